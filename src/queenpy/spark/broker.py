"""Blocking HTTP calls of the Spark connector to the broker's ``/api/v1/spark/*`` endpoints.

The connector runs in Spark's Python worker processes (see SPARK-NOTES.md section 3), so this module is a
small synchronous ``httpx`` adapter that can be pickled: it holds the URL and token only and opens its
``httpx.Client`` on first use (:meth:`SparkBroker.__getstate__` drops it).

Idempotent calls (reads, ``cursor``, ``commit``, ``abort``) are retried on connection errors and 5xx answers
with exponential backoff (about 30 s in total); ``stage`` is never retried, because a second POST of the same
items under the same token would stage them twice (a failed task is retried by Spark with a new token instead).

Errors raised: :class:`queenpy.errors.InvalidRequest` (400), ``AuthenticationError`` (401),
``PermissionDenied`` (403), ``NotFound`` (404), ``DatabaseUnavailable`` (broker unreachable or 5xx after the
retries), ``BrokerError`` (an ``{"error": ...}`` answer).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

import orjson

from queenpy.errors import (
    AuthenticationError,
    BrokerError,
    DatabaseUnavailable,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    QueenError,
)

if TYPE_CHECKING:
    import httpx

__all__ = ["CommitResult", "PartitionHead", "SparkBroker"]

_RETRY_DELAYS_S = (0.1, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0)


@dataclass(frozen=True)
class PartitionHead:
    """One partition of ``GET /api/v1/spark/offsets``: its newest offset, the group's cursor (or None), and its
    earliest offset: offsets at or below it may have been removed by retention or eviction (0 from a broker
    that does not report it)."""

    partition_id: str
    partition: str
    head: int
    cursor: int | None
    earliest: int = 0


@dataclass(frozen=True)
class CommitResult:
    """``POST /api/v1/spark/commit``: messages pushed, and whether the batch had been committed before."""

    duplicate: bool
    pushed: int


class SparkBroker:
    """The broker as seen by the connector.

    Args:
        url: broker base URL, e.g. ``http://127.0.0.1:6632`` (one URL; no failover).
        token: bearer token (JWT) when the broker requires authentication.
        timeout_s: per-request timeout in seconds (a commit of a large micro-batch can take a while).
    """

    def __init__(self, url: str, token: str | None = None, timeout_s: float = 300.0) -> None:
        self.url = url.rstrip("/")
        self.token = token or None
        self.timeout_s = timeout_s
        self._client: httpx.Client | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP connection pool (a later call opens a new one)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- endpoints ------------------------------------------------------------------------------------------

    def offsets(self, queue: str, consumer_group: str | None = None) -> list[PartitionHead]:
        """Heads (and the group's cursors) of every partition of ``queue``, sorted by partitionId; [] if unknown."""
        params = {"queue": queue}
        if consumer_group:
            params["consumerGroup"] = consumer_group
        body = self._call("GET", "/api/v1/spark/offsets", params=params)
        return [
            PartitionHead(
                str(p["partitionId"]),
                str(p.get("partition", "")),
                int(p["head"]),
                None if p.get("cursor") is None else int(p["cursor"]),
                int(p.get("earliest") or 0),
            )
            for p in body.get("partitions", [])
        ]

    def messages(self, partition_id: str, after: int, upto: int, limit: int) -> dict[str, Any]:
        """Messages ``after < offset <= upto`` of one partition, in offset order, at most ``limit`` (no lease).

        Returns the page ``{"partitionId", "partition", "queue", "messages": [{"offset", "id", "transactionId",
        "data", "createdAt", "traceId", "producerSub"}]}``.
        """
        params = {"partitionId": partition_id, "after": str(after), "upto": str(upto), "limit": str(limit)}
        page: dict[str, Any] = self._call("GET", "/api/v1/spark/messages", params=params)
        return page

    def advance_cursor(self, queue: str, consumer_group: str, offsets: Mapping[str, int]) -> int:
        """Set the group's cursor to ``max(cursor, offset)`` per partition; returns partitions updated."""
        body = self._call(
            "POST",
            "/api/v1/spark/cursor",
            json={"queue": queue, "consumerGroup": consumer_group, "offsets": dict(offsets)},
        )
        return int(body.get("partitionsUpdated", 0))

    def stage(self, query_id: str, batch_id: int, token: str, items: Sequence[Mapping[str, Any]]) -> int:
        """Stage push items for micro-batch ``(query_id, batch_id)`` under ``token``; returns the count staged.

        Not retried (see the module docstring).
        """
        body = self._call(
            "POST",
            "/api/v1/spark/stage",
            retry=False,
            json={"queryId": query_id, "batchId": batch_id, "token": token, "items": list(items)},
        )
        return int(body.get("staged", 0))

    def commit(self, query_id: str, batch_id: int, tokens: Sequence[str]) -> CommitResult:
        """Push the staged rows of ``tokens`` in one transaction, once per ``(query_id, batch_id)``."""
        body = self._call(
            "POST",
            "/api/v1/spark/commit",
            json={"queryId": query_id, "batchId": batch_id, "tokens": list(tokens)},
        )
        return CommitResult(bool(body.get("duplicate", False)), int(body.get("pushed", 0)))

    def abort(self, query_id: str, batch_id: int, tokens: Sequence[str]) -> int:
        """Delete the staged rows of ``tokens`` (idempotent; committed batches are untouched)."""
        body = self._call(
            "POST",
            "/api/v1/spark/abort",
            json={"queryId": query_id, "batchId": batch_id, "tokens": list(tokens)},
        )
        return int(body.get("deleted", 0))

    # -- plumbing -------------------------------------------------------------------------------------------

    def _http(self) -> httpx.Client:
        if self._client is None:
            import httpx

            headers = {"Accept": "application/json"}
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            self._client = httpx.Client(base_url=self.url, headers=headers, timeout=self.timeout_s)
        return self._client

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        retry: bool = True,
    ) -> Any:
        import httpx

        content = None if json is None else orjson.dumps(json, option=orjson.OPT_NON_STR_KEYS)
        headers = None if content is None else {"Content-Type": "application/json"}
        delays = iter(_RETRY_DELAYS_S if retry else ())
        while True:
            try:
                response = self._http().request(method, path, params=params, content=content, headers=headers)
            except httpx.TransportError as exc:
                delay = next(delays, None)
                if delay is None:
                    raise DatabaseUnavailable(f"broker {self.url} unreachable: {exc!r}") from exc
                time.sleep(delay)
                continue
            if response.status_code >= 500 and retry:
                delay = next(delays, None)
                if delay is not None:
                    time.sleep(delay)
                    continue
            return _decode(response, f"{method} {path}")


def _decode(response: httpx.Response, what: str) -> Any:
    try:
        body = orjson.loads(response.content) if response.content else {}
    except orjson.JSONDecodeError:
        body = {"error": response.text[:500]}
    error = body.get("error") if isinstance(body, dict) else None
    status = response.status_code
    if status < 400 and not error:
        return body
    message = f"{what}: {error or response.reason_phrase} (HTTP {status})"
    kind: type[QueenError] = {
        400: InvalidRequest,
        401: AuthenticationError,
        403: PermissionDenied,
        404: NotFound,
    }.get(status, DatabaseUnavailable if status in (502, 503, 504) else BrokerError)
    raise kind(message)
