"""The operators' calls of :class:`~queenpy.client.AsyncQueen` (API.md sections 10.2, 11, 12): status and
resources, message browsing, maintenance mode. Answers are the broker's JSON objects, returned as dicts."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import quote

from ._wire import expect_object, format_timestamp

__all__ = ["AdminCalls"]


class _Caller(Protocol):
    async def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        read_timeout_s: float | None = None,
        idempotent: bool = True,
    ) -> Any: ...


def _params(**values: Any) -> dict[str, str]:
    clean: dict[str, str] = {}
    for key, value in values.items():
        if value is None:
            continue
        clean[key] = format_timestamp(value) if isinstance(value, datetime) else str(value)
    return clean


def _q(value: str) -> str:
    return quote(value, safe="")


class AdminCalls:
    """Mixed into :class:`~queenpy.client.AsyncQueen`."""

    async def overview(self: _Caller) -> dict[str, Any]:
        """``GET /api/v1/resources/overview``: ``{queues, partitions, namespaces, tasks, messages: {total,
        pending, processing, completed, failed, deadLetter}, lag, throughput, timestamp, statsAge}``."""
        return expect_object(await self._call("GET", "/api/v1/resources/overview"), "overview")

    async def status(
        self: _Caller,
        *,
        start: datetime | str | None = None,
        end: datetime | str | None = None,
        queue: str | None = None,
    ) -> dict[str, Any]:
        """``GET /api/v1/status``: throughput buckets, queues, messages, leases, DLQ, workers."""
        params = _params(**{"from": start, "to": end, "queue": queue})
        return expect_object(await self._call("GET", "/api/v1/status", params=params), "status")

    async def queue_stats(
        self: _Caller,
        *,
        limit: int = 100,
        offset: int = 0,
        namespace: str | None = None,
        task: str | None = None,
    ) -> dict[str, Any]:
        """``GET /api/v1/status/queues``: ``{queues: [...], total, pagination}``."""
        params = _params(limit=limit, offset=offset, namespace=namespace, task=task)
        return expect_object(await self._call("GET", "/api/v1/status/queues", params=params), "queue stats")

    async def list_messages(
        self: _Caller,
        *,
        queue: str | None = None,
        partition: str | None = None,
        status: str | None = None,
        start: datetime | str | None = None,
        end: datetime | str | None = None,
        limit: int = 200,
        offset: int = 0,
    ) -> dict[str, Any]:
        """``GET /api/v1/messages``: ``{messages: [...], mode, total, pagination}`` (created in [start, end],
        default the last hour; newest first)."""
        params = _params(
            **{
                "queue": queue,
                "partition": partition,
                "status": status,
                "from": start,
                "to": end,
                "limit": limit,
                "offset": offset,
            }
        )
        return expect_object(await self._call("GET", "/api/v1/messages", params=params), "messages")

    async def get_message(self: _Caller, partition_id: str, transaction_id: str) -> dict[str, Any]:
        """One message with its (decrypted) payload. Raises BrokerError ``Message not found``."""
        path = f"/api/v1/messages/{_q(partition_id)}/{_q(transaction_id)}"
        return expect_object(await self._call("GET", path), "message")

    async def delete_message(self: _Caller, partition_id: str, transaction_id: str) -> dict[str, Any]:
        """Delete one message: ``{success, partitionId, transactionId, message}``."""
        path = f"/api/v1/messages/{_q(partition_id)}/{_q(transaction_id)}"
        result = await self._call("DELETE", path, idempotent=False)
        return dict(result) if isinstance(result, Mapping) else {"success": False}

    async def move_to_dlq(
        self: _Caller,
        partition_id: str,
        transaction_id: str,
        *,
        group: str | None = None,
        error: str | None = None,
    ) -> dict[str, Any]:
        """Move the next message of ``group`` (queue mode by default) to its dead-letter queue.
        Raises BrokerError when refused (already consumed, not the next one, ...)."""
        body = {k: v for k, v in {"consumerGroup": group, "errorMessage": error}.items() if v is not None}
        path = f"/api/v1/messages/{_q(partition_id)}/{_q(transaction_id)}/dlq"
        return expect_object(await self._call("POST", path, body=body, idempotent=False), "move to DLQ")

    async def maintenance(self: _Caller) -> dict[str, Any]:
        """``{maintenanceMode, popMaintenanceMode, bufferedMessages, bufferHealthy, bufferStats}``."""
        return expect_object(await self._call("GET", "/api/v1/system/maintenance"), "maintenance")

    async def set_maintenance(self: _Caller, enabled: bool, *, pop: bool = False) -> dict[str, Any]:
        """Turn push maintenance (or, with ``pop``, pop maintenance) on or off on every broker process."""
        path = "/api/v1/system/maintenance/pop" if pop else "/api/v1/system/maintenance"
        return expect_object(await self._call("POST", path, body={"enabled": enabled}), "maintenance")
