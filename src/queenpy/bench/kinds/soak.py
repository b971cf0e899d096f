"""The soak scenario: a paced producer and acking consumers for a long time, with completed retention deleting
behind them. Do the messages table and the broker's memory stay flat, and do the background services cost the
hot path less than 5%? Short runs cannot show either: a table's indexes fill for minutes, and the services'
cost is a difference of a few percent between long stretches with them running and paused.

The timeline of ``--duration`` D, after a warm-up and a settling under the same load (until no index of
``queen.messages`` grew for :data:`SETTLE_QUIET_S`, at most :data:`SETTLE_MAX_S`: :func:`indexes_settled`):
the services run for the first part of D (the flatness window, where the table, the stored messages and the
broker's RSS are fitted per minute); then slices alternate with the services paused everywhere and running
again (:func:`slice_plan`). Each slice starts from a steady state: an "on" slice once retention has caught up
with what the pause left and a vacuum of ``queen.messages`` that began after that has finished; an "off" slice
once the consumers have caught up with what the services' slice left. The push and consume rates of the "on"
slices are compared with the "off" slices of the same run. The producer's rate is :func:`soak_load`.

Why each wait and limit is what it is, and every measured soak: benchmarks/RESULTS.md (the scenario "soak")
and the dated entries in benchmarks/journal/.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from queenpy.bench import procfs
from queenpy.bench.catalog import SCENARIOS, Options, Scenario, payload
from queenpy.bench.core import Q_QUEUE_ROWS, Context, Kind, Window
from queenpy.bench.kinds import consume, push
from queenpy.bench.load import BackgroundLoad
from queenpy.bench.parsing import median
from queenpy.bench.report import number, pyplot
from queenpy.bench.wrk import finish_all, render_script

__all__ = [
    "COMPLETED_RETENTION_S",
    "KIND",
    "PIPELINE_SHARE",
    "SAMPLE_S",
    "SETTLE_MAX_S",
    "SETTLE_QUIET_S",
    "charts",
    "figures",
    "indexes_settled",
    "report_lines",
    "run",
    "slice_plan",
    "slope_per_minute",
    "soak_load",
    "summarize",
    "waits_limit_s",
]

COMPLETED_RETENTION_S = 5
SAMPLE_S = 5.0
MAX_SLICE_S = 60.0  # a paused slice leaves its deletions to the next: longer slices leave more
MIN_PAIRS = 2  # of off and on slices
FLAT_SHARE = 0.10
FLAT_TABLE_BYTES = 8 * 2**20
# of the push-and-consume estimate (soak_load): room for what the two probes leave out, the services' own work
# (deletes, vacuum, their WAL) and the probes' spread; closer to the estimate the consumers fell behind over
# an hour (benchmarks/journal/2026-11.md, the soak paced to what the consumers follow)
PIPELINE_SHARE = 0.7
# the settling before the measured soak (indexes_settled): no index of queen.messages grew for SETTLE_QUIET_S,
# or SETTLE_MAX_S passed; from an emptied table the indexes take minutes to reach their size
# (benchmarks/journal/ 2026-11.md, the soak measured after its table settles)
SETTLE_QUIET_S = 120.0
SETTLE_MAX_S = 600.0
PRODUCERS, PRODUCER_THREADS = 100, 2  # connections and wrk threads of the paced producer
# a wait before a slice ends once the backlog is back within 10% of the flatness window's mean
BACKLOG_SHARE = 1.1

# the messages table's size by part: the heap with its TOAST and maps (pg_table_size), and each index with all
# its forks (pg_total_relation_size of the index); they sum to pg_total_relation_size('queen.messages')
Q_TABLE_PARTS = (
    "SELECT jsonb_build_object('heap', pg_table_size('queen.messages')) || coalesce((SELECT "
    "jsonb_object_agg(c.relname, pg_total_relation_size(c.oid)) FROM pg_index i JOIN pg_class c "
    "ON c.oid = i.indexrelid WHERE i.indrelid = 'queen.messages'::regclass), '{}')"
)
Q_STORED = (
    "SELECT coalesce(sum(p.last_seq - c.messages_deleted), 0)::bigint FROM queen.partitions p "
    "JOIN queen.partition_counters c ON c.partition_id = p.id JOIN queen.queues q ON q.id = p.queue_id "
    "WHERE q.name = $1"
)
# one snapshot: a retention step writes its deletions and its history row in one transaction
Q_LEDGER = (
    "SELECT sum(p.last_seq)::bigint, sum(c.messages_deleted)::bigint, "
    "(SELECT coalesce(sum(h.messages_deleted), 0)::bigint FROM queen.retention_history h "
    " WHERE h.queue_name = $1 AND h.retention_type = 'completed_retention') "
    "FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id "
    "JOIN queen.partition_counters c ON c.partition_id = p.id WHERE q.name = $1"
)
Q_RUNS = (
    "SELECT job, count(*), coalesce(sum(rows), 0)::bigint, "
    "avg(extract(epoch FROM finished_at - started_at) * 1000), "
    "max(extract(epoch FROM finished_at - started_at) * 1000), count(error), "
    "coalesce(array_agg(DISTINCT left(error, 300)) FILTER (WHERE error IS NOT NULL), '{}') "
    "FROM queen.service_runs WHERE started_at >= now() - make_interval(secs => $1) GROUP BY job ORDER BY job"
)
Q_CONFIGURE = "SELECT queen.configure_queue_v1($1::jsonb)::text"
# the server's WAL so far (PostgreSQL 14 and later): bytes and full-page images
Q_WAL = "SELECT wal_bytes::float8, wal_fpi::float8 FROM pg_stat_wal"
# vacuums of queen.messages finished so far, and whether one runs now (PostgreSQL 15 and later report a
# vacuum's end to the statistics at once)
Q_VACUUMS = (
    "SELECT s.vacuum_count + s.autovacuum_count, "
    "EXISTS (SELECT 1 FROM pg_stat_progress_vacuum v WHERE v.relid = s.relid) "
    "FROM pg_stat_user_tables s WHERE s.relid = 'queen.messages'::regclass"
)


def slice_plan(duration_s: float) -> tuple[float, int]:
    """(slice length in s, pairs of off/on slices) for a soak of ``duration_s``: slices of :data:`MAX_SLICE_S`
    (a tenth of the soak when shorter), as many pairs as 40% of the soak holds with the waits before them
    (a pair takes up to five slice lengths), at least :data:`MIN_PAIRS`."""
    slice_s = min(0.1 * duration_s, MAX_SLICE_S)
    return slice_s, max(MIN_PAIRS, int(0.4 * duration_s // (4 * slice_s)))


def waits_limit_s(duration_s: float) -> float:
    """The longest a soak of ``duration_s`` may run beyond it, in s: the settling at its limit, then one slice
    of wait before each "off" slice and two before each "on" one (retention's catch-up, then a vacuum
    pass)."""
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
    resource). On a 2-core machine half of the push capacity is more than the consumers follow beside the
    producer, so the cap sets the rate there (benchmarks/RESULTS.md, the scenario "soak").

    Returns ``{"rate", "push_capacity", "consume_capacity", "pipeline_estimate", "bound"}``, ``bound`` being
    ``"push"`` (share of the push capacity) or ``"pipeline"`` (the cap). Raises ValueError when a capacity is
    not positive."""
    if push_capacity <= 0 or consume_capacity <= 0:
        raise ValueError(f"capacities must be positive: push {push_capacity}, consume {consume_capacity}")
    pipeline = 1.0 / (1.0 / push_capacity + 1.0 / consume_capacity)
    by_push, cap = share * push_capacity, PIPELINE_SHARE * pipeline
    return {
        "rate": min(by_push, cap),
        "push_capacity": push_capacity,
        "consume_capacity": consume_capacity,
        "pipeline_estimate": pipeline,
        "bound": "push" if by_push <= cap else "pipeline",
    }


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


def _trend(
    samples: list[tuple[float, float]], unit: float, absolute_limit: float | None = None
) -> dict[str, Any]:
    """Least-squares trend of ``(t_s, value)`` samples; figures reported in ``unit``s of the value; "flat"
    when the fitted change is within FLAT_SHARE of the mean and ``absolute_limit`` (in the samples' own
    unit)."""
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
    return {
        "samples": len(samples),
        "first": values[0] / unit,
        "last": values[-1] / unit,
        "mean": mean / unit,
        "min": min(values) / unit,
        "max": max(values) / unit,
        "slope_per_min": slope / unit,
        "fitted_change": change / unit,
        "flat": abs(change) <= max(limit, 1.0),
    }


def figures(
    samples: list[dict[str, Any]],
    slices: list[dict[str, Any]],
    flat_s: float,
    target_rate: float,
    capacity: float | None,
    source: str,
    produced: float,
    consumed: float,
    window_s: float,
) -> dict[str, Any]:
    """The soak's figures (``run["soak"]``): trends over the flatness window (``t`` <= ``flat_s``), the on/off
    ratios of the slices after the first, the producer's and consumers' mean rates, every sample."""
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
        "target_producer_msg_per_s": target_rate,
        "push_capacity_msg_per_s": capacity,
        "push_capacity_from": source,
        "window_s": window_s,
        "flatness_window_s": [0.0, flat_s],
        "producer_msg_per_s": produced / window_s if window_s > 0 else 0.0,
        "consumer_msg_per_s": consumed / window_s if window_s > 0 else 0.0,
        "flatness": {
            "table_mb": _trend(series("table_bytes"), 2**20, FLAT_TABLE_BYTES),
            "stored_messages": _trend(series("stored"), 1.0),
            "unconsumed_messages": _trend([(s["t"], _unconsumed(s)) for s in steady], 1.0),
            "retained_messages": _trend([(s["t"], _retained(s)) for s in steady], 1.0),
            "broker_rss_mb": _trend(series("rss_bytes"), 2**20),
        },
        # the table's size split (heap, then each index): which part grows when the table does
        "table_parts_mb": {
            part: _trend([(s["t"], s["table_parts_bytes"][part]) for s in steady], 2**20)
            for part in (steady[-1].get("table_parts_bytes", {}) if steady else {})
        },
        "slices": slices,
        "throughput_on_vs_off": ratios,
        "throughput_window_vs_off": window_ratios,
        "samples": list(map(_rounded, samples)),
    }


@dataclass
class _Rate:
    """The producer's rate in msg/s, the push capacity it was derived from (None with ``--soak-rate``), where
    that figure came from, and :func:`soak_load`'s answer (empty with ``--soak-rate``)."""

    target: float
    capacity: float | None
    source: str
    load: dict[str, Any]

    def describe(self, options: Options) -> str:
        if self.load and self.load["bound"] == "push":
            return f"{options.soak_share:.0%} of {self.capacity:,.0f}, {self.source}"
        if self.load:
            return (
                f"{PIPELINE_SHARE:.0%} of the push-and-consume estimate "
                f"{self.load['pipeline_estimate']:,.0f} from push {self.capacity:,.0f} and consume "
                f"{self.load['consume_capacity']:,.0f}; "
                f"{options.soak_share:.0%} of push is more than the consumers follow"
            )
        return self.source


def _capacity(
    context: Context, round_no: int, name: str, measure: Callable[[Context, Scenario, int], dict[str, Any]]
) -> tuple[float, str]:
    """msg/s of scenario ``name`` in this round, measured now with ``measure`` (a probe) if the run did not
    include it; returns (msg/s, where the figure came from)."""
    figure = context.scenario_results.get((round_no, name), {}).get("msg_per_s")
    if figure:
        return float(figure), f"{name} of this round"
    probe = next(s for s in SCENARIOS if s.name == name)
    measured = measure(context, probe, round_no)
    return float(measured.get("msg_per_s") or probe.initial_rate), f"a {name} probe before the soak"


def _producer_rate(context: Context, round_no: int) -> _Rate:
    options = context.options
    if options.soak_rate:  # a fixed load, for runs compared with each other
        return _Rate(options.soak_rate, None, "--soak-rate", {})
    capacity, source = _capacity(context, round_no, "push-10-40B", push.run)
    consume_capacity, consume_source = _capacity(context, round_no, "consume-ack", consume.run)
    load = soak_load(capacity, consume_capacity, options.soak_share)
    load["consume_capacity_from"] = consume_source
    return _Rate(load["rate"], capacity, source, load)


@dataclass
class _Queue:
    """The soak's queue, and the samples taken of it: its offsets and queue-mode cursor, the messages table's
    size by part, the messages it stores, the broker's RSS."""

    context: Context
    name: str

    def produced(self) -> int:
        return int(self.context.sql.fetchval(Q_QUEUE_ROWS, self.name))

    def cursor(self) -> int:
        return self.context.cursors(self.name, ["__QUEUE_MODE__"])["__QUEUE_MODE__"]

    def sample(self, origin: float, state: str) -> dict[str, Any]:
        sql = self.context.sql
        produced, cursor = self.produced(), self.cursor()
        tree = procfs.tree_of(self.context.broker.pid)
        parts = json.loads(sql.fetchval(Q_TABLE_PARTS))
        return {
            "t": time.monotonic() - origin,
            "services": state,
            "table_bytes": float(sum(parts.values())),
            "table_parts_bytes": parts,
            "stored": float(sql.fetchval(Q_STORED, self.name)),
            "rss_bytes": float(sum(p.rss_pages for p in tree) * procfs.PAGE_SIZE),
            "produced": float(produced),
            "cursor": float(cursor),
        }

    def sample_until(
        self,
        origin: float,
        samples: list[dict[str, Any]],
        done: Callable[[dict[str, Any]], bool],
        limit_s: float,
        state: str = "on",
        every_s: float = 1.0,
    ) -> tuple[float, float, bool]:
        """A wait with the services on (before a slice, or the settling): a sample (``services`` = ``state``)
        every ``every_s`` seconds into ``samples`` until ``done(sample)`` or ``limit_s`` passed; returns (when
        that was, its duration in s, whether ``done`` held)."""
        begin = time.monotonic()
        while True:
            sample = self.sample(origin, state)
            samples.append(sample)
            now = time.monotonic()
            finished = done(sample)
            if finished or now - begin >= limit_s:
                return now, now - begin, finished
            procfs.sleep_until(min(begin + limit_s, now + every_s))

    def settle(self) -> dict[str, Any]:
        """Before the measured soak, under its load: sample every :data:`SAMPLE_S` s until
        :func:`indexes_settled` (:data:`SETTLE_QUIET_S`) or :data:`SETTLE_MAX_S` passed. The soak starts on an
        emptied, rewritten table whose indexes then fill for minutes. Returns ``{"seconds", "settled",
        "quiet_s", "limit_s", "table_mb": [first, last], "samples"}`` (``t`` from the settling's start)."""
        origin = time.monotonic()
        samples: list[dict[str, Any]] = []
        _, seconds, settled = self.sample_until(
            origin,
            samples,
            lambda _: indexes_settled(samples, SETTLE_QUIET_S),
            SETTLE_MAX_S,
            state="settle",
            every_s=SAMPLE_S,
        )
        self.context.log(
            f"   soak: {'settled' if settled else 'not settled'} after {seconds:.0f} s: table "
            f"{samples[0]['table_bytes'] / 2**20:.1f} -> {samples[-1]['table_bytes'] / 2**20:.1f} MB"
        )
        return {
            "seconds": seconds,
            "settled": settled,
            "quiet_s": SETTLE_QUIET_S,
            "limit_s": SETTLE_MAX_S,
            "table_mb": [samples[0]["table_bytes"] / 2**20, samples[-1]["table_bytes"] / 2**20],
            "samples": list(map(_rounded, samples)),
        }

    def catch_up(
        self,
        origin: float,
        samples: list[dict[str, Any]],
        backlog: Callable[[dict[str, Any]], float],
        baseline: float,
        limit_s: float,
    ) -> tuple[float, float, bool]:
        """Before a slice, with the services on: sample until ``backlog(sample)`` is back to ``baseline`` x
        :data:`BACKLOG_SHARE` or ``limit_s`` passed; returns (when that was, its duration in s, whether the
        backlog got back). Before an "on" slice the backlog is retention's (messages consumed and not yet
        deleted, :func:`_retained`: consumers that fall behind grow the stored count without any retention
        debt), so the slice measures the services in a steady state, not the deletions a pause postponed.
        Before an "off" slice it is the consumers' (:func:`_unconsumed`), so the slice does not count as its
        own consume throughput the draining of a backlog the services' slice left."""
        return self.sample_until(
            origin, samples, lambda sample: backlog(sample) <= BACKLOG_SHARE * baseline, limit_s
        )

    def vacuum_pass(
        self, origin: float, samples: list[dict[str, Any]], limit_s: float
    ) -> tuple[float, float, bool]:
        """Before an "on" slice, after retention caught up: sample until a vacuum of ``queen.messages`` that
        began after this call has finished (vacuums finished +1, or +2 when one was running at the call), or
        ``limit_s`` passed; returns (when that was, its duration in s, whether it finished). Such a vacuum
        removed the dead rows of every deletion retention made before it began, the pause's included."""
        sql = self.context.sql
        finished, running = sql.fetchrow(Q_VACUUMS)
        wanted = int(finished) + (2 if running else 1)
        return self.sample_until(
            origin, samples, lambda _: int(sql.fetchrow(Q_VACUUMS)[0]) >= wanted, limit_s
        )

    def check_ledger(self, run: dict[str, Any], load: BackgroundLoad, scenario: Scenario) -> None:
        """Nothing lost or duplicated, and retention deleted only what was consumed: offsets assigned equal
        what the producer saw queued (within what was in flight), the cursor advanced by what the consumers
        acked, and every message deleted was at or below the cursor (completed retention)."""
        settled_rows, settled_cursor = self.context.settled(self.produced), self.context.settled(self.cursor)
        queued, acked = load.counter("producer", "queued"), load.counter("consumer", "acked")
        prefilled = scenario.partitions
        row = self.context.sql.fetchrow(Q_LEDGER, self.name)
        offsets, all_deleted, deleted = int(row[0]), int(row[1]), int(row[2])
        run["ground_truth"].update(
            {
                "client_queued": queued,
                "client_acked": acked,
                "offsets_assigned": settled_rows - prefilled,
                "cursor_advanced": settled_cursor,
                "deleted_by_completed_retention": deleted,
                "stored_at_end": offsets - all_deleted,
            }
        )
        if (
            settled_rows - prefilled < queued
            or settled_rows - prefilled > queued + PRODUCERS * scenario.per_request
        ):
            run["problems"].append(
                f"producer: client queued {queued}, offsets assigned {settled_rows - prefilled}"
            )
        if (
            settled_cursor < acked
            or settled_cursor > acked + scenario.connections * scenario.batch + prefilled
        ):
            run["problems"].append(f"consumer: client acked {acked}, cursor advanced {settled_cursor}")
        if deleted > settled_cursor:
            run["problems"].append(
                f"completed retention deleted {deleted} messages, more than consumed ({settled_cursor})"
            )
        if deleted != all_deleted:
            run["problems"].append(
                f"{all_deleted} messages deleted, {deleted} of them by completed retention"
            )
        if offsets != settled_rows:
            run["problems"].append(f"offsets {offsets} != {settled_rows} after the producer stopped")


def _fresh_queue(context: Context, scenario: Scenario, round_no: int) -> _Queue:
    """The soak's queue (``completedRetentionSeconds`` :data:`COMPLETED_RETENTION_S`), on a table emptied of
    the queues the run created so far (the probes', earlier scenarios'): the table's size is the soak's
    own."""
    if context.created_queues:
        removed = context.drop_queues()
        context.log(f"   soak: {removed:,} messages of the probes' queues deleted, queen.messages rewritten")
    queue = f"{context.queue_prefix}{scenario.name}-r{round_no}"
    context.sql.fetchval(
        Q_CONFIGURE,
        json.dumps({"queue": queue, "options": {"completedRetentionSeconds": COMPLETED_RETENTION_S}}),
    )
    context.precreate(queue, scenario.partitions)
    context.sql.pause_services(False)
    return _Queue(context, queue)


def _slices(
    queue: _Queue, origin: float, flat_s: float, slice_s: float, pairs: int, samples: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The measured soak from ``origin``: the flatness window (services on for ``flat_s``), then ``pairs`` of
    "off" and "on" slices of ``slice_s``, each after its wait (:meth:`_Queue.catch_up`, and for "on" a
    :meth:`_Queue.vacuum_pass`). Samples go to ``samples``; returns one dict per slice (the flatness window
    first): its rates, WAL, and waits."""
    sql = queue.context.sql
    plan = [("on", flat_s)] + [(state, slice_s) for _ in range(pairs) for state in ("off", "on")]
    slices: list[dict[str, Any]] = []
    at = origin
    # what the flatness window leaves, on average, consumed and not deleted ("on"), and not consumed ("off")
    baselines: dict[str, float] | None = None
    for state, length in plan:
        if state == "on":  # resumed before its wait: retention catches up with what the pause left
            sql.pause_services(False)
        catch_up_s, caught_up, vacuum_s = None, None, None
        if baselines is not None:  # "on": retention's backlog; "off": the consumers', services still on
            backlog = _retained if state == "on" else _unconsumed
            at, catch_up_s, caught_up = queue.catch_up(origin, samples, backlog, baselines[state], slice_s)
            if state == "on" and caught_up:  # and the vacuum of what retention deleted
                at, vacuum_s, caught_up = queue.vacuum_pass(origin, samples, slice_s)
        if state == "off":  # paused after its wait, which would otherwise add to retention's debt
            sql.pause_services(True)
        begin = (time.monotonic(), queue.produced(), queue.cursor())
        wal_begin = sql.fetchrow(Q_WAL)
        end_at = at + length
        while time.monotonic() < end_at - 0.05:
            samples.append(queue.sample(origin, state))
            procfs.sleep_until(min(end_at, time.monotonic() + SAMPLE_S))
        finish = (time.monotonic(), queue.produced(), queue.cursor())
        wal_end = sql.fetchrow(Q_WAL)
        elapsed = finish[0] - begin[0]
        slices.append(
            {
                "services": state,
                "seconds": elapsed,
                "push_msg_per_s": _per_s(finish[1] - begin[1], elapsed),
                "consume_msg_per_s": _per_s(finish[2] - begin[2], elapsed),
                "wal_mb_per_s": _per_s(wal_end[0] - wal_begin[0], elapsed) / 2**20,
                "wal_fpi_per_s": _per_s(wal_end[1] - wal_begin[1], elapsed),
                "catch_up_s": catch_up_s,
                "vacuum_s": vacuum_s,
                "caught_up": caught_up,
            }
        )
        if baselines is None:
            steady = [x for x in samples if x["t"] <= flat_s] or samples[-1:]
            baselines = {
                "on": sum(map(_retained, steady)) / len(steady),
                "off": sum(map(_unconsumed, steady)) / len(steady),
            }
        at = end_at
    return slices


def run(context: Context, scenario: Scenario, round_no: int) -> dict[str, Any]:
    """See the module docstring."""
    run = context.new_run(scenario, round_no)
    options = context.options
    rate = _producer_rate(context, round_no)
    queue = _fresh_queue(context, scenario, round_no)
    producer = render_script(
        "push",
        {
            "queue": queue.name,
            "partitions": scenario.partitions,
            "per_request": scenario.per_request,
            "payload": payload(40),
            "seed": 1000 * round_no + 31,
            "rate_per_thread": rate.target / scenario.per_request / PRODUCER_THREADS,
            "transaction_ids": options.soak_transaction_ids,
        },
        context.workdir,
    )
    consumer = render_script(
        "consume",
        {
            "queue": queue.name,
            "groups": [""],
            "batch": scenario.batch,
            "mode": "ack",
            "timeout_ms": options.long_poll_ms,
            "target": "",
            "payload": payload(40),
        },
        context.workdir,
    )
    duration = options.soak_duration_s
    slice_s, pairs = slice_plan(duration)
    flat_s = duration - 2 * pairs * slice_s
    context.checkpoint()
    context.log(
        f"   soak: producer at {rate.target:,.0f} msg/s ({rate.describe(options)}) for {duration:g} s; "
        f"services on for {flat_s:g} s, then {pairs} pairs of off/on slices of {slice_s:g} s"
    )
    # the load runs long enough for the settling and every wait at their longest; it is ended when the last
    # slice does (finish_all)
    load = BackgroundLoad(
        context, options.warmup + duration + waits_limit_s(duration), options.long_poll_ms / 1000 + 10
    )
    load.start("producer", producer, PRODUCERS, PRODUCER_THREADS)
    load.start("consumer", consumer, scenario.connections)
    samples: list[dict[str, Any]] = []
    try:
        procfs.sleep_until(time.monotonic() + options.warmup)
        settle = queue.settle()
        window = context.open_window()
        slices = _slices(queue, window.start.at, flat_s, slice_s, pairs, samples)
        samples.append(queue.sample(window.start.at, "on"))
        context.close_window(window)
    finally:
        context.sql.pause_services(False)
        finish_all()
        load.join()
    load.check(run)
    consumed = samples[-1]["cursor"] - samples[0]["cursor"]
    context.fill_window(run, int(consumed), window, load.scaled_to(window.seconds), load.results["consumer"])
    run["notes"].append("latency is the consumer's (pop and ack requests), warm-up and settling included")
    run["soak"] = figures(
        samples,
        slices,
        flat_s,
        rate.target,
        rate.capacity,
        rate.source,
        samples[-1]["produced"] - samples[0]["produced"],
        consumed,
        window.seconds,
    )
    run["soak"]["settle"] = settle
    if rate.load:
        run["soak"]["load"] = {k: v for k, v in rate.load.items() if k != "rate"}
    _service_runs(context, run, window)
    queue.check_ledger(run, load, scenario)
    _notes(run, settle, slices, slice_s)
    return run


def _service_runs(context: Context, run: dict[str, Any], window: Window) -> None:
    """The services' runs since the window opened (``queen.service_runs``); a failed run is a problem."""
    run["soak"]["service_runs"] = [
        {
            "job": r[0],
            "runs": int(r[1]),
            "rows": int(r[2]),
            "mean_ms": float(r[3] or 0),
            "max_ms": float(r[4] or 0),
            "errors": int(r[5]),
            "error_texts": list(r[6]),
        }
        for r in context.sql.fetch(Q_RUNS, time.monotonic() - window.start.at)
    ]
    for job in run["soak"]["service_runs"]:
        if job["errors"]:
            run["problems"].append(
                f"services: {job['job']} failed {job['errors']} time(s): {'; '.join(job['error_texts'])}"
            )


def _notes(run: dict[str, Any], settle: dict[str, Any], slices: list[dict[str, Any]], slice_s: float) -> None:
    """What a reader of the figures must know: no settling, a services' cost over 5%, waits that reached their
    limit, a trend that is not flat."""
    soak = run["soak"]
    if not settle["settled"]:
        run["notes"].append(
            f"the table's indexes still grew after {settle['seconds']:.0f} s of load (settling "
            f"limit): the flatness window begins before a steady state"
        )
    for path in ("push", "consume"):
        ratio = soak["throughput_on_vs_off"][path]
        if ratio is not None and ratio < 0.95:
            run["notes"].append(f"{path} with the services on: {ratio:.1%} of off")
    behind = [f"{n}:{x['services']}" for n, x in enumerate(slices) if x["caught_up"] is False]
    if behind:  # the ratios then compare states that are not steady: note it next to them
        run["notes"].append(
            f"{len(behind)} of {len(slices) - 1} slices began before the backlog was back to the "
            f'flatness window\'s level, or ("on") before a vacuum had followed (a wait reached its '
            f"{slice_s:g} s limit; slice:state {', '.join(behind)}): the on/off ratios then include the "
            "catching up a pause left; a load the consumers cannot keep up with (unconsumed_messages "
            "growing) leaves no steady state to compare"
        )
    for key in ("table_mb", "stored_messages", "unconsumed_messages", "retained_messages", "broker_rss_mb"):
        trend = soak["flatness"][key]
        if trend["flat"] is False:
            run["notes"].append(
                f"{key} {'grows' if trend['slope_per_min'] > 0 else 'shrinks'}: "
                f"{trend['slope_per_min']:+,.2f} per minute"
            )


def summarize(measured: list[dict[str, Any]]) -> dict[str, Any]:
    def of(read: Callable[[dict[str, Any]], float | None]) -> float | None:
        return median(read(r["soak"]) for r in measured)

    return {
        "soak": {
            "table_mb_slope_per_min": of(lambda s: s["flatness"]["table_mb"]["slope_per_min"]),
            "stored_messages_slope_per_min": of(lambda s: s["flatness"]["stored_messages"]["slope_per_min"]),
            "broker_rss_mb_slope_per_min": of(lambda s: s["flatness"]["broker_rss_mb"]["slope_per_min"]),
            "push_on_vs_off": of(lambda s: s["throughput_on_vs_off"]["push"]),
            "consume_on_vs_off": of(lambda s: s["throughput_on_vs_off"]["consume"]),
            "push_window_vs_off": of(lambda s: s["throughput_window_vs_off"]["push"]),
            "consume_window_vs_off": of(lambda s: s["throughput_window_vs_off"]["consume"]),
        }
    }


def report_lines(entry: dict[str, Any]) -> list[str]:
    soak = (entry.get("median") or {}).get("soak")
    if not soak:
        return []
    return [
        (
            f"{entry['scenario']}: over the flatness window the messages table moved "
            f"{number(soak['table_mb_slope_per_min'], 3)} MB/min and the broker's RSS "
            f"{number(soak['broker_rss_mb_slope_per_min'], 3)} MB/min; with the services on, push "
            f"{number(soak['push_on_vs_off'], 3)} and consume {number(soak['consume_on_vs_off'], 3)} of "
            f"their rates with the services paused (the bar: 0.95)"
        )
    ]


def charts(document: dict[str, Any], path: Path) -> list[Path]:
    """Write one PNG per soak run next to ``path`` (``<stem>-soak-r<round>.png``): over time, in minutes from
    the measured soak's start (the settling before it at negative minutes), the messages table's size by part
    (the heap, each index), the broker's RSS, and the producer's and consumers' rates between samples, with
    the settling and the paused ("off") slices shaded and the flatness window marked. Returns the paths
    written; none when matplotlib is missing or no run has soak samples."""
    runs = [
        run
        for entry in document["scenarios"]
        for run in entry.get("runs", [])
        if run.get("soak", {}).get("samples")
    ]
    plt = pyplot()
    if plt is None:
        return []
    written = []
    for run in runs:
        soak = run["soak"]
        settle = soak.get("settle") or {}
        shift = settle.get("seconds", 0.0)
        samples = [{**x, "t": x["t"] - shift} for x in settle.get("samples", [])] + soak["samples"]
        minutes = [x["t"] / 60 for x in samples]
        parts = sorted(
            {k for x in samples for k in x.get("table_parts_bytes", {})}, key=lambda k: (k != "heap", k)
        )
        fig, (table_ax, rss_ax, rate_ax) = plt.subplots(3, 1, figsize=(11, 10), sharex=True)
        table_ax.stackplot(
            minutes,
            *[[x.get("table_parts_bytes", {}).get(k, 0.0) / 2**20 for x in samples] for k in parts],
            labels=parts,
            alpha=0.8,
        )
        table_ax.set_ylabel("queen.messages MB")
        trend = soak["flatness"]["table_mb"]
        table_ax.set_title(
            f"messages table by part: over the flatness window {number(trend.get('slope_per_min'), 3)}"
            f" MB/min, flat {trend.get('flat')}",
            fontsize=10,
        )
        table_ax.legend(loc="upper left", fontsize=7)
        rss_ax.plot(minutes, [x["rss_bytes"] / 2**20 for x in samples], color="#3b7dd8")
        rss = soak["flatness"]["broker_rss_mb"]
        rss_ax.set_ylim(0, 1.1 * max(x["rss_bytes"] / 2**20 for x in samples))
        rss_ax.set_ylabel("broker RSS MB")
        rss_ax.set_title(
            f"broker RSS (all processes): {number(rss.get('slope_per_min'), 3)} MB/min, flat "
            f"{rss.get('flat')}",
            fontsize=10,
        )
        # samples a second or more apart (a wait samples every second; two taken at a slice's boundary are a
        # few milliseconds apart, and their difference is a batch or nothing)
        pairs = [(a, b) for a, b in itertools.pairwise(samples) if b["t"] - a["t"] >= 1.0]
        mids = [(a["t"] + b["t"]) / 120 for a, b in pairs]
        rate_ax.plot(mids, [_per_second(a, b, "produced") for a, b in pairs], label="pushed", lw=0.8)
        rate_ax.plot(mids, [_per_second(a, b, "cursor") for a, b in pairs], label="consumed", lw=0.8)
        ratios = soak.get("throughput_on_vs_off", {})
        rate_ax.set_title(
            f"msg/s between samples; services on/off: push {number(ratios.get('push'), 3)}, consume "
            f"{number(ratios.get('consume'), 3)}",
            fontsize=10,
        )
        rate_ax.set_ylabel("msg/s")
        rate_ax.set_xlabel("minutes from the measured soak's start (settling before 0)")
        rate_ax.legend(loc="upper left", fontsize=7)
        for ax in (table_ax, rss_ax, rate_ax):
            if settle.get("samples"):
                ax.axvspan(minutes[0], 0, color="#999999", alpha=0.15, lw=0)
            for begin, end in _spans(samples, "off"):
                ax.axvspan(begin / 60, end / 60, color="#d84b3b", alpha=0.15, lw=0)
            for bound in soak.get("flatness_window_s", []):
                ax.axvline(bound / 60, color="#333333", ls="--", lw=0.8)
            ax.grid(alpha=0.3)
        fig.suptitle(
            f"soak {document['started_at'][:16]}Z, git {document['git'].get('commit', '?')}: producer "
            f"{soak.get('target_producer_msg_per_s', 0):,.0f} msg/s; grey: settling, red: services paused,"
            " dashed: flatness window",
            fontsize=10,
        )
        fig.tight_layout()
        out = path.with_name(f"{path.stem}-soak-r{run.get('round', 1)}.png")
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110)
        plt.close(fig)
        written.append(out)
    return written


def _per_second(a: dict[str, Any], b: dict[str, Any], key: str) -> float:
    return (b[key] - a[key]) / (b["t"] - a["t"]) if b["t"] > a["t"] else 0.0


def _spans(samples: list[dict[str, Any]], state: str) -> list[tuple[float, float]]:
    """(first t, last t) of each run of consecutive samples in ``state`` (``services``)."""
    runs = (
        list(group) for key, group in itertools.groupby(samples, key=lambda x: x["services"]) if key == state
    )
    return [(run[0]["t"], run[-1]["t"]) for run in runs]


def _planned_s(scenario: Scenario, options: Options) -> tuple[float, float]:
    return options.warmup + options.seconds + 3 + options.soak_duration_s, waits_limit_s(
        options.soak_duration_s
    )


# completed retention every second, so the soak's table stays small (unless --env says otherwise)
KIND = Kind(
    "soak",
    run,
    summarize,
    report_lines,
    broker_env={"RETENTION_INTERVAL": "1000"},
    planned_s=_planned_s,
    charts=charts,
)
