"""``AsyncQueen``: the asyncio client of the Queen HTTP API v1 (API.md; the grammar of ``queen-mq`` 0.15)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self, overload
from urllib.parse import quote

import httpx

from queenpy.errors import BrokerError, QueenError

from ._admin import AdminCalls
from ._buffering import PushBuffers
from ._builders import QueueBuilder, TransactionBuilder
from ._consumer import ConsumeOptions, Consumer
from ._failover import FailoverTransport
from ._messages import (
    QUEUE_MODE_GROUP,
    AckResult,
    DeadLetter,
    LeaseRenewal,
    Message,
    PushResult,
    parse_timestamp,
)
from ._settings import RetryPolicy, Timeout
from ._signals import SignalGuard
from ._wire import (
    AckableMessage,
    ErrorHandler,
    Handler,
    StopSignal,
    SuccessHandler,
    ack_status,
    expect_object,
    format_timestamp,
    message_reference,
)

__all__ = ["DEFAULT_URL", "AsyncQueen"]

logger = logging.getLogger("queenpy.client")

#: Where the broker listens by default (``queenpy serve``).
DEFAULT_URL = "http://localhost:6632"

#: Pop answers that mean "nothing for you right now", not an error (API.md §5.3).
_EMPTY_POP_ERRORS = frozenset({"no_available_partition", "partition_not_found", "lease_held"})


def _q(value: str) -> str:
    return quote(value, safe="")


class AsyncQueen(AdminCalls):
    """Client of one Queen broker, or of several with failover.

    Args:
        urls: one base URL or a list (``["http://a:6632", "http://b:6632"]``); a request goes to the URL that
            answered last and moves to the next on a connection error or a 5xx.
        token: bearer token (JWT) sent with every request.
        timeout: :class:`Timeout` (seconds); long polls wait ``timeout_millis`` + 5 s.
        retry: :class:`RetryPolicy` for rounds over all URLs (default 3 rounds, 1 s, 2 s backoff).
        headers: extra HTTP headers.
        transport: an ``httpx`` async transport, for tests (``httpx.MockTransport``, ``httpx.ASGITransport``).

    Nothing connects until the first request. Use ``async with AsyncQueen(...) as q`` or ``await q.close()``
    (which stops consumers and flushes push buffers first).
    """

    def __init__(
        self,
        urls: str | Sequence[str] = DEFAULT_URL,
        *,
        token: str | None = None,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._transport = FailoverTransport(
            urls, token=token, timeout=timeout, retry=retry, headers=headers, transport=transport
        )
        self._buffers = PushBuffers(self._push)
        self._lease_times: dict[str, int] = {}
        self._consumers: set[Consumer] = set()
        self._signal_guard: SignalGuard | None = None
        self._signal_users = 0
        self._closed = False
        self._transport_closed = False

    @property
    def urls(self) -> list[str]:
        """The broker base URLs, in failover order."""
        return list(self._transport.urls)

    # -- fluent entry points ---------------------------------------------------------------------------

    def queue(self, name: str | None = None) -> QueueBuilder:
        """Builder for queue ``name``: ``config/create/delete``, ``push``, ``pop``, ``consume``, ``dlq``.
        ``name`` may be omitted for a namespace/task pop (``q.queue().namespace("billing").pop()``)."""
        return QueueBuilder(self, name)

    def transaction(self) -> TransactionBuilder:
        """Builder for an atomic set of acks and pushes, ended by ``commit()``."""
        return TransactionBuilder(self)

    # -- ack and lease ---------------------------------------------------------------------------------

    @overload
    async def ack(
        self,
        message: AckableMessage,
        status: bool | str = ...,
        *,
        group: str | None = ...,
        error: str | None = ...,
    ) -> AckResult: ...

    @overload
    async def ack(
        self,
        message: Sequence[AckableMessage],
        status: bool | str = ...,
        *,
        group: str | None = ...,
        error: str | None = ...,
    ) -> list[AckResult]: ...

    async def ack(
        self,
        message: AckableMessage | Sequence[AckableMessage],
        status: bool | str = True,
        *,
        group: str | None = None,
        error: str | None = None,
    ) -> AckResult | list[AckResult]:
        """Acknowledge one message (``POST /api/v1/ack``) or a list (``POST /api/v1/ack/batch``).

        Args:
            message: a :class:`Message`, a wire dict with ``transactionId``/``partitionId``, or a list.
            status: ``True`` = completed, ``False`` = failed (redelivery, DLQ after ``retryLimit``), or a
                status string (``completed``, ``failed``, ``retry``, ``dlq``).
            group: consumer group; default: the group each message was delivered to.
            error: error text stored with a failed message in the DLQ.

        Returns:
            one :class:`AckResult`, or a list in input order. A refused ack (``Message not found``,
            ``Invalid or expired lease``) has ``success=False``; it does not raise.

        Raises:
            ValueError: a message without transaction or partition id. InvalidRequest: the broker refused the
            request. DatabaseUnavailable: no broker reachable.
        """
        status_text = ack_status(status)
        if isinstance(message, Sequence) and not isinstance(message, (str, Mapping)):
            return await self._ack_batch(list(message), status_text, group, error)
        transaction_id, partition_id, lease_id, message_group = message_reference(message)
        body: dict[str, Any] = {
            "transactionId": transaction_id,
            "partitionId": partition_id,
            "status": status_text,
            "error": error,
            "consumerGroup": group or message_group or QUEUE_MODE_GROUP,
        }
        if lease_id:
            body["leaseId"] = lease_id
        result = await self._call("POST", "/api/v1/ack", body=body)
        if isinstance(result, list) and result and isinstance(result[0], Mapping):
            return AckResult.from_wire(result[0], transaction_id)
        if isinstance(result, Mapping):
            if result.get("error"):
                return AckResult(transaction_id, False, str(result["error"]))
            return AckResult.from_wire(result, transaction_id)
        return AckResult(transaction_id, result is None)

    async def _ack_batch(
        self, messages: list[AckableMessage], status: str, group: str | None, error: str | None
    ) -> list[AckResult]:
        if not messages:
            return []
        by_group: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for position, message in enumerate(messages):
            transaction_id, partition_id, lease_id, message_group = message_reference(message)
            item: dict[str, Any] = {
                "transactionId": transaction_id,
                "partitionId": partition_id,
                "status": status,
                "error": error,
            }
            if lease_id:
                item["leaseId"] = lease_id
            by_group.setdefault(group or message_group or QUEUE_MODE_GROUP, []).append((position, item))
        results: list[AckResult | None] = [None] * len(messages)
        for consumer_group, items in by_group.items():
            body = {"acknowledgments": [item for _, item in items], "consumerGroup": consumer_group}
            answer = await self._call("POST", "/api/v1/ack/batch", body=body)
            for offset, (position, item) in enumerate(items):
                if isinstance(answer, list) and offset < len(answer) and isinstance(answer[offset], Mapping):
                    results[position] = AckResult.from_wire(answer[offset], item["transactionId"])
                elif isinstance(answer, Mapping) and answer.get("error"):
                    results[position] = AckResult(item["transactionId"], False, str(answer["error"]))
                else:
                    results[position] = AckResult(item["transactionId"], False, "no result from broker")
        return [result for result in results if result is not None]

    # a str is also a Sequence[str]; here it is one lease id
    @overload
    async def renew(self, lease: str | AckableMessage, seconds: int = ...) -> LeaseRenewal: ...  # type: ignore[overload-overlap]

    @overload
    async def renew(
        self, lease: Sequence[str | AckableMessage], seconds: int = ...
    ) -> list[LeaseRenewal]: ...

    async def renew(
        self, lease: str | AckableMessage | Sequence[str | AckableMessage], seconds: int = 60
    ) -> LeaseRenewal | list[LeaseRenewal]:
        """Extend a lease by ``seconds`` from now (``POST /api/v1/lease/<id>/extend`` with
        ``{"seconds": N}``).

        ``lease`` is a lease id, a message (its lease), or a list of those (answered with a list, one entry
        per distinct lease). Leases are never shortened and expired ones cannot be renewed: such a renewal
        has ``success=False`` (``Lease not found``, ``Lease already expired``).

        Raises:
            ValueError: no lease id found. DatabaseUnavailable: no broker reachable.
        """
        many = isinstance(lease, Sequence) and not isinstance(lease, (str, Mapping))
        items: list[str | AckableMessage] = (
            list(lease) if isinstance(lease, Sequence) and not isinstance(lease, (str, Mapping)) else [lease]
        )
        lease_ids: list[str] = []
        for item in items:
            lease_id = item if isinstance(item, str) else message_reference(item)[2]
            if lease_id and lease_id not in lease_ids:
                lease_ids.append(lease_id)
        if not lease_ids:
            raise ValueError("no lease id to renew (messages popped with auto-ack hold no lease)")
        renewals = []
        for lease_id in lease_ids:
            answer = await self._call(
                "POST", f"/api/v1/lease/{_q(lease_id)}/extend", body={"seconds": int(seconds)}
            )
            row = answer[0] if isinstance(answer, list) and answer else answer
            if isinstance(row, Mapping):
                expires = row.get("expiresAt") or row.get("newExpiresAt") or row.get("lease_expires_at")
                success = bool(row.get("success", not row.get("error")))
                renewals.append(
                    LeaseRenewal(lease_id, success, parse_timestamp(expires), row.get("error") or None)
                )
            else:
                renewals.append(LeaseRenewal(lease_id, False, None, "empty answer"))
        return renewals if many else renewals[0]

    # -- push buffers ----------------------------------------------------------------------------------

    async def flush_all_buffers(self) -> None:
        """Send every client-side push buffer now and wait for sends in progress.

        Raises:
            QueenError: a batch was refused, now or in an earlier background send (its items stay buffered).
        """
        await self._buffers.flush_all()

    def buffer_stats(self) -> dict[str, int]:
        """``{"pending": items waiting in push buffers, "batches_sent": batches sent so far}``."""
        return {"pending": self._buffers.pending(), "batches_sent": self._buffers.batches_sent}

    # -- consumer groups ---------------------------------------------------------------------------------

    async def consumer_groups(self) -> list[dict[str, Any]]:
        """One row per (group, queue): ``{name, queueName, members, partitionsWithLag, maxTimeLag, state,
        subscriptionMode, ...}`` (``GET /api/v1/consumer-groups``)."""
        return _expect_list(await self._call("GET", "/api/v1/consumer-groups"), "consumer groups")

    async def consumer_group(self, name: str) -> dict[str, Any]:
        """Per-queue, per-partition detail of group ``name``: ``{queue: {"partitions": [{partition, offsetLag,
        timeLagSeconds, leaseActive, ...}]}}``; ``{}`` for an unknown group."""
        result = await self._call("GET", f"/api/v1/consumer-groups/{_q(name)}")
        return {} if result is None else expect_object(result, "consumer group")

    async def lagging_consumer_groups(self, min_lag_s: int = 3600) -> list[dict[str, Any]]:
        """Partitions whose oldest unconsumed message is older than ``min_lag_s`` seconds, worst first."""
        result = await self._call(
            "GET", "/api/v1/consumer-groups/lagging", params={"minLagSeconds": str(int(min_lag_s))}
        )
        return _expect_list(result, "lagging consumer groups")

    async def delete_consumer_group(
        self, name: str, *, delete_metadata: bool = True, queue: str | None = None
    ) -> dict[str, Any]:
        """Delete group ``name``'s cursors (of one ``queue`` or all) and, by default, its subscription."""
        path = f"/api/v1/consumer-groups/{_q(name)}"
        if queue:
            path += f"/queues/{_q(queue)}"
        params = {"deleteMetadata": "true" if delete_metadata else "false"}
        result = await self._call("DELETE", path, params=params)
        return {"success": True} if result is None else expect_object(result, "delete consumer group")

    async def seek(
        self,
        group: str,
        queue: str,
        *,
        to_end: bool = False,
        timestamp: datetime | str | None = None,
        partition: str | None = None,
    ) -> dict[str, Any]:
        """Move group ``group``'s cursors on ``queue``: to the newest message (``to_end``) or to just before
        the first message created after ``timestamp``. With ``partition`` only that partition, to its end.

        Raises:
            ValueError: not exactly one of ``to_end`` / ``timestamp``. BrokerError: the broker refused.
        """
        if partition is not None:
            if timestamp is not None:
                raise ValueError("a partition seek can only go to the end")
            path = f"/api/v1/consumer-groups/{_q(group)}/queues/{_q(queue)}/partitions/{_q(partition)}/seek"
            return expect_object(await self._call("POST", path, body={}), "seek")
        if to_end == (timestamp is not None):
            raise ValueError("give exactly one of to_end=True or timestamp=...")
        body: dict[str, Any] = {"toEnd": True} if to_end else {"timestamp": format_timestamp(timestamp)}  # type: ignore[arg-type]
        path = f"/api/v1/consumer-groups/{_q(group)}/queues/{_q(queue)}/seek"
        return expect_object(await self._call("POST", path, body=body), "seek")

    async def update_consumer_group_timestamp(self, group: str, timestamp: datetime | str) -> dict[str, Any]:
        """Set where group ``group`` starts on partitions it has not read yet (``.../subscription``)."""
        path = f"/api/v1/consumer-groups/{_q(group)}/subscription"
        result = await self._call("POST", path, body={"subscriptionTimestamp": format_timestamp(timestamp)})
        return {"success": True} if result is None else expect_object(result, "subscription update")

    # -- dead-letter queue, queues, health ----------------------------------------------------------------

    async def replay_dlq(
        self, message: DeadLetter | Message | str, transaction_id: str | None = None
    ) -> dict[str, Any]:
        """Put a dead-lettered message back at the head of its partition for its group
        (``POST /api/v1/messages/<partitionId>/<transactionId>/retry``).

        ``message`` is a :class:`DeadLetter` (or :class:`Message`), or a partition id with ``transaction_id``.

        Raises:
            ValueError: a partition id without transaction id. BrokerError: the broker refused.
        """
        if isinstance(message, str):
            if not transaction_id:
                raise ValueError("replay_dlq(partition_id, transaction_id) needs both ids")
            partition_id = message
        else:
            partition_id, transaction_id = message.partition_id, message.transaction_id
        path = f"/api/v1/messages/{_q(partition_id)}/{_q(transaction_id)}/retry"
        result = await self._call("POST", path, body={})
        return {"success": True} if result is None else expect_object(result, "dlq replay")

    async def queues(self) -> list[dict[str, Any]]:
        """All queues: ``[{id, name, namespace, task, createdAt, partitions, messages: {total, pending,
        processing}}]`` (``GET /api/v1/resources/queues``; counts may lag a few seconds)."""
        result = await self._call("GET", "/api/v1/resources/queues")
        if result is None:
            return []
        return _expect_list(expect_object(result, "queues").get("queues") or [], "queues")

    async def describe_queue(self, name: str) -> dict[str, Any]:
        """One queue with per-partition stats: ``{name, partitions: [{name, stats: {total, pending,
        processing, completed, failed, deadLetter}, ...}], totals: {...}}``.

        Raises:
            BrokerError: unknown queue (``Queue not found``).
        """
        return expect_object(await self._call("GET", f"/api/v1/resources/queues/{_q(name)}"), "queue")

    async def health(self) -> dict[str, Any]:
        """The broker's ``/health`` answer (``{status, database, ...}``). Raises DatabaseUnavailable on
        503."""
        result = await self._call("GET", "/health")
        return result if isinstance(result, dict) else {"status": str(result)}

    # -- lifecycle -----------------------------------------------------------------------------------------

    def stop_consumers(self) -> None:
        """Ask every running ``consume()`` of this client to finish its in-flight handlers and return.
        Must be called on the client's event loop (from another thread use ``loop.call_soon_threadsafe``)."""
        for consumer in list(self._consumers):
            consumer.stop()

    async def close(self) -> None:
        """Stop consumers (waiting for their in-flight handlers), flush push buffers, close connections.

        Raises:
            QueenError: flushing a push buffer failed (connections are closed anyway).
        """
        if self._closed:
            return
        self._closed = True
        self.stop_consumers()
        await asyncio.gather(*(consumer.done.wait() for consumer in list(self._consumers)))
        try:
            await self._buffers.flush_all()
        finally:
            self._transport_closed = True
            await self._transport.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncQueen({self._transport.urls!r})"

    # -- internals used by the builders -----------------------------------------------------------------

    async def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        read_timeout_s: float | None = None,
        idempotent: bool = True,
    ) -> Any:
        if self._transport_closed:
            raise QueenError("this client is closed")
        return await self._transport.request(
            method, path, params=params, body=body, read_timeout_s=read_timeout_s, idempotent=idempotent
        )

    async def _push(self, items: list[dict[str, Any]]) -> list[PushResult]:
        """Send wire push items in one request; results by position."""
        result = await self._call("POST", "/api/v1/push", body={"items": items})
        if isinstance(result, list):
            return [
                PushResult.from_wire(answer if isinstance(answer, Mapping) else {}, sent)
                for answer, sent in zip(result, items)
            ]
        if isinstance(result, Mapping) and result.get("error"):
            raise BrokerError(str(result["error"]), answer=dict(result))
        if result is None and not items:
            return []
        raise BrokerError(f"unexpected push answer: {result!r}"[:300])

    async def _pop(
        self, options: ConsumeOptions, *, batch: int, wait: bool, timeout_millis: int, server_auto_ack: bool
    ) -> list[Message]:
        """One pop request; ``[]`` for every "nothing now" answer."""
        params = options.pop_params(
            batch=batch, wait=wait, timeout_millis=timeout_millis, server_auto_ack=server_auto_ack
        )
        read_timeout = self._transport.timeout.for_long_poll(timeout_millis) if wait else None
        result = await self._call("GET", options.pop_path(), params=params, read_timeout_s=read_timeout)
        if not isinstance(result, Mapping):
            return []
        raw = result.get("messages")
        if not raw:
            error = result.get("error")
            if error and result.get("success") is False and error not in _EMPTY_POP_ERRORS:
                raise BrokerError(str(error), answer=dict(result))
            return []
        queue = str(result.get("queue") or options.queue or "")
        group = result.get("consumerGroup") or options.group or QUEUE_MODE_GROUP
        return [
            Message.from_wire(item, queue=queue, consumer_group=str(group))
            for item in raw
            if isinstance(item, Mapping)
        ]

    async def _consume(
        self,
        options: ConsumeOptions,
        handler: Handler,
        on_error: ErrorHandler | None,
        on_success: SuccessHandler | None,
        stop: StopSignal | None,
    ) -> int:
        if self._closed:
            raise QueenError("this client is closed")
        consumer = Consumer(self, options, handler, on_error, on_success, stop)
        self._consumers.add(consumer)
        self._enter_signal_scope()
        try:
            return await consumer.run()
        finally:
            self._consumers.discard(consumer)
            self._exit_signal_scope()

    def _enter_signal_scope(self) -> None:
        if self._signal_users == 0:
            loop = asyncio.get_running_loop()

            def on_signal() -> bool:
                if not self._consumers:
                    return False
                loop.call_soon_threadsafe(self.stop_consumers)
                return True

            self._signal_guard = SignalGuard(on_signal).__enter__()
        self._signal_users += 1

    def _exit_signal_scope(self) -> None:
        self._signal_users -= 1
        if self._signal_users == 0 and self._signal_guard is not None:
            self._signal_guard.__exit__(None, None, None)
            self._signal_guard = None

    async def _fetch_lease_time(self, queue: str) -> int | None:
        """The queue's ``leaseTime`` in seconds as the broker reports it (``options.leaseTime`` of
        ``GET /api/v1/resources/queues/<q>``, else ``queue.config.leaseTime`` of
        ``/api/v1/status/queues/<q>``), or None if neither says."""
        for path, keys in (
            (f"/api/v1/resources/queues/{_q(queue)}", ("options", "leaseTime")),
            (f"/api/v1/status/queues/{_q(queue)}", ("queue", "config", "leaseTime")),
        ):
            try:
                value: Any = await self._call("GET", path)
                for key in keys:
                    value = value[key]
            except (QueenError, KeyError, TypeError, IndexError):
                continue
            if isinstance(value, int) and not isinstance(value, bool):
                self._lease_times[queue] = value or 60
                return self._lease_times[queue]
        return None


def _expect_list(result: Any, what: str) -> list[dict[str, Any]]:
    if result is None:
        return []
    if isinstance(result, list):
        return [dict(row) for row in result if isinstance(row, Mapping)]
    if isinstance(result, Mapping) and result.get("error"):
        raise BrokerError(str(result["error"]), answer=dict(result))
    raise BrokerError(f"unexpected answer to {what}: {result!r}"[:300])
