/* queenpy console: the views, one Alpine.js component each (templates in index.html).
 *
 * Every view loads through QC.api (app.js) and refreshes with QC.poll on the store's period. Lists are paged:
 * by the broker where the route takes limit/offset (DLQ, traces, messages, a queue's partitions), in the
 * browser where the route answers a whole list (consumer groups, a group's partitions, the overview's deepest
 * hundred queues) or where Queen's API cannot search or sort (the queue listing).
 */
"use strict";

/* A section of a view that loads on its own: `data`, `error`, and `run(fn)`, which keeps the last good data
 * when a refresh fails and says why. */
QC.section = function () {
  return {
    data: null,
    error: "",
    loaded: false,
    async run(fn) {
      try {
        this.data = await fn();
        this.error = "";
      } catch (err) {
        this.error = err.status === 404 ? "not served by this broker" : err.message;
      } finally {
        this.loaded = true;
      }
    },
  };
};

/* A queue of the listings (resources/queues, status/queues, status's deepest queues) as a table row. Depth is
 * the number of messages stored (as in `queenpy queues` and the Prometheus depth gauge), pending those the
 * queue-mode group has not consumed yet, in flight those under a lease. */
QC.queueRow = (q) => ({
  name: q.name, namespace: q.namespace, task: q.task, partitions: q.partitions, createdAt: q.createdAt,
  depth: q.messages?.total ?? null, pending: q.messages?.pending ?? null,
  processing: q.messages?.processing ?? null, deadLetter: q.deadLetter ?? q.messages?.deadLetter ?? null,
  lagSeconds: q.lagSeconds ?? null,
});

/* Every queue of the broker (/api/v1/resources/queues, from the stats tables, 10,000 a page), kept in the
 * browser because Queen's listing neither searches nor sorts: a refresh asks again only when the copy is older
 * than `maxAgeMs`; search, sort and paging reuse it. */
QC.listing = { rows: null, at: 0, pending: null, statsAge: null };
QC.LISTING_PAGE = 10000;
QC.queueRows = async function (maxAgeMs) {
  const listing = QC.listing;
  if (listing.rows && Date.now() - listing.at < maxAgeMs) return listing.rows;
  if (!listing.pending) {
    listing.pending = (async () => {
      const rows = [];
      for (let offset = 0; ; offset += QC.LISTING_PAGE) {
        const answer = (await QC.get(QC.url("/api/v1/resources/queues", { limit: QC.LISTING_PAGE, offset }))) || {};
        rows.push(...(answer.queues || []).map(QC.queueRow));
        listing.statsAge = answer.statsAge ?? null;
        if (!(answer.queues || []).length || rows.length >= (answer.total ?? 0)) break;
      }
      listing.rows = rows;
      listing.at = Date.now();
      return rows;
    })().finally(() => { listing.pending = null; });
  }
  return listing.pending;
};

/* One page of queues: {rows, total}. `sort` is "depth" (messages stored), "pending" (largest first) or "name";
 * `search` a substring of the name; `maxAgeMs` how old the copy may be (a refresh: the refresh period, at least
 * 10 s, the stats job's period; a click: any). */
QC.queuePage = async function ({ offset, limit, search, sort, maxAgeMs }) {
  let rows = await QC.queueRows(maxAgeMs ?? Infinity);
  if (search) rows = rows.filter((r) => r.name.toLowerCase().includes(search.toLowerCase()));
  rows = [...rows];
  const by = sort === "pending" ? "pending" : "depth";
  if (sort === "name") rows.sort((a, b) => a.name.localeCompare(b.name));
  else rows.sort((a, b) => (b[by] ?? 0) - (a[by] ?? 0) || a.name.localeCompare(b.name));
  return { rows: rows.slice(offset, offset + limit).map((r) => ({ ...r })), total: rows.length };
};
QC.refreshAge = () => Math.max(10_000, Alpine.store("app").refreshMs);

/* A throughput chart (uPlot) in `el`: messages per second ingested and processed. */
QC.chart = function (el) {
  const options = {
    width: Math.max(320, el.clientWidth || 640), height: 220,
    scales: { x: { time: true, range: () => { const now = Date.now() / 1000; return [now - 3600, now]; } },
              y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] } },
    series: [{}, { label: "ingested/s", stroke: "#2f6fdf", width: 2 }, { label: "processed/s", stroke: "#1a9a5a", width: 2 },
      { label: "popped/s", stroke: "#b7791f", width: 1, dash: [4, 4] }],
    axes: [{}, { size: 60 }],
  };
  const plot = new uPlot(options, [[], [], [], []], el);
  // follow the card's width (it may have none yet when the chart is made)
  const observer = new ResizeObserver(() => {
    if (el.clientWidth > 0) plot.setSize({ width: el.clientWidth, height: 220 });
  });
  observer.observe(el);
  return {
    plot,
    set(points) {
      plot.setData([points.map((p) => p.t), points.map((p) => p.ingested), points.map((p) => p.processed),
        points.map((p) => p.popped)]);
    },
    destroy() { observer.disconnect(); plot.destroy(); },
  };
};

/* Calls `fn(route)` when the URL fragment names another object of the same view (#/queue/a -> #/queue/b keeps
 * the component, so it must load the new one itself). */
QC.followRoute = function (component, fn) {
  const view = Alpine.store("app").route.view;
  component.$watch("$store.app.route", (route) => { if (route.view === view) fn(route); });
};

document.addEventListener("alpine:init", () => {
  /* ---------------- overview ---------------- */
  Alpine.data("overview", () => ({
    status: QC.section(), overview: QC.section(), health: QC.section(), buffers: QC.section(),
    metrics: QC.section(), groups: QC.section(),
    pager: QC.pager(25),
    init() {
      this.stop = QC.poll(() => this.load());
    },
    destroy() { this.stop(); this.chart?.destroy(); },
    /* Every number here but the answering worker's own (/metrics) and the groups' lag comes from the stats
     * tables, which the broker's stats job refreshes every STATS_INTERVAL_MS: the last hour per minute, the
     * deepest hundred queues, workers, dead letters, lag. */
    async load() {
      await Promise.all([
        this.status.run(() => QC.get("/api/v1/status")).then(() => this.draw()),
        this.overview.run(() => QC.get("/api/v1/resources/overview")),
        this.health.run(() => QC.api("GET", "/health").catch((e) => e.body || Promise.reject(e))),
        this.buffers.run(() => QC.get("/api/v1/status/buffers")),
        this.metrics.run(() => QC.get("/metrics")),
        this.groups.run(async () => (await QC.get("/api/v1/consumer-groups")) || []),
      ]);
      Alpine.store("app").updated();
    },
    draw() {
      if (!this.status.data || !this.$refs.chart) return;
      if (!this.chart) this.chart = QC.chart(this.$refs.chart);
      this.chart.set((this.status.data.throughput || []).map((b) => ({
        t: Date.parse(b.timestamp) / 1000, ingested: b.ingestedPerSecond, processed: b.processedPerSecond,
        popped: b.popPerSecond,
      })));
    },
    /* the deepest queues, in the broker's order (messages stored, then name) */
    queueRows() { return (this.status.data?.queues || []).map(QC.queueRow); },
    lastRates() {
      const series = this.status.data?.throughput || [];
      const last = series.length > 1 ? series[series.length - 2] : series[series.length - 1]; // last full minute
      return last ? { ingested: last.ingestedPerSecond, processed: last.processedPerSecond } : null;
    },
    laggingGroups() {
      return (this.groups.data || []).filter((g) => g.partitionsWithLag > 0)
        .sort((a, b) => (b.maxTimeLag ?? 0) - (a.maxTimeLag ?? 0)).slice(0, 10);
    },
    fusionRows() {
      const fusion = this.metrics.data?.fusion || {};
      return Object.entries(fusion).map(([name, f]) => ({ name, ...f }));
    },
  }));

  /* ---------------- queues ---------------- */
  Alpine.data("queues", () => ({
    list: QC.section(),
    search: "", sort: "depth",
    page: { offset: 0, limit: 50 },
    init() {
      this.search = Alpine.store("app").route.query.search || "";
      this.sort = Alpine.store("app").route.query.sort || "depth";
      this.stop = QC.poll(() => this.load(QC.refreshAge()));
    },
    destroy() { this.stop(); },
    statsAge: null,
    async load(maxAgeMs) {
      await this.list.run(() => QC.queuePage({ ...this.page, search: this.search, sort: this.sort, maxAgeMs }));
      this.statsAge = QC.listing.statsAge;
    },
    refilter() { this.page.offset = 0; this.load(); },
    move(delta) { this.page.offset = Math.max(0, this.page.offset + delta * this.page.limit); this.load(); },
  }));

  Alpine.data("queueDetail", () => ({
    queue: QC.section(), groups: QC.section(),
    name: "", page: { offset: 0, limit: 50 },
    init() {
      this.name = Alpine.store("app").route.args[0];
      this.stop = QC.poll(() => this.load());
      QC.followRoute(this, (route) => { this.name = route.args[0]; this.page.offset = 0; this.load(); });
    },
    destroy() { this.stop(); },
    async load() {
      await Promise.all([
        this.queue.run(() => QC.get(QC.url(`/api/v1/resources/queues/${QC.seg(this.name)}`, this.page))),
        this.groups.run(async () => {
          const all = (await QC.get("/api/v1/consumer-groups")) || [];
          const mine = all.filter((g) => g.queueName === this.name);
          const details = await Promise.all(mine.map((g) => QC.get(`/api/v1/consumer-groups/${QC.seg(g.name)}`)));
          return mine.map((g, i) => {
            const parts = details[i]?.[this.name]?.partitions || [];
            return { ...g, offsetLag: QC.groupLag(details[i]?.[this.name]), parts };
          });
        }),
      ]);
      Alpine.store("app").updated();
    },
    partitions() { return this.queue.data?.partitions || []; },
    partitionTotal() { return this.queue.data?.total ?? this.partitions().length; },
    move(delta) {
      this.page.offset = Math.max(0, this.page.offset + delta * this.page.limit);
      this.queue.run(() => QC.get(QC.url(`/api/v1/resources/queues/${QC.seg(this.name)}`, this.page)));
    },
    options() { return Object.entries(this.queue.data?.options || this.queue.data?.config || {}); },
    async remove() {
      if (!confirm(`Delete queue ${this.name} and every message in it?`)) return;
      if (await QC.act(`queue ${this.name} deleted`, () => QC.api("DELETE", `/api/v1/resources/queues/${QC.seg(this.name)}`))) {
        QC.listing.at = 0; // the copy of the listing in the browser still has it
        QC.go("queues");
      }
    },
  }));

  /* ---------------- DLQ ---------------- */
  Alpine.data("dlq", () => ({
    list: QC.section(),
    queue: "", group: "", selected: {},
    page: { offset: 0, limit: 50 },
    init() {
      this.queue = Alpine.store("app").route.query.queue || "";
      this.stop = QC.poll(() => this.load());
    },
    destroy() { this.stop(); },
    load() {
      return this.list.run(() => QC.get(QC.url("/api/v1/dlq", {
        queue: this.queue, consumerGroup: this.group, limit: this.page.limit, offset: this.page.offset })));
    },
    rows() { return this.list.data?.messages || []; },
    total() { return this.list.data?.total ?? this.rows().length; },
    key(m) { return `${m.partitionId}/${m.transactionId}/${m.consumerGroup}`; },
    refilter() { this.page.offset = 0; this.selected = {}; this.load(); },
    move(delta) { this.page.offset = Math.max(0, this.page.offset + delta * this.page.limit); this.load(); },
    selectedRows() { return this.rows().filter((m) => this.selected[this.key(m)]); },
    toggleAll(on) { for (const m of this.rows()) this.selected[this.key(m)] = on; },
    replayOne(m) {
      return QC.api("POST", `/api/v1/messages/${QC.seg(m.partitionId)}/${QC.seg(m.transactionId)}/retry`,
        { consumerGroup: m.consumerGroup });
    },
    async replay(rows) {
      const done = await QC.act(`${rows.length} message(s) replayed`, async () => {
        for (const m of rows) await this.replayOne(m);
      });
      if (done) { this.selected = {}; await this.load(); }
    },
  }));

  /* ---------------- consumer groups ---------------- */
  Alpine.data("groups", () => ({
    list: QC.section(), search: "", pager: QC.pager(50),
    init() { this.stop = QC.poll(() => this.list.run(async () => (await QC.get("/api/v1/consumer-groups")) || [])); },
    destroy() { this.stop(); },
    rows() {
      const s = this.search.toLowerCase();
      return (this.list.data || []).filter((g) => !s || g.name.toLowerCase().includes(s) || g.queueName.toLowerCase().includes(s));
    },
  }));

  Alpine.data("groupDetail", () => ({
    detail: QC.section(), name: "", seekAt: {},
    init() {
      this.name = Alpine.store("app").route.args[0];
      this.stop = QC.poll(() => this.load());
      QC.followRoute(this, (route) => { this.name = route.args[0]; this.load(); });
    },
    destroy() { this.stop(); },
    load() { return this.detail.run(async () => (await QC.get(`/api/v1/consumer-groups/${QC.seg(this.name)}`)) || {}); },
    queues() {
      return Object.entries(this.detail.data || {}).map(([queue, value]) => ({
        queue, partitions: value.partitions || [],
        offsetLag: QC.groupLag(value),
      }));
    },
    async seek(queue, toEnd) {
      const body = toEnd ? { toEnd: true } : { timestamp: QC.isoFromLocal(this.seekAt[queue]) };
      if (!toEnd && !body.timestamp) { Alpine.store("app").notify("choose a time to seek to", "error"); return; }
      const what = toEnd ? "the end" : QC.time(body.timestamp);
      if (!confirm(`Move ${this.name}'s cursors on ${queue} to ${what}?`)) return;
      await QC.act(`${this.name} on ${queue} moved to ${what}`, () => QC.api("POST",
        `/api/v1/consumer-groups/${QC.seg(this.name)}/queues/${QC.seg(queue)}/seek`, body));
      await this.load();
    },
    async remove(queue) {
      const where = queue ? ` on ${queue}` : "";
      if (!confirm(`Delete consumer group ${this.name}${where}?`)) return;
      const path = `/api/v1/consumer-groups/${QC.seg(this.name)}` + (queue ? `/queues/${QC.seg(queue)}` : "");
      if (await QC.act(`consumer group ${this.name}${where} deleted`, () => QC.api("DELETE", path))) {
        if (queue) await this.load(); else QC.go("groups");
      }
    },
  }));

  /* ---------------- traces ---------------- */
  Alpine.data("traces", () => ({
    names: QC.section(), byName: QC.section(), name: "",
    namesPage: { offset: 0, limit: 50 }, tracesPage: { offset: 0, limit: 50 },
    init() {
      this.name = Alpine.store("app").route.args[0] || "";
      this.stop = QC.poll(() => this.load());
    },
    destroy() { this.stop(); },
    async load() {
      await this.names.run(() => QC.get(QC.url("/api/v1/traces/names", this.namesPage)));
      if (this.name) {
        await this.byName.run(() => QC.get(QC.url(`/api/v1/traces/by-name/${QC.seg(this.name)}`, this.tracesPage)));
      }
    },
    open(name) { this.name = name; this.tracesPage.offset = 0; QC.go("traces", [name]); this.load(); },
    moveNames(delta) { this.namesPage.offset = Math.max(0, this.namesPage.offset + delta * this.namesPage.limit); this.load(); },
    moveTraces(delta) { this.tracesPage.offset = Math.max(0, this.tracesPage.offset + delta * this.tracesPage.limit); this.load(); },
  }));

  /* ---------------- messages ---------------- */
  Alpine.data("messages", () => ({
    list: QC.section(),
    filter: { queue: "", partition: "", status: "", from: "", to: "" },
    page: { offset: 0, limit: 50 },
    init() {
      const query = Alpine.store("app").route.query;
      for (const key of Object.keys(this.filter)) this.filter[key] = query[key] || "";
      this.stop = QC.poll(() => this.load());
    },
    destroy() { this.stop(); },
    load() {
      const f = this.filter;
      return this.list.run(() => QC.get(QC.url("/api/v1/messages", {
        queue: f.queue, partition: f.partition, status: f.status, from: QC.isoFromLocal(f.from),
        to: QC.isoFromLocal(f.to), limit: this.page.limit,
        cursor: this.cursors[this.cursors.length - 1] || "" })));
    },
    /* keyset paging: `cursors` holds the cursor of each page up to this one (the first page has none); the
       broker's nextCursor leads on, and `total` may be the planner's estimate ("estimated": true) */
    cursors: [null],
    rows() { return this.list.data?.messages || []; },
    total() { return this.list.data?.total ?? this.rows().length; },
    estimated() { return Boolean(this.list.data?.estimated); },
    hasNext() { return Boolean(this.list.data?.nextCursor); },
    refilter() {
      this.page.offset = 0;
      this.cursors = [null];
      history.replaceState(null, "", QC.href("messages", [], { ...this.filter }));
      this.load();
    },
    move(delta) {
      if (delta > 0 && this.hasNext()) this.cursors.push(this.list.data.nextCursor);
      else if (delta < 0 && this.cursors.length > 1) this.cursors.pop();
      else return;
      this.page.offset = (this.cursors.length - 1) * this.page.limit;
      this.load();
    },
  }));

  Alpine.data("message", () => ({
    message: QC.section(), traces: QC.section(), partitionId: "", transactionId: "", deleted: false,
    init() {
      [this.partitionId, this.transactionId] = Alpine.store("app").route.args;
      this.stop = QC.poll(() => this.load());
      QC.followRoute(this, (route) => {
        [this.partitionId, this.transactionId] = route.args;
        this.deleted = false;
        this.load();
      });
    },
    destroy() { this.stop(); },
    path() { return `/api/v1/messages/${QC.seg(this.partitionId)}/${QC.seg(this.transactionId)}`; },
    async load() {
      if (this.deleted) return;
      await Promise.all([
        this.message.run(() => QC.get(this.path())),
        this.traces.run(async () => (await QC.get(`/api/v1/traces/${QC.seg(this.partitionId)}/${QC.seg(this.transactionId)}`))?.traces || []),
      ]);
    },
    async remove() {
      if (!confirm(`Delete message ${this.transactionId}?`)) return;
      const answer = await QC.act(`message ${this.transactionId} deleted`, () => QC.api("DELETE", this.path()));
      if (answer) {
        this.deleted = true;
        this.message.data = null;
      }
    },
    async retry() {
      await QC.act(`message ${this.transactionId} replayed from the dead-letter queue`,
        () => QC.api("POST", this.path() + "/retry", {}));
      await this.load();
    },
  }));

  /* ---------------- system ---------------- */
  Alpine.data("system", () => ({
    health: QC.section(), metrics: QC.section(), buffers: QC.section(), maintenance: QC.section(),
    postgres: QC.section(),
    init() { this.stop = QC.poll(() => this.load()); },
    destroy() { this.stop(); },
    async load() {
      await QC.signedIn; // whether to ask for the maintenance state (admin) depends on the role
      const admin = Alpine.store("app").can("admin");
      await Promise.all([
        this.health.run(() => QC.api("GET", "/health").catch((e) => e.body || Promise.reject(e))),
        this.metrics.run(() => QC.get("/metrics")),
        this.buffers.run(() => QC.get("/api/v1/status/buffers")),
        admin ? this.maintenance.run(() => QC.get("/api/v1/system/maintenance")) : null,
        this.postgres.run(() => QC.get("/api/v1/analytics/postgres-stats")),
      ]);
      Alpine.store("app").updated();
    },
    /* kind: "push" (pushes buffered to disk, replayed when turned off) or "pop" (pops answer 204) */
    async toggle(kind) {
      const key = kind === "pop" ? "popMaintenanceMode" : "maintenanceMode";
      const enabled = !this.maintenance.data?.[key];
      const path = kind === "pop" ? "/api/v1/system/maintenance/pop" : "/api/v1/system/maintenance";
      const verb = enabled ? "on" : "off";
      if (!confirm(`Turn ${kind} maintenance ${verb}?`)) return;
      await QC.act(`${kind} maintenance ${verb}`, () => QC.api("POST", path, { enabled }));
      await this.maintenance.run(() => QC.get("/api/v1/system/maintenance"));
    },
    fusionRows() { return Object.entries(this.metrics.data?.fusion || {}).map(([name, f]) => ({ name, ...f })); },
  }));
});
