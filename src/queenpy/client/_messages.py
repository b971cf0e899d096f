"""Typed objects built from the broker's JSON (API.md §4–§10), and the conversions back to the wire."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "QUEUE_MODE_GROUP",
    "AckResult",
    "DeadLetter",
    "DeadLetterPage",
    "LeaseRenewal",
    "Message",
    "PushResult",
    "parse_timestamp",
    "uuid7",
]

#: The consumer group the broker uses when none is given ("queue mode", API.md §0).
QUEUE_MODE_GROUP = "__QUEUE_MODE__"


def parse_timestamp(value: Any) -> datetime | None:
    """Parse a broker timestamp (``YYYY-MM-DDTHH:MM:SS.ffffffZ``, ms or µs) to an aware UTC datetime.

    Returns ``None`` for ``None``/empty/unparseable values (the broker renders missing times as null).
    """
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def uuid7() -> str:
    """A random, time-ordered UUIDv7 string (RFC 9562 §5.7): 48-bit Unix ms, version 7, 74 random bits.

    Used as the default ``transactionId`` of pushed items, so a retried push is deduplicated by the broker.
    """
    unix_ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (unix_ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def _none_if_empty(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True, slots=True)
class Message:
    """One delivered message, as returned by a pop (API.md §5.3).

    Attributes:
        id: the broker's message id (UUIDv7).
        transaction_id: the producer's id; unique per partition (dedupe key).
        partition_id: UUID of the partition; together with ``transaction_id`` it names the message.
        partition: partition name.
        queue: queue name (taken from the pop response, messages do not carry it themselves).
        consumer_group: the group it was delivered to (``__QUEUE_MODE__`` in queue mode).
        lease_id: the partition lease the delivery holds, ``None`` with auto-ack.
        data: the payload (any JSON value).
        created_at: when the broker stored it, aware UTC datetime (``None`` if the broker sent none).
        trace_id: the producer-supplied trace UUID, if any.
        producer_sub: the JWT ``sub`` of the producer, when the broker runs with authentication.
    """

    id: str
    transaction_id: str
    partition_id: str
    partition: str
    queue: str
    consumer_group: str
    lease_id: str | None
    data: Any
    created_at: datetime | None
    trace_id: str | None = None
    producer_sub: str | None = None

    @classmethod
    def from_wire(
        cls, item: Mapping[str, Any], *, queue: str = "", consumer_group: str | None = None
    ) -> Message:
        """Build a message from one element of a pop response's ``messages`` array.

        Args:
            item: the wire dict (camelCase keys: ``id``, ``transactionId``, ``partitionId``, ...).
            queue: queue name of the pop response (used when the item has no ``queue``).
            consumer_group: the response's group, used when the item has no ``consumerGroup``.

        Raises:
            ValueError: ``transactionId`` or ``partitionId`` is missing (the message could not be acked).
        """
        transaction_id = item.get("transactionId")
        partition_id = item.get("partitionId")
        if not isinstance(transaction_id, str) or not isinstance(partition_id, str):
            raise ValueError("a message needs string transactionId and partitionId")  # noqa: TRY004
        group = item.get("consumerGroup") or consumer_group or QUEUE_MODE_GROUP
        return cls(
            id=str(item.get("id") or ""),
            transaction_id=transaction_id,
            partition_id=partition_id,
            partition=str(item.get("partition") or ""),
            queue=str(item.get("queue") or queue),
            consumer_group=str(group),
            lease_id=_none_if_empty(item.get("leaseId")),
            data=item.get("data"),
            created_at=parse_timestamp(item.get("createdAt")),
            trace_id=_none_if_empty(item.get("traceId")),
            producer_sub=_none_if_empty(item.get("producerSub")),
        )

    def to_wire(self) -> dict[str, Any]:
        """The message as a camelCase JSON-able dict (the pop wire shape plus ``queue``); used by the CLI."""
        created = self.created_at.isoformat().replace("+00:00", "Z") if self.created_at else None
        return {
            "id": self.id,
            "transactionId": self.transaction_id,
            "partitionId": self.partition_id,
            "partition": self.partition,
            "queue": self.queue,
            "consumerGroup": self.consumer_group,
            "leaseId": self.lease_id,
            "data": self.data,
            "createdAt": created,
            "traceId": self.trace_id,
            "producerSub": self.producer_sub,
        }


@dataclass(frozen=True, slots=True)
class PushResult:
    """The broker's answer for one pushed item (API.md §4.1), matched to the item by position.

    ``status`` is ``queued`` | ``duplicate`` | ``buffered`` (broker file buffer, PostgreSQL down) |
    ``failed`` (see ``error``) | ``pending`` (held in this client's push buffer, not sent yet).
    """

    status: str
    transaction_id: str
    queue: str
    partition: str
    message_id: str | None = None
    partition_id: str | None = None
    error: str | None = None

    @classmethod
    def from_wire(cls, item: Mapping[str, Any], sent: Mapping[str, Any]) -> PushResult:
        """Combine one result dict (snake_case keys) with the item that was sent at the same position."""
        return cls(
            status=str(item.get("status") or "failed"),
            transaction_id=str(
                item.get("transaction_id") or item.get("transactionId") or sent["transactionId"]
            ),
            queue=str(item.get("queueName") or item.get("queue") or sent["queue"]),
            partition=str(sent.get("partition") or item.get("partition") or "Default"),
            message_id=_none_if_empty(item.get("message_id") or item.get("messageId")),
            partition_id=_none_if_empty(item.get("partition_id") or item.get("partitionId")),
            error=_none_if_empty(item.get("error")),
        )

    @property
    def ok(self) -> bool:
        """True when the broker holds the message (``queued``, ``duplicate`` or ``buffered``) or it is
        pending."""
        return self.status in ("queued", "duplicate", "buffered", "pending")


@dataclass(frozen=True, slots=True)
class AckResult:
    """The broker's answer for one acknowledgement (API.md §6).

    ``success`` false with an ``error`` such as ``Message not found`` or ``Invalid or expired lease`` means
    nothing changed. ``dlq`` tells that a failed ack moved the message to the dead-letter queue.
    """

    transaction_id: str
    success: bool
    error: str | None = None
    dlq: bool = False
    lease_released: bool = False

    @classmethod
    def from_wire(cls, item: Mapping[str, Any], transaction_id: str) -> AckResult:
        """Build from one element of the ack response array."""
        return cls(
            transaction_id=str(item.get("transactionId") or transaction_id),
            success=bool(item.get("success")),
            error=_none_if_empty(item.get("error")),
            dlq=bool(item.get("dlq")),
            lease_released=bool(item.get("leaseReleased")),
        )


@dataclass(frozen=True, slots=True)
class LeaseRenewal:
    """The answer to a lease extension (API.md §7): ``expires_at`` is the new expiry (aware UTC)."""

    lease_id: str
    success: bool
    expires_at: datetime | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One row of the dead-letter queue listing (API.md §10.1); ``id`` is the original message id."""

    id: str
    transaction_id: str
    partition_id: str
    queue: str
    partition: str
    consumer_group: str | None
    error_message: str | None
    retry_count: int
    data: Any
    created_at: datetime | None
    failed_at: datetime | None
    producer_sub: str | None = None

    @classmethod
    def from_wire(cls, item: Mapping[str, Any]) -> DeadLetter:
        """Build from one element of ``GET /api/v1/dlq``'s ``messages``."""
        return cls(
            id=str(item.get("id") or ""),
            transaction_id=str(item.get("transactionId") or ""),
            partition_id=str(item.get("partitionId") or ""),
            queue=str(item.get("queue") or ""),
            partition=str(item.get("partition") or ""),
            consumer_group=_none_if_empty(item.get("consumerGroup")),
            error_message=item.get("errorMessage") if isinstance(item.get("errorMessage"), str) else None,
            retry_count=int(item.get("retryCount") or 0),
            data=item.get("data"),
            created_at=parse_timestamp(item.get("createdAt")),
            failed_at=parse_timestamp(item.get("failedAt")),
            producer_sub=_none_if_empty(item.get("producerSub")),
        )

    def to_wire(self) -> dict[str, Any]:
        """The row as a camelCase JSON-able dict, as the broker sent it."""

        def iso(value: datetime | None) -> str | None:
            return value.isoformat(timespec="milliseconds").replace("+00:00", "Z") if value else None

        return {
            "id": self.id,
            "transactionId": self.transaction_id,
            "partitionId": self.partition_id,
            "queue": self.queue,
            "partition": self.partition,
            "consumerGroup": self.consumer_group,
            "errorMessage": self.error_message,
            "retryCount": self.retry_count,
            "data": self.data,
            "createdAt": iso(self.created_at),
            "failedAt": iso(self.failed_at),
            "producerSub": self.producer_sub,
        }


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    """A page of the dead-letter queue: ``messages`` newest failure first, ``total`` rows matching overall."""

    messages: list[DeadLetter] = field(default_factory=list)
    total: int = 0
    limit: int = 100
    offset: int = 0
