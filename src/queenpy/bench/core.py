"""The measuring core every scenario kind shares, and what a kind is.

:class:`Context` is the one object a kind's ``run(context, scenario, round_no)`` receives: the PostgreSQL
server and an SQL connection to it, the broker under test, the run's options, and the measuring core
(ground-truth queries, CPU and WAL marks around a window, pgbench limits, the settle loop). :class:`Kind` is
what a kind module registers in :mod:`queenpy.bench.kinds`.

Every run: a warm-up, then a measured window; the figures come from PostgreSQL (rows and cursors
before/after the window), the load from wrk, the CPU from /proc. A run is INVALID when wrk saw a
non-2xx response or a socket error (timeouts included), when a response reported a failed item, or when the
client's counts and PostgreSQL's disagree beyond what can be in flight when wrk stops (lost or duplicated
messages).

Consumption (consume, fan-out, handoff, streams) reads a shared backlog queue (:meth:`Context.backlog`): each
run is its own consumer group reading the queue from the beginning (subscription mode ``all``), so one backlog
serves every round; in queenpy queue mode is the group ``__QUEUE_MODE__`` on the same code path. Backlogs are
loaded by one SQL statement that writes the rows the push procedure writes (partitions created by the
procedure itself), because the procedure is too slow a loader for a two-minute quick run; the push scenarios
measure push. Loaded rows get time-ordered ids (UUIDv7 layout) and transaction ids ``b<offset>-<partition>``,
because ordered keys load faster into the indexes than random ones.
"""

from __future__ import annotations

import json
import math
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import asyncpg

from queenpy.bench import procfs
from queenpy.bench.broker import Broker
from queenpy.bench.catalog import Limit, Options, Scenario, payload
from queenpy.bench.parsing import percentile
from queenpy.bench.postgres import (
    BenchServer,
    PgbenchProcess,
    Sql,
    WaitSampler,
    postgres_process_kind,
    wait_for_clients,
)
from queenpy.bench.wrk import WrkRun

__all__ = ["Backlog", "Context", "CpuMark", "Kind", "ScenarioSkipped", "Window", "environment_facts"]

T = TypeVar("T")


# ground truth queries (queenpy's schema: partitions.last_seq is the gap-free offset of the newest message,
# partition_consumers.last_consumed_seq the cursor; so a sum of cursors counts consumed messages)
Q_QUEUE_ROWS = (
    "SELECT coalesce(sum(p.last_seq), 0)::bigint FROM queen.partitions p "
    "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1"
)
Q_QUEUE_COUNT = (
    "SELECT count(*) FROM queen.messages m WHERE m.partition_id IN "
    "(SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1)"
)
Q_CURSORS = (
    "SELECT pc.consumer_group, coalesce(sum(pc.last_consumed_seq), 0)::bigint "
    "FROM queen.partition_consumers pc JOIN queen.partitions p ON p.id = pc.partition_id "
    "JOIN queen.queues q ON q.id = p.queue_id "
    "WHERE q.name = $1 AND pc.consumer_group = ANY($2::text[]) GROUP BY 1"
)
Q_ALL_ROWS = "SELECT coalesce(sum(last_seq), 0)::bigint FROM queen.partitions"
Q_INSERTS = (
    "SELECT coalesce(n_tup_ins, 0) FROM pg_stat_user_tables "
    "WHERE schemaname = 'queen' AND relname = 'messages'"
)
#: application_name prefix of the harness's own connections (``queenbench``, ``queenbench-waits``), as
#: :meth:`Context._process_kind` labels their backends
HARNESS_BACKENDS = "backend:queenbench"


def postgres_cpu(start: CpuMark, end: CpuMark) -> tuple[float, float, dict[str, float]]:
    """PostgreSQL's CPU seconds between two marks: (all its processes but the harness's own backends, the
    harness's backends, every kind that used some, in name order). The harness's backends (its ground-truth
    polls, the wait sampler) are the measurement, not the system measured: they are listed by kind and left
    out of the first figure. The kinds are empty when PostgreSQL's processes are not on this machine."""
    if start.postgres_ticks is None or end.postgres_ticks is None:
        return end.postgres_s - start.postgres_s, 0.0, {}
    split = procfs.cpu_by_kind_s(start.postgres_ticks, end.postgres_ticks)
    by_kind = {kind: seconds for kind, seconds in sorted(split.items()) if seconds}
    harness = sum(seconds for kind, seconds in by_kind.items() if kind.startswith(HARNESS_BACKENDS))
    return end.postgres_s - start.postgres_s - harness, harness, by_kind


Q_CHECKPOINTS = "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
# rows the pgbench limits inserted so far (each row takes nextval): their ground truth, read at the window's
# edges
Q_LIMIT_ROWS = "SELECT coalesce(last_value, 0) FROM bench.seq"
# WAL written (exact, from the insert position), full-page images and WAL fsyncs (pg_stat_wal: each backend
# publishes its counts at most once a second, so these two lag the window's edges by up to a second)
Q_WAL = (
    "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint, wal_fpi, wal_sync FROM pg_stat_wal"
)


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
        return {
            "bytes": (self.bytes - before.bytes) / messages,
            "fpi": (self.fpi - before.fpi) / messages,
            "syncs": (self.syncs - before.syncs) / messages,
        }


BULK_LOAD = """
WITH parts AS (
    SELECT p.id, p.last_seq FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
    WHERE q.name = $1 ORDER BY p.id FOR NO KEY UPDATE OF p
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
    "TRUNCATE bench.messages",  # a user's server may keep an earlier run's rows: every run starts empty
    (
        "CREATE OR REPLACE FUNCTION bench.partition_uuid(p int) RETURNS uuid LANGUAGE sql IMMUTABLE AS "
        "$$ SELECT ('00000000-0000-4000-8000-' || lpad(p::text, 12, '0'))::uuid $$"
    ),
    # the cycle limit (streams): state rows and cursors of 100 partitions
    (
        "CREATE TABLE IF NOT EXISTS bench.stream_state "
        "(partition int, key text, value jsonb, PRIMARY KEY (partition, key))"
    ),
    "CREATE TABLE IF NOT EXISTS bench.stream_cursors (partition int PRIMARY KEY, seq bigint NOT NULL)",
    "INSERT INTO bench.stream_cursors SELECT g, 0 FROM generate_series(0, 99) g ON CONFLICT DO NOTHING",
]

# One stream cycle's writes as pgbench sees them (queen.streams_cycle_v1 for a window that closes each cycle)
CYCLE_LIMIT_SCRIPT = """\\set p random(0, 99)
BEGIN;
SELECT pg_advisory_xact_lock(:p);
SELECT key, value FROM bench.stream_state WHERE partition = :p;
DELETE FROM bench.stream_state WHERE partition = :p AND key = 'w';
INSERT INTO bench.stream_state VALUES (:p, 'w', '{"acc":100,"windowStart":0,"windowEnd":100}')
    ON CONFLICT (partition, key) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO bench.stream_state VALUES (:p, 'wm', '{"eventTimeMs":99}')
    ON CONFLICT (partition, key) DO UPDATE SET value = EXCLUDED.value;
INSERT INTO bench.messages (id, transaction_id, partition_id, seq, payload, created_at)
    VALUES (gen_random_uuid(), gen_random_uuid()::text, bench.partition_uuid(:p), nextval('bench.seq'),
            '{"key":"p","windowStart":0,"count":100}', clock_timestamp());
UPDATE bench.stream_cursors SET seq = seq + 100 WHERE partition = :p;
END;
"""


@dataclass
class CpuMark:
    at: float
    broker_s: float
    machine: procfs.MachineCpu
    harness_s: float
    postgres_ticks: procfs.TreeTicks | None  # None: PostgreSQL's processes are not on this machine
    wal: WalMark
    io: procfs.MachineIo | None = None  # the machine's block I/O (PostgreSQL's own when it runs here)

    @property
    def postgres_s(self) -> float:
        return self.postgres_ticks.cpu_s if self.postgres_ticks is not None else 0.0


@dataclass
class Backlog:
    """A shared backlog queue: ``per_partition`` messages in each of its ``partitions``, read by groups."""

    queue: str
    partitions: int
    per_partition: int = 0


@dataclass
class Window:
    """A measured window: the CPU/WAL marks at its edges and the checkpoints PostgreSQL made inside it.
    Opened by :meth:`Context.open_window`, closed by :meth:`Context.close_window`."""

    start: CpuMark
    checkpoints_before: int
    end: CpuMark | None = None
    checkpoints: int = 0

    @property
    def seconds(self) -> float:
        return (self.end.at - self.start.at) if self.end is not None else 0.0


class ScenarioSkipped(Exception):
    """The scenario cannot run on this installation (a missing extra); the message is the one-line reason."""


@dataclass
class Context:
    """What a scenario kind works with, for one benchmark session: the server (:attr:`pg`) and the harness's
    SQL connection to it (:attr:`sql`), the broker under test (:attr:`broker`, its base URL
    :attr:`broker_url`), the run's :attr:`options`, the work directory, a log line writer; the measuring core
    (:meth:`open_window`, :meth:`fill_window`, :meth:`measure_limit`, the memory and wait samplers); and what
    rounds share: rate estimates that size the backlogs, the shared backlogs, every result so far (keyed by
    ``(round, name)``), per-kind state (:meth:`state`) and clean-ups (:meth:`at_close`)."""

    pg: BenchServer
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
    queue_prefix: str = (
        ""  # before every queue name: a run on a user's server never meets an earlier run's queues
    )
    created_queues: set[str] = field(default_factory=set)  # by precreate, so drop_queues removes only those
    limit_results: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)
    scenario_results: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)
    _states: dict[str, Any] = field(default_factory=dict)
    _cleanups: list[Callable[[], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.memory = procfs.MemorySampler(self.broker.pid).start()
        self.waits = WaitSampler(self.pg.url).start()
        for statement in LIMIT_SCHEMA:
            self.sql.execute(statement)
        self.inserts_start = self.inserts_ledger()

    @property
    def broker_url(self) -> str:
        return self.broker.url

    def state(self, key: str, factory: Callable[[], T]) -> T:
        """The session-long state stored under ``key`` (a kind's name), made by ``factory()`` on first use:
        what a kind keeps from one round to the next (the Spark kind's SparkSession, for example)."""
        if key not in self._states:
            self._states[key] = factory()
        return cast(T, self._states[key])

    def at_close(self, cleanup: Callable[[], None]) -> None:
        """Call ``cleanup()`` when the session closes (after the last round, or when the run is stopped)."""
        self._cleanups.append(cleanup)

    def close(self) -> None:
        for cleanup in reversed(self._cleanups):
            cleanup()
        self._cleanups.clear()
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
        verdict = (
            "equal"
            if counted == stored
            else "more inserts than rows (aborted inserts)"
            if counted > stored
            else f"n_tup_ins still behind after {wait_s:g} s (statistics not flushed)"
        )
        return {"n_tup_ins_delta": counted, "rows_delta": stored, "verdict": verdict}

    def settled(self, read: Callable[[], Any], max_s: float = 20.0) -> Any:
        """``read()`` once two reads 0.3 s apart agree (work still in flight when wrk stopped has landed)."""
        previous, deadline = read(), time.monotonic() + max_s
        while time.monotonic() < deadline:
            time.sleep(0.3)
            current = read()
            if current == previous:
                return current
            previous = current
        return previous

    def _postgres_ticks(self) -> procfs.TreeTicks | None:
        """PostgreSQL's CPU so far, or None when its processes are not on this machine."""
        return None if self.pg.pid is None else procfs.tree_ticks(self.pg.pid, self._process_kind())

    def mark(self) -> CpuMark:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return CpuMark(
            time.monotonic(),
            procfs.tree_cpu_s([self.broker.pid]),
            procfs.machine_cpu(),
            usage.ru_utime + usage.ru_stime,
            self._postgres_ticks(),
            self._wal(),
            procfs.machine_io(),
        )

    def _process_kind(self) -> Callable[[int], str]:
        """Labels for the PostgreSQL processes: client backends by application_name (``backend:queenpy``
        for the broker's, ``backend:pgbench``, ``backend:queenbench`` and ``backend:queenbench-waits`` for
        the harness), the others by their title (:func:`postgres_process_kind`)."""
        apps = {
            int(row[0]): str(row[1] or "?")
            for row in self.sql.fetch(
                "SELECT pid, application_name FROM pg_stat_activity WHERE backend_type = 'client backend'"
            )
        }

        def kind_of(pid: int) -> str:
            kind = postgres_process_kind(pid)
            return f"backend:{apps.get(pid, '?')}" if kind == "backend" else kind

        return kind_of

    def _wal(self) -> WalMark:
        row = self.sql.fetch(Q_WAL)[0]
        return WalMark(int(row[0]), int(row[1]), int(row[2]))

    def checkpoint(self) -> None:
        if self.options.checkpoint:
            try:
                self.sql.execute("CHECKPOINT")
            except asyncpg.InsufficientPrivilegeError:
                self.log("  CHECKPOINT needs a superuser or pg_checkpoint: the runs go on without it")
                self.options.checkpoint = False

    def new_run(self, scenario: Scenario, round_no: int) -> dict[str, Any]:
        return {
            "scenario": scenario.name,
            "round": round_no,
            "valid": True,
            "problems": [],
            "notes": [],
            "ground_truth": {},
            "limit": scenario.limit,
        }

    def open_window(self) -> Window:
        """Start a measured window now: the checkpoint count, the memory and wait samplers' marks, the CPU and
        WAL marks."""
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS))
        self.memory.mark()
        self.waits.mark()
        return Window(self.mark(), checkpoints)

    def close_window(self, window: Window) -> Window:
        """End ``window`` now (CPU and WAL marks, checkpoints made inside it); returns it."""
        window.end = self.mark()
        window.checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS)) - window.checkpoints_before
        return window

    def fill_window(
        self,
        run: dict[str, Any],
        messages: int,
        measured: Window,
        wrk_runs: list[WrkRun],
        latency_from: WrkRun | None,
        extra_cpu_s: dict[str, float] | None = None,
        requests: int | None = None,
    ) -> None:
        """The window's figures into ``run`` (the keys every kind reports: ``messages``, ``msg_per_s``,
        ``cpu_us_per_msg``, ``cpu_share_of_machine``, ``latency_ms`` from ``latency_from``, ...);
        ``extra_cpu_s``: CPU seconds of other processes of the scenario (``{"spark": ...}``), reported next to
        the broker's and PostgreSQL's instead of under "other". ``requests``: the HTTP requests the broker
        served in the window, when the kind knows them exactly (a wrk run that is the window); then
        ``broker_us_per_request`` is the broker's CPU per request, the figure contention changes least."""
        start, end, checkpoints = measured.start, measured.end, measured.checkpoints
        if end is None:
            raise ValueError("fill_window needs a closed window (close_window)")
        window = end.at - start.at
        broker_s = end.broker_s - start.broker_s
        postgres_seen = start.postgres_ticks is not None and end.postgres_ticks is not None
        postgres_s, harness_postgres_s, by_kind = postgres_cpu(start, end)
        wrk_s = sum(w.cpu_s for w in wrk_runs)
        extra = dict(extra_cpu_s or {})
        busy = end.machine.busy_s - start.machine.busy_s
        total = max(1e-9, end.machine.total_s - start.machine.total_s)
        harness_s = end.harness_s - start.harness_s + harness_postgres_s
        ours = broker_s + postgres_s + wrk_s + sum(extra.values()) + harness_s

        def per(seconds: float) -> float | None:
            return seconds / messages * 1e6 if messages > 0 else None

        rss, pss, processes = self.memory.peak()
        run.update(
            {
                "messages": messages,
                "window_s": window,
                "msg_per_s": messages / window if window > 0 else 0.0,
                "cpu_s": {"broker": broker_s, "postgres": postgres_s, "wrk": wrk_s, **extra},
                "cpu_us_per_msg": {
                    "broker": per(broker_s),
                    "postgres": per(postgres_s) if postgres_seen else None,
                    "wrk": per(wrk_s),
                    **{name: per(seconds) for name, seconds in extra.items()},
                },
                # where PostgreSQL's CPU went: backends, autovacuum workers, walwriter, checkpointer, exited
                # ...
                "postgres_cpu_s_by_kind": by_kind,
                "postgres_harness_cpu_s": harness_postgres_s,
                "cpu_share_of_machine": {
                    "broker": broker_s / total,
                    "postgres": postgres_s / total,
                    "wrk": wrk_s / total,
                    **{name: s / total for name, s in extra.items()},
                    "other": max(0.0, busy - ours) / total,
                    "idle": max(0.0, total - busy) / total,
                },
                "broker_rss_mb_peak": rss / 2**20,
                "broker_pss_mb_peak": pss / 2**20,
                "broker_processes": processes,
                "checkpoints_in_window": checkpoints,
                "pg_waits": self.waits.shares(),
                "wal_per_msg": end.wal.per_message(start.wal, messages),
            }
        )
        if requests:
            run["requests"] = requests
            run["broker_us_per_request"] = broker_s / requests * 1e6
        if latency_from is not None:
            result = latency_from.result
            run["requests_per_s"] = result.requests / window if window > 0 else 0.0
            run["latency_ms"] = {f"{k:g}": v / 1000 for k, v in result.latency_us.items()}
            if result.latency_mean_us is not None:
                run["latency_ms"]["mean"] = result.latency_mean_us / 1000
            if result.over_10ms is not None:  # a disk's fsync stall delays about one request per connection
                run["requests_over_10ms"] = {
                    "count": result.over_10ms,
                    "per_s": result.over_10ms / window if window > 0 else 0.0,
                }
        if checkpoints:
            run["notes"].append(f"{checkpoints} checkpoint(s) during the window")

    @staticmethod
    def check_wrk(run: dict[str, Any], wrk: WrkRun, label: str) -> None:
        """Record wrk's counts under ``run["wrk"][label]``; errors and failed items become problems."""
        result = wrk.result
        run.setdefault("wrk", {})[label] = {
            "requests": result.requests,
            "non_2xx": result.non_2xx,
            "socket_errors": result.socket_errors,
            "counters": result.counters,
        }
        if result.non_2xx:
            run["problems"].append(f"{label}: {result.non_2xx} non-2xx responses")
        errors = {k: v for k, v in result.socket_errors.items() if v}
        if errors:
            run["problems"].append(f"{label}: socket errors {errors}")
        failures = [
            name
            for name in ("bad_responses", "not_queued", "ack_failed", "tx_failed", "parse_errors")
            if result.counters.get(name)
        ]
        for name in failures:
            run["problems"].append(f"{label}: {name} = {int(result.counters[name])}")
        if result.sample and (result.non_2xx or failures):
            run["problems"].append(f"{label}: first unexpected response: {result.sample}")

    def precreate(self, queue: str, partitions: int) -> None:
        """Create the queue's partitions through the push procedure (one message each)."""
        self.created_queues.add(queue)
        for start in range(0, partitions, 2000):
            items = [
                {"queue": queue, "partition": f"p{i}", "payload": {"precreate": i}}
                for i in range(start, min(partitions, start + 2000))
            ]
            self.sql.fetchval("SELECT queen.push_messages_v3($1::jsonb)::text", json.dumps(items))

    def drop_queues(self) -> int:
        """Delete every queue this session created (``queen.delete_queue_v1``: messages, partitions, consumer
        rows) and rewrite ``queen.messages`` (VACUUM FULL), so a scenario that measures the table's size
        starts from an empty one, not from an earlier scenario's or probe's rows. Those rows leave the
        n_tup_ins ledger's stored count with their partitions, so its start is moved by as many. Returns the
        messages removed (offsets assigned in the deleted queues)."""
        names = sorted(self.created_queues)
        removed = int(
            self.sql.fetchval(
                "SELECT coalesce(sum(p.last_seq), 0)::bigint FROM queen.partitions p JOIN queen.queues q "
                "ON q.id = p.queue_id WHERE q.name = ANY($1::text[])",
                names,
            )
        )
        for name in names:
            self.sql.fetchval("SELECT queen.delete_queue_v1($1)::text", name)
        self.created_queues.clear()
        self.backlogs.clear()
        self.inserts_start = (self.inserts_start[0], self.inserts_start[1] - removed)
        self.sql.execute("VACUUM (FULL, ANALYZE) queen.messages")
        return removed

    def backlog(self, scenario: Scenario, need_per_group: int) -> Backlog:
        """The shared backlog of ``scenario.partitions`` partitions, topped up to ``need_per_group`` rows,
        in whole batches per partition (at least one): a partition whose tail is a partial batch would make
        every other pop a short one."""
        backlog = self.backlogs.get(scenario.partitions)
        if backlog is None:
            backlog = Backlog(f"{self.queue_prefix}backlog-p{scenario.partitions}", scenario.partitions)
            self.precreate(backlog.queue, scenario.partitions)
            backlog.per_partition = 1
            self.backlogs[scenario.partitions] = backlog
        wanted = scenario.batch * max(1, math.ceil(need_per_group / scenario.partitions / scenario.batch))
        if wanted > backlog.per_partition:
            self.load_backlog(backlog.queue, scenario.partitions, wanted - backlog.per_partition, 40, 200_000)
            backlog.per_partition = wanted
        return backlog

    def load_backlog(
        self, queue: str, partitions: int, per_partition: int, payload_bytes: int, rows_per_statement: int
    ) -> None:
        """Add ``per_partition`` messages to each of the queue's ``partitions`` by SQL (``BULK_LOAD``), in
        statements of about ``rows_per_statement`` rows so each stays a few seconds at most; logs the time."""
        started = time.monotonic()
        self.log(f"  loading backlog: {per_partition * partitions:,} messages into {queue}")
        step = max(1, rows_per_statement // partitions)
        for done in range(0, per_partition, step):
            self.sql.execute(BULK_LOAD, queue, min(step, per_partition - done), payload(payload_bytes))
        self.log(f"  loaded in {time.monotonic() - started:.1f}s")

    # --- limits -----------------------------------------------------------------------------------
    def measure_limit(self, limit: Limit, round_no: int) -> dict[str, Any]:
        """Run pgbench for one limit and return its figures, measured as the broker's are: one pgbench run;
        once its connections are open, a warm-up; then a window whose rows are counted by PostgreSQL (the
        sequence every inserted row draws from) and whose CPU is read from /proc at the window's edges, so
        neither connection set-up nor the end of the run is in the figures."""
        if (round_no, limit.key) in self.limit_results:
            return self.limit_results[(round_no, limit.key)]
        script = self.workdir / f"limit-{limit.key}.sql"
        if limit.kind == "select1":
            script.write_text("SELECT 1;\n")
        elif limit.kind == "cycle":
            script.write_text(CYCLE_LIMIT_SCRIPT)
        else:
            body = payload(limit.payload_bytes).replace("'", "''")
            script.write_text(
                "\\set p random(0, 99)\n"
                "INSERT INTO bench.messages (id, transaction_id, partition_id, seq, payload, created_at) "
                "SELECT gen_random_uuid(), gen_random_uuid()::text, bench.partition_uuid(:p), "
                f"nextval('bench.seq'), '{body}'::jsonb, clock_timestamp() "
                f"FROM generate_series(1, {limit.rows});\n"
            )
        self.checkpoint()
        options = self.options
        # 5 s more than the warm-up and the window need (pgbench's clock may start before its connections are
        # made), so the load is still on when the window closes; if not, the limit is INVALID
        process = PgbenchProcess(
            self.pg,
            script,
            limit.clients,
            math.ceil(options.warmup + options.seconds) + 5,
            log_dir=self.workdir / "pgbench-log" if limit.log_latency else None,
        )
        try:
            wait_for_clients(self.sql, limit.clients)
            time.sleep(options.warmup)
            rows_before, start, started_epoch = int(self.sql.fetchval(Q_LIMIT_ROWS)), self.mark(), time.time()
            self.waits.mark()
            procfs.sleep_until(start.at + options.seconds)
            rows_after, end, ended_epoch = int(self.sql.fetchval(Q_LIMIT_ROWS)), self.mark(), time.time()
            still_running = process.running()
        except BaseException:
            process.stop()
            raise
        run = process.finish(window=(started_epoch, ended_epoch))
        wall = end.at - start.at
        if limit.kind == "select1":  # no rows to count: pgbench's own rate over its whole run
            rate, rows = run.result.tps, run.result.tps * wall
        else:  # a cycle transaction draws one number from bench.seq and stands for `limit.rows` messages
            rows = (rows_after - rows_before) * (limit.rows if limit.kind == "cycle" else 1)
            rate = rows / wall if wall > 0 else 0.0
        seen = start.postgres_ticks is not None and end.postgres_ticks is not None
        postgres_s, _, by_kind = postgres_cpu(start, end)
        figures: dict[str, Any] = {
            "limit": limit.key,
            "round": round_no,
            "description": limit.description,
            "msg_per_s": rate,
            "tps": run.result.tps,
            "failed": run.result.failed,
            "wall_s": wall,
            "cpu_us_per_msg": {
                "postgres": postgres_s / rows * 1e6 if rows and seen else None,
                "pgbench": None,
            },
            "valid": run.result.failed == 0 and still_running,
            "pg_waits": self.waits.shares(),
            "wal_per_msg": end.wal.per_message(start.wal, rows),
        }
        if seen:
            figures["postgres_cpu_s_by_kind"] = by_kind
        # pgbench's own CPU is known for its whole run only (wait4): per row of the whole run
        total_rows = run.result.transactions * (limit.rows if limit.kind != "select1" else 1)
        figures["cpu_us_per_msg"]["pgbench"] = run.client_cpu_s / total_rows * 1e6 if total_rows else None
        if not still_running:
            figures["problems"] = ["pgbench ended before the window closed"]
        if run.latencies_us:
            figures["latency_ms"] = {
                "50": (percentile(run.latencies_us, 50) or 0) / 1000,
                "99": (percentile(run.latencies_us, 99) or 0) / 1000,
            }
            slow = sum(1 for us in run.latencies_us if us > 10_000)
            figures["requests_over_10ms"] = {"count": slow, "per_s": slow / wall if wall > 0 else 0.0}
        elif run.result.latency_avg_ms is not None:
            figures["latency_ms"] = {"mean": run.result.latency_avg_ms}
        self.limit_results[(round_no, limit.key)] = figures
        return figures

    def cursors(self, queue: str, groups: list[str]) -> dict[str, int]:
        found = {row[0]: int(row[1]) for row in self.sql.fetch(Q_CURSORS, queue, groups)}
        return {group: found.get(group, 0) for group in groups}


def _nothing(measured: list[dict[str, Any]]) -> dict[str, Any]:
    return {}


def _no_lines(entry: dict[str, Any]) -> list[str]:
    return []


def _one_window(scenario: Scenario, options: Options) -> tuple[float, float]:
    return options.warmup + options.seconds + 3, 0.0


def _no_charts(document: dict[str, Any], path: Path) -> list[Path]:
    return []


@dataclass(frozen=True)
class Kind:
    """A kind of scenario, as found in :data:`queenpy.bench.kinds.KINDS` under :attr:`name` (the
    ``kind`` of its :class:`~queenpy.bench.catalog.Scenario` rows).

    - ``run(context, scenario, round_no)``: one measured run; returns the run's dict, made by
      :meth:`Context.new_run` and filled by :meth:`Context.fill_window` (``problems`` empty when valid),
      plus the kind's own figures under a key of its own. Raises :class:`ScenarioSkipped` when it cannot
      run here.
    - ``summarize(measured)``: the kind's medians over the rounds that measured (``msg_per_s`` in each),
      merged into the scenario's ``median`` in the JSON (``{"keepup": {...}}``); the runner computes the
      figures every kind shares.
    - ``report_lines(entry)``: the kind's lines under the terminal table and on the results page, from the
      scenario's JSON entry.
    - ``broker_env``: defaults for the broker's environment when a scenario of this kind is selected
      (``--env`` wins).
    - ``planned_s(scenario, options)``: (seconds a round of it takes, seconds more it may take at most), for
      the run's time estimate.
    - ``charts(document, path)``: PNGs of the kind's own next to the run's chart ``path``; returns the paths
      written (none without matplotlib).
    """

    name: str
    run: Callable[[Context, Scenario, int], dict[str, Any]]
    summarize: Callable[[list[dict[str, Any]]], dict[str, Any]] = _nothing
    report_lines: Callable[[dict[str, Any]], list[str]] = _no_lines
    broker_env: dict[str, str] = field(default_factory=dict)
    planned_s: Callable[[Scenario, Options], tuple[float, float]] = _one_window
    charts: Callable[[dict[str, Any], Path], list[Path]] = _no_charts


def environment_facts(sql: Sql) -> dict[str, Any]:
    """PostgreSQL version and the settings that decide its speed."""
    names = [
        "fsync",
        "synchronous_commit",
        "wal_sync_method",
        "full_page_writes",
        "shared_buffers",
        "max_connections",
        "max_wal_size",
        "checkpoint_timeout",
        "wal_buffers",
        "commit_delay",
        "work_mem",
        "wal_compression",
        "effective_io_concurrency",
        "jit",
    ]
    facts: dict[str, Any] = {"version": str(sql.fetchval("SELECT version()")).split(",")[0]}
    for name in names:
        facts[name] = sql.fetchval("SELECT current_setting($1)", name)
    facts["cores"] = os.cpu_count()
    return facts
