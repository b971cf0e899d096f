"""The fusion engine of one broker process: fusion queues per operation type, long-poll waiters.

``server`` submits validated items here and awaits their results; this layer turns them into procedure
calls through ``store``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from queenpy.engine.fusion import Fusion, LanedFusion, StaticLimit, VegasLimit
from queenpy.engine.longpoll import WaiterRegistry, backoff_ms
from queenpy.settings import Settings
from queenpy.store.database import Database

__all__ = ["NOTIFY_CHANNEL", "Engine", "Fusion", "LanedFusion", "StaticLimit", "VegasLimit", "WaiterRegistry", "backoff_ms"]

log = logging.getLogger("queenpy.engine")

NOTIFY_CHANNEL = "queen_message_available"

# operation type -> stored procedure (one JSONB batch in, one JSONB array out)
_OPERATIONS = {
    "push": "push_items_v2",
    "pop": "pop_v1",
    "ack": "ack_v1",
    "renew_lease": "renew_lease_v1",
}


def _partition_key(item: dict[str, Any]) -> str:
    return f"{item['queue']}/{item.get('partition') or 'Default'}"


class Engine:
    """Fusion queues and long-poll waiters of one process, over one :class:`Database`."""

    def __init__(self, database: Database, settings: Settings) -> None:
        self.database = database
        self.settings = settings
        self.waiters = WaiterRegistry()
        self.fusions: dict[str, Fusion | LanedFusion] = {}
        for op, procedure in _OPERATIONS.items():
            fusion_settings = settings.fusion_for(op)
            if op == "push":
                # one lane per allowed call in flight; see LanedFusion for why pushes are laned
                self.fusions[op] = LanedFusion(op, self._caller(procedure), fusion_settings.max_batch_size,
                                               fusion_settings.max_concurrent, _partition_key)
                continue
            limit: StaticLimit | VegasLimit
            if settings.concurrency_mode == "vegas":
                limit = VegasLimit(initial=max(1, fusion_settings.max_concurrent // 2),
                                   min_limit=settings.vegas_min_limit,
                                   max_limit=fusion_settings.max_concurrent,
                                   alpha=settings.vegas_alpha, beta=settings.vegas_beta)
            else:
                limit = StaticLimit(fusion_settings.max_concurrent)
            self.fusions[op] = Fusion(op, self._caller(procedure), fusion_settings.max_batch_size, limit,
                                      fusion_settings.max_hold_ms)
        self._transactions = asyncio.Semaphore(settings.fusion_for("transaction").max_concurrent)
        self._notify_pending: set[str] = set()
        self._notify_task: asyncio.Task[None] | None = None

    def _caller(self, procedure: str) -> Any:
        async def call(payload: str) -> str:
            return await self.database.call(procedure, payload)

        return call

    async def start(self) -> None:
        """Subscribe to push notifications from every broker process."""
        await self.database.listen(NOTIFY_CHANNEL, self.waiters.wake_notification)

    async def stop(self) -> None:
        for fusion in self.fusions.values():
            await fusion.drain()
        if self._notify_task is not None:
            await asyncio.gather(self._notify_task, return_exceptions=True)

    def announce(self, keys: set[tuple[str, str]]) -> None:
        """Messages were committed on these (queue, partition)s: wake this process's long polls now, and
        the other processes' and brokers' through NOTIFY, coalesced while a NOTIFY is in flight."""
        for key in keys:
            self.waiters.wake(*key)
        self._notify_pending.update(f"{queue}/{partition}" for queue, partition in keys)
        if self._notify_task is None or self._notify_task.done():
            self._notify_task = asyncio.get_running_loop().create_task(self._flush_notifications())

    async def _flush_notifications(self) -> None:
        while self._notify_pending:
            payloads, self._notify_pending = sorted(self._notify_pending), set()
            try:
                await self.database.notify(NOTIFY_CHANNEL, payloads)
            except Exception as exc:  # noqa: BLE001 - other processes fall back to their poll timer
                log.warning("NOTIFY failed (other processes will poll): %s", exc)

    async def push(self, items: list[dict[str, Any]]) -> list[Any]:
        """Fused push; announces every queue/partition that got a message (see :meth:`announce`)."""
        results = await self.fusions["push"].submit(items)
        keys = {(item["queue"], item.get("partition") or "Default")
                for item, result in zip(items, results)
                if isinstance(result, dict) and result.get("status") == "queued"}
        if keys:
            self.announce(keys)
        return results

    async def pop(self, request: dict[str, Any]) -> dict[str, Any]:
        """One fused pop attempt (no waiting)."""
        results = await self.fusions["pop"].submit([request])
        return results[0] or {"success": False, "error": "no result"}

    async def ack(self, items: list[dict[str, Any]]) -> list[Any]:
        return await self.fusions["ack"].submit(items)

    async def renew_lease(self, items: list[dict[str, Any]]) -> list[Any]:
        return await self.fusions["renew_lease"].submit(items)

    async def transaction(self, request: dict[str, Any]) -> dict[str, Any]:
        """A client transaction: never fused with another one (one PostgreSQL transaction each)."""
        async with self._transactions:
            text = await self.database.call("transaction_v1", orjson.dumps(request).decode())
        result: dict[str, Any] = orjson.loads(text)
        if result.get("success"):
            keys = {(item["queue"], item.get("partition") or "Default")
                    for op in request.get("operations", []) if op.get("type") == "push"
                    for item in op.get("items", [])}
            if keys:
                self.announce(keys)
        return result

    async def long_poll(self, request: dict[str, Any], timeout_ms: int, wait: bool,
                        disconnected: Callable[[], Awaitable[bool]] | None = None) -> dict[str, Any]:
        """Pop, and with ``wait`` park until messages arrive or ``timeout_ms`` passes.

        ``disconnected`` is checked before every attempt after the first: a client that went away never
        gets a lease taken on its behalf. Returns the pop result; on timeout (or disconnect) Queen's
        long-poll timeout body (API.md 5.3).
        """
        if not wait:
            return await self.pop(request)
        settings = self.settings
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000.0
        waiter = self.waiters.register(request["queue"], request.get("partition"), request.get("consumerGroup"))
        attempt = 0  # consecutive empty attempts: drives the backoff
        tries = 0
        try:
            while True:
                waiter.event.clear()
                if tries and disconnected is not None and await disconnected():
                    break
                tries += 1
                result = await self.pop(request)
                if result.get("messages"):
                    return result
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                attempt += 1
                delay = backoff_ms(attempt, settings.pop_wait_initial_interval_ms,
                                   settings.pop_wait_backoff_threshold, settings.pop_wait_backoff_multiplier,
                                   settings.pop_wait_max_interval_ms) / 1000.0
                try:
                    await asyncio.wait_for(waiter.event.wait(), timeout=min(delay, remaining))
                    attempt = 0  # woken by a push: start the schedule over
                except TimeoutError:
                    pass
        finally:
            self.waiters.unregister(waiter)
        return {"success": True, "queue": request["queue"], "partition": request.get("partition") or "",
                "partitionId": None, "leaseId": None, "consumerGroup": request.get("consumerGroup"),
                "messages": []}
