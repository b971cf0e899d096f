"""The scenarios (Queen's standard ones) and their limits, and how one run of each is measured.

Every run: a warm-up, then a measured window; the figures come from PostgreSQL (rows and cursors
before/after the window), the load comes from wrk, the CPU from /proc. A run is INVALID when wrk saw a
non-2xx response or a socket error (timeouts included), when a response reported a failed item, or when the
client's counts and PostgreSQL's disagree beyond what can be in flight when wrk stops (lost or duplicated
messages).

Consumption (consume, fan-out, handoff) reads a shared backlog queue: each run is its own consumer group
reading the queue from the beginning (subscription mode ``all``), so one backlog serves every round; in
queenpy queue mode is the group ``__QUEUE_MODE__`` on the same code path. Backlogs are loaded by one SQL
statement that writes the rows the push procedure writes (partitions created by the procedure itself),
because the procedure is too slow a loader for a two-minute quick run; the push scenarios measure push.
Loaded rows get time-ordered ids (UUIDv7 layout) and transaction ids ``b<offset>-<partition>``: ordered keys
load about 1.6 times faster than random ones.
"""

from __future__ import annotations

import json
import math
import os
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from queenpy.bench import procfs
from queenpy.bench.broker import Broker
from queenpy.bench.parsing import percentile
from queenpy.bench.postgres import PrivatePostgres, Sql, WaitSampler, postgres_process_kind, run_pgbench
from queenpy.bench.wrk import WrkRun, render_script, run_wrk

__all__ = ["LIMITS", "SCENARIOS", "Bench", "Limit", "Scenario", "payload"]


def payload(size: int) -> str:
    """A JSON object of exactly ``size`` bytes (at least 33)."""
    head, tail = '{"kind":"bench","n":12345,"v":"', '"}'
    return head + "x" * max(0, size - len(head) - len(tail)) + tail


def _size_name(size: int) -> str:
    return f"{size // 1024}KB" if size % 1024 == 0 else f"{size}B"


@dataclass(frozen=True)
class Limit:
    """A PostgreSQL limit measured with pgbench on the same server: ``insert`` writes ``rows`` rows per
    INSERT into ``bench.messages`` (``LIKE queen.messages INCLUDING ALL``, ids from ``gen_random_uuid()``);
    ``select1`` is ``SELECT 1``. ``log_latency``: per-transaction latencies (p50/p99) from pgbench's log."""

    key: str
    kind: str
    rows: int = 1
    payload_bytes: int = 40
    clients: int = 50
    log_latency: bool = False
    description: str = ""


def _insert_limit(rows: int, size: int, clients: int = 50) -> Limit:
    suffix = "" if clients == 50 else f"-{clients}client"
    return Limit(f"insert-{rows}-{_size_name(size)}{suffix}", "insert", rows, size, clients, clients == 1,
                 f"pgbench, {clients} client(s), INSERT of {rows} row(s) of {_size_name(size)} per statement")


LIMITS: dict[str, Limit] = {limit.key: limit for limit in [
    _insert_limit(1, 40, clients=1),
    *(_insert_limit(rows, size) for size in (40, 1024) for rows in (1, 10, 100)),
    Limit("select1", "select1", description="pgbench, 50 clients, SELECT 1 (prepared)"),
]}


@dataclass(frozen=True)
class Scenario:
    """One benchmark scenario. ``kind``: ``push`` | ``consume`` | ``keepup``; ``mode`` (consume): ``auto``
    (autoAck pops), ``ack`` (pop + ``/ack/batch``), ``handoff`` (pop + ``/transaction`` ack and push to a
    second queue); ``groups``: consumer groups reading everything (fan-out); ``limit``: key in LIMITS."""

    name: str
    kind: str
    limit: str
    description: str
    per_request: int = 1
    payload_bytes: int = 40
    partitions: int = 100
    connections: int = 50
    threads: int = 2
    mode: str = "auto"
    groups: int = 1
    batch: int = 100
    quick: bool = False
    initial_rate: float = 50_000.0  # msg/s guess that sizes the backlog until a run has measured it


def _push(per_request: int, size: int, partitions: int = 100, quick: bool = False) -> Scenario:
    name = f"push-{per_request}-{_size_name(size)}" + ("" if partitions == 100 else f"-p{partitions}")
    return Scenario(name, "push", f"insert-{per_request}-{_size_name(size)}",
                    f"push {per_request} msg/request of {_size_name(size)}, 50 connections, "
                    f"one random partition of {partitions} per request",
                    per_request=per_request, payload_bytes=size, partitions=partitions, quick=quick)


SCENARIOS: list[Scenario] = [
    Scenario("latency-1conn", "push", "insert-1-40B-1client",
             "push 1 msg/request of 40B, 1 connection, no other load (latency)", connections=1, threads=1,
             quick=True),
    _push(1, 40, quick=True), _push(10, 40, quick=True), _push(100, 40, quick=True),
    _push(1, 1024), _push(10, 1024), _push(100, 1024, quick=True),
    _push(10, 40, partitions=1), _push(10, 40, partitions=10_000),
    Scenario("consume-auto", "consume", "insert-100-40B",
             "wildcard long-poll pop, batch 100, autoAck, 10 connections, 100 partitions",
             connections=10, mode="auto", quick=True, initial_rate=100_000),
    Scenario("consume-ack", "consume", "insert-100-40B",
             "wildcard long-poll pop, batch 100, then POST /ack/batch, 10 connections, 100 partitions",
             connections=10, mode="ack", quick=True, initial_rate=40_000),
    Scenario("consume-auto-p10000", "consume", "insert-100-40B",
             "wildcard long-poll pop, batch 100, autoAck, 10 connections, 10,000 partitions",
             connections=10, mode="auto", partitions=10_000, initial_rate=60_000),
    Scenario("fanout-5", "consume", "insert-100-40B",
             "5 consumer groups each read everything: pop batch 100 autoAck, 10 connections round-robin",
             connections=10, mode="auto", groups=5, quick=True, initial_rate=60_000),
    Scenario("fanout-10", "consume", "insert-100-40B",
             "10 consumer groups each read everything: pop batch 100 autoAck, 10 connections round-robin",
             connections=10, mode="auto", groups=10, initial_rate=60_000),
    Scenario("handoff-tx", "consume", "insert-100-40B",
             "pop batch 100 from A, one POST /transaction acks them and pushes them to B, 10 connections",
             connections=10, mode="handoff", quick=True, initial_rate=20_000),
    Scenario("keepup-ack", "keepup", "insert-10-40B",
             "producer paced at a share of push-10-40B (--keepup-share, default 55%; 100 connections) while "
             "10 connections pop 100 + /ack/batch",
             per_request=10, connections=10, mode="ack", initial_rate=10_000),
]


@dataclass
class Options:
    """How long and how hard: seconds of the measured window and of the warm-up, client connections of the
    push scenarios, whether to CHECKPOINT before each scenario."""

    seconds: float = 10.0
    warmup: float = 3.0
    connections: int = 50
    checkpoint: bool = True
    long_poll_ms: int = 1000
    keepup_fraction: float = 0.55


# ground truth queries (queenpy's schema: partitions.last_seq is the gap-free offset of the newest message,
# partition_consumers.last_consumed_seq the cursor; so a sum of cursors counts consumed messages)
Q_QUEUE_ROWS = ("SELECT coalesce(sum(p.last_seq), 0)::bigint FROM queen.partitions p "
                "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1")
Q_QUEUE_COUNT = ("SELECT count(*) FROM queen.messages m WHERE m.partition_id IN "
                 "(SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1)")
Q_CURSORS = ("SELECT pc.consumer_group, coalesce(sum(pc.last_consumed_seq), 0)::bigint "
             "FROM queen.partition_consumers pc JOIN queen.partitions p ON p.id = pc.partition_id "
             "JOIN queen.queues q ON q.id = p.queue_id "
             "WHERE q.name = $1 AND pc.consumer_group = ANY($2::text[]) GROUP BY 1")
Q_ALL_ROWS = "SELECT coalesce(sum(last_seq), 0)::bigint FROM queen.partitions"
Q_INSERTS = ("SELECT coalesce(n_tup_ins, 0) FROM pg_stat_user_tables "
             "WHERE schemaname = 'queen' AND relname = 'messages'")
Q_CHECKPOINTS = "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
# WAL written (exact, from the insert position), full-page images and WAL fsyncs (pg_stat_wal: each backend
# publishes its counts at most once a second, so these two lag the window's edges by up to a second)
Q_WAL = ("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint, wal_fpi, wal_sync "
         "FROM pg_stat_wal")


@dataclass(frozen=True)
class WalMark:
    """WAL counters at one moment: bytes written so far, full-page images, fsyncs of the WAL."""

    bytes: int
    fpi: int
    syncs: int

    def per_message(self, before: WalMark, messages: float) -> dict[str, float | None]:
        """WAL bytes, full-page images and fsyncs per message since ``before``."""
        if messages <= 0:
            return {"bytes": None, "fpi": None, "syncs": None}
        return {"bytes": (self.bytes - before.bytes) / messages, "fpi": (self.fpi - before.fpi) / messages,
                "syncs": (self.syncs - before.syncs) / messages}

BULK_LOAD = """
WITH parts AS (
    SELECT p.id, p.last_seq FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
    WHERE q.name = $1 ORDER BY p.id FOR UPDATE OF p
), inserted AS (
    INSERT INTO queen.messages (id, transaction_id, partition_id, seq, payload, created_at)
    SELECT (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') || '7'
            || substr(h, 1, 3) || '8' || substr(h, 4, 15))::uuid,
           'b' || (parts.last_seq + g) || '-' || left(parts.id::text, 8),
           parts.id, parts.last_seq + g, $3::jsonb, clock_timestamp()
    FROM parts CROSS JOIN generate_series(1, $2::int) g CROSS JOIN LATERAL md5(parts.id::text || g) h
    ORDER BY parts.id, g
    RETURNING partition_id, seq, id, created_at
)
UPDATE queen.partitions p
SET last_seq = m.seq, last_message_id = m.id, last_message_at = m.created_at, last_activity = m.created_at
FROM (SELECT DISTINCT ON (partition_id) partition_id, seq, id, created_at FROM inserted
      ORDER BY partition_id, seq DESC) m
WHERE p.id = m.partition_id
"""

LIMIT_SCHEMA = [
    "CREATE SCHEMA IF NOT EXISTS bench",
    "CREATE TABLE IF NOT EXISTS bench.messages (LIKE queen.messages INCLUDING ALL)",
    "CREATE SEQUENCE IF NOT EXISTS bench.seq",
    ("CREATE OR REPLACE FUNCTION bench.partition_uuid(p int) RETURNS uuid LANGUAGE sql IMMUTABLE AS "
     "$$ SELECT ('00000000-0000-4000-8000-' || lpad(p::text, 12, '0'))::uuid $$"),
]


@dataclass
class CpuMark:
    at: float
    broker_s: float
    machine: procfs.MachineCpu
    harness_s: float
    postgres_ticks: procfs.TreeTicks
    wal: WalMark

    @property
    def postgres_s(self) -> float:
        return self.postgres_ticks.cpu_s


@dataclass
class Backlog:
    """A shared backlog queue: ``rows`` messages in each of ``partitions`` partitions, read by groups."""

    queue: str
    partitions: int
    per_partition: int = 0


@dataclass
class Bench:
    """The state of one benchmark session: server, broker, harness SQL connection, memory sampler,
    rate estimates that size the backlogs, and the n_tup_ins ledger."""

    pg: PrivatePostgres
    broker: Broker
    sql: Sql
    workdir: Path
    options: Options
    log: Callable[[str], None]
    memory: procfs.MemorySampler = field(init=False)
    waits: WaitSampler = field(init=False)
    estimates: dict[str, float] = field(default_factory=dict)
    backlogs: dict[int, Backlog] = field(default_factory=dict)
    inserts_start: tuple[int, int] = (0, 0)  # (n_tup_ins, rows) when the session started
    limit_results: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)
    scenario_results: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.memory = procfs.MemorySampler(self.broker.pid).start()
        self.waits = WaitSampler(self.pg.url).start()
        for statement in LIMIT_SCHEMA:
            self.sql.execute(statement)
        self.inserts_start = self.inserts_ledger()

    def close(self) -> None:
        self.memory.stop()
        self.waits.stop()

    # --- helpers ----------------------------------------------------------------------------------
    def inserts_ledger(self) -> tuple[int, int]:
        """(n_tup_ins of queen.messages, rows stored in it), read now."""
        return int(self.sql.fetchval(Q_INSERTS) or 0), int(self.sql.fetchval(Q_ALL_ROWS))

    def check_inserts(self, wait_s: float = 12.0) -> dict[str, Any]:
        """Whole-run ledger: the inserts PostgreSQL counted in ``pg_stat_user_tables.n_tup_ins`` since the
        start equal the rows stored since the start. A backend publishes its counts up to 10 s after it goes
        idle (PGSTAT_IDLE_INTERVAL), hence the wait; more inserts than rows means aborted inserts."""
        deadline = time.monotonic() + wait_s
        while True:
            inserts, rows = self.inserts_ledger()
            counted, stored = inserts - self.inserts_start[0], rows - self.inserts_start[1]
            if counted == stored or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        verdict = ("equal" if counted == stored else
                   "more inserts than rows (aborted inserts)" if counted > stored else
                   f"n_tup_ins still behind after {wait_s:g} s (statistics not flushed)")
        return {"n_tup_ins_delta": counted, "rows_delta": stored, "verdict": verdict}

    def _settled(self, read: Callable[[], Any], max_s: float = 20.0) -> Any:
        """``read()`` once two reads 0.3 s apart agree (work still in flight when wrk stopped has landed)."""
        previous, deadline = read(), time.monotonic() + max_s
        while time.monotonic() < deadline:
            time.sleep(0.3)
            current = read()
            if current == previous:
                return current
            previous = current
        return previous

    def _mark(self) -> CpuMark:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return CpuMark(time.monotonic(), procfs.tree_cpu_s([self.broker.pid]),
                       procfs.machine_cpu(), usage.ru_utime + usage.ru_stime,
                       procfs.tree_ticks(self.pg.pid, self._process_kind()), self._wal())

    def _process_kind(self) -> Callable[[int], str]:
        """Labels for the PostgreSQL processes: client backends by application_name (``backend:queenpy``
        for the broker's, ``backend:pgbench``, ``backend:queenbench`` and ``backend:queenbench-waits`` for
        the harness), the others by their title (:func:`postgres_process_kind`)."""
        apps = {int(row[0]): str(row[1] or "?") for row in self.sql.fetch(
            "SELECT pid, application_name FROM pg_stat_activity WHERE backend_type = 'client backend'")}

        def kind_of(pid: int) -> str:
            kind = postgres_process_kind(pid)
            return f"backend:{apps.get(pid, '?')}" if kind == "backend" else kind
        return kind_of

    def _wal(self) -> WalMark:
        row = self.sql.fetch(Q_WAL)[0]
        return WalMark(int(row[0]), int(row[1]), int(row[2]))

    def _checkpoint(self) -> None:
        if self.options.checkpoint:
            self.sql.execute("CHECKPOINT")

    def _new_run(self, scenario: Scenario, round_no: int) -> dict[str, Any]:
        return {"scenario": scenario.name, "round": round_no, "valid": True, "problems": [], "notes": [],
                "ground_truth": {}, "limit": scenario.limit}

    def _fill_window(self, run: dict[str, Any], messages: int, start: CpuMark, end: CpuMark,
                     wrk_runs: list[WrkRun], latency_from: WrkRun | None, checkpoints: int) -> None:
        window = end.at - start.at
        broker_s = end.broker_s - start.broker_s
        postgres_s = end.postgres_s - start.postgres_s
        wrk_s = sum(w.cpu_s for w in wrk_runs)
        busy = end.machine.busy_s - start.machine.busy_s
        total = max(1e-9, end.machine.total_s - start.machine.total_s)
        ours = broker_s + postgres_s + wrk_s + (end.harness_s - start.harness_s)
        def per(seconds: float) -> float | None:
            return seconds / messages * 1e6 if messages > 0 else None

        rss, pss, processes = self.memory.peak()
        run.update({
            "messages": messages, "window_s": window, "msg_per_s": messages / window if window > 0 else 0.0,
            "cpu_s": {"broker": broker_s, "postgres": postgres_s, "wrk": wrk_s},
            "cpu_us_per_msg": {"broker": per(broker_s), "postgres": per(postgres_s), "wrk": per(wrk_s)},
            # where PostgreSQL's CPU went: backends, autovacuum workers, walwriter, checkpointer, exited ...
            "postgres_cpu_s_by_kind": {kind: seconds for kind, seconds in sorted(
                procfs.cpu_by_kind_s(start.postgres_ticks, end.postgres_ticks).items()) if seconds},
            "cpu_share_of_machine": {"broker": broker_s / total, "postgres": postgres_s / total,
                                     "wrk": wrk_s / total, "other": max(0.0, busy - ours) / total,
                                     "idle": max(0.0, total - busy) / total},
            "broker_rss_mb_peak": rss / 2**20, "broker_pss_mb_peak": pss / 2**20, "broker_processes": processes,
            "checkpoints_in_window": checkpoints,
            "pg_waits": self.waits.shares(),
            "wal_per_msg": end.wal.per_message(start.wal, messages),
        })
        if latency_from is not None:
            result = latency_from.result
            run["requests_per_s"] = result.requests / window if window > 0 else 0.0
            run["latency_ms"] = {f"{k:g}": v / 1000 for k, v in result.latency_us.items()}
            if result.latency_mean_us is not None:
                run["latency_ms"]["mean"] = result.latency_mean_us / 1000
            if result.over_10ms is not None:  # a disk's fsync stall delays about one request per connection
                run["requests_over_10ms"] = {"count": result.over_10ms,
                                             "per_s": result.over_10ms / window if window > 0 else 0.0}
        if checkpoints:
            run["notes"].append(f"{checkpoints} checkpoint(s) during the window")

    @staticmethod
    def _check_wrk(run: dict[str, Any], wrk: WrkRun, label: str) -> None:
        result = wrk.result
        run.setdefault("wrk", {})[label] = {"requests": result.requests, "non_2xx": result.non_2xx,
                                            "socket_errors": result.socket_errors, "counters": result.counters}
        if result.non_2xx:
            run["problems"].append(f"{label}: {result.non_2xx} non-2xx responses")
        errors = {k: v for k, v in result.socket_errors.items() if v}
        if errors:
            run["problems"].append(f"{label}: socket errors {errors}")
        failures = [name for name in ("bad_responses", "not_queued", "ack_failed", "tx_failed", "parse_errors")
                    if result.counters.get(name)]
        for name in failures:
            run["problems"].append(f"{label}: {name} = {int(result.counters[name])}")
        if result.sample and (result.non_2xx or failures):
            run["problems"].append(f"{label}: first unexpected response: {result.sample}")

    def _precreate(self, queue: str, partitions: int) -> None:
        """Create the queue's partitions through the push procedure (one message each)."""
        for start in range(0, partitions, 2000):
            items = [{"queue": queue, "partition": f"p{i}", "payload": {"precreate": i}}
                     for i in range(start, min(partitions, start + 2000))]
            self.sql.fetchval("SELECT queen.push_messages_v3($1::jsonb)::text", json.dumps(items))

    # --- limits -----------------------------------------------------------------------------------
    def measure_limit(self, limit: Limit, round_no: int) -> dict[str, Any]:
        """Run pgbench for one limit (warm-up, then the measured window) and return its figures."""
        if (round_no, limit.key) in self.limit_results:
            return self.limit_results[(round_no, limit.key)]
        script = self.workdir / f"limit-{limit.key}.sql"
        if limit.kind == "select1":
            script.write_text("SELECT 1;\n")
        else:
            body = payload(limit.payload_bytes).replace("'", "''")
            script.write_text(
                "\\set p random(0, 99)\n"
                "INSERT INTO bench.messages (id, transaction_id, partition_id, seq, payload, created_at) "
                "SELECT gen_random_uuid(), gen_random_uuid()::text, bench.partition_uuid(:p), "
                f"nextval('bench.seq'), '{body}'::jsonb, clock_timestamp() "
                f"FROM generate_series(1, {limit.rows});\n")
        self._checkpoint()
        if self.options.warmup >= 1:
            run_pgbench(self.pg, script, limit.clients, self.options.warmup)
        before, wal_before = procfs.tree_cpu_s([self.pg.pid]), self._wal()
        self.waits.mark()
        started = time.monotonic()
        run = run_pgbench(self.pg, script, limit.clients, self.options.seconds,
                          log_dir=self.workdir / "pgbench-log" if limit.log_latency else None)
        wall = time.monotonic() - started
        postgres_s = procfs.tree_cpu_s([self.pg.pid]) - before
        wal_after = self._wal()
        rate = run.result.tps * limit.rows
        rows = rate * self.options.seconds
        figures: dict[str, Any] = {
            "limit": limit.key, "round": round_no, "description": limit.description,
            "msg_per_s": rate, "tps": run.result.tps, "failed": run.result.failed, "wall_s": wall,
            "cpu_us_per_msg": {"postgres": postgres_s / rows * 1e6 if rows else None,
                               "pgbench": run.client_cpu_s / rows * 1e6 if rows else None},
            "valid": run.result.failed == 0,
            "pg_waits": self.waits.shares(),
            "wal_per_msg": wal_after.per_message(wal_before, rows),  # pgbench's connection setup included
        }
        if run.latencies_us:
            figures["latency_ms"] = {"50": (percentile(run.latencies_us, 50) or 0) / 1000,
                                     "99": (percentile(run.latencies_us, 99) or 0) / 1000}
            slow = sum(1 for us in run.latencies_us if us > 10_000)
            figures["requests_over_10ms"] = {"count": slow, "per_s": slow / wall if wall > 0 else 0.0}
        elif run.result.latency_avg_ms is not None:
            figures["latency_ms"] = {"mean": run.result.latency_avg_ms}
        self.limit_results[(round_no, limit.key)] = figures
        return figures

    # --- scenarios --------------------------------------------------------------------------------
    def run_scenario(self, scenario: Scenario, round_no: int) -> dict[str, Any]:
        run = {"push": self._run_push, "consume": self._run_consume, "keepup": self._run_keepup}[scenario.kind](
            scenario, round_no)
        run["valid"] = not run["problems"]
        self.scenario_results[(round_no, scenario.name)] = run
        return run

    def _run_push(self, scenario: Scenario, round_no: int) -> dict[str, Any]:
        run = self._new_run(scenario, round_no)
        options = self.options
        queue = f"{scenario.name}-r{round_no}"
        connections = options.connections if scenario.connections == 50 else scenario.connections
        self._precreate(queue, scenario.partitions)
        params = {"queue": queue, "partitions": scenario.partitions, "per_request": scenario.per_request,
                  "payload": payload(scenario.payload_bytes), "seed": 1000 * round_no + 17, "rate_per_thread": 0}
        script = render_script("push", params, self.workdir)
        self._checkpoint()

        def rows() -> int:
            return int(self.sql.fetchval(Q_QUEUE_ROWS, queue))

        initial = rows()  # the precreated rows; nothing in flight yet
        runs: list[WrkRun] = []
        if options.warmup > 0:
            warm = run_wrk(self.broker.url, script, connections, options.warmup, scenario.threads)
            self._check_wrk(run, warm, "warm-up")
            runs.append(warm)
        before = self._settled(rows)
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS))
        self.memory.mark()
        self.waits.mark()
        start = self._mark()
        measured = run_wrk(self.broker.url, script, connections, options.seconds, scenario.threads)
        runs.append(measured)
        at_end = rows()
        end = self._mark()
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS)) - checkpoints
        self._check_wrk(run, measured, "measured")
        self._fill_window(run, at_end - before, start, end, [measured], measured, checkpoints)
        settled = self._settled(rows)
        stored = int(self.sql.fetchval(Q_QUEUE_COUNT, queue))
        # The ledger of the whole run, warm-up included: every message stored was answered "queued" to wrk,
        # or was in a request still in flight when one of the wrk runs stopped (wrk abandons those; the
        # broker stores them, possibly after the window began when PostgreSQL stalls)
        queued = sum(int(w.result.counters.get("queued", 0)) for w in runs)
        in_flight = len(runs) * connections * scenario.per_request
        run["ground_truth"].update({"rows_in_window": at_end - before, "rows_after_settle": settled - before,
                                    "client_queued": int(measured.result.counters.get("queued", 0)),
                                    "run_stored": settled - initial, "run_client_queued": queued,
                                    "queue_rows_counted": stored, "queue_last_seq_sum": settled})
        if settled - initial < queued:
            run["problems"].append(f"lost: the client saw {queued} queued, PostgreSQL stored {settled - initial}")
        if settled - initial > queued + in_flight:
            run["problems"].append(f"duplicated: PostgreSQL stored {settled - initial}, the client saw {queued} "
                                   f"queued (+{in_flight} in flight at most when wrk stopped)")
        if stored != settled:
            run["problems"].append(f"queue rows counted {stored} != sum of partition offsets {settled}")
        return run

    # consumption ----------------------------------------------------------------------------------
    def _backlog(self, scenario: Scenario, need_per_group: int) -> Backlog:
        """The shared backlog of ``scenario.partitions`` partitions, topped up to ``need_per_group`` rows,
        in whole batches per partition (at least one): a partition whose tail is a partial batch would make
        every other pop a short one."""
        backlog = self.backlogs.get(scenario.partitions)
        if backlog is None:
            backlog = Backlog(f"backlog-p{scenario.partitions}", scenario.partitions)
            self._precreate(backlog.queue, scenario.partitions)
            backlog.per_partition = 1
            self.backlogs[scenario.partitions] = backlog
        wanted = scenario.batch * max(1, math.ceil(need_per_group / scenario.partitions / scenario.batch))
        if wanted > backlog.per_partition:
            add = wanted - backlog.per_partition
            started = time.monotonic()
            self.log(f"  loading backlog: {add * scenario.partitions:,} messages into {backlog.queue}")
            # in slices, so one statement stays a few seconds at most
            step = max(1, 200_000 // scenario.partitions)
            for done in range(0, add, step):
                self.sql.execute(BULK_LOAD, backlog.queue, min(step, add - done), payload(40))
            backlog.per_partition = wanted
            self.log(f"  loaded in {time.monotonic() - started:.1f}s")
        return backlog

    def _cursors(self, queue: str, groups: list[str]) -> dict[str, int]:
        found = {row[0]: int(row[1]) for row in self.sql.fetch(Q_CURSORS, queue, groups)}
        return {group: found.get(group, 0) for group in groups}

    def _run_consume(self, scenario: Scenario, round_no: int) -> dict[str, Any]:
        run = self._new_run(scenario, round_no)
        options = self.options
        estimate = self.estimates.get(scenario.name, scenario.initial_rate)
        per_group = estimate / scenario.groups
        need = int(per_group * max(options.seconds, options.warmup) * 1.3) + scenario.batch * scenario.connections
        backlog = self._backlog(scenario, need)
        queue = backlog.queue
        groups = [f"{scenario.name}-r{round_no}" + (f"-g{i}" if scenario.groups > 1 else "")
                  for i in range(1, scenario.groups + 1)]
        warm_groups = [f"warm-{g}" for g in groups]
        # a target queue per run: each run's group re-reads the same source messages, and the pushed copies'
        # transactionIds (h-<source id>) must not meet an earlier run's (that would fail the transaction)
        target = f"{queue}-{scenario.name}-r{round_no}-out" if scenario.mode == "handoff" else ""
        if target:
            self._precreate(target, scenario.partitions)
            self._precreate(target + "-warm", scenario.partitions)

        def script_for(group_names: list[str], target_queue: str) -> Path:
            return render_script("consume", {
                "queue": queue, "groups": group_names, "batch": scenario.batch, "mode": scenario.mode,
                "timeout_ms": options.long_poll_ms, "target": target_queue, "payload": payload(40)},
                self.workdir)

        timeout_s = options.long_poll_ms / 1000 + 10
        self._checkpoint()
        if options.warmup > 0:
            warm = run_wrk(self.broker.url, script_for(warm_groups, target and target + "-warm"),
                           scenario.connections, options.warmup, scenario.threads, timeout_s)
            self._check_wrk(run, warm, "warm-up")

        def truth() -> tuple[dict[str, int], int]:
            cursors = self._cursors(queue, groups)
            return cursors, (int(self.sql.fetchval(Q_QUEUE_ROWS, target)) if target else 0)

        cursors0, target0 = truth()
        available = int(self.sql.fetchval(Q_QUEUE_ROWS, queue))
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS))
        self.memory.mark()
        self.waits.mark()
        start = self._mark()
        measured = run_wrk(self.broker.url, script_for(groups, target), scenario.connections, options.seconds,
                           scenario.threads, timeout_s)
        cursors1, target1 = truth()
        end = self._mark()
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS)) - checkpoints
        self._check_wrk(run, measured, "measured")
        consumed = sum(cursors1.values()) - sum(cursors0.values())
        counted = (target1 - target0) if target else consumed
        self._fill_window(run, counted, start, end, [measured], measured, checkpoints)
        cursors2, target2 = self._settled(truth)
        advance = sum(cursors2.values()) - sum(cursors0.values())
        counters = measured.result.counters
        slack = scenario.connections * scenario.batch
        client = int(counters.get({"auto": "delivered", "ack": "acked", "handoff": "handed"}[scenario.mode], 0))
        run["ground_truth"].update({
            "consumed_in_window": consumed, "consumed_after_settle": advance, "client_count": client,
            "delivered": int(counters.get("delivered", 0)), "per_group_in_window":
                {g: cursors1[g] - cursors0[g] for g in groups}, "backlog_rows": available})
        if advance < client:
            run["problems"].append(f"duplicated: the client counted {client}, cursors advanced {advance}")
        if advance > client + slack:
            run["problems"].append(f"lost: cursors advanced {advance}, the client counted {client} "
                                   f"(+{slack} in flight at most)")
        if target:
            handed = target2 - target0
            run["ground_truth"].update({"target_rows_after_settle": handed})
            if handed != advance:
                run["problems"].append(f"handoff not atomic: {advance} acked from A, {handed} pushed to B")
        left = min(available - cursors1[g] for g in groups)
        if left <= slack:
            run["notes"].append("backlog drained during the window: the rate is a lower bound")
            self.estimates[scenario.name] = estimate * 2
        else:
            self.estimates[scenario.name] = max(estimate, run["msg_per_s"] * 1.2)
        return run

    def _run_keepup(self, scenario: Scenario, round_no: int) -> dict[str, Any]:
        """A paced producer (push, 10 msg/request, 50 connections) and 10 consumers that pop + ack batches
        of 100, together for warm-up + window; does the backlog stay steady?"""
        run = self._new_run(scenario, round_no)
        options = self.options
        queue = f"{scenario.name}-r{round_no}"
        push = self.scenario_results.get((round_no, "push-10-40B"), {})
        push_figure = push.get("msg_per_s")
        target_rate = options.keepup_fraction * (push_figure or scenario.initial_rate)
        # each wrk thread sends on a schedule of target_rate / per_request / threads requests per second
        # (push.lua), whatever the latency, as long as some of its connections are free
        producers, producer_threads = 100, 2
        rate_per_thread = target_rate / scenario.per_request / producer_threads
        self._precreate(queue, scenario.partitions)
        self.sql.execute(BULK_LOAD, queue, 20, payload(40))  # a small standing backlog
        producer = render_script("push", {"queue": queue, "partitions": scenario.partitions,
                                          "per_request": scenario.per_request, "payload": payload(40),
                                          "seed": 1000 * round_no + 29, "rate_per_thread": rate_per_thread},
                                 self.workdir)
        consumer = render_script("consume", {"queue": queue, "groups": [""], "batch": scenario.batch,
                                             "mode": "ack", "timeout_ms": options.long_poll_ms, "target": "",
                                             "payload": payload(40)}, self.workdir)
        def rows() -> int:
            return int(self.sql.fetchval(Q_QUEUE_ROWS, queue))

        def cursor() -> int:
            return self._cursors(queue, ["__QUEUE_MODE__"])["__QUEUE_MODE__"]

        self._checkpoint()
        total = options.warmup + options.seconds
        results: dict[str, WrkRun] = {}

        def drive(name: str, script: Path, connections: int, wrk_threads: int) -> None:
            results[name] = run_wrk(self.broker.url, script, connections, total, wrk_threads,
                                    options.long_poll_ms / 1000 + 10)

        threads = [threading.Thread(target=drive, args=("producer", producer, producers, producer_threads)),
                   threading.Thread(target=drive, args=("consumer", consumer, scenario.connections, 2))]
        for thread in threads:
            thread.start()
        procfs.sleep_until(time.monotonic() + options.warmup)
        rows0, cursor0 = rows(), cursor()
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS))
        self.memory.mark()
        self.waits.mark()
        start = self._mark()
        procfs.sleep_until(start.at + options.seconds)
        rows1, cursor1 = rows(), cursor()
        end = self._mark()
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS)) - checkpoints
        for thread in threads:
            thread.join()
        for name, wrk in results.items():
            self._check_wrk(run, wrk, name)
        window = end.at - start.at
        # wrk's CPU over its whole run, scaled to the window
        wrk_share = options.seconds / total
        scaled = [WrkRun(w.result, w.wall_s, w.cpu_s * wrk_share, w.output) for w in results.values()]
        self._fill_window(run, cursor1 - cursor0, start, end, scaled, results["consumer"], checkpoints)
        run["notes"].append("latency is the consumer's (pop and ack requests), warm-up included")
        produced, consumed = rows1 - rows0, cursor1 - cursor0
        backlog0, backlog1 = rows0 - cursor0, rows1 - cursor1
        growth = (backlog1 - backlog0) / window
        keeps_up = backlog1 - backlog0 <= max(2 * scenario.batch * scenario.connections, 0.05 * produced)
        run["keepup"] = {"target_producer_msg_per_s": target_rate, "producer_msg_per_s": produced / window,
                         "producer_share_of_push": produced / window / push_figure if push_figure else None,
                         "consumer_msg_per_s": consumed / window, "backlog_start": backlog0,
                         "backlog_end": backlog1, "backlog_growth_per_s": growth, "keeps_up": keeps_up,
                         "push_figure": push_figure, "rate_per_thread": rate_per_thread}
        if not keeps_up:
            run["notes"].append(f"consumers fall behind: backlog grew {growth:,.0f} msg/s")
        settled_rows = self._settled(rows)
        settled_cursor = self._settled(cursor)
        acked = int(results["consumer"].result.counters.get("acked", 0))
        queued = int(results["producer"].result.counters.get("queued", 0))
        advance = settled_cursor  # the queue is new: its cursor started at 0, as the consumer's counts did
        run["ground_truth"].update({"produced_in_window": produced, "consumed_in_window": consumed,
                                    "client_acked": acked, "client_queued": queued})
        prefilled = 20 * scenario.partitions + scenario.partitions
        if settled_rows - prefilled < queued or settled_rows - prefilled > queued + producers * scenario.per_request:
            run["problems"].append(f"producer: client queued {queued}, PostgreSQL stored {settled_rows - prefilled}")
        if advance < acked or advance > acked + scenario.connections * scenario.batch:
            run["problems"].append(f"consumer: client acked {acked}, cursor advanced {advance}")
        return run


def environment_facts(sql: Sql) -> dict[str, Any]:
    """PostgreSQL version and the settings that decide its speed."""
    names = ["fsync", "synchronous_commit", "wal_sync_method", "full_page_writes", "shared_buffers",
             "max_connections", "max_wal_size", "checkpoint_timeout", "wal_buffers", "commit_delay"]
    facts: dict[str, Any] = {"version": str(sql.fetchval("SELECT version()")).split(",")[0]}
    for name in names:
        facts[name] = sql.fetchval("SELECT current_setting($1)", name)
    facts["cores"] = os.cpu_count()
    return facts
