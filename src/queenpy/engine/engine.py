"""The :class:`Engine` of one broker process: fusion queues per operation type, long-poll waiters, and the
cross-process wake-ups through PostgreSQL LISTEN/NOTIFY."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from queenpy.engine.fusion import Decode, Fusion, LanedFusion, StaticLimit, VegasLimit, results_by_index
from queenpy.engine.longpoll import WaiterRegistry, backoff_ms
from queenpy.settings import Settings
from queenpy.store.database import Database

__all__ = [
    "NOTIFY_CHANNEL",
    "WAITING_CHANNEL",
    "Engine",
    "ack_results",
    "push_results",
    "transaction_results",
]

log = logging.getLogger("queenpy.engine")

NOTIFY_CHANNEL = "queen_message_available"

# Long-poll interest (see Engine.announce). A process with pops parked on a queue says so on WAITING_CHANNEL
# (payload {"queues": [name, ...]}) when the first one parks and every POP_WAIT_ANNOUNCE_INTERVAL_MS while
# any stays parked; the other processes NOTIFY the queue's pushes while they heard it within three
# intervals (plus one retry interval). A process that starts listening asks the others to say it again at
# once (payload {"probe": true}) and notifies every push for POP_WAIT_LISTEN_GRACE_MS meanwhile.
WAITING_CHANNEL = "queen_long_poll_waiting"
_PAYLOAD_BYTES = 7000  # PostgreSQL caps a NOTIFY payload at 8000 bytes

# operation type -> stored procedure (one JSONB batch in, one JSON array out)
_OPERATIONS = {
    "push": "push_items_v3",
    "pop": "pop_group_v1",
    "ack": "ack_v2",
    "renew_lease": "renew_lease_v1",
    "transaction": "transaction_v3",
}


def _partition_key(item: dict[str, Any]) -> str:
    return f"{item['queue']}/{item.get('partition') or 'Default'}"


def push_results(items: list[dict[str, Any]], text: str) -> list[Any]:
    """Expand ``queen.push_items_v3``'s answer (``[[position, status, message id, partition id], ...]``,
    status ``q``/``d``/``f``; 020_push.sql) into the per-item results of API.md section 4.1, in the items'
    order. The procedure returns only what the broker does not know: transaction_id is the item's
    transactionId, else the message id (the procedure's convention), trace_id and queueName are the item's
    own. PostgreSQL spent more CPU building these objects as jsonb than storing the message
    (benchmarks/RESULTS.md).
    """
    results: list[Any] = [None] * len(items)
    for position, status, message_id, partition_id in orjson.loads(text):
        item = items[position]
        transaction_id = item.get("transactionId") or message_id
        if status == "f":
            results[position] = {
                "index": position,
                "transaction_id": transaction_id,
                "status": "failed",
                "error": "queue full",
                "queueName": item["queue"],
            }
        else:
            results[position] = {
                "index": position,
                "transaction_id": transaction_id,
                "status": "queued" if status == "q" else "duplicate",
                "message_id": message_id,
                "partition_id": partition_id,
                "trace_id": item.get("traceId"),
                "queueName": item["queue"],
            }
    return results


def ack_results(items: list[dict[str, Any]], text: str) -> list[Any]:
    """Expand ``queen.ack_v2``'s compact answer (040_ack.sql) into the per-item results of API.md section 6.3,
    in the items' order: ``{"index", "transactionId", "queueName", "partitionName", "success", "error",
    "leaseReleased", "dlq"}``. An element ``[positions, queueName, partitionName, held, k]`` is a run of one
    partition and group acknowledged in one pass (the o-th position, 1-based, released the lease when o >= k;
    all failed with an invalid lease when not held); an object is one item's result as the procedure built it.
    Building those objects as jsonb cost PostgreSQL about 9 us an item (benchmarks/RESULTS.md)."""
    results: list[Any] = [None] * len(items)
    for entry in orjson.loads(text):
        if isinstance(entry, dict):
            position = entry.get("index")
            if isinstance(position, int) and 0 <= position < len(results):
                results[position] = entry
            continue
        positions, queue_name, partition_name, held, lease_end = entry
        for place, position in enumerate(positions, 1):
            item = items[position]
            result = {
                "index": item["index"],
                "transactionId": item.get("transactionId"),
                "queueName": queue_name,
                "partitionName": partition_name,
            }
            if held:
                result.update(success=True, error=None, leaseReleased=place >= lease_end, dlq=False)
            else:
                result.update(success=False, error="Invalid or expired lease")
            results[position] = result
    return results


def transaction_result(request: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """One client transaction's answer from ``queen.transaction_v3`` (022_group_commit.sql; the same answer
    as ``transaction_v2``, 040_ack.sql) as the response of API.md
    section 9: ``{"transactionId", "success", "results": [...], "error"?}``, one result per ack and per push
    item, numbered in that order; a failed transaction's results stop at its failing operation
    (``failedAt``). What the procedure does not answer comes from the request: an ack's result is its own
    transactionId, and ``dlq`` when its status was failed or dlq (a transaction sends those straight to the
    DLQ); a push's ids come from its run's ``push_items_v3`` answer. The same expansion in SQL is
    ``queen.transaction_results_v1`` (tests/integration/test_transactions.py compares the two)."""
    pushed: dict[int, list[Any]] = {}
    for start, entries in answer.get("pushes") or []:
        for entry in entries:
            pushed[start + entry[0]] = entry
    success = answer.get("success") is True
    end = None if success else int(answer.get("failedAt") or 0)
    results: list[dict[str, Any]] = []
    index = 0
    for op in request.get("operations", []):
        for item in (op.get("items") or []) if op.get("type") == "push" else [op]:
            if end is not None and index >= end:
                break
            if op.get("type") == "push":
                entry = pushed.get(index)
                message_id = entry[2] if entry else None
                results.append(
                    {
                        "index": index,
                        "type": "push",
                        "success": True,
                        "transactionId": item.get("transactionId") or message_id,
                        "messageId": message_id,
                        "partitionId": entry[3] if entry else None,
                        "queueName": item.get("queue"),
                    }
                )
            else:
                results.append(
                    {
                        "index": index,
                        "type": "ack",
                        "success": True,
                        "transactionId": item.get("transactionId"),
                        "error": None,
                        "dlq": item.get("status") in ("failed", "dlq"),
                    }
                )
            index += 1
    response: dict[str, Any] = {
        "transactionId": answer.get("transactionId"),
        "success": success,
        "results": results,
    }
    if not success:
        response["error"] = answer.get("error")
    return response


def transaction_results(requests: list[dict[str, Any]], text: str) -> list[Any]:
    """Expand ``queen.transaction_v3``'s answer (one per fused client transaction, in order) with
    :func:`transaction_result`."""
    return [transaction_result(request, answer) for request, answer in zip(requests, orjson.loads(text))]


# operation type -> most requests fused into one call (default: no cap). A group of client transactions runs
# each in a subtransaction, and each one that writes takes a transaction id of its own. PostgreSQL keeps 64 of
# them per backend in shared memory (PGPROC_MAX_CACHED_SUBXIDS, src/include/storage/proc.h); past that every
# snapshot taken by any session while the group runs must look its transaction ids up in pg_subtrans (the
# "subtransaction overflow" slowdown). So a group has at most 64 client transactions.
_MAX_REQUESTS = {"transaction": 64}

# operation type -> how its procedure's answer becomes one result per item (default: results_by_index)
_DECODERS: dict[str, Decode] = {"push": push_results, "ack": ack_results, "transaction": transaction_results}


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
                self.fusions[op] = LanedFusion(
                    op,
                    self._caller(procedure),
                    fusion_settings.max_batch_size,
                    fusion_settings.max_concurrent,
                    _partition_key,
                    _DECODERS["push"],
                )
                continue
            limit: StaticLimit | VegasLimit
            if settings.concurrency_mode == "vegas":
                limit = VegasLimit(
                    initial=max(1, fusion_settings.max_concurrent // 2),
                    min_limit=settings.vegas_min_limit,
                    max_limit=fusion_settings.max_concurrent,
                    alpha=settings.vegas_alpha,
                    beta=settings.vegas_beta,
                )
            else:
                limit = StaticLimit(fusion_settings.max_concurrent)
            self.fusions[op] = Fusion(
                op,
                self._caller(procedure),
                fusion_settings.max_batch_size,
                limit,
                fusion_settings.max_hold_ms,
                _DECODERS.get(op, results_by_index),
                max_batch_bytes=fusion_settings.max_batch_bytes,
                max_batch_requests=_MAX_REQUESTS.get(op, 0),
            )
        self._stream_cycles = asyncio.Semaphore(settings.fusion_for("streams_cycle").max_concurrent)
        self._notify_pending: set[str] = set()  # "<queue>/<partition>" to NOTIFY
        self._waiting_pending: set[str] = set()  # queues to announce on WAITING_CHANNEL
        self._probe_pending = False
        self._notify_task: asyncio.Task[None] | None = None
        # queue -> time.monotonic() until which another process is known to have pops parked on it
        self._remote_waiting: dict[str, float] = {}
        self._notify_all_until = 0.0  # and while not listening: notify every push
        self._announced: dict[str, float] = {}  # queue -> when this process last announced its waiters
        self._announce_interval_s = settings.pop_wait_announce_interval_ms / 1000.0
        # a parked pop renews at its next retry, at most pop_wait_max_interval_ms after the renewal was due
        self._waiting_ttl_s = 3 * self._announce_interval_s + settings.pop_wait_max_interval_ms / 1000.0
        self._next_prune = 0.0
        self.notifications_sent = 0
        self.notifications_skipped = 0
        self._subscriptions: dict[str, Callable[[str], None]] = {}
        self._on_connected: list[Callable[[], None]] = []

    def subscribe(
        self, channel: str, callback: Callable[[str], None], on_connected: Callable[[], None] | None = None
    ) -> None:
        """Also LISTEN on ``channel`` (``callback(payload)`` per notification from another process) on the
        engine's LISTEN connection; ``on_connected()`` runs whenever that connection is (re-)established,
        when notifications may have been missed. Call before :meth:`start`."""
        self._subscriptions[channel] = callback
        if on_connected is not None:
            self._on_connected.append(on_connected)

    def _caller(self, procedure: str) -> Any:
        async def call(payload: str) -> str:
            return await self.database.call(procedure, payload)

        return call

    async def start(self) -> None:
        """Subscribe to push notifications and long-poll interest from every broker process."""
        await self.database.listen(
            {
                NOTIFY_CHANNEL: self.waiters.wake_notification,
                WAITING_CHANNEL: self._on_waiting_notification,
                **self._subscriptions,
            },
            on_connected=self._on_listening,
        )

    @property
    def remote_waiting_queues(self) -> list[str]:
        """Queues on which another process has announced parked pops (within the TTL)."""
        now = time.monotonic()
        return sorted(queue for queue, until in self._remote_waiting.items() if until > now)

    async def stop(self) -> None:
        for fusion in self.fusions.values():
            await fusion.drain()
        if self._notify_task is not None:
            await asyncio.gather(self._notify_task, return_exceptions=True)

    def announce(self, keys: set[tuple[str, str]]) -> None:
        """Messages were committed on these (queue, partition)s: wake this process's long polls now, and
        the other processes' and brokers' through NOTIFY, coalesced while a NOTIFY is in flight.

        Only queues on which another process announced parked pops are notified (every queue while this
        process is not listening, and for POP_WAIT_LISTEN_GRACE_MS after it starts to). A NOTIFY costs a
        transaction, a signal to every listening backend and a message to every broker process: at 1 message
        per push request it cost ~25% of the push throughput of a two-worker broker (benchmarks/RESULTS.md).
        A pop that parks for the first time on a queue may miss the wake of a push committed in the
        instant before the other processes heard its announcement; its backoff timer delivers it then.
        """
        now = time.monotonic()
        everything = now < self._notify_all_until or not self.database.listening
        for queue, partition in keys:
            self.waiters.wake(queue, partition)
            if everything or self._remote_waiting.get(queue, 0.0) > now:
                self._notify_pending.add(f"{queue}/{partition}")
                self.notifications_sent += 1
            else:
                self.notifications_skipped += 1
        self._schedule_flush()

    def observe_calls(self, observer: Callable[[str, int, float], None]) -> None:
        """Call ``observer(operation type, items, seconds)`` after every fused procedure call."""
        for fusion in self.fusions.values():
            for part in fusion.lanes if isinstance(fusion, LanedFusion) else [fusion]:
                part.observer = observer

    def wake(self, queue: str, partition: str | None = None) -> None:
        """Wake the long polls of ``queue`` (one partition, or all) in every broker process, now (the
        operators' ``/internal/api/notify``); unlike :meth:`announce`, always NOTIFYs."""
        self.waiters.wake(queue, partition)
        self._notify_pending.add(f"{queue}/{partition or ''}")
        self.notifications_sent += 1
        self._schedule_flush()

    def _announce_waiting(self, queue: str) -> None:
        """A pop is parked on ``queue`` here: tell the other processes, unless done within the interval."""
        now = time.monotonic()
        last = self._announced.get(queue)
        if last is not None and last + self._announce_interval_s > now:
            return
        self._announced[queue] = now
        self._waiting_pending.add(queue)
        self._schedule_flush()

    def _on_waiting_notification(self, payload: str) -> None:
        """Another process announced parked pops (``{"queues": [...]}``) or asks for announcements
        (``{"probe": true}``)."""
        try:
            message = orjson.loads(payload)
            queues, probe = message.get("queues", []), message.get("probe") is True
        except (orjson.JSONDecodeError, AttributeError):
            queues, probe = None, False
        if not isinstance(queues, list):  # not JSON, not an object, or "queues" not a list
            log.warning("ignoring a malformed %s payload: %.100r", WAITING_CHANNEL, payload)
            return
        now = time.monotonic()
        if now >= self._next_prune:  # forget queues nobody waits on any more
            self._next_prune = now + self._waiting_ttl_s
            self._remote_waiting = {q: until for q, until in self._remote_waiting.items() if until > now}
            self._announced = {
                q: at for q, at in self._announced.items() if at + self._announce_interval_s > now
            }
        until = now + self._waiting_ttl_s
        for queue in queues:
            if isinstance(queue, str):
                self._remote_waiting[queue] = until
        if probe:
            self._announce_all_waiting()

    def _on_listening(self) -> None:
        """LISTEN is (re-)established: announcements made meanwhile were missed, so ask for them again
        and notify every push until the answers are in."""
        self._notify_all_until = time.monotonic() + self.settings.pop_wait_listen_grace_ms / 1000.0
        for on_connected in self._on_connected:
            on_connected()
        self._probe_pending = True
        self._announce_all_waiting()
        self._schedule_flush()

    def _announce_all_waiting(self) -> None:
        """Announce every queue with parked pops here now, whenever each was last announced."""
        self._announced.clear()
        for queue in self.waiters.queues():
            self._announce_waiting(queue)

    def _schedule_flush(self) -> None:
        if not (self._notify_pending or self._waiting_pending or self._probe_pending):
            return
        if self._notify_task is None or self._notify_task.done():
            self._notify_task = asyncio.get_running_loop().create_task(self._flush_notifications())

    async def _flush_notifications(self) -> None:
        while self._notify_pending or self._waiting_pending or self._probe_pending:
            notifications = [(NOTIFY_CHANNEL, payload) for payload in sorted(self._notify_pending)]
            notifications += [
                (WAITING_CHANNEL, payload)
                for payload in _waiting_payloads(sorted(self._waiting_pending), self._probe_pending)
            ]
            self._notify_pending, self._waiting_pending, self._probe_pending = set(), set(), False
            try:
                await self.database.notify(notifications)
            except Exception as exc:  # noqa: BLE001 - other processes fall back to their poll timer
                log.warning("NOTIFY failed (other processes will poll): %s", exc)

    async def push(self, items: list[dict[str, Any]]) -> list[Any]:
        """Fused push; announces every queue/partition that got a message (see :meth:`announce`)."""
        results = await self.fusions["push"].submit(items)
        keys = {
            (item["queue"], item.get("partition") or "Default")
            for item, result in zip(items, results)
            if isinstance(result, dict) and result.get("status") == "queued"
        }
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

    async def transaction(self, request: dict[str, Any], size_bytes: int = 0) -> dict[str, Any]:
        """A client transaction ``{"operations": [...], "requiredLeases"?: [...]}`` (API.md section 9), fused
        with the others that arrive while one is in flight into one PostgreSQL transaction
        (``queen.transaction_v3``: group commit, set-based for a group of recipe-shaped members and each
        client transaction in its own subtransaction otherwise, so it commits or fails on its own). A group
        is capped by operations (``QUEEN_TRANSACTION_MAX_BATCH_SIZE``) and by ``size_bytes`` (the request's
        size; ``QUEEN_TRANSACTION_MAX_BATCH_BYTES``).

        Returns the response of API.md section 9 (``success`` false with this transaction's own ``error``
        when it failed). Raises what the procedure call raised (connection lost, a terminated backend,
        statement timeout): then every client transaction of the group is rolled back, none half-applied.
        After COMMIT, wakes the long polls of the partitions it pushed to."""
        weight = sum(
            len(op.get("items") or []) if op.get("type") == "push" else 1
            for op in request.get("operations", [])
        )
        results = await self.fusions["transaction"].submit([request], weight=weight, size_bytes=size_bytes)
        result: dict[str, Any] = results[0]
        if result.get("success"):
            keys = {
                (item["queue"], item.get("partition") or "Default")
                for op in request.get("operations", [])
                if op.get("type") == "push"
                for item in op.get("items", [])
            }
            if keys:
                self.announce(keys)
        return result

    async def stream_cycle(self, request: dict[str, Any]) -> dict[str, Any]:
        """A Queen Streams cycle (``queen.streams_cycle_v1``: state ops, source ack and sink pushes in one
        PostgreSQL transaction). Never fused with another one; at most ``QUEEN_STREAMS_CYCLE_MAX_CONCURRENT``
        in flight per process. After COMMIT, wakes the long polls of every sink partition that got a message
        (see :meth:`announce`). Returns the procedure's result without its ``touched`` list."""
        async with self._stream_cycles:
            text = await self.database.call("streams_cycle_v1", orjson.dumps(request).decode())
        result: dict[str, Any] = orjson.loads(text)
        touched = result.pop("touched", None) or []
        if touched:
            self.announce({(queue, partition) for queue, partition in touched})
        return result

    async def long_poll(
        self,
        request: dict[str, Any],
        timeout_ms: int,
        wait: bool,
        disconnected: Callable[[], Awaitable[bool]] | None = None,
    ) -> dict[str, Any]:
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
        waiter = self.waiters.register(
            request["queue"], request.get("partition"), request.get("consumerGroup")
        )
        self._announce_waiting(request["queue"])
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
                self._announce_waiting(request["queue"])  # renewed while the pop stays parked
                delay = (
                    backoff_ms(
                        attempt,
                        settings.pop_wait_initial_interval_ms,
                        settings.pop_wait_backoff_threshold,
                        settings.pop_wait_backoff_multiplier,
                        settings.pop_wait_max_interval_ms,
                    )
                    / 1000.0
                )
                try:
                    await asyncio.wait_for(waiter.event.wait(), timeout=min(delay, remaining))
                    attempt = 0  # woken by a push: start the schedule over
                except TimeoutError:
                    pass
        finally:
            self.waiters.unregister(waiter)
        return {
            "success": True,
            "queue": request["queue"],
            "partition": request.get("partition") or "",
            "partitionId": None,
            "leaseId": None,
            "consumerGroup": request.get("consumerGroup"),
            "messages": [],
        }


def _waiting_payloads(queues: list[str], probe: bool) -> list[str]:
    """WAITING_CHANNEL payloads announcing ``queues`` (and a probe): JSON, each under _PAYLOAD_BYTES."""
    payloads: list[str] = []
    chunk: list[str] = []
    size = 0
    for queue in queues:
        length = (
            len(orjson.dumps(queue)) + 1
        )  # a name is at most 255 characters, escaped at most 6 bytes each
        if chunk and size + length > _PAYLOAD_BYTES:
            payloads.append(orjson.dumps({"queues": chunk}).decode())
            chunk, size = [], 0
        chunk.append(queue)
        size += length
    if chunk or probe:
        payloads.append(
            orjson.dumps({"queues": chunk, "probe": True} if probe else {"queues": chunk}).decode()
        )
    return payloads
