"""The background jobs (API.md section 16): what one run of each does, in bounded database steps.

Each run is a sequence of short transactions (one procedure call each, autocommit), so no run holds a lock
for long and a run interrupted by a crash leaves consistent counters behind (every step counts its own
deletions). The procedures are in ``sql/procedures/080_services.sql`` and ``081_stats.sql``.

- :class:`StatsJob` (``STATS_INTERVAL_MS``): ``queen.stats_refresh_v4`` in steps of at most
  ``STATS_RUN_PARTITIONS`` changed partitions until the sweep of what changed ends; every
  ``STATS_RECONCILE_INTERVAL_MS`` a reconcile pass starts (``STATS_RECONCILE_CHUNK`` partitions a run until
  it ends), plus a recount of every capped queue's stored count (``queen.recount_queue_capacity_v1``).
- :class:`RetentionJob` (``RETENTION_INTERVAL``): retention then completed retention of every queue that has
  them (``queen.retention_step_v1``, ``RETENTION_BATCH_SIZE`` messages per step), partition cleanup
  (``PARTITION_CLEANUP_DAYS``), then trimming of the metrics and history tables (``METRICS_RETENTION_DAYS``,
  ``STATS_HISTORY_RETENTION_DAYS``); with ``RETENTION_VACUUM_ROWS`` set, a vacuum of ``queen.messages`` once
  it has deleted that many messages since the last one.
- :class:`EvictionJob` (``EVICTION_INTERVAL``): ``maxWaitTimeSeconds`` eviction (``EVICTION_BATCH_SIZE``).

Every step is paced (:class:`Pace`, ``SERVICES_DUTY_CYCLE``): after a step that took t seconds the job
rests t x (1 - d) / d, so its steps take at most the share d of its wall time, however much work a run
finds. Run flat out, retention over a million partitions and the partition cleanup each took a third or
more of the push rate on two cores; the stats job's runs after a large retention took 20-30 s back to back
(benchmarks/journal/2026-11.md, issue 44).

A run holds before its next step while an operator has paused its job (:func:`services_paused`), so a pause
stops a run of minutes within a step, not at its end.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncpg
import orjson

from queenpy.settings import ServiceSettings
from queenpy.store.database import Database

__all__ = [
    "DeletingJob",
    "EvictionJob",
    "Job",
    "Pace",
    "RetentionJob",
    "RunResult",
    "StatsJob",
    "jobs_for",
    "keep_up_duty",
    "rest_after",
    "services_paused",
]

PARTITIONS_PER_STEP = 500
CLEANUP_PER_STEP = 1000
TRIM_PER_STEP = 5000
_DAY_S = 86_400.0
#: a deleting job's next run gets this many times the busy share of wall time its last cycle needed
#: (:func:`keep_up_duty`): it then clears what arrives in about half the time it arrives in
KEEP_UP_HEADROOM = 2.0
#: seconds between two looks at a job's pause (:class:`Pace`): while it is held, and at most this often while
#: it is not
HOLD_POLL_S = 0.25
T = TypeVar("T")


def rest_after(busy_s: float, duty: float) -> float:
    """Seconds to rest after a step that took ``busy_s`` seconds so that steps take the share ``duty`` of the
    wall time (busy / (busy + rest) = duty): ``busy_s * (1 - duty) / duty``; 0 when ``duty >= 1`` (flat out).
    The idea of PostgreSQL's cost-based vacuum delay (its manual, "Cost-based Vacuum Delay"), in time instead
    of page costs. Raises ValueError when ``duty`` is not positive."""
    if duty <= 0:
        raise ValueError(f"duty must be positive, not {duty}")
    return 0.0 if duty >= 1 else busy_s * (1 - duty) / duty


def keep_up_duty(base: float, busy_s: float, run_s: float, interval_s: float) -> float:
    """The duty for a deleting job's next run (retention, eviction): ``base`` (``SERVICES_DUTY_CYCLE``), or
    ``KEEP_UP_HEADROOM`` times the share of its last cycle (the run's ``run_s`` of wall time plus the
    ``interval_s`` rest before the next run) that the run was busy (``busy_s``), whichever is higher, and
    at most 1. Seconds in, a share in (0, 1] out.

    Deletions arrive all the time: messages pass their retention as producers push them. At a duty d a job
    keeps up only while d exceeds u, the share of wall time the arrivals need (busy seconds a row times rows
    a second, on a machine as busy as it is); at d <= u each run outlasts the last and the stored messages
    grow without bound (the soak at a fixed 0.25: benchmarks/journal/2026-12.md, issue 18). A run's busy
    share of its cycle estimates u (from above while a backlog drains), so the next run gets twice it. A
    one-off backlog (a new retention period over millions of stored messages) is one long run at ``base``,
    and twice its busy share of the cycle, ``2 * busy_s / (busy_s / base + interval_s)``, stays at most
    ``base`` while ``busy_s <= base * interval_s``: its hot path is spared, and the runs after it have little
    to do."""
    rest_after(0.0, base)  # validates base
    cycle_s = run_s + max(interval_s, 0.0)
    needed = busy_s / cycle_s if cycle_s > 0 else 0.0
    return min(1.0, max(base, KEEP_UP_HEADROOM * needed))


async def services_paused(database: Database, job: str) -> bool:
    """Whether an operator paused the job named ``job`` everywhere (``queen.services_paused_v2``):
    ``system_state`` 'services' is ``{"paused": true}`` (every job) or ``{"paused": [names]}`` (those)."""
    return bool(await database.fetchval("SELECT queen.services_paused_v2($1)", job))


class Pace:
    """A job run's steps at a duty cycle: :meth:`step` awaits one step, then rests :func:`rest_after` its
    duration. ``busy_s`` and ``rested_s`` add up what the run spent in each (seconds); a pace is made when
    its run starts, and ``elapsed_s`` is the run's wall time since.

    With ``held`` (an awaitable predicate, :func:`services_paused` for the broker's jobs), a step first
    waits while ``held()`` is true, asking every ``HOLD_POLL_S`` (and not again within ``HOLD_POLL_S`` of a
    false answer); ``held_s`` adds up that time."""

    def __init__(self, duty: float, held: Callable[[], Awaitable[bool]] | None = None) -> None:
        rest_after(0.0, duty)  # validates duty
        self.duty = duty
        self.busy_s = 0.0
        self.rested_s = 0.0
        self.held_s = 0.0
        self._held = held
        self._looked: float | None = None  # when held() last answered false
        self._started = time.monotonic()

    @property
    def elapsed_s(self) -> float:
        """Seconds since the pace was made."""
        return time.monotonic() - self._started

    async def step(self, work: Awaitable[T]) -> T:
        """Hold while ``held()`` (see the class), ``await work``, then rest; an exception propagates at once
        (no rest). ``work`` not yet started (a coroutine) is closed when the hold raises or is cancelled."""
        try:
            await self._hold()
        except BaseException:
            if asyncio.iscoroutine(work):
                work.close()
            raise
        clock = time.monotonic()
        result = await work
        busy = time.monotonic() - clock
        self.busy_s += busy
        rest = rest_after(busy, self.duty)
        if rest > 0:
            await asyncio.sleep(rest)
            self.rested_s += rest
        return result

    async def _hold(self) -> None:
        """Wait while ``held()``; it is asked at most once a ``HOLD_POLL_S`` (a run of short steps would
        otherwise ask once a step, as often as it works)."""
        if self._held is None or (self._looked is not None and time.monotonic() - self._looked < HOLD_POLL_S):
            return
        clock = None
        while await self._held():
            clock = time.monotonic() if clock is None else clock
            await asyncio.sleep(HOLD_POLL_S)
        self._looked = time.monotonic()
        if clock is not None:
            self.held_s += self._looked - clock

    def details(self) -> dict[str, float]:
        """``{"busyMs", "restedMs", "heldMs", "duty"}`` for the run's record."""
        return {
            "busyMs": round(self.busy_s * 1000, 1),
            "restedMs": round(self.rested_s * 1000, 1),
            "heldMs": round(self.held_s * 1000, 1),
            "duty": self.duty,
        }


@dataclass
class RunResult:
    """What one run did: ``rows`` (messages deleted, or stats rows rewritten) and the details by part."""

    rows: int = 0
    details: dict[str, Any] = field(default_factory=dict)


class Job:
    """One background job: a name, its advisory-lock key, its interval, and :meth:`run`."""

    name = ""
    lock_key = 0
    quiet = False  # log runs that did something at DEBUG instead of INFO (the stats job: every few seconds)

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings

    @property
    def interval_s(self) -> float:
        """Seconds between the end of a run and the next try; 0 or less: the job is off."""
        raise NotImplementedError

    async def run(self, database: Database) -> RunResult:
        """One run. Raises what the database raises (the runner records and logs it)."""
        raise NotImplementedError

    def _duty_now(self) -> float:
        """The duty of a run starting now: ``SERVICES_DUTY_CYCLE``."""
        return self.settings.duty_cycle

    def _pace(self, database: Database) -> Pace:
        """This run's pace, made as the run starts: at :meth:`_duty_now`, held while the job is paused."""
        return Pace(self._duty_now(), held=lambda: services_paused(database, self.name))


class DeletingJob(Job):
    """A job that deletes what expires (retention, eviction): each run is paced at the duty the run before
    it set (:func:`keep_up_duty`; the first run at ``SERVICES_DUTY_CYCLE``)."""

    def __init__(self, settings: ServiceSettings) -> None:
        super().__init__(settings)
        self._duty = settings.duty_cycle

    def _duty_now(self) -> float:
        """The duty the last run set (:meth:`_paced`)."""
        return self._duty

    def _paced(self, pace: Pace) -> dict[str, float]:
        """Set the next run's duty from this run's (:func:`keep_up_duty`; the time it was held does not
        count); the run's ``pace`` details, with ``nextDuty``."""
        run_s = pace.elapsed_s - pace.held_s
        self._duty = keep_up_duty(self.settings.duty_cycle, pace.busy_s, run_s, self.interval_s)
        return {**pace.details(), "nextDuty": round(self._duty, 3)}


async def _json(database: Database, query: str, *args: Any) -> Any:
    return orjson.loads(await database.fetchval(query, *args))


#: the counts of a stats step's answer that a run sums over its steps
_STATS_COUNTS = ("partitions", "consumers", "queues", "groups", "candidates")


#: rows of queen.consumer_activity a drain step of the stats job deletes at most: one stats interval's
#: consumer changes at tens of thousands of messages a second take one step
DRAIN_BATCH = 20_000

#: The share of one core the queues' re-aggregation (step 4 of ``queen.stats_refresh_v4``: a sum over every
#: partition of a queue) may take: it runs once a ``STATS_INTERVAL_MS``, or, when its last run took longer
#: than this share of that interval, after its time divided by this share. About 0.6 s at a million
#: partitions (benchmarks/journal/2026-11.md, issue 44), so every 30 s there; its time grows with the
#: partitions, and below about 300,000 it stays under 0.2 s: every interval, as before.
AGGREGATE_SHARE = 0.02


class StatsJob(Job):
    name = "stats"
    lock_key = 737_003
    quiet = True

    def __init__(self, settings: ServiceSettings) -> None:
        super().__init__(settings)
        self._last_full: float | None = None
        self._last_aggregate: float | None = None
        self._aggregate_every_s = self.interval_s  # AGGREGATE_SHARE: after a slow re-aggregation, longer

    @property
    def interval_s(self) -> float:
        return self.settings.stats_interval_ms / 1000

    async def run(self, database: Database) -> RunResult:
        """One run: the steps of a sweep (``queen.stats_refresh_v4``, ``STATS_RUN_PARTITIONS`` changed
        partitions a step, each paced) until the sweep ends; the first step also takes the reconcile pass's
        next chunk (and starts a pass every ``STATS_RECONCILE_INTERVAL_MS``); the queues' sums are
        re-aggregated once a ``STATS_INTERVAL_MS``, or less often (``AGGREGATE_SHARE``), by the step that
        ends the sweep, or by the next step once overdue by another period (a long sweep). Details: the
        steps' counts summed, ``steps``, ``aggregated`` (by any step) and ``aggregateMs`` (its time, ms;
        None without), and the first step's reconcile fields."""
        now = time.monotonic()
        full = (
            self._last_full is None
            or now - self._last_full >= self.settings.stats_reconcile_interval_ms / 1000
        )
        pace = self._pace(database)
        first: dict[str, Any] = {}  # the first step's answer: its reconcile fields
        last: dict[str, Any] = {}  # the last step's answer: where the sweep stands
        summed: Counter[str] = Counter()  # the steps' counts
        aggregate_ms: float | None = None  # the re-aggregations' time (ms), when a step did one
        skipped: dict[str, Any] = {}
        steps = 0
        while True:
            # due (half a run early at most: runs start an interval apart): the step that ends the sweep
            # aggregates (SQL NULL); overdue by another period (a long sweep): this step
            started = time.monotonic()
            aggregate: bool | None = None
            if self._last_aggregate is not None:
                since = started - self._last_aggregate + self.interval_s / 2
                if since < self._aggregate_every_s:
                    aggregate = False
                elif since >= 2 * self._aggregate_every_s:
                    aggregate = True
            step = await pace.step(
                _json(
                    database,
                    "SELECT queen.stats_refresh_v4($1, $2, $3, false, $4)::text",
                    full and steps == 0,
                    self.settings.stats_reconcile_chunk if steps == 0 else None,
                    self.settings.stats_run_partitions,
                    aggregate,
                )
            )
            steps += 1
            if "skipped" in step:
                skipped = step
                break
            if step.get("aggregated"):
                self._last_aggregate = started
                took_ms = float(step.get("aggregateMs") or 0)
                self._aggregate_every_s = max(self.interval_s, took_ms / 1000 / AGGREGATE_SHARE)
                aggregate_ms = (aggregate_ms or 0.0) + took_ms
            first, last = first or step, step
            summed.update({key: int(step[key] or 0) for key in _STATS_COUNTS if key in step})
            if step.get("sweepAfter") is None:
                break
        details: dict[str, Any] = {**skipped, **first, **summed, "steps": steps}
        details["aggregated"] = aggregate_ms is not None  # by any step, not only the first
        details["aggregateMs"] = aggregate_ms
        if last:
            details["sweepAfter"] = last.get("sweepAfter")
        if not skipped:
            details["activityDrained"] = await self._drain(database, pace)
        rows = sum(int(details.get(k) or 0) for k in ("partitions", "consumers", "queues", "groups"))
        if full and "skipped" not in details:
            self._last_full = now
            capped = await database.fetchval("SELECT queen.capped_queues_v1()")
            for queue_id in capped or []:
                await pace.step(database.fetchval("SELECT queen.recount_queue_capacity_v1($1)", queue_id))
            details["capacityRecounts"] = len(capped or [])
        details["pace"] = pace.details()
        return RunResult(rows, details)

    async def _drain(self, database: Database, pace: Pace) -> int:
        """Delete the rows of ``queen.consumer_activity`` the sweeps have taken and no lease holds
        (``queen.consumer_activity_drain_v1``, migration 026), ``DRAIN_BATCH`` a step, each its own
        transaction, paced, until a step finds fewer: the rows deleted."""
        drained = 0
        while True:
            deleted = int(
                await pace.step(database.fetchval("SELECT queen.consumer_activity_drain_v1($1)", DRAIN_BATCH))
                or 0
            )
            drained += deleted
            if deleted < DRAIN_BATCH:
                return drained


async def _delete_kind(
    database: Database, pace: Pace, kind: str, batch: int, run_at: datetime.datetime
) -> dict[str, int]:
    """Every queue with ``kind`` configured, step after step (paced) until each reports no more work."""
    queues = await _json(database, "SELECT queen.retention_queues_v1($1)::text", kind)
    deleted = steps = 0
    for queue in queues:
        after, inclusive = "", True
        while True:
            step = await pace.step(
                _json(
                    database,
                    "SELECT queen.retention_step_v1($1, $2::uuid, $3::text[], $4, $5, $6, $7, $8)::text",
                    kind,
                    queue["queueId"],
                    queue["groups"],
                    after,
                    inclusive,
                    PARTITIONS_PER_STEP,
                    batch,
                    run_at,
                )
            )
            steps += 1
            deleted += int(step["deleted"])
            if step["next"] is None:
                break
            after, inclusive = step["next"], bool(step["inclusive"])
    return {"queues": len(queues), "deleted": deleted, "steps": steps}


class RetentionJob(DeletingJob):
    name = "retention"
    lock_key = 737_001

    def __init__(self, settings: ServiceSettings) -> None:
        super().__init__(settings)
        self._unvacuumed = 0  # messages this job deleted since it last vacuumed queen.messages

    async def _vacuum(self, database: Database) -> dict[str, Any] | None:
        """``VACUUM (SKIP_LOCKED) queen.messages`` once this job has deleted ``retention_vacuum_rows``
        messages since its last vacuum (0: never; autovacuum alone). None when it did not vacuum. The vacuum
        runs on a connection of its own, without the pool's ``statement_timeout`` (pooled connections carry no
        session settings of their own: see ``queenpy.store.database``)."""
        threshold = self.settings.retention_vacuum_rows
        if threshold <= 0 or self._unvacuumed < threshold:
            return None
        clock = time.monotonic()
        connection = await asyncpg.connect(
            database.url, server_settings={"application_name": "queenpy-vacuum", "statement_timeout": "0"}
        )
        try:
            await connection.execute("VACUUM (SKIP_LOCKED) queen.messages")
        finally:
            await connection.close(timeout=5)
        done = {"messagesDeleted": self._unvacuumed, "ms": round((time.monotonic() - clock) * 1000, 1)}
        self._unvacuumed = 0
        return done

    @property
    def interval_s(self) -> float:
        return self.settings.retention_interval_ms / 1000

    async def run(self, database: Database) -> RunResult:
        """Retention, completed retention, the partition cleanup and the history trim, each in paced steps
        at the duty :func:`keep_up_duty` set after the last run (the first: ``SERVICES_DUTY_CYCLE``); then
        the vacuum when due (:meth:`_vacuum`). Rows: the messages deleted."""
        settings = self.settings
        pace = self._pace(database)
        run_at = await database.fetchval("SELECT now()")
        details: dict[str, Any] = {}
        rows = 0
        for kind in ("retention", "completed_retention"):
            part = await _delete_kind(database, pace, kind, settings.retention_batch_size, run_at)
            details[kind] = part
            rows += part["deleted"]
        self._unvacuumed += rows
        vacuum = await self._vacuum(database)
        if vacuum is not None:
            details["vacuum"] = vacuum
        removed = 0
        while True:
            step = await pace.step(
                _json(
                    database,
                    "SELECT queen.partition_cleanup_v3($1, $2)::text",
                    settings.partition_cleanup_days * _DAY_S,
                    CLEANUP_PER_STEP,
                )
            )
            removed += int(step["partitions"])
            if int(step["partitions"]) < CLEANUP_PER_STEP:
                break
        details["partitionCleanup"] = {"partitions": removed}
        trimmed: dict[str, int] = {}
        metrics_before = run_at - datetime.timedelta(days=settings.metrics_retention_days)
        stats_before = run_at - datetime.timedelta(days=settings.stats_history_retention_days)
        while True:
            step = await pace.step(
                _json(
                    database,
                    "SELECT queen.trim_history_v1($1, $2, $3)::text",
                    metrics_before,
                    stats_before,
                    TRIM_PER_STEP,
                )
            )
            for table, count in step.items():
                trimmed[table] = trimmed.get(table, 0) + int(count)
            if all(int(count) < TRIM_PER_STEP for count in step.values()):
                break
        details["trimmed"] = {table: count for table, count in trimmed.items() if count}
        details["pace"] = self._paced(pace)
        return RunResult(rows, details)


class EvictionJob(DeletingJob):
    name = "eviction"
    lock_key = 737_002

    @property
    def interval_s(self) -> float:
        return self.settings.eviction_interval_ms / 1000

    async def run(self, database: Database) -> RunResult:
        """Eviction in paced steps at the duty :func:`keep_up_duty` set after the last run (the first:
        ``SERVICES_DUTY_CYCLE``). Rows: the messages evicted."""
        pace = self._pace(database)
        run_at = await database.fetchval("SELECT now()")
        part = await _delete_kind(
            database, pace, "max_wait_time_eviction", self.settings.eviction_batch_size, run_at
        )
        return RunResult(part["deleted"], {"max_wait_time_eviction": part, "pace": self._paced(pace)})


def jobs_for(settings: ServiceSettings) -> list[Job]:
    """The jobs this configuration runs: none when the services are off, else those with an interval."""
    if not settings.enabled:
        return []
    return [
        job
        for job in (StatsJob(settings), RetentionJob(settings), EvictionJob(settings))
        if job.interval_s > 0
    ]
