"""Request fusion: many HTTP requests become one stored-procedure call (DESIGN.md section 3).

Per worker process and per operation type there is one :class:`Fusion`: a FIFO of pending requests, a
batch limit, a concurrency limit and the calls in flight. The policy is group commit: **fire as soon as a
slot is free; batch only what accumulates while the slots are busy**. At low load a request goes straight
to PostgreSQL with no hold timer; at high load batches grow by themselves. Every item of a fused batch gets
an ``index`` (its position in the batch); the procedure answers one result per item carrying it (or, for
push, a compact answer that :data:`Decode` expands), and the results are split back to their requests by
index. A request whose client went away simply has its result dropped.

The concurrency limit is static or adaptive (:class:`VegasLimit`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["Decode", "Fusion", "FusionStats", "StaticLimit", "VegasLimit", "results_by_index"]

log = logging.getLogger("queenpy.engine")

Call = Callable[[str], Awaitable[str]]
# observer(operation type, items in the call, seconds the call took): one call per procedure call
Observer = Callable[[str, int, float], None]
# (the fused items, the procedure's answer) -> one result per item, in the items' order (None: no result)
Decode = Callable[[list[Any], str], list[Any]]


def results_by_index(items: list[Any], text: str) -> list[Any]:
    """The default :data:`Decode`: a JSON array of result objects, each carrying its item's ``index``."""
    by_index: list[Any] = [None] * len(items)
    for result in orjson.loads(text) if text else []:
        position = result.get("index") if isinstance(result, dict) else None
        if isinstance(position, int) and 0 <= position < len(by_index):
            by_index[position] = result
    return by_index


class StaticLimit:
    """A fixed number of calls in flight."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)

    def on_sample(self, rtt_s: float, inflight: int) -> None:
        """Static: samples change nothing."""


class VegasLimit:
    """Adaptive concurrency in the style of TCP Vegas.

    Source: L. Brakmo, L. Peterson, "TCP Vegas: End to End Congestion Avoidance on a Global Internet"
    (IEEE JSAC, 1995), as adapted to request concurrency by Netflix's ``concurrency-limits`` (VegasLimit).
    The queue a limit builds up in PostgreSQL is estimated as ``limit * (1 - rtt_min / rtt)``: below
    ``alpha`` the limit grows by one, above ``beta`` it shrinks by one. ``rtt_min`` is the smallest round
    trip seen in the last ``window_s`` seconds.
    """

    def __init__(
        self,
        initial: int,
        min_limit: int,
        max_limit: int,
        alpha: int = 3,
        beta: int = 12,
        window_s: float = 30.0,
    ) -> None:
        self.limit = max(min_limit, min(initial, max_limit))
        self.min_limit = min_limit
        self.max_limit = max_limit
        self.alpha = alpha
        self.beta = beta
        self.window_s = window_s
        self._rtt_min = float("inf")
        self._rtt_min_at = 0.0

    def on_sample(self, rtt_s: float, inflight: int) -> None:
        now = time.monotonic()
        if rtt_s < self._rtt_min or now - self._rtt_min_at > self.window_s:
            self._rtt_min, self._rtt_min_at = rtt_s, now
        if inflight < self.limit // 2:
            return  # the limit was not the constraint; the sample says nothing about it
        queued = self.limit * (1.0 - self._rtt_min / max(rtt_s, 1e-9))
        if queued < self.alpha:
            self.limit = min(self.max_limit, self.limit + 1)
        elif queued > self.beta:
            self.limit = max(self.min_limit, self.limit - 1)


@dataclass
class FusionStats:
    """Counters of one fusion queue (exported by /metrics)."""

    requests: int = 0
    items: int = 0
    calls: int = 0
    errors: int = 0
    busy_s: float = 0.0
    max_batch_seen: int = 0


@dataclass
class _Pending:
    items: list[Any]
    future: asyncio.Future[list[Any]]
    weight: int  # what counts against max_batch_size: the items, or what the submitter says (operations)
    size_bytes: int  # what counts against max_batch_bytes (0: not counted)
    enqueued_at: float = field(default_factory=time.monotonic)


class Fusion:
    """The fusion queue of one operation type.

    Args:
        name: the operation type (``push``, ``pop``, ...), for logs and metrics.
        call: runs one procedure call: JSON array text in, JSON array text out.
        max_batch_size: most items per call, or most weight when requests are submitted with one (a
            single request larger than this still goes alone).
        limit: a :class:`StaticLimit` or :class:`VegasLimit` for the calls in flight.
        max_hold_ms: optional extra wait before firing a partial batch; 0 (default) fires at once.
        decode: turns the procedure's answer into one result per item (default :func:`results_by_index`).
        max_batch_bytes: most bytes per call, as the requests' ``size_bytes`` add up (0: no cap).
        max_batch_requests: most requests per call (0: no cap).
    """

    def __init__(
        self,
        name: str,
        call: Call,
        max_batch_size: int,
        limit: StaticLimit | VegasLimit,
        max_hold_ms: int = 0,
        decode: Decode = results_by_index,
        max_batch_bytes: int = 0,
        max_batch_requests: int = 0,
    ) -> None:
        self.name = name
        self._call = call
        self._decode = decode
        self.max_batch_size = max(1, max_batch_size)
        self.max_batch_bytes = max(0, max_batch_bytes)
        self.max_batch_requests = max(0, max_batch_requests)
        self.limit = limit
        self.max_hold_s = max_hold_ms / 1000.0
        self.stats = FusionStats()
        self._queue: collections.deque[_Pending] = collections.deque()
        self._queued_items = 0
        self._inflight = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._hold_handle: asyncio.TimerHandle | None = None
        self.observer: Observer | None = None
        self.op = name.split("[", 1)[0]

    @property
    def inflight(self) -> int:
        return self._inflight

    @property
    def pending(self) -> int:
        return len(self._queue)

    async def submit(self, items: list[Any], weight: int | None = None, size_bytes: int = 0) -> list[Any]:
        """Queue one request's items; return their results (dicts), in the items' order.

        ``weight``: what the request counts against ``max_batch_size`` (default: its number of items);
        ``size_bytes``: what it counts against ``max_batch_bytes``.
        Raises whatever the procedure call raised (every request fused into that call gets the error).
        """
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        pending = _Pending(items, future, len(items) if weight is None else weight, size_bytes)
        self._queue.append(pending)
        self._queued_items += pending.weight
        self.stats.requests += 1
        self._fire()
        return await future

    def _fire(self) -> None:
        while self._queue and self._inflight < self.limit.limit:
            if (
                self.max_hold_s > 0
                and self._inflight > 0
                and self._queued_items < self.max_batch_size
                and time.monotonic() - self._queue[0].enqueued_at < self.max_hold_s
            ):
                if self._hold_handle is None:
                    self._hold_handle = asyncio.get_running_loop().call_later(self.max_hold_s, self._on_hold)
                return
            batch: list[_Pending] = []
            count = 0
            size = 0
            while self._queue and (
                not batch
                or (
                    count + self._queue[0].weight <= self.max_batch_size
                    and (not self.max_batch_bytes or size + self._queue[0].size_bytes <= self.max_batch_bytes)
                    and (not self.max_batch_requests or len(batch) < self.max_batch_requests)
                )
            ):
                pending = self._queue.popleft()
                batch.append(pending)
                count += pending.weight
                size += pending.size_bytes
            self._queued_items -= count
            self._inflight += 1
            task = asyncio.get_running_loop().create_task(self._run(batch, count))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _on_hold(self) -> None:
        self._hold_handle = None
        self._fire()

    async def _run(self, batch: list[_Pending], count: int) -> None:
        indexed: list[Any] = []
        for pending in batch:
            for item in pending.items:
                item["index"] = len(indexed)
                indexed.append(item)
        started = time.monotonic()
        try:
            text = await self._call(orjson.dumps(indexed).decode())
            by_index = self._decode(indexed, text)
        except BaseException as exc:
            self.stats.errors += 1
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(exc)
            if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                raise
            return
        finally:
            rtt = time.monotonic() - started
            self.limit.on_sample(rtt, self._inflight)
            self._inflight -= 1
            self.stats.calls += 1
            self.stats.items += count
            self.stats.busy_s += rtt
            self.stats.max_batch_seen = max(self.stats.max_batch_seen, count)
            if self.observer is not None:
                self.observer(self.op, count, rtt)
            self._fire()
        start = 0
        for pending in batch:
            end = start + len(pending.items)
            if not pending.future.done():
                pending.future.set_result(by_index[start:end])
            start = end

    async def drain(self) -> None:
        """Wait for the calls in flight (shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


class LanedFusion:
    """Fusion split into lanes by a key (for pushes: queue and partition), one call in flight per lane.

    A push holds the row locks of the partitions it writes until COMMIT. If any request could join any
    batch, two concurrent calls would nearly always share a partition and wait for each other, so pushes
    would commit one at a time. With lanes, the calls in flight in one process touch disjoint partitions
    and commit in parallel (PostgreSQL then flushes their WAL together); each lane still fuses everything
    that accumulates while its call runs. A request goes to the lane of its first item's key (CRC-32).
    The default is one lane (``QUEEN_PUSH_MAX_CONCURRENT=1``): the lanes of different worker processes
    share partitions anyway, and bigger batches cost PostgreSQL less per message than parallel small ones.
    """

    def __init__(
        self,
        name: str,
        call: Call,
        max_batch_size: int,
        lanes: int,
        key: Callable[[Any], str],
        decode: Decode = results_by_index,
    ) -> None:
        self.name = name
        self._key = key
        self.lanes = [
            Fusion(f"{name}[{i}]", call, max_batch_size, StaticLimit(1), decode=decode)
            for i in range(max(1, lanes))
        ]

    async def submit(self, items: list[Any], weight: int | None = None, size_bytes: int = 0) -> list[Any]:
        """As :meth:`Fusion.submit`, on the lane of ``items[0]``."""
        if len(self.lanes) == 1 or not items:  # the default: no key to compute on the hot path
            return await self.lanes[0].submit(items, weight, size_bytes)
        lane = zlib.crc32(self._key(items[0]).encode()) % len(self.lanes)
        return await self.lanes[lane].submit(items, weight, size_bytes)

    @property
    def inflight(self) -> int:
        return sum(lane.inflight for lane in self.lanes)

    @property
    def pending(self) -> int:
        return sum(lane.pending for lane in self.lanes)

    @property
    def stats(self) -> FusionStats:
        total = FusionStats()
        for lane in self.lanes:
            total.requests += lane.stats.requests
            total.items += lane.stats.items
            total.calls += lane.stats.calls
            total.errors += lane.stats.errors
            total.busy_s += lane.stats.busy_s
            total.max_batch_seen = max(total.max_batch_seen, lane.stats.max_batch_seen)
        return total

    @property
    def limit(self) -> StaticLimit:
        return StaticLimit(len(self.lanes))

    async def drain(self) -> None:
        for lane in self.lanes:
            await lane.drain()
