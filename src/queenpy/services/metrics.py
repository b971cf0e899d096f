"""What each worker process measures about itself (API.md sections 11, 12 and 16, "metrics collector").

Every ``METRICS_SAMPLE_INTERVAL_MS`` (1 s) a worker samples its CPU and memory (psutil), its database pool,
its fusion queues and its parked long polls, sets its Prometheus gauges, and folds the sample into the
current minute's aggregates; every ``METRICS_AGGREGATE_INTERVAL_S`` (60 s) and at each minute boundary it
upserts that minute's rows for itself (``queen.metrics_flush_v1``): ``system_metrics`` (CPU, memory, pool,
event-loop lag: avg/min/max/last), ``worker_metrics`` (requests, errors, fusion calls and batch sizes, long
polls) and ``queue_lag_metrics`` (per queue: messages pushed, popped and acknowledged, pops, pop lag, parked
long polls). The analytics routes and the Prometheus per-queue rates read those tables, so every worker of
every broker instance is counted.

Per-request numbers are counted in plain Python and handed to the process-shared Prometheus metrics at each
sample; only the request latency histogram is observed per request. Pop lag is the age of the oldest
message of a pop when it is delivered (one timestamp parse per pop, not per message).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import psutil

from queenpy.engine import Engine
from queenpy.services.prometheus import WorkerInstruments
from queenpy.store.database import Database

__all__ = ["QueueCounters", "WorkerMetrics"]

log = logging.getLogger("queenpy.metrics")


@dataclass
class _Agg:
    """avg/min/max/last of one sampled number over a minute."""

    count: int = 0
    total: float = 0.0
    low: float = float("inf")
    high: float = float("-inf")
    last: float = 0.0

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.low = min(self.low, value)
        self.high = max(self.high, value)
        self.last = value

    def wire(self) -> dict[str, float]:
        if not self.count:
            return {"avg": 0, "min": 0, "max": 0, "last": 0}
        return {
            "avg": round(self.total / self.count, 3),
            "min": round(self.low, 3),
            "max": round(self.high, 3),
            "last": round(self.last, 3),
        }


@dataclass
class QueueCounters:
    """One queue's numbers of one minute in this process."""

    push_requests: int = 0
    push_messages: int = 0
    pop_count: int = 0
    pop_messages: int = 0
    ack_messages: int = 0
    ack_failed: int = 0
    lag_sum_ms: float = 0.0
    lag_max_ms: float = 0.0
    lag_samples: int = 0
    parked_max: int = 0

    def wire(self, queue: str) -> dict[str, Any]:
        return {
            "queue": queue,
            "pushRequests": self.push_requests,
            "pushMessages": self.push_messages,
            "popCount": self.pop_count,
            "popMessages": self.pop_messages,
            "ackMessages": self.ack_messages,
            "ackFailed": self.ack_failed,
            "lagSumMs": round(self.lag_sum_ms, 3),
            "lagMaxMs": round(self.lag_max_ms, 3),
            "lagSamples": self.lag_samples,
            "parkedMax": self.parked_max,
        }


@dataclass
class _Minute:
    bucket: datetime
    system: dict[str, _Agg] = field(default_factory=lambda: defaultdict(_Agg))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # requests, errors: whole counts
    fusion: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )
    queues: dict[str, QueueCounters] = field(default_factory=lambda: defaultdict(QueueCounters))


def _minute(now: float) -> datetime:
    return datetime.fromtimestamp(now - now % 60, tz=UTC)


def _created_at_ms(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value).timestamp() * 1000.0
    except ValueError:
        return None


class WorkerMetrics:
    """The numbers of one worker process; see the module docstring. It reads only what it is given.

    Args:
        database: the process's database (its pool is sampled; the minute's rows are written through it).
        engine: the process's engine (its fusion queues and parked long polls are sampled).
        instruments: the Prometheus metrics this process writes.
        worker_id: this worker's index (``worker_metrics.worker_id``).
        instance: the broker instance, ``host:port`` (the rows' ``hostname``).
        started_at: when the process started (Unix seconds), for the uptime gauge.
        sample_interval_ms: ``METRICS_SAMPLE_INTERVAL_MS``.
        aggregate_interval_s: ``METRICS_AGGREGATE_INTERVAL_S``.
    """

    def __init__(
        self,
        database: Database,
        engine: Engine,
        instruments: WorkerInstruments,
        *,
        worker_id: int,
        instance: str,
        started_at: float,
        sample_interval_ms: float,
        aggregate_interval_s: float,
    ) -> None:
        self.database = database
        self.engine = engine
        self.instruments = instruments
        self.worker_id = worker_id
        self.hostname = instance
        self.started_at = started_at
        self.pid = os.getpid()
        self.sample_s = sample_interval_ms / 1000.0
        self.flush_s = aggregate_interval_s
        self._minute = _minute(time.time())
        self._current = _Minute(self._minute)
        self._process = psutil.Process()
        self._cpu = self._process.cpu_times()
        self._cpu_at = time.monotonic()
        self._fusion_seen: dict[str, tuple[int, int, int, int, float]] = {}
        self._task: asyncio.Task[None] | None = None
        self.requests = 0  # counted by the app's route wrapper
        self.errors = 0
        self._requests_seen = self._errors_seen = 0
        self.totals = {"pushed": 0, "popped": 0, "acked": 0}  # since start, for the Prometheus counters
        self._totals_seen = dict(self.totals)
        self.flushes = 0

    # -- counted on the request path -------------------------------------------------------------------
    def pushed(self, items: list[dict[str, Any]], results: list[Any]) -> None:
        queues = self._current.queues
        stored = 0
        seen: set[str] = set()
        for item, result in zip(items, results):
            if isinstance(result, dict) and result.get("status") == "queued":
                counters = queues[item["queue"]]
                counters.push_messages += 1
                if item["queue"] not in seen:
                    seen.add(item["queue"])
                    counters.push_requests += 1
                stored += 1
        self.totals["pushed"] += stored

    def popped(self, queue: str | None, messages: list[dict[str, Any]]) -> None:
        if not queue:
            return
        counters = self._current.queues[queue]
        counters.pop_count += 1
        counters.pop_messages += len(messages)
        self.totals["popped"] += len(messages)
        created = _created_at_ms(messages[0].get("createdAt")) if messages else None
        if created is not None:
            lag = max(0.0, time.time() * 1000.0 - created)
            counters.lag_sum_ms += lag
            counters.lag_max_ms = max(counters.lag_max_ms, lag)
            counters.lag_samples += 1

    def acked(self, results: list[Any]) -> None:
        queues = self._current.queues
        for result in results:
            if isinstance(result, dict) and result.get("success") and result.get("queueName"):
                counters = queues[result["queueName"]]
                counters.ack_messages += 1
                self.totals["acked"] += 1
                if result.get("dlq"):
                    counters.ack_failed += 1

    # -- the sampler ---------------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):
            await self.flush()

    async def _run(self) -> None:
        next_flush = time.monotonic() + self.flush_s
        while True:
            before = time.monotonic()
            await asyncio.sleep(self.sample_s)
            lag_s = max(0.0, time.monotonic() - before - self.sample_s)
            try:
                self.sample(lag_s)
                if time.monotonic() >= next_flush or _minute(time.time()) != self._minute:
                    next_flush = time.monotonic() + self.flush_s
                    await self.flush()
            except Exception as exc:  # noqa: BLE001 - metrics never take the worker down
                log.warning("metrics sample/flush failed: %s", exc)

    def sample(self, loop_lag_s: float = 0.0) -> dict[str, float]:
        """Take one sample now: update the Prometheus gauges and the minute's aggregates."""
        now = time.monotonic()
        cpu = self._process.cpu_times()
        elapsed = max(1e-6, now - self._cpu_at)
        user, system = cpu.user - self._cpu.user, cpu.system - self._cpu.system
        self._cpu, self._cpu_at = cpu, now
        rss = self._process.memory_info().rss
        pool = self.database.pool
        size, idle = pool.get_size(), pool.get_idle_size()
        parked = self.engine.waiters.counts()
        values = {
            "cpuPercent": 100.0 * (user + system) / elapsed,
            "rssBytes": float(rss),
            "poolSize": float(size),
            "poolIdle": float(idle),
            "poolActive": float(size - idle),
            "eventLoopLagMs": loop_lag_s * 1000.0,
            "parked": float(sum(parked.values())),
        }
        minute = self._current
        for key, value in values.items():
            minute.system[key].add(value)
        for queue, count in parked.items():
            if queue is None:  # namespace/task long polls park under no queue: counted in "parked" above only
                continue
            counters = minute.queues[queue]
            counters.parked_max = max(counters.parked_max, count)
        for name, fusion in self.engine.fusions.items():
            stats = fusion.stats
            seen = self._fusion_seen.get(name, (0, 0, 0, 0, 0.0))
            now_seen = (stats.requests, stats.items, stats.calls, stats.errors, stats.busy_s)
            self._fusion_seen[name] = now_seen
            delta = minute.fusion[name]
            for key, a, b in zip(("requests", "items", "calls", "errors", "busyMs"), now_seen, seen):
                delta[key] += (a - b) * (1000.0 if key == "busyMs" else 1.0)
            delta["maxBatch"] = max(delta["maxBatch"], stats.max_batch_seen)
        minute.counts["requests"] += self.requests - self._requests_seen
        minute.counts["errors"] += self.errors - self._errors_seen
        self._requests_seen, self._errors_seen = self.requests, self.errors
        deltas = {key: self.totals[key] - self._totals_seen[key] for key in self.totals}
        self._totals_seen = dict(self.totals)
        self.instruments.sample(values, user, system, time.time() - self.started_at, deltas)
        return values

    def _rows(self, minute: _Minute) -> dict[str, Any]:
        counts = dict(minute.counts)
        return {
            "bucket": minute.bucket.isoformat(),
            "hostname": self.hostname,
            "pid": self.pid,
            "workerId": str(self.worker_id),
            "sampleCount": minute.system["cpuPercent"].count,
            "system": {key: agg.wire() for key, agg in minute.system.items()},
            "worker": {
                **counts,
                "fusion": {op: dict(d) for op, d in minute.fusion.items()},
                "parked": minute.system["parked"].wire(),
            },
            "queues": [counters.wire(queue) for queue, counters in minute.queues.items()],
        }

    async def flush(self) -> None:
        """Upsert this process's rows of the current minute. When the minute is over, counting moves to the
        next one first (nothing counted meanwhile is lost) and the finished minute is written a last time."""
        minute = self._current
        now_minute = _minute(time.time())
        if now_minute != self._minute:
            self._minute, self._current = now_minute, _Minute(now_minute)
        rows = orjson.dumps(self._rows(minute)).decode()
        await self.database.fetchval("SELECT queen.metrics_flush_v1($1::jsonb)", rows)
        self.flushes += 1
