"""Queen's fluent grammar: ``q.queue(name)...push/pop/consume``, ``q.transaction()...commit()``, DLQ reads.

Builders collect options and end in one coroutine (``create``, ``delete``, ``push``, ``pop``, ``consume``,
``get``, ``commit``). Names follow the reference client ``queen-mq`` 0.15 in snake_case; durations carry their
unit in the name (``idle_millis``, ``timeout_millis``, ``lease_time_s``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from queenpy.errors import BrokerError, TransactionFailed

from ._buffering import BufferOptions
from ._consumer import ConsumeOptions
from ._messages import QUEUE_MODE_GROUP, DeadLetter, DeadLetterPage, Message, PushResult
from ._wire import (
    AckableMessage,
    ErrorHandler,
    Handler,
    StopSignal,
    SuccessHandler,
    ack_status,
    camel_case,
    expect_object,
    format_push_item,
    format_timestamp,
    message_reference,
)

if TYPE_CHECKING:
    from ._async import AsyncQueen

__all__ = [
    "DeadLetterBuilder",
    "Fluent",
    "QueueBuilder",
    "TransactionBuilder",
    "TransactionQueueBuilder",
]


class Fluent:
    """Marker base of every builder: the sync facade wraps objects of this type in a blocking proxy."""

    __slots__ = ()


class QueueBuilder(Fluent):
    """Options for one queue; end with ``create``/``delete``/``push``/``pop``/``consume``/``dlq(...).get``.

    Made by :meth:`AsyncQueen.queue`. Every option method returns the builder itself.
    """

    __slots__ = ("_buffer", "_client", "_config", "_name", "_options", "_partition")

    def __init__(self, client: AsyncQueen, name: str | None) -> None:
        self._client = client
        self._name = name
        self._partition: str | None = None
        self._config: dict[str, Any] = {}
        self._buffer: BufferOptions | None = None
        self._options = ConsumeOptions()
        self._options.queue = name

    # -- configuration -------------------------------------------------------------------------------

    def namespace(self, name: str) -> QueueBuilder:
        """Namespace stored with the queue on ``create()``, or selects queues for a namespace pop."""
        self._options.namespace = name
        return self

    def task(self, name: str) -> QueueBuilder:
        """Task stored with the queue on ``create()``, or selects queues for a task pop."""
        self._options.task = name
        return self

    def config(self, options: Mapping[str, Any]) -> QueueBuilder:
        """Queue options for ``create()``: camelCase as on the wire (``leaseTime``, ``retryLimit``,
        ``deadLetterQueue``, ...) or snake_case (``lease_time``). Units as in API.md §3.2 (seconds, ms for
        ``retryDelay``). Configure is a full overwrite: options not given get the broker's defaults."""
        self._config.update({camel_case(key): value for key, value in options.items()})
        return self

    def _require_name(self, what: str) -> str:
        if not self._name:
            raise ValueError(f"{what} needs a queue name: q.queue('name')")
        return self._name

    async def create(self) -> dict[str, Any]:
        """Create or reconfigure the queue: ``POST /api/v1/configure``.

        Returns:
            the broker's answer ``{configured, queue, namespace, task, options: {...}, ...}``.

        Raises:
            InvalidRequest: the broker refused the options. BrokerError: an ``error`` in the answer.
        """
        name = self._require_name("create()")
        body: dict[str, Any] = {"queue": name, "options": dict(self._config)}
        if self._options.namespace is not None:
            body["namespace"] = self._options.namespace
        if self._options.task is not None:
            body["task"] = self._options.task
        result = await self._client._call("POST", "/api/v1/configure", body=body)
        answer = expect_object(result, "configure")
        options = answer.get("options") if isinstance(answer.get("options"), Mapping) else self._config
        lease_time = options.get("leaseTime") if isinstance(options, Mapping) else None
        if isinstance(lease_time, int):
            self._client._lease_times[name] = lease_time or 60
        return answer

    async def delete(self) -> dict[str, Any]:
        """Delete the queue with its partitions, messages, cursors and DLQ rows
        (``DELETE /resources/queues``).

        Returns ``{deleted, queue, existed}``. Raises BrokerError on an ``error`` answer.
        """
        name = self._require_name("delete()")
        result = await self._client._call("DELETE", f"/api/v1/resources/queues/{quote(name, safe='')}")
        self._client._lease_times.pop(name, None)
        return (
            expect_object(result, "delete queue") if result is not None else {"deleted": True, "queue": name}
        )

    # -- push ----------------------------------------------------------------------------------------

    def partition(self, name: str) -> QueueBuilder:
        """Partition to push to (default ``Default``) or to pop from (default: any partition)."""
        self._partition = name
        self._options.partition = name
        return self

    def buffer(self, max_size: int = 100, max_wait_ms: int = 1000) -> QueueBuilder:
        """Buffer pushes in this client and send them in batches of up to ``max_size`` items, at the latest
        ``max_wait_ms`` ms after the first buffered one; ``AsyncQueen.flush_all_buffers()`` sends the rest."""
        self._buffer = BufferOptions(max_size=max_size, max_wait_ms=max_wait_ms)
        return self

    async def push(self, items: Any) -> list[PushResult]:
        """Push one item or a list of items in one request (``POST /api/v1/push``).

        Items: see :func:`format_push_item`. With ``buffer(...)`` the items are only queued in the client and
        come back with status ``pending``.

        Returns:
            one :class:`PushResult` per item, in order (``queued`` or ``duplicate`` normally).

        Raises:
            BrokerError: the broker answered with an error, or some items ``failed`` (all results are in
                ``error.details["results"]``). DatabaseUnavailable: no broker reachable.
        """
        name = self._require_name("push()")
        batch = items if isinstance(items, list) else [items]
        partition = self._partition if self._partition is not None else "Default"
        wire = [format_push_item(item, name, partition) for item in batch]
        if self._buffer is not None:
            self._client._buffers.add((name, partition), wire, self._buffer)
            return [PushResult("pending", item["transactionId"], name, partition) for item in wire]
        results = await self._client._push(wire)
        failed = [result for result in results if result.status == "failed"]
        if failed:
            raise BrokerError(failed[0].error or "push failed", results=results)
        return results

    async def flush_buffer(self) -> None:
        """Send what this queue/partition has in the client push buffer now."""
        name = self._require_name("flush_buffer()")
        await self._client._buffers.flush(
            (name, self._partition if self._partition is not None else "Default")
        )

    # -- pop / consume options ------------------------------------------------------------------------

    def group(self, name: str) -> QueueBuilder:
        """Consumer group (default: queue mode, ``__QUEUE_MODE__``)."""
        self._options.group = name
        return self

    def batch(self, size: int) -> QueueBuilder:
        """Up to ``size`` messages per pop (default 1)."""
        self._options.batch = max(1, int(size))
        return self

    def wait(self, enabled: bool = True) -> QueueBuilder:
        """Long poll: the broker holds the pop until a message arrives or ``timeout_millis`` passes.
        Default: off for ``pop()``, on for ``consume()``."""
        self._options.wait = bool(enabled)
        return self

    def timeout_millis(self, millis: int) -> QueueBuilder:
        """Long-poll timeout in ms (default 30000); the HTTP timeout is this plus 5 s."""
        self._options.timeout_millis = max(1, int(millis))
        return self

    def auto_ack(self, enabled: bool = True) -> QueueBuilder:
        """``pop()``: the broker acks at delivery (``autoAck=true``, no lease; default off).
        ``consume()``: the client acks ``completed`` after the handler returns and ``failed`` when it raises
        (default on)."""
        self._options.auto_ack = bool(enabled)
        return self

    def each(self) -> QueueBuilder:
        """``consume()`` calls the handler once per message even when ``batch`` > 1."""
        self._options.each = True
        return self

    def concurrency(self, workers: int) -> QueueBuilder:
        """Number of concurrent pop/handle loops in ``consume()`` (default 1)."""
        self._options.concurrency = max(1, int(workers))
        return self

    def limit(self, count: int | None) -> QueueBuilder:
        """``consume()`` returns after handling ``count`` messages in total (default: no limit)."""
        self._options.limit = None if count is None else max(1, int(count))
        return self

    def idle_millis(self, millis: int | None) -> QueueBuilder:
        """``consume()`` returns after ``millis`` ms without any message (default: never)."""
        self._options.idle_millis = None if millis is None else max(1, int(millis))
        return self

    def partitions(self, count: int) -> QueueBuilder:
        """Claim up to ``count`` partitions per pop; ``batch`` is then the total across them (default 1)."""
        self._options.partitions = max(1, int(count))
        return self

    def subscription_mode(self, mode: str) -> QueueBuilder:
        """``new`` (only messages created after the group's first pop) or ``all`` (default); first join
        wins."""
        self._options.subscription_mode = mode
        return self

    def subscription_from(self, start: datetime | str) -> QueueBuilder:
        """Where a new consumer group starts: ``"now"`` or a timestamp (datetime or ISO string)."""
        self._options.subscription_from = format_timestamp(start)
        return self

    def lease_time_s(self, seconds: int) -> QueueBuilder:
        """The queue's ``leaseTime`` in seconds; ``consume()`` renews leases every ``seconds / 2`` while a
        handler runs. Default: what this client's ``create()`` set, else the broker's queue status, else
        30."""
        self._options.lease_time_s = max(1, int(seconds))
        return self

    def renew_lease(self, enabled: bool = True, interval_millis: int | None = None) -> QueueBuilder:
        """Turn lease renewal during ``consume()`` handlers on (default) or off, or set its period in ms."""
        self._options.renew_lease = bool(enabled)
        if interval_millis:
            self._options.renew_interval_millis = max(1, int(interval_millis))
        return self

    # -- pop / consume --------------------------------------------------------------------------------

    async def pop(self) -> list[Message]:
        """Pop once: ``GET /api/v1/pop/queue/<q>[/partition/<p>]``.

        Returns:
            the delivered messages in partition order; ``[]`` when there is nothing (no partition available,
            partition leased by another consumer of the group, long-poll timeout, ...).

        Raises:
            BrokerError: the broker reported a database error. DatabaseUnavailable: no broker reachable.
        """
        options = self._options
        return await self._client._pop(
            options,
            batch=options.batch,
            wait=bool(options.wait),
            timeout_millis=options.timeout_millis,
            server_auto_ack=bool(options.auto_ack),
        )

    async def consume(
        self,
        handler: Handler,
        *,
        on_error: ErrorHandler | None = None,
        on_success: SuccessHandler | None = None,
        stop: StopSignal | None = None,
    ) -> int:
        """Pop and handle messages until stopped; returns the number of messages handled.

        The handler (sync functions run in a worker thread) gets one :class:`Message` when ``batch`` is 1 or
        ``each()`` is set, else the list. While it runs, the partition lease is renewed at half the lease
        time. After it: with ``auto_ack`` (default) the client acks ``completed``, or ``failed`` (with the
        exception text) if it raised; ``on_error(message_or_list, exc)`` replaces the failed ack when given.
        With ``each()`` a failure releases the rest of the batch for redelivery.

        Stops when ``limit`` messages were handled, after ``idle_millis`` without messages, when ``stop`` is
        set (asyncio or threading event), on ``AsyncQueen.stop_consumers()``/``close()``, or on SIGINT/SIGTERM
        when running in the main thread. In-flight handlers finish (and are acked) before it returns; a pop
        in flight is abandoned.

        Raises:
            AuthenticationError, PermissionDenied, InvalidRequest: the broker refused the pops.
        """
        return await self._client._consume(self._options, handler, on_error, on_success, stop)

    # -- dead-letter queue -----------------------------------------------------------------------------

    def dlq(self, consumer_group: str | None = None) -> DeadLetterBuilder:
        """Read this queue's dead-letter queue, optionally for one consumer group."""
        name = self._require_name("dlq()")
        return DeadLetterBuilder(self._client, name, consumer_group, self._partition)


class DeadLetterBuilder(Fluent):
    """A query on a queue's dead-letter queue (``GET /api/v1/dlq``); end with ``get()``."""

    __slots__ = ("_client", "_params")

    def __init__(self, client: AsyncQueen, queue: str, group: str | None, partition: str | None) -> None:
        self._client = client
        self._params: dict[str, str] = {"queue": queue, "limit": "100", "offset": "0"}
        if group:
            self._params["consumerGroup"] = group
        if partition:
            self._params["partition"] = partition

    def limit(self, count: int) -> DeadLetterBuilder:
        """At most ``count`` rows (default 100)."""
        self._params["limit"] = str(max(1, int(count)))
        return self

    def offset(self, count: int) -> DeadLetterBuilder:
        """Skip the first ``count`` rows (default 0)."""
        self._params["offset"] = str(max(0, int(count)))
        return self

    def from_(self, start: datetime | str) -> DeadLetterBuilder:
        """Only rows that failed at or after ``start``."""
        self._params["from"] = format_timestamp(start)
        return self

    def to(self, end: datetime | str) -> DeadLetterBuilder:
        """Only rows that failed before ``end``."""
        self._params["to"] = format_timestamp(end)
        return self

    async def get(self) -> DeadLetterPage:
        """Fetch the page: rows newest failure first, with ``total`` (``len(messages)`` if the broker sends
        none). Raises BrokerError on an ``error`` answer."""
        result = await self._client._call("GET", "/api/v1/dlq", params=self._params)
        if result is None:
            return DeadLetterPage([], 0, int(self._params["limit"]), int(self._params["offset"]))
        answer = expect_object(result, "dlq")
        rows = [DeadLetter.from_wire(row) for row in answer.get("messages") or [] if isinstance(row, Mapping)]
        total = answer.get("total")
        return DeadLetterPage(
            rows,
            int(total) if isinstance(total, int) else len(rows),
            int(self._params["limit"]),
            int(self._params["offset"]),
        )


class TransactionBuilder(Fluent):
    """Acks and pushes committed atomically in one broker transaction (``POST /api/v1/transaction``).

    ``q.transaction().ack(msg).queue("next").partition(p).push([...]).commit()``
    """

    __slots__ = ("_client", "_leases", "_operations")

    def __init__(self, client: AsyncQueen) -> None:
        self._client = client
        self._operations: list[dict[str, Any]] = []
        self._leases: list[str] = []

    def ack(
        self,
        messages: AckableMessage | Sequence[AckableMessage],
        status: bool | str = "completed",
        *,
        group: str | None = None,
        error: str | None = None,
        check_lease: bool = True,
    ) -> TransactionBuilder:
        """Ack one message or a list in the transaction.

        ``group`` defaults to the group each message was delivered to. With ``check_lease`` the message's
        lease id is sent, so the commit fails (nothing happens) if the lease expired and the message may
        already be with another consumer. In a transaction a ``failed`` ack goes straight to the DLQ.
        """
        items = (
            list(messages)
            if isinstance(messages, Sequence) and not isinstance(messages, Mapping)
            else [messages]
        )
        for message in items:
            transaction_id, partition_id, lease_id, message_group = message_reference(message)
            operation: dict[str, Any] = {
                "type": "ack",
                "transactionId": transaction_id,
                "partitionId": partition_id,
                "status": ack_status(status),
            }
            consumer_group = group or message_group
            if consumer_group and consumer_group != QUEUE_MODE_GROUP:
                operation["consumerGroup"] = consumer_group
            if error is not None:
                operation["error"] = error
            if lease_id and check_lease:
                operation["leaseId"] = lease_id
                self._leases.append(lease_id)
            self._operations.append(operation)
        return self

    def queue(self, name: str) -> TransactionQueueBuilder:
        """Start a push to queue ``name`` inside the transaction."""
        return TransactionQueueBuilder(self, name)

    def _add_push(self, items: list[dict[str, Any]]) -> None:
        self._operations.append({"type": "push", "items": items})

    @property
    def operations(self) -> list[dict[str, Any]]:
        """The wire operations collected so far (copies)."""
        return [dict(operation) for operation in self._operations]

    async def commit(self) -> dict[str, Any]:
        """Run every operation in one broker transaction.

        Returns:
            the broker's answer ``{transactionId, success: true, results: [...]}``.

        Raises:
            ValueError: no operations. TransactionFailed: the broker rolled back (``results`` holds the
            operations run before the failure). DatabaseUnavailable: no broker reachable (the commit is not
            retried once it may have reached a broker).
        """
        if not self._operations:
            raise ValueError("a transaction needs at least one operation")
        body = {"operations": self._operations, "requiredLeases": sorted(set(self._leases))}
        result = await self._client._call("POST", "/api/v1/transaction", body=body, idempotent=False)
        answer = result if isinstance(result, Mapping) else {}
        if not answer.get("success"):
            results = answer.get("results")
            raise TransactionFailed(
                str(answer.get("error") or "transaction failed"),
                results=list(results) if isinstance(results, list) else [],
                transaction_id=answer.get("transactionId"),
            )
        return dict(answer)


class TransactionQueueBuilder(Fluent):
    """The push part of a transaction: ``.partition(p).push([...])`` returns the transaction."""

    __slots__ = ("_partition", "_queue", "_transaction")

    def __init__(self, transaction: TransactionBuilder, queue: str) -> None:
        self._transaction = transaction
        self._queue = queue
        self._partition: str | None = None

    def partition(self, name: str) -> TransactionQueueBuilder:
        """Partition to push to (default ``Default``)."""
        self._partition = name
        return self

    def push(self, items: Any) -> TransactionBuilder:
        """Add one item or a list (same item rules as :func:`format_push_item`); a duplicate
        ``transactionId`` in the target partition makes the whole commit fail."""
        batch = items if isinstance(items, list) else [items]
        self._transaction._add_push([format_push_item(item, self._queue, self._partition) for item in batch])
        return self._transaction
