"""The Spark connector's routes (DESIGN.md section 11): offsets and range reads for the source; cursor
commits; the direct sink's pushes and batch records; stage, commit and abort of the staged micro-batch sink,
and flush of its pipelined commits (``services/spark_apply.py``).

Two data paths. Version 1 moves one JSON object per message (``GET /spark/messages``, ``POST /spark/stage``).
Version 2 moves columns (``POST /spark/read``: several ranges per call; ``POST /spark/rows``: one task's rows
as parallel arrays; ``POST /spark/commit`` with ``counts``): payloads travel as JSON *text*, which the broker
passes through without parsing (procedures/110_spark_rows.sql says why). The connector uses version 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import asyncpg
import orjson
from starlette.requests import Request
from starlette.responses import Response

from queenpy.errors import InvalidRequest
from queenpy.server import validation as v
from queenpy.server.routes._base import CORS_HEADERS, Endpoint, Level, json_object, json_response, worker_of

if TYPE_CHECKING:
    from queenpy.server.worker import Worker

__all__ = ["ENDPOINTS"]


async def spark_offsets(request: Request) -> Response:
    queue = v.check_name(request.query_params.get("queue"), "queue")
    group = v.check_name(request.query_params.get("consumerGroup"), "consumerGroup", required=False)
    return json_response(
        (
            await worker_of(request).database.fetchval(
                "SELECT queen.spark_offsets_v1($1, $2)::text", queue, group
            )
        ).encode(),
        empty_as_body=True,
    )


async def spark_messages(request: Request) -> Response:
    worker = worker_of(request)
    q = request.query_params
    partition_id = v.check_uuid(q.get("partitionId"), "partitionId")
    after = v.query_int(q, "after", 0, maximum=2**62)
    upto = v.query_int(q, "upto", 2**62, maximum=2**62)
    limit = v.query_int(q, "limit", 10_000, minimum=1, maximum=50_000)
    text = await worker.database.fetchval(
        "SELECT queen.spark_messages_v1($1::uuid, $2, $3, $4)::text", partition_id, after, upto, limit
    )
    if text is None:
        return json_response({"error": "Partition not found"})
    result = orjson.loads(text)
    worker.decrypt_messages(result["messages"])
    return json_response(result)


MAX_READ_RANGES = 10_000
BINARY = "application/octet-stream"
MAX_READ_MESSAGES = 100_000
MAX_STAGE_ROWS = 100_000
#: the per-message fields of a ``/spark/read`` answer that a caller may leave out (``columns``); a range's
#: index, partitionId, partition, queue and offsets always come
READ_COLUMNS = ("data", "transactionIds", "createdAtUs", "traceIds", "producerSubs")


async def spark_read(request: Request) -> Response:
    """Several offset ranges in one call: ``{"ranges": [{"partitionId", "after", "upto"}], "columns"?:
    [name]}`` (at most ``MAX_READ_MESSAGES`` offsets in all) -> ``{"ranges": [{"index", "partitionId",
    "partition", "queue", "offsets", "transactionIds", "data", "createdAtUs", "traceIds", "producerSubs"}]}``:
    per range (in request order; an unknown partition is left out) its messages in offset order as parallel
    arrays, ``data`` as JSON text (decrypted), ``createdAtUs`` as microseconds since the Unix epoch.
    ``columns`` (default: all of ``READ_COLUMNS``) names the per-message fields wanted; the others are left
    out of the answer, and PostgreSQL does not compute them (spark_read_v5). With ``Accept:
    application/octet-stream`` the payloads come as bytes after a JSON header (:func:`_read_binary`)."""
    worker = worker_of(request)
    body = await json_object(request)
    ranges = body.get("ranges")
    if not isinstance(ranges, list) or not 0 < len(ranges) <= MAX_READ_RANGES:
        raise InvalidRequest(f"ranges must be an array of 1 to {MAX_READ_RANGES} objects")
    ids: list[str] = []
    afters: list[int] = []
    uptos: list[int] = []
    for i, item in enumerate(ranges):
        if not isinstance(item, dict):
            raise InvalidRequest(f"ranges[{i}] must be an object")
        after: Any = item.get("after", 0)
        upto: Any = item.get("upto")
        for name, value in (("after", after), ("upto", upto)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**62:
                raise InvalidRequest(f"ranges[{i}].{name} must be an integer offset >= 0")
        if upto < after:
            raise InvalidRequest(f"ranges[{i}]: upto ({upto}) is below after ({after})")
        ids.append(v.check_uuid(item.get("partitionId"), f"ranges[{i}].partitionId"))
        afters.append(int(after))
        uptos.append(int(upto))
    if sum(uptos) - sum(afters) > MAX_READ_MESSAGES:
        raise InvalidRequest(f"ranges span {sum(uptos) - sum(afters)} offsets, more than {MAX_READ_MESSAGES}")
    columns = _read_columns(body.get("columns", list(READ_COLUMNS)))
    if request.headers.get("accept") == BINARY:
        return await _read_binary(worker, ids, afters, uptos, columns)
    rows = await worker.database.fetch(
        "SELECT * FROM queen.spark_read_v2($1::uuid[], $2::bigint[], $3::bigint[])", ids, afters, uptos
    )
    out = []
    for row in rows:
        data = row["payloads"]
        if row["encrypted"] and worker.cipher is not None:
            for position in row["encrypted"]:
                data[position - 1] = orjson.dumps(
                    worker.cipher.decrypt(orjson.loads(data[position - 1]))
                ).decode()
        out.append(
            {
                "index": row["range_index"] - 1,
                "partitionId": str(row["partition_id"]),
                "partition": row["partition_name"],
                "queue": row["queue_name"],
                "offsets": row["offsets"],
                "transactionIds": row["transaction_ids"],
                "data": data,
                "createdAtUs": row["created_us"],
                "traceIds": row["trace_ids"],
                "producerSubs": row["producer_subs"],
            }
        )
    if len(columns) < len(READ_COLUMNS):  # version 2 computes every field: leave out the others here
        for block in out:
            for name in set(READ_COLUMNS) - set(columns):
                del block[name]
    return json_response({"ranges": out}, empty_as_body=True)


def _read_columns(value: Any) -> list[str]:
    if not isinstance(value, list) or any(name not in READ_COLUMNS for name in value):
        raise InvalidRequest(f"columns must be an array of names among {', '.join(READ_COLUMNS)}")
    return [name for name in READ_COLUMNS if name in value]


async def _read_binary(
    worker: Worker, ids: list[str], afters: list[int], uptos: list[int], columns: list[str]
) -> Response:
    """``/spark/read`` with ``Accept: application/octet-stream``: a 4-byte big-endian length, that many bytes
    of JSON header (the JSON answer's ranges with ``dataBytes``, each payload's length in bytes, instead of
    ``data``), then every range's payloads, concatenated in order (UTF-8 JSON texts). The payloads pass
    through as bytes: no JSON string per message to escape here and unescape in the connector. Without
    ``data`` in ``columns``, no ``dataBytes`` and no payload bytes."""
    rows = await worker.database.fetch(
        "SELECT * FROM queen.spark_read_v5($1::uuid[], $2::bigint[], $3::bigint[], $4::text[])",
        ids,
        afters,
        uptos,
        columns,
    )
    rows.sort(key=lambda row: int(row["range_index"]))  # spark_read_v5 leaves the order to its caller
    fields = {
        "transactionIds": "transaction_ids",
        "createdAtUs": "created_us",
        "traceIds": "trace_ids",
        "producerSubs": "producer_subs",
    }
    out, blobs = [], []
    for row in rows:
        block: dict[str, Any] = {
            "index": row["range_index"] - 1,
            "partitionId": str(row["partition_id"]),
            "partition": row["partition_name"],
            "queue": row["queue_name"],
            "offsets": row["offsets"],
        }
        block.update((name, row[fields[name]]) for name in columns if name in fields)
        out.append(block)
        if "data" not in columns:
            continue
        blob: bytes = row["payload_text"].encode()
        lengths: list[int] = row["payload_bytes"]
        if row["encrypted"] and worker.cipher is not None:
            pieces, position = [], 0
            for length in lengths:
                pieces.append(blob[position : position + length])
                position += length
            place = {offset: i for i, offset in enumerate(row["offsets"])}
            for offset in row["encrypted"]:  # offsets of the encrypted payloads
                i = place[offset]
                pieces[i] = orjson.dumps(worker.cipher.decrypt(orjson.loads(pieces[i])))
            lengths = [len(piece) for piece in pieces]
            blob = b"".join(pieces)
        blobs.append(blob)
        block["dataBytes"] = lengths
    header = orjson.dumps({"ranges": out})
    return Response(
        b"".join([len(header).to_bytes(4, "big"), header, *blobs]), media_type=BINARY, headers=CORS_HEADERS
    )


def _column(body: dict[str, Any], name: str, rows: int, *, required: bool = True) -> list[Any]:
    column = body.get(name)
    if column is None and not required:
        return [None] * rows
    if not isinstance(column, list) or len(column) != rows:
        raise InvalidRequest(f"{name} must be an array of {rows} values (one per row, as data)")
    return column


async def spark_rows(request: Request) -> Response:
    """Stage one write task's rows as columns: ``{"queryId", "batchId", "token", "first", "queue", "data":
    [JSON text | null], "partitions": [name | null], "transactionIds": [str | null], "traceIds"?: [uuid |
    null]}``; ``first`` is how many rows this token staged before (row numbers continue). Answers
    ``{"success", "staged"}``; a ``data`` value that is not JSON text is a 400 and nothing is staged."""
    worker = worker_of(request)
    body = await json_object(request)
    key = _batch_key(body)
    token = v.check_name(body.get("token"), "token")
    queue = v.check_name(body.get("queue"), "queue")
    first = body.get("first", 0)
    if isinstance(first, bool) or not isinstance(first, int) or first < 0:
        raise InvalidRequest("first must be a non-negative integer")
    data = body.get("data")
    if not isinstance(data, list) or len(data) > MAX_STAGE_ROWS:
        raise InvalidRequest(f"data must be an array of at most {MAX_STAGE_ROWS} JSON texts")
    rows = len(data)
    if any(value is not None and type(value) is not str for value in data):
        raise InvalidRequest("data must hold JSON text (strings) or null")
    partitions = _column(body, "partitions", rows, required=False)
    for name in set(partitions) - {None}:
        v.check_name(name, "partitions[]")
    transaction_ids = _column(body, "transactionIds", rows, required=False)
    for i, value in enumerate(transaction_ids):
        if value is not None:
            v.check_name(value, f"transactionIds[{i}]")
    trace_ids = _column(body, "traceIds", rows, required=False)
    trace_ids = [None if t is None else v.check_uuid(t, f"traceIds[{i}]") for i, t in enumerate(trace_ids)]
    encrypted = worker.cipher is not None and bool(await worker.queues_with_encryption({queue or ""}))
    if encrypted and worker.cipher is not None:
        cipher = worker.cipher
        data = [
            None if d is None else orjson.dumps(cipher.encrypt(_json_text(d, i))).decode()
            for i, d in enumerate(data)
        ]
    claims = getattr(request.state, "claims", None) or {}
    try:
        staged = await worker.database.fetchval(
            "SELECT queen.spark_stage_v2($1, $2, $3, $4, $5, $6::text[], $7::text[], $8::uuid[], "
            "$9::text[], $10, $11)",
            key["queryId"],
            key["batchId"],
            token,
            first,
            queue,
            partitions,
            transaction_ids,
            trace_ids,
            data,
            claims.get("sub") or None,
            encrypted,
        )
    except asyncpg.exceptions.DataError as exc:
        raise InvalidRequest(
            f"data: a row is not JSON text that PostgreSQL's jsonb can store: {exc}"
        ) from exc
    return json_response({"success": True, "staged": staged})


async def spark_push(request: Request) -> Response:
    """Push one direct write task's rows (``commit=direct``):
    ``{"queryId", "batchId", "task", "token", "queue", "partitions": [name], "partitionIndexes": [int],
    "transactionIds": [str | null], "data": [JSON text | null], "traceIds"?: [uuid | null], "staleOk"?:
    bool}``; ``partitionIndexes`` point into ``partitions`` (0-based), one per row, as the other arrays. With
    ``Content-Type: application/octet-stream`` the body is a 4-byte big-endian length, that many bytes of the
    same JSON object with ``dataBytes`` (each payload's length in bytes, -1 for none) instead of ``data``,
    then the payloads' UTF-8 texts, concatenated: they pass through to PostgreSQL as bytes (no JSON string per
    row to unescape here). Answers ``{"success", "committed", "stale", "pushed", "duplicates"}``
    (procedures/115_spark_copy.sql, spark_push_direct_v4); a row that is not JSON text is a 400 and nothing of
    the request is stored."""
    worker = worker_of(request)
    blob: bytes | None = None
    data: list[Any] = []
    if request.headers.get("content-type") == BINARY:
        raw = await request.body()
        size = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else -1
        if not 0 < size <= len(raw) - 4:
            raise InvalidRequest("a binary body starts with the 4-byte length of its JSON header")
        body = v.parse_body(raw[4 : 4 + size])
        if not isinstance(body, dict):
            raise InvalidRequest("request body must be a JSON object")
        blob = raw[4 + size :]
        lengths = body.get("dataBytes")
        if (
            not isinstance(lengths, list)
            or len(lengths) > MAX_STAGE_ROWS
            or any(isinstance(n, bool) or not isinstance(n, int) or not -1 <= n < 2**31 for n in lengths)
        ):
            raise InvalidRequest(
                f"dataBytes must be an array of at most {MAX_STAGE_ROWS} lengths (-1 or more)"
            )
        if sum(n for n in lengths if n > 0) != len(blob):
            raise InvalidRequest("the payload lengths (dataBytes) do not add up to the bytes sent")
        rows = len(lengths)
    else:
        body = await json_object(request)
        texts = body.get("data")
        if not isinstance(texts, list) or len(texts) > MAX_STAGE_ROWS:
            raise InvalidRequest(f"data must be an array of at most {MAX_STAGE_ROWS} JSON texts")
        data = texts
        if any(value is not None and type(value) is not str for value in data):
            raise InvalidRequest("data must hold JSON text (strings) or null")
        rows = len(data)
    key = _batch_key(body)
    token = v.check_name(body.get("token"), "token")
    queue = v.check_name(body.get("queue"), "queue")
    task = body.get("task", 0)
    if isinstance(task, bool) or not isinstance(task, int) or not 0 <= task < 2**31:
        raise InvalidRequest("task must be a non-negative integer")
    partitions = body.get("partitions")
    if not isinstance(partitions, list) or not partitions and rows:
        raise InvalidRequest("partitions must be an array of partition names")
    partitions = [v.check_name(name, "partitions[]") for name in partitions]
    if len(set(partitions)) != len(partitions):
        raise InvalidRequest("partitions must not repeat a name")
    indexes = _column(body, "partitionIndexes", rows)
    if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(partitions) for i in indexes):
        raise InvalidRequest(f"partitionIndexes must hold integers from 0 to {len(partitions) - 1}")
    transaction_ids = _column(body, "transactionIds", rows, required=False)
    for i, value in enumerate(transaction_ids):
        if value is not None:
            v.check_name(value, f"transactionIds[{i}]")
    trace_ids = _column(body, "traceIds", rows, required=False)
    trace_ids = [None if t is None else v.check_uuid(t, f"traceIds[{i}]") for i, t in enumerate(trace_ids)]
    encrypted = worker.cipher is not None and bool(await worker.queues_with_encryption({queue or ""}))
    if blob is not None and encrypted:  # the cipher takes JSON values: split the bytes into texts
        position = 0
        for i, length in enumerate(body["dataBytes"]):
            if length < 0:
                data.append(None)
                continue
            try:
                data.append(blob[position : position + length].decode())
            except UnicodeDecodeError as exc:
                raise InvalidRequest(f"data[{i}] is not UTF-8 text") from exc
            position += length
        blob = None
    claims = getattr(request.state, "claims", None) or {}
    sub = claims.get("sub") or None
    stale_ok = bool(body.get("staleOk", False))
    if blob is None:  # JSON texts (encrypted here when the queue asks for it) as the bytes of a binary body
        if encrypted and worker.cipher is not None:
            cipher = worker.cipher
            data = [
                None if d is None else orjson.dumps(cipher.encrypt(_json_text(d, i))).decode()
                for i, d in enumerate(data)
            ]
        encoded = [None if d is None else d.encode() for d in data]
        blob = b"".join(e for e in encoded if e is not None)
        lengths = [-1 if e is None else len(e) for e in encoded]
    else:
        lengths = body["dataBytes"]
    try:
        text = await worker.database.fetchval(
            "SELECT queen.spark_push_direct_v4($1, $2, $3, $4, $5, $6::text[], $7::integer[], $8::text[], "
            "$9::uuid[], $10::bytea, $11::integer[], $12, $13, $14)::text",
            key["queryId"],
            key["batchId"],
            task,
            token,
            queue,
            partitions,
            indexes,
            transaction_ids,
            trace_ids,
            blob,
            lengths,
            sub,
            encrypted,
            stale_ok,
        )
    except asyncpg.exceptions.DataError as exc:
        raise InvalidRequest(
            f"data: a row is not JSON text that PostgreSQL's jsonb can store: {exc}"
        ) from exc
    result = orjson.loads(text)
    touched = {(q, p) for q, _, p in (k.partition("/") for k in result.pop("touched", None) or [])}
    if touched:
        worker.engine.announce(touched)
    return json_response({"success": True, **result})


def _json_text(text: str, row: int) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"data[{row}] is not JSON text: {exc}") from exc


async def spark_cursor(request: Request) -> Response:
    body = await json_object(request)
    queue = v.check_name(body.get("queue"), "queue")
    group = v.check_name(body.get("consumerGroup"), "consumerGroup")
    offsets = body.get("offsets")
    if not isinstance(offsets, dict):
        raise InvalidRequest("offsets must be an object {partitionId: offset}")
    clean = {}
    for key, value in offsets.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidRequest(f"offsets[{key!r}] must be a non-negative integer")
        clean[v.check_uuid(key, "offsets key")] = value
    return json_response(
        (
            await worker_of(request).database.fetchval(
                "SELECT queen.spark_commit_cursor_v1($1, $2, $3::jsonb)::text",
                queue,
                group,
                orjson.dumps(clean).decode(),
            )
        ).encode()
    )


def _batch_key(body: dict[str, Any]) -> dict[str, Any]:
    batch_id = body.get("batchId")
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise InvalidRequest("batchId must be a non-negative integer")
    return {"queryId": v.check_name(body.get("queryId"), "queryId"), "batchId": batch_id}


def _tokens(body: dict[str, Any]) -> list[str]:
    tokens = body.get("tokens")
    if not isinstance(tokens, list):
        raise InvalidRequest("tokens must be an array of strings")
    return [v.check_name(t, "tokens[]") or "" for t in tokens]


async def spark_stage(request: Request) -> Response:
    worker = worker_of(request)
    body = await json_object(request)
    key = _batch_key(body)
    items = v.validate_push({"items": body.get("items")})
    await worker.encrypt_items(items)
    payload = {**key, "token": v.check_name(body.get("token"), "token"), "items": items}
    return json_response(
        (
            await worker.database.fetchval(
                "SELECT queen.spark_stage_v1($1::jsonb)::text", orjson.dumps(payload).decode()
            )
        ).encode()
    )


async def spark_commit(request: Request) -> Response:
    worker = worker_of(request)
    body = await json_object(request)
    if body.get("mode") == "direct":  # the tasks pushed the rows (/spark/push): record the batch, once
        payload: dict[str, Any] = _batch_key(body)
        procedure = "spark_commit_direct_v1"
    elif "counts" in body:  # version 2: rows staged by /spark/rows, each token with its row count
        counts = body["counts"]
        payload = {**_batch_key(body), "tokens": _tokens(body), "counts": counts}
        if (
            not isinstance(counts, list)
            or len(counts) != len(payload["tokens"])
            or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in counts)
        ):
            raise InvalidRequest("counts must be an array of non-negative integers, one per token")
        mode = body.get("mode", "sync")
        if mode not in ("sync", "pipelined"):
            raise InvalidRequest("mode must be 'sync', 'pipelined' or 'direct'")
        payload["mode"] = mode
        procedure = "spark_commit_batch_v2"
    elif "mode" in body:
        raise InvalidRequest("mode needs counts (rows staged by /api/v1/spark/rows)")
    else:
        payload = {**_batch_key(body), "tokens": _tokens(body)}
        procedure = "spark_commit_batch_v1"
    result = orjson.loads(
        await worker.database.fetchval(
            f"SELECT queen.{procedure}($1::jsonb)::text", orjson.dumps(payload).decode()
        )
    )
    touched = {
        (queue, partition)
        for queue, _, partition in (key.partition("/") for key in result.pop("touched", None) or [])
    }
    if touched:
        worker.engine.announce(touched)
    if result.get("pending"):
        worker.spark_applier.schedule(payload["queryId"])
    return json_response(result)


async def spark_flush(request: Request) -> Response:
    """Apply a query's pipelined micro-batches still pending, now: ``{"success", "applied", "pushed"}``."""
    body = await json_object(request)
    query_id = v.check_name(body.get("queryId"), "queryId")
    return json_response({"success": True, **await worker_of(request).spark_applier.apply(query_id)})


async def spark_abort(request: Request) -> Response:
    body = await json_object(request)
    payload = {**_batch_key(body), "tokens": _tokens(body)}
    return json_response(
        (
            await worker_of(request).database.fetchval(
                "SELECT queen.spark_abort_v2($1::jsonb)::text", orjson.dumps(payload).decode()
            )
        ).encode()
    )


ENDPOINTS = [
    Endpoint("/api/v1/spark/offsets", "GET", spark_offsets, Level.READ_ONLY),
    Endpoint("/api/v1/spark/messages", "GET", spark_messages, Level.READ_ONLY),
    Endpoint("/api/v1/spark/read", "POST", spark_read, Level.READ_ONLY),
    Endpoint("/api/v1/spark/cursor", "POST", spark_cursor, Level.READ_WRITE),
    Endpoint("/api/v1/spark/stage", "POST", spark_stage, Level.READ_WRITE),
    Endpoint("/api/v1/spark/rows", "POST", spark_rows, Level.READ_WRITE),
    Endpoint("/api/v1/spark/push", "POST", spark_push, Level.READ_WRITE),
    Endpoint("/api/v1/spark/commit", "POST", spark_commit, Level.READ_WRITE),
    Endpoint("/api/v1/spark/abort", "POST", spark_abort, Level.READ_WRITE),
    Endpoint("/api/v1/spark/flush", "POST", spark_flush, Level.READ_WRITE),
]
