"""The soak scenario (issue 18): a paced producer and acking consumers for a long time, with completed
retention deleting behind them. Do the messages table and the broker's memory stay flat, and do the background
services cost the hot path less than 5%?

Timeline of ``--duration`` D, after a warm-up and a settling under the same load (until no index of
``queen.messages`` grew for :data:`SETTLE_QUIET_S`, at most :data:`SETTLE_MAX_S`; :func:`indexes_settled`, reported
under ``settle``): the services run for the first part of D (the flatness window);
then slices alternate with the services paused everywhere and running again (off, on, off, on, ...;
``system_state`` 'services' {"paused": true}, read by every job before each run). Slices last
:data:`MAX_SLICE_S` (a tenth of D when shorter); a pair of them takes up to five slice lengths with the waits
below, and there are as many pairs as 40% of D holds so, at least 2 (:func:`slice_plan`: 2 pairs in 10 and
20 minutes, 3 in 30, 6 in 60). The flatness window takes the rest of D. The push and consume
rates of the "on" slices are compared with the "off" slices of the same run. Each slice starts from a steady
state, free of what the slice before it left, after a wait of at most one slice reported as ``catch_up_s``
(``caught_up`` false, and a note, when a wait reached its limit: then there was no steady state to compare):
an "on" slice once retention has caught up with what the pause left (the messages consumed and not yet
deleted back within 10% of the flatness window's mean) and a vacuum of ``queen.messages`` that began after
that has finished (:meth:`SoakRuns._vacuum_pass`: the pause's deletions leave as many dead rows, and their
vacuum, with its full-page images and the heap's truncation, ran into the "on" slices: 2026-11-27's 60-minute
run pushed 23,600-26,200 msg/s in those against 26,350 over the flatness window, where the services run without
pauses; that wait, ``vacuum_s``, has a limit of one more slice), an "off" slice once the consumers have caught
up with what the services' slice left (the messages not yet consumed back within 10% of that window's mean; the
services still run during that wait, so a pause lasts one slice and leaves retention no more to catch up
with). Without the wait before it an "off" slice counted the backlog the "on" slice before it left as consume
throughput of its own (the consumers draining it: 20,703 msg/s consumed against 20,363 pushed). The
producer is paced at ``--soak-share`` (default half) of the push capacity (the same round's push-10-40B figure,
or a short push-10 probe when that scenario is not in the run), unless that is more than the consumers can
follow beside it on this machine: then at :data:`PIPELINE_SHARE` of the push-and-consume estimate
(:func:`soak_load`; consume-ack of the round, or a probe). A load the consumers cannot follow grows their
backlog, and the table with it, whatever the services do (2026-11-27: at 22,000 msg/s, 87% of that estimate,
the backlog went from 8,000 to 125,000 in an hour and the table 120 to 147 MB). The queue has
``completedRetentionSeconds`` = :data:`COMPLETED_RETENTION_S`; the suite starts the broker with
``RETENTION_INTERVAL`` = 1 s when soak runs (unless ``--env`` sets it), so what is consumed goes within seconds.

Before the soak, the queues the run created so far (the probes', earlier scenarios') are deleted and
``queen.messages`` rewritten (:meth:`BenchCore._drop_queues`). Before that the probes' rows stayed in the
table (the push probe's, and since db8a9c5 the consume probe's backlog of 529,900 messages): a 10-minute soak's
table was 471-495 MB with 97,700 messages of its own stored on average (heap 271 MB, 47 MB of dedupe index
holding the backlog's rows). Sampled every :data:`SAMPLE_S` seconds: the messages table's size with its
indexes and TOAST (``pg_total_relation_size``; and split, under ``table_parts_mb``, into the heap with its TOAST
and maps and each index), the messages it stores (offsets assigned minus messages deleted, from
partitions and partition_counters), the broker's resident memory (all its processes), offsets assigned and
the consumers' cursor (so the stored messages split into ``unconsumed_messages``, the consumers' backlog, and
``retained_messages``, consumed and not yet deleted: retention's backlog; a table that grows with the first
and not the second means the consumers fell behind, not the services); per slice, the push and consume rates
and the WAL the server wrote (MB/s and full-page images/s, from ``pg_stat_wal``: deletions and vacuum write
WAL too). Slopes are least-squares fits per minute
over the flatness window. "flat": the fitted change over that window is under 10% of the mean (and, for the
table, under 8 MB). The heap reaches its steady size within seconds (completedRetentionSeconds plus a retention
interval), the indexes of the emptied table in minutes: until 2245cb2 the window began a third into it, without
the settling, and a 10-minute soak's table grew by 12.7 MB over it (the ``(partition_id, seq)`` index 30 -> 35 MB)
while the hour's was flat from minute 7 on.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from queenpy.bench import procfs
from queenpy.bench.catalog import SCENARIOS, Scenario, payload
from queenpy.bench.core import Q_CHECKPOINTS, Q_QUEUE_ROWS, BenchCore
from queenpy.bench.wrk import WrkRun, finish_all, render_script, run_wrk

__all__ = ["COMPLETED_RETENTION_S", "PIPELINE_SHARE", "SAMPLE_S", "SETTLE_MAX_S", "SETTLE_QUIET_S", "SoakRuns",
           "indexes_settled", "slice_plan", "slope_per_minute", "soak_load", "waits_limit_s"]

COMPLETED_RETENTION_S = 5
SAMPLE_S = 5.0
MAX_SLICE_S = 60.0  # a paused slice leaves its deletions to the next: 60 s at 20,000 msg/s is 1.2 million rows
MIN_PAIRS = 2  # of off and on slices
FLAT_SHARE = 0.10
FLAT_TABLE_BYTES = 8 * 2**20
# of the push-and-consume estimate (soak_load): room for what the two probes leave out, the services' own work
# (deletes, vacuum, their WAL) and the probes' spread (consume-ack 43,000-52,600 msg/s on 2026-11-27). At 87% of
# it (22,000 msg/s) the consumers fell behind by 40 msg/s over an hour
PIPELINE_SHARE = 0.7
# the settling before the measured soak (indexes_settled): no index of queen.messages grew for SETTLE_QUIET_S, or
# SETTLE_MAX_S passed. From the emptied table the indexes reached their size in 4-7 minutes on 2026-11-27
SETTLE_QUIET_S = 120.0
SETTLE_MAX_S = 600.0

# the messages table's size by part: the heap with its TOAST and maps (pg_table_size), and each index with all
# its forks (pg_total_relation_size of the index); they sum to pg_total_relation_size('queen.messages')
Q_TABLE_PARTS = ("SELECT jsonb_build_object('heap', pg_table_size('queen.messages')) || coalesce((SELECT "
                 "jsonb_object_agg(c.relname, pg_total_relation_size(c.oid)) FROM pg_index i JOIN pg_class c "
                 "ON c.oid = i.indexrelid WHERE i.indrelid = 'queen.messages'::regclass), '{}')")
Q_STORED = ("SELECT coalesce(sum(p.last_seq - c.messages_deleted), 0)::bigint FROM queen.partitions p "
            "JOIN queen.partition_counters c ON c.partition_id = p.id JOIN queen.queues q ON q.id = p.queue_id "
            "WHERE q.name = $1")
# one snapshot: a retention step writes its deletions and its history row in one transaction
Q_LEDGER = ("SELECT sum(p.last_seq)::bigint, sum(c.messages_deleted)::bigint, "
            "(SELECT coalesce(sum(h.messages_deleted), 0)::bigint FROM queen.retention_history h "
            " WHERE h.queue_name = $1 AND h.retention_type = 'completed_retention') "
            "FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id "
            "JOIN queen.partition_counters c ON c.partition_id = p.id WHERE q.name = $1")
Q_RUNS = ("SELECT job, count(*), coalesce(sum(rows), 0)::bigint, "
          "avg(extract(epoch FROM finished_at - started_at) * 1000), "
          "max(extract(epoch FROM finished_at - started_at) * 1000), count(error), "
          "coalesce(array_agg(DISTINCT left(error, 300)) FILTER (WHERE error IS NOT NULL), '{}') "
          "FROM queen.service_runs WHERE started_at >= now() - make_interval(secs => $1) GROUP BY job ORDER BY job")
Q_PAUSE = ("INSERT INTO queen.system_state (key, value) VALUES ('services', jsonb_build_object('paused', $1::boolean)) "
           "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()")
Q_CONFIGURE = "SELECT queen.configure_queue_v1($1::jsonb)::text"
# the server's WAL so far (PostgreSQL 14 and later): bytes and full-page images
Q_WAL = "SELECT wal_bytes::float8, wal_fpi::float8 FROM pg_stat_wal"
# vacuums of queen.messages finished so far, and whether one runs now (PostgreSQL 15 and later report a vacuum's
# end to the statistics at once)
Q_VACUUMS = ("SELECT s.vacuum_count + s.autovacuum_count, "
             "EXISTS (SELECT 1 FROM pg_stat_progress_vacuum v WHERE v.relid = s.relid) "
             "FROM pg_stat_user_tables s WHERE s.relid = 'queen.messages'::regclass")


def slice_plan(duration_s: float) -> tuple[float, int]:
    """(slice length in s, pairs of off/on slices) for a soak of ``duration_s``: see the module docstring."""
    slice_s = min(0.1 * duration_s, MAX_SLICE_S)
    return slice_s, max(MIN_PAIRS, int(0.4 * duration_s // (4 * slice_s)))


def waits_limit_s(duration_s: float) -> float:
    """The longest a soak of ``duration_s`` may run beyond it, in s: the settling at its limit, then one slice
    of wait before each "off" slice and two before each "on" one (retention's catch-up, then a vacuum pass)."""
    slice_s, pairs = slice_plan(duration_s)
    return SETTLE_MAX_S + 3 * pairs * slice_s


def slope_per_minute(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of ``(seconds, value)`` samples, in value per minute (None under 3 samples)."""
    if len(samples) < 3:
        return None
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if var == 0:
        return None
    return 60.0 * sum((t - mean_t) * (v - mean_v) for t, v in samples) / var


def indexes_settled(samples: list[dict[str, Any]], quiet_s: float) -> bool:
    """Whether no index of ``queen.messages`` grew over the last ``quiet_s`` seconds of ``samples`` (soak
    samples: ``{"t": s, "table_parts_bytes": {"heap": bytes, <index name>: bytes, ...}}``, oldest first), the
    samples covering at least that long. Indexes only grow (pages freed by the deletes are reused, not given
    back), so an index that stopped growing has reached the size the load's peaks need; the heap is left out,
    since vacuum's truncation of its empty tail moves it up and down all the time."""
    if not samples or samples[-1]["t"] - samples[0]["t"] < quiet_s:
        return False

    def indexes(sample: dict[str, Any]) -> dict[str, float]:
        return {k: v for k, v in sample["table_parts_bytes"].items() if k != "heap"}

    last = indexes(samples[-1])
    return all(indexes(s) == last for s in samples if s["t"] >= samples[-1]["t"] - quiet_s)


def soak_load(push_capacity: float, consume_capacity: float, share: float) -> dict[str, Any]:
    """The soak producer's rate: ``share`` of ``push_capacity``, or :data:`PIPELINE_SHARE` of the
    push-and-consume estimate when that is lower. All rates in msg/s.

    The estimate is ``1 / (1/push_capacity + 1/consume_capacity)``: each message is pushed once and consumed
    (popped and acked) once, and where producer, consumers, broker and PostgreSQL share one machine's CPU the
    time each message costs on the two paths adds up (the harmonic sum, as for two stages sharing one
    resource). Half of push-10-40B alone is about 29,000 msg/s on the 2-core machine, the estimate with
    consume-ack about 25,000, and the consumers held about 22,000 beside the producer with the services on.

    Returns ``{"rate", "push_capacity", "consume_capacity", "pipeline_estimate", "bound"}``, ``bound`` being
    ``"push"`` (share of the push capacity) or ``"pipeline"`` (the cap). Raises ValueError when a capacity is
    not positive."""
    if push_capacity <= 0 or consume_capacity <= 0:
        raise ValueError(f"capacities must be positive: push {push_capacity}, consume {consume_capacity}")
    pipeline = 1.0 / (1.0 / push_capacity + 1.0 / consume_capacity)
    by_push, cap = share * push_capacity, PIPELINE_SHARE * pipeline
    return {"rate": min(by_push, cap), "push_capacity": push_capacity, "consume_capacity": consume_capacity,
            "pipeline_estimate": pipeline, "bound": "push" if by_push <= cap else "pipeline"}


def _per_s(change: float, seconds: float) -> float:
    return change / seconds if seconds > 0 else 0.0


def _unconsumed(sample: dict[str, Any]) -> float:
    """Messages not yet consumed in a sample: offsets assigned minus the queue-mode cursor."""
    return float(sample["produced"] - sample["cursor"])


def _retained(sample: dict[str, Any]) -> float:
    """Messages consumed and not yet deleted in a sample: stored minus not yet consumed."""
    return float(sample["stored"]) - _unconsumed(sample)


def _rounded(sample: dict[str, Any]) -> dict[str, Any]:
    """A sample for the JSON: floats to 3 decimals."""
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in sample.items()}


def _trend(samples: list[tuple[float, float]], unit: float, absolute_limit: float | None = None) -> dict[str, Any]:
    """Least-squares trend of ``(t_s, value)`` samples; figures reported in ``unit``s of the value; "flat" when
    the fitted change is within FLAT_SHARE of the mean and ``absolute_limit`` (in the samples' own unit)."""
    slope = slope_per_minute(samples)
    if slope is None:
        return {"samples": len(samples), "slope_per_min": None, "flat": None}
    values = [v for _, v in samples]
    mean = sum(values) / len(values)
    minutes = (samples[-1][0] - samples[0][0]) / 60.0
    change = slope * minutes
    limit = FLAT_SHARE * abs(mean) if mean else 0.0
    if absolute_limit is not None:
        limit = min(limit, absolute_limit) if limit else absolute_limit
    return {"samples": len(samples), "first": values[0] / unit, "last": values[-1] / unit, "mean": mean / unit,
            "min": min(values) / unit, "max": max(values) / unit, "slope_per_min": slope / unit,
            "fitted_change": change / unit, "flat": abs(change) <= max(limit, 1.0)}


class SoakRuns(BenchCore):
    if TYPE_CHECKING:  # the push and consume runners, sibling bases of Bench (kinds/push.py, consume.py)
        def _run_push(self, scenario: Scenario, round_no: int) -> dict[str, Any]: ...

        def _run_consume(self, scenario: Scenario, round_no: int) -> dict[str, Any]: ...

    def _run_soak(self, scenario: Scenario, round_no: int) -> dict[str, Any]:
        """See the module docstring."""
        run = self._new_run(scenario, round_no)
        options = self.options
        queue = f"{scenario.name}-r{round_no}"
        capacity: float | None
        load: dict[str, Any] = {}
        if options.soak_rate:  # a fixed load, for runs compared with each other
            capacity, source, target_rate = None, "--soak-rate", options.soak_rate
        else:
            capacity, source = self._capacity(round_no, "push-10-40B", self._run_push)
            consume_capacity, consume_source = self._capacity(round_no, "consume-ack", self._run_consume)
            load = soak_load(capacity, consume_capacity, options.soak_share)
            load["consume_capacity_from"] = consume_source
            target_rate = load["rate"]
        producers, producer_threads = 100, 2
        rate_per_thread = target_rate / scenario.per_request / producer_threads
        if self.created_queues:  # the probes' and earlier scenarios' queues go: the table's size is the soak's own
            removed = self._drop_queues()
            self.log(f"   soak: {removed:,} messages of the probes' queues deleted, queen.messages rewritten")
        self.sql.fetchval(Q_CONFIGURE, json.dumps({"queue": queue, "options": {
            "completedRetentionSeconds": COMPLETED_RETENTION_S}}))
        self._precreate(queue, scenario.partitions)
        self.sql.execute(Q_PAUSE, False)
        producer = render_script("push", {"queue": queue, "partitions": scenario.partitions,
                                          "per_request": scenario.per_request, "payload": payload(40),
                                          "seed": 1000 * round_no + 31, "rate_per_thread": rate_per_thread,
                                          "transaction_ids": options.soak_transaction_ids},
                                 self.workdir)
        consumer = render_script("consume", {"queue": queue, "groups": [""], "batch": scenario.batch,
                                             "mode": "ack", "timeout_ms": options.long_poll_ms, "target": "",
                                             "payload": payload(40)}, self.workdir)
        duration = options.soak_duration_s
        slice_s, pairs = slice_plan(duration)
        flat_s = duration - 2 * pairs * slice_s
        # the load runs long enough for the settling and every wait at their longest; it is ended when the last
        # slice does (finish_all)
        total = options.warmup + duration + waits_limit_s(duration)
        results: dict[str, WrkRun] = {}

        def drive(name: str, script: Path, connections: int, threads: int) -> None:
            results[name] = run_wrk(self.broker.url, script, connections, total, threads,
                                    options.long_poll_ms / 1000 + 10)

        def produced() -> int:
            return int(self.sql.fetchval(Q_QUEUE_ROWS, queue))

        def cursor() -> int:
            return self._cursors(queue, ["__QUEUE_MODE__"])["__QUEUE_MODE__"]

        self._checkpoint()
        share = source
        if load and load["bound"] == "push":
            share = f"{options.soak_share:.0%} of {capacity:,.0f}, {source}"
        elif load:
            share = (f"{PIPELINE_SHARE:.0%} of the push-and-consume estimate {load['pipeline_estimate']:,.0f} from "
                     f"push {capacity:,.0f} and consume {load['consume_capacity']:,.0f}; {options.soak_share:.0%} of "
                     "push is more than the consumers follow")
        self.log(f"   soak: producer at {target_rate:,.0f} msg/s ({share}) for {duration:g} s; services on for "
                 f"{flat_s:g} s, then {pairs} pairs of off/on slices of {slice_s:g} s")
        threads = [threading.Thread(target=drive, args=("producer", producer, producers, producer_threads)),
                   threading.Thread(target=drive, args=("consumer", consumer, scenario.connections, 2))]
        for thread in threads:
            thread.start()
        samples: list[dict[str, float]] = []
        slices: list[dict[str, Any]] = []
        try:
            procfs.sleep_until(time.monotonic() + options.warmup)
            settle = self._settle(queue, produced, cursor)
            checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS))
            self.memory.mark()
            self.waits.mark()
            start = self._mark()
            plan = [("on", flat_s)] + [(state, slice_s) for _ in range(pairs) for state in ("off", "on")]
            at = start.at
            # what the flatness window leaves, on average, consumed and not deleted, and not consumed
            baselines: dict[str, float] | None = None
            for state, length in plan:
                if state == "on":  # resumed before its wait: retention catches up with what the pause left
                    self.sql.execute(Q_PAUSE, False)
                catch_up_s, caught_up, vacuum_s = None, None, None
                if baselines is not None:  # "on": retention's backlog; "off": the consumers', services still on
                    backlog = _retained if state == "on" else _unconsumed
                    at, catch_up_s, caught_up = self._catch_up(queue, start.at, samples, backlog, baselines[state],
                                                               slice_s, produced, cursor)
                    if state == "on" and caught_up:  # and the vacuum of what retention deleted
                        at, vacuum_s, caught_up = self._vacuum_pass(queue, start.at, samples, slice_s, produced,
                                                                    cursor)
                if state == "off":  # paused after its wait, which would otherwise add to retention's debt
                    self.sql.execute(Q_PAUSE, True)
                begin = (time.monotonic(), produced(), cursor())
                wal_begin = self.sql.fetchrow(Q_WAL)
                end_at = at + length
                while time.monotonic() < end_at - 0.05:
                    samples.append(self._soak_sample(queue, start.at, state, produced(), cursor()))
                    procfs.sleep_until(min(end_at, time.monotonic() + SAMPLE_S))
                finish = (time.monotonic(), produced(), cursor())
                wal_end = self.sql.fetchrow(Q_WAL)
                elapsed = finish[0] - begin[0]
                slices.append({"services": state, "seconds": elapsed,
                               "push_msg_per_s": _per_s(finish[1] - begin[1], elapsed),
                               "consume_msg_per_s": _per_s(finish[2] - begin[2], elapsed),
                               "wal_mb_per_s": _per_s(wal_end[0] - wal_begin[0], elapsed) / 2**20,
                               "wal_fpi_per_s": _per_s(wal_end[1] - wal_begin[1], elapsed),
                               "catch_up_s": catch_up_s, "vacuum_s": vacuum_s, "caught_up": caught_up})
                if baselines is None:
                    steady = [x for x in samples if x["t"] <= flat_s] or samples[-1:]
                    baselines = {"on": sum(map(_retained, steady)) / len(steady),
                                 "off": sum(map(_unconsumed, steady)) / len(steady)}
                at = end_at
            samples.append(self._soak_sample(queue, start.at, "on", produced(), cursor()))
            end = self._mark()
            checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS)) - checkpoints
        finally:
            self.sql.execute(Q_PAUSE, False)
            finish_all()
            for thread in threads:
                thread.join()
        for name, wrk in results.items():
            self._check_wrk(run, wrk, name)
        produced_total = samples[-1]["produced"] - samples[0]["produced"]
        consumed_total = samples[-1]["cursor"] - samples[0]["cursor"]
        scaled = [WrkRun(w.result, w.wall_s, w.cpu_s * min(1.0, (end.at - start.at) / w.wall_s), w.output)
                  for w in results.values()]
        self._fill_window(run, int(consumed_total), start, end, scaled, results["consumer"], checkpoints)
        run["notes"].append("latency is the consumer's (pop and ack requests), warm-up and settling included")
        run["soak"] = self._soak_figures(samples, slices, flat_s, target_rate, capacity, source,
                                         produced_total, consumed_total, end.at - start.at)
        run["soak"]["settle"] = settle
        if not settle["settled"]:
            run["notes"].append(f"the table's indexes still grew after {settle['seconds']:.0f} s of load (settling "
                                f"limit): the flatness window begins before a steady state")
        if load:
            run["soak"]["load"] = {k: v for k, v in load.items() if k != "rate"}
        run["soak"]["service_runs"] = [
            {"job": r[0], "runs": int(r[1]), "rows": int(r[2]), "mean_ms": float(r[3] or 0),
             "max_ms": float(r[4] or 0), "errors": int(r[5]), "error_texts": list(r[6])}
            for r in self.sql.fetch(Q_RUNS, time.monotonic() - start.at)]
        for job in run["soak"]["service_runs"]:
            if job["errors"]:
                run["problems"].append(f"services: {job['job']} failed {job['errors']} time(s): "
                                       f"{'; '.join(job['error_texts'])}")
        self._soak_ledger(run, queue, results, produced, cursor, scenario)
        soak = run["soak"]
        if soak["throughput_on_vs_off"]["push"] is not None and soak["throughput_on_vs_off"]["push"] < 0.95:
            run["notes"].append(f"push with the services on: {soak['throughput_on_vs_off']['push']:.1%} of off")
        if soak["throughput_on_vs_off"]["consume"] is not None and soak["throughput_on_vs_off"]["consume"] < 0.95:
            run["notes"].append(f"consume with the services on: {soak['throughput_on_vs_off']['consume']:.1%} of off")
        behind = [f"{n}:{x['services']}" for n, x in enumerate(slices) if x["caught_up"] is False]
        if behind:  # the ratios then compare states that are not steady: note it next to them
            run["notes"].append(
                f"{len(behind)} of {len(slices) - 1} slices began before the backlog was back to the flatness "
                f"window's level, or (\"on\") before a vacuum had followed (a wait reached its {slice_s:g} s limit; "
                f"slice:state {', '.join(behind)}): the on/off ratios then include the catching up a pause left; "
                "a load the consumers cannot keep up with (unconsumed_messages growing) leaves no steady state to "
                "compare")
        for key in ("table_mb", "stored_messages", "unconsumed_messages", "retained_messages", "broker_rss_mb"):
            trend = soak["flatness"][key]
            if trend["flat"] is False:
                run["notes"].append(f"{key} {'grows' if trend['slope_per_min'] > 0 else 'shrinks'}: "
                                    f"{trend['slope_per_min']:+,.2f} per minute")
        return run

    def _settle(self, queue: str, produced: Any, cursor: Any) -> dict[str, Any]:
        """Before the measured soak, under its load: sample every :data:`SAMPLE_S` s until
        :func:`indexes_settled` (:data:`SETTLE_QUIET_S`) or :data:`SETTLE_MAX_S` passed. Returns ``{"seconds",
        "settled", "quiet_s", "limit_s", "table_mb": [first, last], "samples"}`` (``t`` from the settling's
        start). The soak starts on an emptied, rewritten table whose indexes then fill for minutes; measured from
        there, a 10-minute soak's table grew by 12.7 MB over its flatness window (2245cb2) and the hour's was
        flat only after minute 7."""
        origin = time.monotonic()
        samples: list[dict[str, Any]] = []
        _, seconds, settled = self._sample_until(queue, origin, samples,
                                                 lambda _: indexes_settled(samples, SETTLE_QUIET_S), SETTLE_MAX_S,
                                                 produced, cursor, state="settle", every_s=SAMPLE_S)
        self.log(f"   soak: {'settled' if settled else 'not settled'} after {seconds:.0f} s: table "
                 f"{samples[0]['table_bytes'] / 2**20:.1f} -> {samples[-1]['table_bytes'] / 2**20:.1f} MB")
        return {"seconds": seconds, "settled": settled, "quiet_s": SETTLE_QUIET_S, "limit_s": SETTLE_MAX_S,
                "table_mb": [samples[0]["table_bytes"] / 2**20, samples[-1]["table_bytes"] / 2**20],
                "samples": list(map(_rounded, samples))}

    def _catch_up(self, queue: str, origin: float, samples: list[dict[str, Any]], backlog: Any, baseline: float,
                  limit_s: float, produced: Any, cursor: Any) -> tuple[float, float, bool]:
        """Before a slice, with the services on: sample until ``backlog(sample)`` is back to ``baseline`` x 1.1
        or ``limit_s`` passed; returns (when that was, its duration in s, whether the backlog got back). Before
        an "on" slice the backlog is retention's (messages consumed and not yet deleted, :func:`_retained`: not
        all stored ones, since consumers that fall behind grow the stored count without any retention debt);
        the slice then measures what the services do in a steady state, not the deletions a pause postponed
        (those would charge it twice). Before an "off" slice it is the consumers' (:func:`_unconsumed`), so the
        slice does not count as its own consume throughput the draining of a backlog the services' slice
        left."""
        return self._sample_until(queue, origin, samples, lambda sample: backlog(sample) <= 1.1 * baseline,
                                  limit_s, produced, cursor)

    def _vacuum_pass(self, queue: str, origin: float, samples: list[dict[str, Any]], limit_s: float,
                     produced: Any, cursor: Any) -> tuple[float, float, bool]:
        """Before an "on" slice, after retention caught up: sample until a vacuum of ``queen.messages`` that
        began after this call has finished (vacuums finished +1, or +2 when one was running at the call), or
        ``limit_s`` passed; returns (when that was, its duration in s, whether it finished). Such a vacuum
        removed the dead rows of every deletion retention made before it began, the pause's included."""
        finished, running = self.sql.fetchrow(Q_VACUUMS)
        wanted = int(finished) + (2 if running else 1)
        return self._sample_until(queue, origin, samples, lambda _: int(self.sql.fetchrow(Q_VACUUMS)[0]) >= wanted,
                                  limit_s, produced, cursor)

    def _sample_until(self, queue: str, origin: float, samples: list[dict[str, Any]],
                      done: Callable[[dict[str, Any]], bool], limit_s: float, produced: Any,
                      cursor: Any, state: str = "on", every_s: float = 1.0) -> tuple[float, float, bool]:
        """A wait with the services on (before a slice, or the settling): a sample (``services`` = ``state``)
        every ``every_s`` seconds into ``samples`` until ``done(sample)`` or ``limit_s`` passed; returns (when
        that was, its duration in s, whether ``done`` held)."""
        begin = time.monotonic()
        while True:
            sample = self._soak_sample(queue, origin, state, produced(), cursor())
            samples.append(sample)
            now = time.monotonic()
            finished = done(sample)
            if finished or now - begin >= limit_s:
                return now, now - begin, finished
            procfs.sleep_until(min(begin + limit_s, now + every_s))

    def _capacity(self, round_no: int, name: str, run: Callable[[Scenario, int], dict[str, Any]]) -> tuple[float, str]:
        """msg/s of scenario ``name`` in this round, measured now with ``run`` if the run did not include it;
        returns (msg/s, where the figure came from)."""
        figure = self.scenario_results.get((round_no, name), {}).get("msg_per_s")
        if figure:
            return float(figure), f"{name} of this round"
        probe = next(s for s in SCENARIOS if s.name == name)
        measured = run(probe, round_no)
        return float(measured.get("msg_per_s") or probe.initial_rate), f"a {name} probe before the soak"

    def _soak_sample(self, queue: str, origin: float, state: str, produced: int, cursor: int) -> dict[str, Any]:
        tree = procfs.tree_of(self.broker.pid)
        parts = json.loads(self.sql.fetchval(Q_TABLE_PARTS))
        return {"t": time.monotonic() - origin, "services": state,
                "table_bytes": float(sum(parts.values())), "table_parts_bytes": parts,
                "stored": float(self.sql.fetchval(Q_STORED, queue)),
                "rss_bytes": float(sum(p.rss_pages for p in tree) * procfs.PAGE_SIZE),
                "produced": float(produced), "cursor": float(cursor)}

    @staticmethod
    def _soak_figures(samples: list[dict[str, Any]], slices: list[dict[str, Any]], flat_s: float,
                      target_rate: float, capacity: float | None, source: str, produced: float, consumed: float,
                      window_s: float) -> dict[str, Any]:
        steady = [s for s in samples if s["t"] <= flat_s]

        def series(key: str) -> list[tuple[float, float]]:
            return [(s["t"], s[key]) for s in steady]

        def mean_rate(state: str, key: str) -> float | None:
            rates = [s[key] for s in slices[1:] if s["services"] == state]
            return sum(rates) / len(rates) if rates else None

        # the "on" slices against the "off" ones; and the flatness window (the services on without pauses, so
        # without a pause's deletions to catch up with, and without any wait) against the same "off" slices
        ratios: dict[str, float | None] = {}
        window_ratios: dict[str, float | None] = {}
        for label, key in (("push", "push_msg_per_s"), ("consume", "consume_msg_per_s")):
            on, off = mean_rate("on", key), mean_rate("off", key)
            ratios[label] = on / off if on is not None and off else None
            window = slices[0][key] if slices and slices[0]["services"] == "on" else None
            window_ratios[label] = window / off if window is not None and off else None
        return {
            "target_producer_msg_per_s": target_rate, "push_capacity_msg_per_s": capacity,
            "push_capacity_from": source, "window_s": window_s, "flatness_window_s": [0.0, flat_s],
            "producer_msg_per_s": produced / window_s if window_s > 0 else 0.0,
            "consumer_msg_per_s": consumed / window_s if window_s > 0 else 0.0,
            "flatness": {"table_mb": _trend(series("table_bytes"), 2**20, FLAT_TABLE_BYTES),
                         "stored_messages": _trend(series("stored"), 1.0),
                         "unconsumed_messages": _trend([(s["t"], _unconsumed(s)) for s in steady], 1.0),
                         "retained_messages": _trend([(s["t"], _retained(s)) for s in steady], 1.0),
                         "broker_rss_mb": _trend(series("rss_bytes"), 2**20)},
            # the table's size split (heap, then each index): which part grows when the table does
            "table_parts_mb": {part: _trend([(s["t"], s["table_parts_bytes"][part]) for s in steady], 2**20)
                               for part in (steady[-1].get("table_parts_bytes", {}) if steady else {})},
            "slices": slices,
            "throughput_on_vs_off": ratios,
            "throughput_window_vs_off": window_ratios,
            "samples": list(map(_rounded, samples)),
        }

    def _soak_ledger(self, run: dict[str, Any], queue: str, results: dict[str, WrkRun], produced: Any,
                     cursor: Any, scenario: Scenario) -> None:
        """Nothing lost or duplicated, and retention deleted only what was consumed: offsets assigned equal what
        the producer saw queued (within what was in flight), the cursor advanced by what the consumers acked,
        and every message deleted was at or below the cursor (completed retention)."""
        settled_rows, settled_cursor = self._settled(produced), self._settled(cursor)
        queued = int(results["producer"].result.counters.get("queued", 0))
        acked = int(results["consumer"].result.counters.get("acked", 0))
        prefilled = scenario.partitions
        row = self.sql.fetchrow(Q_LEDGER, queue)
        offsets, all_deleted, deleted = int(row[0]), int(row[1]), int(row[2])
        stored = offsets - all_deleted
        run["ground_truth"].update({"client_queued": queued, "client_acked": acked, "offsets_assigned":
                                    settled_rows - prefilled, "cursor_advanced": settled_cursor,
                                    "deleted_by_completed_retention": deleted, "stored_at_end": stored})
        if settled_rows - prefilled < queued or settled_rows - prefilled > queued + 100 * scenario.per_request:
            run["problems"].append(f"producer: client queued {queued}, offsets assigned {settled_rows - prefilled}")
        if settled_cursor < acked or settled_cursor > acked + scenario.connections * scenario.batch + prefilled:
            run["problems"].append(f"consumer: client acked {acked}, cursor advanced {settled_cursor}")
        if deleted > settled_cursor:
            run["problems"].append(f"completed retention deleted {deleted} messages, more than consumed "
                                   f"({settled_cursor})")
        if deleted != all_deleted:
            run["problems"].append(f"{all_deleted} messages deleted, {deleted} of them by completed retention")
        if offsets != settled_rows:
            run["problems"].append(f"offsets {offsets} != {settled_rows} after the producer stopped")
