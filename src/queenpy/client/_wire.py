"""What the client sends and reads on the wire, shared by the builders and the client: timestamps, ack
statuses, message references, push items, answer checks; and the handler types of the fluent grammar."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from queenpy.errors import BrokerError

from ._messages import DeadLetter, Message, uuid7

__all__ = [
    "AckableMessage",
    "ErrorHandler",
    "Handler",
    "StopSignal",
    "SuccessHandler",
    "ack_status",
    "camel_case",
    "expect_object",
    "format_push_item",
    "format_timestamp",
    "message_reference",
]

#: A handler gets one :class:`Message` (batch 1 or ``each()``) or a list of them; sync or async.
Handler = Callable[[Any], Any]
#: ``on_error(message_or_list, exception)``; sync or async.
ErrorHandler = Callable[[Any, BaseException], Any]
#: ``on_success(message_or_list, handler_result)``; sync or async.
SuccessHandler = Callable[[Any, Any], Any]
StopSignal = asyncio.Event | threading.Event
AckableMessage = Message | DeadLetter | Mapping[str, Any]


def format_timestamp(value: datetime | str) -> str:
    """Render a timestamp for the wire: ISO 8601 in UTC with ``Z`` and milliseconds; strings pass through.

    Naive datetimes are taken as UTC.
    """
    if isinstance(value, str):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def message_reference(message: AckableMessage) -> tuple[str, str, str | None, str | None]:
    """``(transaction_id, partition_id, lease_id, consumer_group)`` of a message object or wire dict.

    Raises:
        ValueError: the message has no transaction id or no partition id.
    """
    if isinstance(message, Message):
        return message.transaction_id, message.partition_id, message.lease_id, message.consumer_group
    if isinstance(message, DeadLetter):
        return message.transaction_id, message.partition_id, None, message.consumer_group
    transaction_id = message.get("transactionId") or message.get("transaction_id") or message.get("id")
    partition_id = message.get("partitionId") or message.get("partition_id")
    if not isinstance(transaction_id, str) or not transaction_id:
        raise ValueError("a message needs a transactionId")
    if not isinstance(partition_id, str) or not partition_id:
        raise ValueError("a message needs a partitionId (a transactionId is only unique per partition)")
    lease_id = message.get("leaseId") or None
    group = message.get("consumerGroup") or None
    return transaction_id, partition_id, lease_id, group


def ack_status(status: bool | str) -> str:
    """``True`` → ``completed``, ``False`` → ``failed``, strings (``retry``, ``dlq``, ...) unchanged."""
    if status is True:
        return "completed"
    if status is False:
        return "failed"
    if not isinstance(status, str) or not status:
        raise ValueError("ack status must be True, False or a status string")
    return status


def camel_case(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def format_push_item(item: Any, queue: str, partition: str | None) -> dict[str, Any]:
    """One wire push item ``{queue, partition?, payload, transactionId, traceId?}`` from a user item.

    An item that is a mapping with a ``data`` (or ``payload``) key supplies the payload under that key and may
    carry ``transactionId`` and ``traceId``; any other value is the payload itself (a plain dict may still
    carry a ``transactionId``, as in the reference client). A missing ``transactionId`` gets a fresh UUIDv7.

    Raises:
        ValueError: ``traceId`` is not a UUID or ``transactionId`` not a string.
    """
    transaction_id: Any = None
    trace_id: Any = None
    payload: Any = item
    if isinstance(item, Mapping):
        if "data" in item:
            payload = item["data"]
        elif "payload" in item:
            payload = item["payload"]
        transaction_id = item.get("transactionId")
        trace_id = item.get("traceId")
    if transaction_id is not None and not isinstance(transaction_id, str):
        raise ValueError("transactionId must be a string")
    wire: dict[str, Any] = {"queue": queue, "payload": payload, "transactionId": transaction_id or uuid7()}
    if partition is not None:
        wire["partition"] = partition
    if trace_id:
        try:
            wire["traceId"] = str(uuid.UUID(str(trace_id)))
        except ValueError:
            raise ValueError(f"traceId must be a UUID, got {trace_id!r}") from None
    return wire


def expect_object(result: Any, what: str) -> dict[str, Any]:
    """Return a dict answer, raising BrokerError for ``{"error": ...}`` or a non-object answer."""
    if isinstance(result, Mapping):
        error = result.get("error")
        if error and not result.get("success", False):
            raise BrokerError(str(error), answer=dict(result))
        return dict(result)
    raise BrokerError(f"unexpected answer to {what}: {result!r}"[:300])
