/* queenpy console: the HTTP client, sign-in and role, the router, the refresh clock and formatting.
 *
 * A client of the broker's public HTTP API only (API.md sections 8-13): every number on screen comes from a
 * JSON answer of /api/v1/*, /health or /metrics, fetched with the token the user gave (Authorization:
 * Bearer). The views (views.js) are Alpine.js components; this file registers the shared store `app`.
 * Navigation lives in the URL fragment (#/queues/orders), so the broker serves one page at "/".
 */
"use strict";

const QC = (window.QC = window.QC || {});

/* ---------- levels (API.md section 13) ---------- */
QC.LEVELS = { none: 0, "read-only": 1, "read-write": 2, admin: 3 };
QC.LEVEL_NAMES = ["no access", "read-only", "read-write", "admin"];

/* ---------- HTTP ---------- */
class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}
QC.ApiError = ApiError;

const TOKEN_KEY = "queenpy.console.token";

QC.token = () => sessionStorage.getItem(TOKEN_KEY) || "";

/* One call of the API. Resolves to the parsed JSON (null for an empty body, which Queen sends for [] and
 * {}); rejects with ApiError for a non-2xx status and for the 200 answers that carry an error
 * ({"success": false, "error": ...} or {"error": ...} alone, API.md 1.2). A 401 asks for a token. */
QC.api = async function (method, path, body) {
  const early = method === "GET" && window.QC_EARLY && window.QC_EARLY[path]; // asked for by index.html
  if (early) {
    delete window.QC_EARLY[path];
    return QC.answer(early);
  }
  const headers = {};
  const token = QC.token();
  if (token) headers.Authorization = "Bearer " + token;
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  return QC.answer(fetch(path, init));
};

/* The JSON of a fetch() in flight, with QC.api's errors (also for the listing index.html asks for early). */
QC.answer = async function (pending) {
  let response;
  try {
    response = await pending;
  } catch (err) {
    throw new ApiError(0, "broker unreachable: " + err.message, null);
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch (_err) {
      data = text; // /metrics/prometheus and other text answers
    }
  }
  const message = data && typeof data === "object" && typeof data.error === "string" ? data.error : null;
  if (response.status === 401) {
    Alpine.store("app").askForToken(message || "Authentication required");
    throw new ApiError(401, message || "Authentication required", data);
  }
  if (!response.ok) throw new ApiError(response.status, message || `${response.status} ${response.statusText}`, data);
  if (message && (data.success === false || Object.keys(data).length === 1)) throw new ApiError(200, message, data);
  return data;
};
QC.get = (path) => QC.api("GET", path);

/* "/api/v1/dlq" + {queue: "a", limit: 50} -> "/api/v1/dlq?queue=a&limit=50" (empty values left out). */
QC.url = function (path, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "") query.set(key, String(value));
  }
  const text = query.toString();
  return text ? `${path}?${text}` : path;
};
QC.seg = (value) => encodeURIComponent(value);

/* ---------- formatting ---------- */
// A consumer group's offset lag on one queue from its detail (GET /api/v1/consumer-groups/{group}): the sum
// over the listed partitions when the page holds them all (exact, current), else the stats job's total
// (the detail lists one page of partitions; the total is as of the job's last run).
QC.groupLag = (value) => {
  const parts = value?.partitions || [];
  const sum = parts.reduce((s, p) => s + (Number(p.offsetLag) || 0), 0);
  return value?.nextCursor && value.offsetLag !== null && value.offsetLag !== undefined ? value.offsetLag : sum;
};
QC.num = (n) => (n === null || n === undefined || n === "" ? "—" : Number(n).toLocaleString("en-US"));
QC.rate = (n) => (n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US", { maximumFractionDigits: 1 }));
QC.time = function (iso) {
  if (!iso) return "—";
  const date = new Date(iso);
  if (isNaN(date)) return String(iso);
  return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
};
QC.age = function (seconds) {
  if (seconds === null || seconds === undefined || seconds === "") return "—";
  let s = Math.round(Number(seconds));
  if (s < 60) return `${s}s`;
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  s = s % 60;
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  return `${m}m ${s}s`;
};
QC.ms = (ms) => (ms === null || ms === undefined ? "—" : QC.age(Number(ms) / 1000));
QC.bytes = function (n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(n), unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
  return `${value.toLocaleString("en-US", { maximumFractionDigits: 1 })} ${units[unit]}`;
};
QC.pretty = function (value) {
  if (value === undefined) return "";
  return JSON.stringify(value, null, 2);
};
/* An <input type="datetime-local"> value (local time) -> ISO-8601 UTC, or "" */
QC.isoFromLocal = (value) => (value ? new Date(value).toISOString() : "");

/* ---------- router: #/view/arg1/arg2?key=value ---------- */
QC.parseHash = function () {
  const raw = location.hash.replace(/^#\/?/, "");
  const [pathPart, queryPart] = raw.split("?");
  const parts = pathPart.split("/").filter(Boolean).map(decodeURIComponent);
  const query = Object.fromEntries(new URLSearchParams(queryPart || ""));
  return { view: parts[0] || "overview", args: parts.slice(1), query, key: raw };
};
QC.go = function (view, args, query) {
  const path = [view, ...(args || []).map(encodeURIComponent)].join("/");
  const text = new URLSearchParams(Object.entries(query || {}).filter(([, v]) => v !== "" && v != null)).toString();
  location.hash = "#/" + path + (text ? "?" + text : "");
};
QC.href = function (view, args, query) {
  const path = [view, ...(args || []).map(encodeURIComponent)].join("/");
  const text = new URLSearchParams(Object.entries(query || {}).filter(([, v]) => v !== "" && v != null)).toString();
  return "#/" + path + (text ? "?" + text : "");
};

/* ---------- polling: one load at a time, paused while the tab is hidden ---------- */
/* Calls `load` now and then every refresh period of the store (changeable in the header; 0 = off).
 * Returns a stop function for the view's destroy(). */
QC.poll = function (load) {
  let timer = null, busy = false, stopped = false;
  const run = async () => {
    if (busy || stopped) return;
    busy = true;
    try { await load(); } finally { busy = false; }
  };
  const schedule = () => {
    if (stopped) return;
    const ms = Alpine.store("app").refreshMs;
    timer = setTimeout(async () => {
      if (!document.hidden) await run();
      schedule();
    }, ms > 0 ? ms : 1000);
  };
  const reschedule = () => { clearTimeout(timer); schedule(); };
  window.addEventListener("queenpy:refresh-changed", reschedule);
  window.addEventListener("queenpy:signed-in", run); // a new token: load again at once
  run();
  schedule();
  return () => {
    stopped = true;
    clearTimeout(timer);
    window.removeEventListener("queenpy:refresh-changed", reschedule);
    window.removeEventListener("queenpy:signed-in", run);
  };
};

/* ---------- paging of a list held in the browser ---------- */
QC.pager = function (size) {
  return {
    size: size || 50,
    page: 0,
    pages(total) { return Math.max(1, Math.ceil(total / this.size)); },
    slice(list) {
      if (this.page >= this.pages(list.length)) this.page = this.pages(list.length) - 1;
      return list.slice(this.page * this.size, (this.page + 1) * this.size);
    },
  };
};

/* ---------- the shared store ---------- */
let resolveSignedIn;
QC.signedIn = new Promise((resolve) => { resolveSignedIn = resolve; }); // resolved once the role is known

document.addEventListener("alpine:init", () => {
  Alpine.store("app", {
    route: QC.parseHash(),
    refreshMs: Number(localStorage.getItem("queenpy.console.refreshMs") || 5000),
    level: null,          // QC.LEVELS value once known
    authEnabled: null,    // false when the broker answers without a token
    needToken: false,
    loginError: "",
    toasts: [],
    lastUpdate: null,
    initialized: false,

    init() {
      window.addEventListener("hashchange", () => { this.route = QC.parseHash(); });
      this.probe();
    },
    setRefresh(ms) {
      this.refreshMs = Number(ms);
      localStorage.setItem("queenpy.console.refreshMs", String(this.refreshMs));
      window.dispatchEvent(new Event("queenpy:refresh-changed"));
    },
    askForToken(message) {
      this.needToken = true;
      this.loginError = QC.token() ? message : "";
    },
    async signIn(token) {
      sessionStorage.setItem(TOKEN_KEY, token.trim());
      this.loginError = "";
      await this.probe();
      if (!this.needToken) window.dispatchEvent(new Event("queenpy:signed-in"));
    },
    signOut() {
      sessionStorage.removeItem(TOKEN_KEY);
      this.level = null;
      this.needToken = true;
      this.loginError = "";
    },
    /* What the token may do, asked of the broker itself (JWT_ROLES_CLAIM and the role names are the
     * server's settings, so the console does not guess them from the token): a read-only route, a
     * read-write call that changes nothing (extending a lease that does not exist) and an admin read. */
    async probe() {
      const status = async (method, path, body) => {
        const headers = {};
        if (QC.token()) headers.Authorization = "Bearer " + QC.token();
        if (body !== undefined) headers["Content-Type"] = "application/json";
        try {
          const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
          let error = "";
          if (!r.ok) { try { error = (await r.json()).error || ""; } catch (_e) { /* not JSON */ } }
          return { status: r.status, error };
        } catch (_err) {
          return { status: 0, error: "broker unreachable" };
        }
      };
      const read = await status("GET", "/api/v1/status/buffers");
      if (read.status === 200 && !QC.token()) { // answered without a token: authentication is off
        Object.assign(this, { level: QC.LEVELS.admin, authEnabled: false, needToken: false, initialized: true });
        resolveSignedIn();
        return;
      }
      if (read.status === 401 || read.status === 403) {
        this.level = QC.LEVELS.none;
        this.needToken = true;
        this.loginError = QC.token() ? read.error || "token refused" : "";
        this.authEnabled = true;
        this.initialized = true;
        return;
      }
      if (read.status !== 200) { // unreachable or failing: the views say so; actions stay off until it answers
        Object.assign(this, { level: QC.LEVELS.none, authEnabled: Boolean(QC.token()), initialized: true });
        resolveSignedIn();
        setTimeout(() => this.probe(), 5000);
        return;
      }
      const [write, admin] = await Promise.all([status("POST", "/api/v1/lease/queenpy-console-probe/extend", {}),
                                                status("GET", "/api/v1/system/maintenance")]);
      const refused = (r) => r.status === 401 || r.status === 403;
      this.authEnabled = true;
      // admin only when the admin read answered (a broker without that route gets no admin buttons)
      this.level = refused(write) ? QC.LEVELS["read-only"] : admin.status === 200 ? QC.LEVELS.admin : QC.LEVELS["read-write"];
      this.needToken = false;
      this.initialized = true;
      resolveSignedIn();
    },
    can(levelName) { return this.level !== null && this.level >= QC.LEVELS[levelName]; },
    why(levelName) { return this.can(levelName) ? "" : `needs the ${levelName} role`; },
    levelName() { return this.level === null ? "…" : QC.LEVEL_NAMES[this.level]; },
    notify(text, kind) {
      const toast = { id: Date.now() + Math.random(), text, kind: kind || "ok" };
      this.toasts.push(toast);
      setTimeout(() => { this.toasts = this.toasts.filter((t) => t.id !== toast.id); }, 6000);
    },
    updated() { this.lastUpdate = new Date(); },
  });
});

/* Run an action (a button), report its outcome as a toast, and return its result (or null on failure). */
QC.act = async function (label, fn) {
  const app = Alpine.store("app");
  try {
    const result = await fn();
    app.notify(label, "ok");
    return result === undefined ? true : result;
  } catch (err) {
    app.notify(`${label} failed: ${err.message}`, "error");
    return null;
  }
};
