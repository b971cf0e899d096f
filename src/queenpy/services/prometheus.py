"""``GET /metrics/prometheus`` (API.md section 12) with ``prometheus_client``: the instruments, and what a
scrape does (:class:`Exposition`; the route in ``server/routes/system.py`` only answers with it).

Two sources, one exposition:

* **Per process, shared across the workers** with ``prometheus_client``'s multiprocess mode (the supervisor
  sets ``PROMETHEUS_MULTIPROC_DIR`` before forking, see ``server/process.py``): request latency per route,
  fusion batch sizes and call times per operation, message counters, CPU, memory, pool and long-poll gauges.
  Whichever worker answers a scrape merges every worker's numbers (``MultiProcessCollector``). Without the
  variable (an app built in a test) the numbers are this process's only.
* **From PostgreSQL at scrape time**, one query (``queen.prometheus_snapshot_v1``): per-queue depth,
  messages in flight, DLQ depth, per-minute push/pop/ack rates and pop lag (from ``queue_lag_metrics``,
  written by every worker of every instance), per consumer group lag; with the maintenance switches and
  the failover buffer of the answering process, through a custom collector.

Family names follow Queen's where they exist (``queen_db_pool_*``, ``queen_file_buffer_*``,
``queen_maintenance_mode_enabled``, ``queen_dlq_depth``, ``queen_dlq_depth_by_queue``,
``queen_queue_*{queue}``, ``queen_queue_pop_lag_milliseconds{queue,stat}``,
``queen_worker_*{hostname,worker_id,pid}``).

The snapshot's families are rendered once per change of the stats (:class:`SnapshotCache`), so ages are given
as timestamps (``*_timestamp_seconds``: the age is ``time() - x`` in PromQL), which stay true while cached.

Who writes :class:`WorkerInstruments`: on the request path, the route wrapper observes the latency histogram
(``server/app.py``), the push route counts buffered messages and the engine's call observer the fusion
histograms; everything else is set once per sample by the metrics sampler (``services/metrics.py``).

The histograms of the request path are observed into :class:`LocalHistogram` tallies, plain Python numbers
of this process, and added to the shared instruments by :meth:`WorkerInstruments.flush`: at every sample of
the metrics sampler (``METRICS_SAMPLE_INTERVAL_MS``) and before this process renders a scrape. In
multiprocess mode an observation is two writes into a memory-mapped file under a lock, per request; a tally
is a list increment (benchmarks/profiles/README.md). Another worker's latest requests reach a scrape at its
next sample.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import socket
from collections.abc import Iterator
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from queenpy.engine.failover import FailoverBuffer
from queenpy.services.maintenance import MaintenanceState
from queenpy.store.database import Database

__all__ = [
    "CONTENT_TYPE",
    "Exposition",
    "LocalCollector",
    "LocalHistogram",
    "SnapshotCache",
    "SnapshotCollector",
    "WorkerInstruments",
    "multiprocess_dir",
    "render_collector",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
_BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)


def multiprocess_dir() -> str | None:
    """The directory shared by the workers' metric files, when running under ``queenpy serve``."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class LocalHistogram:
    """Observations of one histogram child kept in this process until :meth:`flush` adds them to it (see the
    module docstring). Buckets as ``prometheus_client``'s ``Histogram.observe`` picks them: the first upper
    bound at or above the value."""

    __slots__ = ("_bounds", "_child", "_counts", "_sum")

    def __init__(self, child: Histogram) -> None:
        self._child = child
        self._bounds: list[float] = list(child._upper_bounds)
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0

    def observe(self, value: float) -> None:
        self._sum += value
        self._counts[bisect.bisect_left(self._bounds, value)] += 1

    def flush(self) -> None:
        """Add what was observed since the last flush to the histogram child."""
        counts, total = self._counts, self._sum
        if not any(counts):
            return
        self._counts, self._sum = [0] * len(self._bounds), 0.0
        child = self._child
        for bucket, count in zip(child._buckets, counts, strict=True):
            if count:
                bucket.inc(count)
        child._sum.inc(total)


class WorkerInstruments:
    """The Prometheus metrics one worker process writes (see the module docstring)."""

    def __init__(self, worker_id: int) -> None:
        self.multiprocess = multiprocess_dir() is not None
        if self.multiprocess and not getattr(values.ValueClass, "__name__", "").startswith("Mmaped"):
            values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]  # imported before the variable was set
        self.registry: CollectorRegistry | None = None if self.multiprocess else CollectorRegistry()
        r = self.registry
        labels = {"hostname": socket.gethostname(), "worker_id": str(worker_id)}
        self.request_seconds = Histogram(
            "queen_http_request_duration_seconds",
            "HTTP request latency by route template",
            ["method", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.fusion_batch = Histogram(
            "queen_fusion_batch_size",
            "Items per fused procedure call",
            ["op"],
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.fusion_seconds = Histogram(
            "queen_fusion_call_duration_seconds",
            "Duration of fused procedure calls",
            ["op"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.cpu_user = Counter(
            "queen_cpu_user_microseconds", "User CPU time of the worker processes", registry=r
        )
        self.cpu_system = Counter(
            "queen_cpu_system_microseconds", "System CPU time of the worker processes", registry=r
        )
        self.pushed = Counter("queen_messages_pushed", "Messages stored by pushes", registry=r)
        self.popped = Counter("queen_messages_popped", "Messages delivered by pops", registry=r)
        self.acked = Counter("queen_messages_acked", "Acknowledgments applied", registry=r)
        self.buffered = Counter(
            "queen_messages_buffered", "Pushed messages written to the failover buffer", registry=r
        )

        def total(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, registry=r, multiprocess_mode="livesum")

        self.pool_size = total("queen_db_pool_size", "Database connections open, all workers")
        self.pool_idle = total("queen_db_pool_idle", "Idle database connections, all workers")
        self.pool_active = total("queen_db_pool_active", "Database connections in use, all workers")
        self.rss = total("queen_process_resident_memory_bytes", "Resident memory of the worker processes")
        self.parked = total("queen_long_poll_parked", "Long polls parked, all workers")
        self.uptime = Gauge(
            "queen_uptime_seconds",
            "Seconds since the oldest live worker started",
            registry=r,
            multiprocess_mode="livemax",
        )
        self._tallies: list[LocalHistogram] = []
        self._fusion: dict[str, tuple[LocalHistogram, LocalHistogram]] = {}
        per_worker = ["hostname", "worker_id"]

        def worker(name: str, doc: str) -> Any:
            return Gauge(name, doc, per_worker, registry=r, multiprocess_mode="liveall").labels(**labels)

        self.worker_cpu = worker(
            "queen_worker_cpu_percent", "CPU use of one worker process (percent of a core)"
        )
        self.worker_rss = worker(
            "queen_worker_resident_memory_bytes", "Resident memory of one worker process"
        )
        self.worker_lag = worker(
            "queen_worker_event_loop_lag_seconds", "Event-loop lag of one worker process"
        )
        self.worker_pool = worker("queen_worker_db_pool_active", "Database connections in use by one worker")
        self.worker_parked = worker("queen_worker_long_poll_parked", "Long polls parked in one worker")

    def request_latency(self, method: str, route: str) -> LocalHistogram:
        """The latency tally of one route template (flushed into ``queen_http_request_duration_seconds``)."""
        return self._tally(self.request_seconds.labels(method, route))

    def observe_call(self, op: str, items: int, seconds: float) -> None:
        """A fused procedure call finished (the engine's observer)."""
        tallies = self._fusion.get(op)
        if tallies is None:
            tallies = self._fusion[op] = (
                self._tally(self.fusion_batch.labels(op)),
                self._tally(self.fusion_seconds.labels(op)),
            )
        tallies[0].observe(items)
        tallies[1].observe(seconds)

    def _tally(self, child: Histogram) -> LocalHistogram:
        tally = LocalHistogram(child)
        self._tallies.append(tally)
        return tally

    def flush(self) -> None:
        """Add the request path's tallies to the shared histograms (see the module docstring). Call it on the
        event loop's thread, which observes them."""
        for tally in self._tallies:
            tally.flush()

    def sample(
        self,
        numbers: dict[str, float],
        cpu_user_s: float,
        cpu_system_s: float,
        uptime_s: float,
        counted: dict[str, int],
    ) -> None:
        """One sample of this process (see ``services/metrics.py``); ``counted``: messages pushed, popped and
        acknowledged since the last sample."""
        self.flush()
        self.pushed.inc(counted.get("pushed", 0))
        self.popped.inc(counted.get("popped", 0))
        self.acked.inc(counted.get("acked", 0))
        self.cpu_user.inc(max(0.0, cpu_user_s) * 1e6)
        self.cpu_system.inc(max(0.0, cpu_system_s) * 1e6)
        self.pool_size.set(numbers["poolSize"])
        self.pool_idle.set(numbers["poolIdle"])
        self.pool_active.set(numbers["poolActive"])
        self.rss.set(numbers["rssBytes"])
        self.parked.set(numbers["parked"])
        self.uptime.set(uptime_s)
        self.worker_cpu.set(numbers["cpuPercent"])
        self.worker_rss.set(numbers["rssBytes"])
        self.worker_lag.set(numbers["eventLoopLagMs"] / 1000.0)
        self.worker_pool.set(numbers["poolActive"])
        self.worker_parked.set(numbers["parked"])

    def render(self, local: Collector) -> bytes:
        """The exposition text of every worker's metrics (or this process's) and ``local``; flush the tallies
        first (:meth:`flush`, on the event loop's thread: the tallies are not locked)."""
        registry = CollectorRegistry(auto_describe=False)
        if self.multiprocess:
            MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        else:
            assert self.registry is not None
            registry.register(_Forward(self.registry))
        registry.register(local)
        return generate_latest(registry)


def render_collector(collector: Collector) -> bytes:
    """The exposition text of one collector's families."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)


class SnapshotCache:
    """The rendered snapshot families of this process, kept while the stats and the minute are the same (the
    per-queue numbers only change when the stats job runs, every ``STATS_INTERVAL_MS``, and the per-minute
    rates when a minute ends): a scraper polling every second re-renders the per-queue families once per stats
    run, not once per scrape."""

    def __init__(self) -> None:
        self.key: str | None = None
        self.body = b""
        self.renders = 0


class Exposition:
    """What one scrape of this process answers: every worker's instruments, this process's maintenance
    switches and failover buffer, and the snapshot's families from PostgreSQL (cached, see
    :class:`SnapshotCache`).

    Args:
        database: where ``queen.prometheus_snapshot_v1`` runs.
        failover: this process's failover buffer (``queen_file_buffer_*``).
        maintenance: this process's copy of the maintenance switches.
        instruments: this process's instruments (every worker's, in multiprocess mode).
    """

    def __init__(
        self,
        database: Database,
        failover: FailoverBuffer,
        maintenance: MaintenanceState,
        instruments: WorkerInstruments,
    ) -> None:
        self.database = database
        self.failover = failover
        self.maintenance = maintenance
        self.instruments = instruments
        self.cache = SnapshotCache()

    async def render(self) -> bytes:
        """The exposition text (:data:`CONTENT_TYPE`). Rendering runs in a thread: a scrape of many queues
        does not hold the event loop."""
        cache = self.cache
        key = await self.database.fetchval("SELECT queen.prometheus_snapshot_key_v1()")
        if key is None or key != cache.key:  # None: the stats job has not run yet; do not cache
            text = await self.database.fetchval("SELECT queen.prometheus_snapshot_v1()::text")
            snapshot = orjson.loads(text)
            cache.body = await asyncio.to_thread(render_collector, SnapshotCollector(snapshot))
            cache.key = key
            cache.renders += 1
        buffer = await asyncio.to_thread(self.failover.stats)
        local = {
            "maintenance": float(self.maintenance.push),
            "popMaintenance": float(self.maintenance.pop),
            "bufferPending": float(buffer["events"]),
            "bufferFailed": float(buffer["failedFiles"]),
            "bufferHealthy": float(self.failover.db_healthy),
        }
        self.instruments.flush()
        body = await asyncio.to_thread(self.instruments.render, LocalCollector(local))
        return body + cache.body


class _Forward(Collector):
    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        yield from self._registry.collect()


def _gauge(name: str, doc: str, labels: list[str], rows: list[tuple[list[str], float]]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for label_values, value in rows:
        family.add_metric(label_values, value)
    return family


class LocalCollector(Collector):
    """The answering process's maintenance switches and failover buffer (``local``)."""

    def __init__(self, local: dict[str, float]) -> None:
        self.local = local

    def collect(self) -> Iterator[Metric]:
        local = self.local
        yield _gauge(
            "queen_maintenance_mode_enabled", "Push maintenance mode (1 on)", [], [([], local["maintenance"])]
        )
        yield _gauge(
            "queen_pop_maintenance_mode_enabled",
            "Pop maintenance mode (1 on)",
            [],
            [([], local["popMaintenance"])],
        )
        yield _gauge(
            "queen_file_buffer_pending",
            "Pushes waiting in the failover buffer",
            [],
            [([], local["bufferPending"])],
        )
        yield _gauge(
            "queen_file_buffer_failed",
            "Failover buffer files left by a process that died while replaying them",
            [],
            [([], local["bufferFailed"])],
        )
        yield _gauge(
            "queen_file_buffer_db_healthy",
            "The failover buffer's view of the database (1 healthy)",
            [],
            [([], local["bufferHealthy"])],
        )


class SnapshotCollector(Collector):
    """Families read from PostgreSQL (``snapshot``: ``queen.prometheus_snapshot_v1()``)."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot
        yield _gauge("queen_queues", "Queues", [], [([], s.get("queueCount", 0))])
        yield _gauge("queen_partitions", "Partitions", [], [([], s.get("partitionCount", 0))])
        yield _gauge(
            "queen_dlq_depth",
            "Messages in dead-letter queues",
            ["scope"],
            [(["cluster"], s.get("dlqTotal", 0))],
        )
        yield _gauge(
            "queen_queue_metrics_age_seconds",
            "Age of the per-queue minute rates (their minute's end)",
            [],
            [([], s.get("metricsAgeSeconds") or 0)],
        )
        yield _gauge(
            "queen_stats_age_seconds",
            "Age of the per-queue numbers (the stats job's last run)",
            [],
            [([], s.get("statsAgeSeconds") or 0)],
        )
        queues = s.get("queues") or []
        # every queue: partitions, depth, DLQ depth; only where not zero (a scrape at 10,000 mostly idle
        # queues stays small): messages in flight, per-minute rates, parked long polls
        for key, name, doc, sparse in (
            ("partitions", "queen_queue_partitions", "Partitions of the queue", False),
            (
                "depth",
                "queen_queue_depth",
                "Messages not yet consumed (queue mode, else the slowest group)",
                False,
            ),
            ("dlq", "queen_dlq_depth_by_queue", "Messages in the queue's dead-letter queue", False),
            ("messages", "queen_queue_messages", "Messages stored", False),
            (
                "oldestUnconsumedAt",
                "queen_queue_oldest_unconsumed_timestamp_seconds",
                "Creation time (Unix seconds) of the oldest unconsumed message; its age is time() minus this",
                True,
            ),
            (
                "processing",
                "queen_queue_processing",
                "Messages under a live lease (left out when none)",
                True,
            ),
            ("pushPerMinute", "queen_queue_push_per_minute", "Messages pushed in the last full minute", True),
            ("popPerMinute", "queen_queue_pop_per_minute", "Messages popped in the last full minute", True),
            ("ackPerMinute", "queen_queue_ack_per_minute", "Acknowledgments in the last full minute", True),
            (
                "parked",
                "queen_queue_parked_consumers",
                "Long polls parked in the last full minute (max)",
                True,
            ),
        ):
            yield _gauge(
                name,
                doc,
                ["queue"],
                [([q["queue"]], q[key]) for q in queues if q.get(key) is not None and (q[key] or not sparse)],
            )
        lag = GaugeMetricFamily(
            "queen_queue_pop_lag_milliseconds",
            "Age of messages when popped, last full minute",
            labels=["queue", "stat"],
        )
        for q in queues:
            if q.get("popLagAvgMs") is not None:
                lag.add_metric([q["queue"], "avg"], q["popLagAvgMs"])
                lag.add_metric([q["queue"], "max"], q["popLagMaxMs"])
        yield lag
        groups = s.get("groups") or []
        yield _gauge(
            "queen_consumer_group_lag_messages",
            "Messages a consumer group has not consumed",
            ["queue", "group"],
            [([g["queue"], g["group"]], g["lagMessages"]) for g in groups],
        )
        yield _gauge(
            "queen_consumer_group_oldest_unconsumed_timestamp_seconds",
            "Creation time (Unix seconds) of the oldest message a group has not consumed; its time lag is "
            "time() minus this",
            ["queue", "group"],
            [([g["queue"], g["group"]], g["oldestUnconsumedAt"]) for g in groups if g["oldestUnconsumedAt"]],
        )
        yield _gauge(
            "queen_consumer_group_partitions_lagging",
            "Partitions where a group is behind (left out when none)",
            ["queue", "group"],
            [([g["queue"], g["group"]], g["partitionsLagging"]) for g in groups if g["partitionsLagging"]],
        )
