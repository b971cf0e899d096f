"""Blocking HTTP calls of the Spark connector to the broker's ``/api/v1/spark/*`` endpoints.

The connector runs in Spark's Python worker processes (see SPARK-NOTES.md section 3), so this module is a
small synchronous ``httpx`` adapter that can be pickled: it holds the URL and token only. The ``httpx.Client``
is shared by every :class:`SparkBroker` of a process with the same URL and token and kept open: Spark reuses
its Python workers across tasks and micro-batches, and making a client per task cost a TLS context (httpx
builds one even for http URLs) and a TCP connection each time: a third of the workers' CPU in the profile of
the 1 KB queue-to-queue copy (py-spy, 100 tasks per micro-batch), before tasks were grouped.

Idempotent calls (reads, ``cursor``, ``commit``, ``abort``, ``flush``, ``rows``: a chunk is keyed by its task
token and first row number, so a repeated POST stages nothing twice, and ``push``: its rows carry transaction
ids) are retried on connection errors and 5xx answers with exponential backoff (about 30 s in total); the
version 1 ``stage`` is never retried, because a second POST of the same items under the same token would stage
them twice.

Errors raised: :class:`queenpy.errors.InvalidRequest` (400), ``AuthenticationError`` (401),
``PermissionDenied`` (403), ``NotFound`` (404), ``DatabaseUnavailable`` (broker unreachable or 5xx after the
retries), ``BrokerError`` (an ``{"error": ...}`` answer).
"""

from __future__ import annotations

import os
import threading
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

__all__ = ["CommitResult", "PartitionHead", "PushResult", "SparkBroker", "flush_sink"]

BINARY = "application/octet-stream"
_RETRY_DELAYS_S = (0.1, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0)

# one keep-alive client per (process, url, token, timeout): see the module docstring
_CLIENTS: dict[tuple[int, str, str | None, float], httpx.Client] = {}
_CLIENTS_LOCK = threading.Lock()


def shared_client(url: str, token: str | None, timeout_s: float) -> httpx.Client:
    """The process's keep-alive ``httpx.Client`` for ``url`` and ``token`` (made on first use)."""
    key = (os.getpid(), url, token, timeout_s)
    client = _CLIENTS.get(key)
    if client is None or client.is_closed:
        import httpx

        with _CLIENTS_LOCK:
            client = _CLIENTS.get(key)
            if client is None or client.is_closed:
                headers = {"Accept": "application/json"}
                if token:
                    headers["Authorization"] = f"Bearer {token}"
                client = httpx.Client(base_url=url, headers=headers, timeout=timeout_s)
                _CLIENTS[key] = client
    return client


@dataclass(frozen=True)
class PartitionHead:
    """One partition of ``GET /api/v1/spark/offsets``: its newest offset, the group's cursor (or None), and
    its earliest offset: offsets at or below it may have been removed by retention or eviction (0 from a
    broker that does not report it)."""

    partition_id: str
    partition: str
    head: int
    cursor: int | None
    earliest: int = 0


@dataclass(frozen=True)
class CommitResult:
    """``POST /api/v1/spark/commit``: messages pushed, whether the batch had been committed before, and
    whether it waits to be applied (pipelined)."""

    duplicate: bool
    pushed: int
    pending: bool = False  # a pipelined commit: recorded, applied by the broker right after


@dataclass(frozen=True)
class PushResult:
    """``POST /api/v1/spark/push``: messages stored, rows skipped as stored already, whether the micro-batch
    was recorded as committed before (nothing pushed), and whether the broker let a stale replay push
    (``stale``)."""

    committed: bool
    pushed: int
    duplicates: int
    stale: bool = False


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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release: the HTTP client is the process's shared one (see the module docstring)."""

    # -- endpoints ------------------------------------------------------------------------------------------

    def offsets(self, queue: str, consumer_group: str | None = None) -> list[PartitionHead]:
        """Heads (and the group's cursors) of every partition of ``queue``, sorted by partitionId; [] if
        unknown."""
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
        """Messages ``after < offset <= upto`` of one partition, in offset order, at most ``limit`` (no
        lease).

        Returns the page
        ``{"partitionId", "partition", "queue", "messages": [{"offset", "id", "transactionId", "data",
        "createdAt", "traceId", "producerSub"}]}``.
        """
        params = {"partitionId": partition_id, "after": str(after), "upto": str(upto), "limit": str(limit)}
        page: dict[str, Any] = self._call("GET", "/api/v1/spark/messages", params=params)
        return page

    def read(
        self, ranges: Sequence[tuple[str, int, int]], fields: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """Messages of several ranges ``(partitionId, after, upto)`` in one call
        (``POST /api/v1/spark/read``).

        Returns one block per range whose partition exists, in request order: ``{"index", "partitionId",
        "partition", "queue", "offsets", "transactionIds", "createdAtUs", "traceIds",
        "producerSubs"}`` and the payloads as ``"dataBytes"`` (each one's length in bytes) plus ``"blob"`` (a
        ``memoryview`` of them all, concatenated in block order, shared by the blocks), or, from a broker
        without the binary answer, as ``"data"`` (JSON texts). The lists are parallel and in offset order. The
        ranges may span 100,000 offsets. ``fields`` (default: all) names the per-message fields wanted among
        ``data``, ``transactionIds``, ``createdAtUs``, ``traceIds``, ``producerSubs``: a broker that knows the
        option leaves the others out (and PostgreSQL does not compute them); an older one sends them all.
        """
        request: dict[str, Any] = {
            "ranges": [{"partitionId": p, "after": a, "upto": u} for p, a, u in ranges]
        }
        if fields is not None:
            request["columns"] = list(fields)
        body = self._call("POST", "/api/v1/spark/read", json=request, accept=BINARY)
        if isinstance(body, bytes | memoryview):
            view = memoryview(body)
            size = int.from_bytes(view[:4], "big")
            header = orjson.loads(view[4 : 4 + size])
            blocks: list[dict[str, Any]] = header.get("ranges", [])
            blob = view[4 + size :]
            for block in blocks:
                block["blob"] = blob
            return blocks
        blocks = body.get("ranges", []) if isinstance(body, dict) else []
        return blocks

    def stage_rows(
        self, query_id: str, batch_id: int, token: str, first: int, queue: str, columns: Mapping[str, Any]
    ) -> int:
        """Stage rows ``first + 1 ..`` of task ``token`` as columns (``POST /api/v1/spark/rows``): ``columns``
        has ``data`` (JSON text or None per row) and optionally ``partitions``, ``transactionIds``,
        ``traceIds``. Returns the rows staged. Retried safely (a chunk is keyed by token and first row)."""
        body = self._call(
            "POST",
            "/api/v1/spark/rows",
            json={
                "queryId": query_id,
                "batchId": batch_id,
                "token": token,
                "first": first,
                "queue": queue,
                **columns,
            },
        )
        return int(body.get("staged", 0))

    def push_direct(
        self,
        query_id: str,
        batch_id: int,
        task: int,
        token: str,
        queue: str,
        columns: Mapping[str, Any],
        payloads: bytes | memoryview,
        *,
        stale_ok: bool = False,
    ) -> PushResult:
        """Push rows of task ``task`` (attempt ``token``) of micro-batch ``(query_id, batch_id)`` into
        ``queue`` (``POST /api/v1/spark/push``, binary body): ``columns`` has ``partitions`` (distinct names),
        ``partitionIndexes`` (one per row, into ``partitions``), ``transactionIds``, ``dataBytes`` (each
        payload's length in bytes, -1 for none) and optionally ``traceIds``; ``payloads`` the UTF-8 JSON
        texts, concatenated. Retried safely (a row whose transaction id is stored is skipped).

        Raises:
            InvalidRequest: a bad row, or a replay older than the queue keeps transaction ids and not
                ``stale_ok``.
        """
        header = orjson.dumps(
            {
                "queryId": query_id,
                "batchId": batch_id,
                "task": task,
                "token": token,
                "queue": queue,
                "staleOk": stale_ok,
                **columns,
            },
            option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY,
        )
        body = self._call(
            "POST",
            "/api/v1/spark/push",
            content=b"".join([len(header).to_bytes(4, "big"), header, payloads]),
            content_type=BINARY,
        )
        return PushResult(
            bool(body.get("committed", False)),
            int(body.get("pushed", 0)),
            int(body.get("duplicates", 0)),
            bool(body.get("stale", False)),
        )

    def commit_direct(self, query_id: str, batch_id: int) -> CommitResult:
        """Record micro-batch ``(query_id, batch_id)`` whose tasks pushed directly, once (``duplicate``
        after)."""
        body = self._call(
            "POST", "/api/v1/spark/commit", json={"queryId": query_id, "batchId": batch_id, "mode": "direct"}
        )
        return CommitResult(bool(body.get("duplicate", False)), int(body.get("pushed", 0)))

    def advance_cursor(self, queue: str, consumer_group: str, offsets: Mapping[str, int]) -> int:
        """Set the group's cursor to ``max(cursor, offset)`` per partition; returns partitions updated."""
        body = self._call(
            "POST",
            "/api/v1/spark/cursor",
            json={"queue": queue, "consumerGroup": consumer_group, "offsets": dict(offsets)},
        )
        return int(body.get("partitionsUpdated", 0))

    def stage(self, query_id: str, batch_id: int, token: str, items: Sequence[Mapping[str, Any]]) -> int:
        """Stage push items for micro-batch ``(query_id, batch_id)`` under ``token``; returns the count
        staged.

        Not retried (see the module docstring).
        """
        body = self._call(
            "POST",
            "/api/v1/spark/stage",
            retry=False,
            json={"queryId": query_id, "batchId": batch_id, "token": token, "items": list(items)},
        )
        return int(body.get("staged", 0))

    def commit(
        self,
        query_id: str,
        batch_id: int,
        tokens: Sequence[str],
        counts: Sequence[int] | None = None,
        *,
        pipelined: bool = False,
    ) -> CommitResult:
        """Push the staged rows of ``tokens`` in one transaction, once per ``(query_id, batch_id)``.

        With ``counts`` (rows each token staged through :meth:`stage_rows`), the version 2 commit, which fails
        (and records nothing) when a token's staged rows are not all there. ``pipelined`` (version 2 only):
        the broker records the batch and answers; it moves the rows afterwards (see :meth:`flush`).
        """
        request: dict[str, Any] = {"queryId": query_id, "batchId": batch_id, "tokens": list(tokens)}
        if counts is not None:
            request["counts"] = list(counts)
            if pipelined:
                request["mode"] = "pipelined"
        body = self._call("POST", "/api/v1/spark/commit", json=request)
        return CommitResult(
            bool(body.get("duplicate", False)), int(body.get("pushed", 0)), bool(body.get("pending", False))
        )

    def flush(self, query_id: str) -> int:
        """Apply ``query_id``'s pipelined micro-batches still pending, now; returns how many were applied."""
        body = self._call("POST", "/api/v1/spark/flush", json={"queryId": query_id})
        return int(body.get("applied", 0))

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
        return shared_client(self.url, self.token, self.timeout_s)

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        retry: bool = True,
        accept: str | None = None,
        content: bytes | None = None,
        content_type: str = "application/json",
    ) -> Any:
        import httpx

        if json is not None:
            content = orjson.dumps(json, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)
        headers = {} if content is None else {"Content-Type": content_type}
        if accept:
            headers["Accept"] = accept
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
            if accept and response.status_code < 400 and response.headers.get("content-type") == accept:
                return response.content
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


def flush_sink(query: Any, url: str | None = None, token: str | None = None) -> int:
    """Make a ``commit=pipelined`` query's last micro-batches visible now; returns how many were applied.

    ``query`` is the ``StreamingQuery`` (or its ``id`` as text: the sink's key is the query id, stable across
    restarts from one checkpoint). ``url`` and ``token`` default to ``$QUEEN_URL`` and ``$QUEEN_TOKEN``. A
    sync query has nothing pending (0). Raises what :class:`SparkBroker` raises.
    """
    from .options import DEFAULT_URL

    query_id = query if isinstance(query, str) else str(query.id)
    with SparkBroker(
        url or os.environ.get("QUEEN_URL") or DEFAULT_URL, token or os.environ.get("QUEEN_TOKEN")
    ) as broker:
        return broker.flush(query_id)
