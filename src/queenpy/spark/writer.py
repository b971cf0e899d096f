"""Writers of the ``queen`` sink: streaming (:class:`QueenStreamWriter`) and batch (:class:`QueenBatchWriter`).

Protocol, one broker transaction per micro-batch (SPARK-NOTES.md section 7):

1. ``write()`` (executors, once per task attempt) turns its Arrow record batches into columns (``data`` as
   JSON text, passed through untouched when it is a string column; partition names; transaction ids) and stages
   them with ``POST /api/v1/spark/rows`` under ``(queryId, batchId, token)``, ``stageBatchSize`` rows per
   request; ``token`` is fresh per task attempt. It returns a :class:`QueenCommitMessage` with the row count.
2. ``commit(messages, batchId)`` (driver side) calls ``POST /api/v1/spark/commit`` with the tokens of the
   successful tasks, in task order, and their row counts. The broker checks every token's rows are staged,
   pushes them and records ``(queryId, batchId)`` in one PostgreSQL transaction; a replayed batch (same query id
   and batch id after a crash) is answered ``duplicate`` and pushes nothing. All staging rows of the batch
   (including those of killed attempts) go. With ``commit=pipelined`` the transaction only checks and records
   the batch with its tokens; the broker pushes the rows in a second transaction while Spark runs the next
   micro-batch (the query's next commit, ``POST /api/v1/spark/flush`` or the broker's sweep do it if that one
   did not happen), still once and in batch order (``services/spark_apply.py``).
3. ``abort`` deletes the batch's staged rows of the given tokens; it is idempotent and never touches a committed
   batch (Spark may call it after a commit that succeeded but whose worker died).

The key is ``sql.streaming.queryId``, stable across restarts from one checkpoint (never the batch id alone:
it restarts at 0 with a new checkpoint), and the ``streaming.sql.batchId`` task property.

Transaction ids are derived (:func:`derive_transaction_id`) as a pure function of the query id, the batch id
and the row's identity: ``(partitionId, offset, k)`` when the rows carry the source columns ``partitionId`` and
``offset`` (the k-th output row of that input message in this task), else ``(task partition, row index)``.
A replayed batch therefore produces the same ids, and the broker's per-partition transaction-id dedupe is a
second line of defence behind the commit protocol.

Per-partition order: a task's rows are staged in iterator order and committed in task order, so a copy of a
queue keeps each partition's order (ranges of one partition are tasks in offset order).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from queenpy.errors import InvalidRequest

from .api import SparkBroker
from .options import SinkOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = [
    "QueenBatchWriter",
    "QueenCommitMessage",
    "QueenStreamWriter",
    "RowEncoder",
    "check_sink_schema",
    "derive_transaction_id",
    "first_non_json",
]

log = logging.getLogger("queenpy.spark")

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def derive_transaction_id(query_id: str, batch_id: int, identity: str) -> str:
    """A transaction id that depends only on its arguments: ``"spark-" + 32 hex digits`` (BLAKE2b-128)."""
    key = f"{query_id}\x1f{batch_id}\x1f{identity}".encode()
    return "spark-" + hashlib.blake2b(key, digest_size=16).hexdigest()


def check_sink_schema(names: Sequence[str], options: SinkOptions) -> None:
    """Fail at query start, not in a task: the rows need ``data`` and the configured columns.

    Raises:
        ValueError: a required column is missing.
    """
    required = ["data"]
    if options.partition is None and options.partition_column:
        required.append(options.partition_column)
    if options.transaction_id_column:
        required.append(options.transaction_id_column)
    missing = [name for name in required if name not in names]
    if missing:
        raise ValueError(f"the queen sink needs column(s) {missing}; the rows have {list(names)}")


class RowEncoder:
    """Turns Arrow record batches into the staging columns of one task: ``{"data": [JSON text | None],
    "partitions": [name], "transactionIds": [str | None], "traceIds"?: [str | None]}``, numbering rows for the
    derived transaction ids.

    ``data`` may be JSON text (sent as it is; the broker rejects a row that is not JSON, and
    :func:`first_non_json` then names it) or any other Spark type (structs become objects).
    """

    def __init__(self, options: SinkOptions, query_id: str, batch_id: int, task: int) -> None:
        self.options = options
        self.query_id = query_id
        self.batch_id = batch_id
        self.task = task
        self.rows = 0
        self._occurrences: dict[tuple[str, int], int] = {}

    def encode(self, batch: pa.RecordBatch) -> dict[str, list[Any]]:
        import pyarrow as pa

        names = batch.schema.names
        n = batch.num_rows
        data_column = batch.column(names.index("data"))
        if pa.types.is_string(data_column.type) or pa.types.is_large_string(data_column.type):
            texts: list[Any] = data_column.to_pylist()
        else:
            texts = [None if value is None else orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
                     for value in data_column.to_pylist()]
        options = self.options
        if options.partition is not None:
            partitions: list[Any] = [options.partition] * n
        else:
            column = options.partition_column or ("partition" if "partition" in names else None)
            partitions = batch.column(names.index(column)).to_pylist() if column else [None] * n
            if any(p is not None and type(p) is not str for p in partitions):
                partitions = [None if p is None else str(p) for p in partitions]
        if options.transaction_id_column:
            transaction_ids = [
                None if v is None else str(v)
                for v in batch.column(names.index(options.transaction_id_column)).to_pylist()
            ]
        else:
            transaction_ids = self._derive(batch, n)
        columns: dict[str, list[Any]] = {"data": texts, "partitions": partitions, "transactionIds": transaction_ids}
        if "traceId" in names:
            trace_ids = batch.column(names.index("traceId")).to_pylist()
            if any(trace_ids):
                columns["traceIds"] = [str(t) if t else None for t in trace_ids]
        self.rows += n
        return columns

    def _derive(self, batch: pa.RecordBatch, n: int) -> list[str | None]:
        names = batch.schema.names
        prefix = f"{self.query_id}\x1f{self.batch_id}\x1f"
        blake2b = hashlib.blake2b
        ids: list[str | None] = []
        if "partitionId" in names and "offset" in names:
            pids = batch.column(names.index("partitionId")).to_pylist()
            offsets = batch.column(names.index("offset")).to_pylist()
            seen = self._occurrences
            for i in range(n):
                pid, offset = pids[i], offsets[i]
                if pid is None or offset is None:
                    identity = f"row:{self.task}:{self.rows + i}"
                else:
                    key = (pid, offset)
                    k = seen.get(key, 0)
                    seen[key] = k + 1
                    identity = f"src:{pid}:{offset}:{k}"
                ids.append("spark-" + blake2b((prefix + identity).encode(), digest_size=16).hexdigest())
        else:
            for i in range(n):
                identity = f"row:{self.task}:{self.rows + i}"
                ids.append("spark-" + blake2b((prefix + identity).encode(), digest_size=16).hexdigest())
        return ids


#: bytes counted per staged row for its other columns (partition, transaction id, trace id) and JSON syntax
ROW_OVERHEAD_BYTES = 128


def rows_that_fit(data: Sequence[str | None], max_rows: int, max_bytes: int) -> int:
    """How many leading rows of ``data`` (JSON texts) go in one ``/spark/rows`` request: at most ``max_rows``,
    and as many as keep the estimated body within ``max_bytes`` (each text's UTF-8 length plus one byte per
    quote or backslash that the body's JSON escapes, plus ``ROW_OVERHEAD_BYTES``); always at least one."""
    total = 0
    for i, text in enumerate(data[:max_rows]):
        size = ROW_OVERHEAD_BYTES
        if text is not None:
            size += len(text.encode()) + text.count('"') + text.count("\\")
        total += size
        if total > max_bytes:
            return max(1, i)
    return min(len(data), max_rows)


def first_non_json(texts: Sequence[Any]) -> tuple[int, str] | None:
    """The first row (index, error) of ``texts`` that is not JSON text, or None when all parse."""
    for i, text in enumerate(texts):
        if text is None:
            continue
        try:
            orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            return i, f"{exc}: {str(text)[:80]!r}"
    return None


@dataclass
class QueenCommitMessage(WriterCommitMessage):
    """What one task reports to the driver: the staging key and how many items it staged."""

    query_id: str
    batch_id: int
    token: str
    staged: int
    task: int
    attempt: int


def _stage_task(
    options: SinkOptions, batches: Iterator[pa.RecordBatch], query_id: str, batch_id: int
) -> QueenCommitMessage:
    from pyspark import TaskContext

    context = TaskContext.get()
    task = context.partitionId() if context else 0
    attempt = context.attemptNumber() if context else 0
    token = uuid.uuid4().hex
    encoder = RowEncoder(options, query_id, batch_id, task)
    staged = 0
    pending: dict[str, list[Any]] = {}
    broker = SparkBroker(options.url, options.token)

    def flush(limit: int) -> None:
        nonlocal staged, pending
        while pending and len(pending["data"]) >= limit:
            size = rows_that_fit(pending["data"], options.stage_batch_size, options.stage_batch_bytes)
            chunk = {name: values[:size] for name, values in pending.items()}
            pending = {name: values[size:] for name, values in pending.items()} if size < len(pending["data"]) else {}
            try:
                staged += broker.stage_rows(query_id, batch_id, token, staged, options.queue, chunk)
            except InvalidRequest as exc:
                bad = first_non_json(chunk["data"])
                if bad is not None:
                    row = staged + bad[0]
                    raise ValueError(f"row {row}: column data is not JSON text ({bad[1]})") from exc
                raise

    for batch in batches:
        columns = encoder.encode(batch)
        if pending and set(columns) != set(pending):  # a traceIds column appeared or went: make both have it
            for side in (pending, columns):
                side.setdefault("traceIds", [None] * len(side["data"]))
        if not pending:
            pending = columns
        else:
            for name, values in columns.items():
                pending[name].extend(values)
        flush(options.stage_batch_size)
    flush(1)
    return QueenCommitMessage(query_id, batch_id, token, staged, task, attempt)


def _tokens(messages: Sequence[WriterCommitMessage | None]) -> tuple[str | None, list[str], list[int]]:
    ours = [m for m in messages if isinstance(m, QueenCommitMessage)]
    ours.sort(key=lambda m: m.task)
    return (ours[0].query_id if ours else None), [m.token for m in ours], [m.staged for m in ours]


class QueenStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("queen").option("queue", ...)``: one broker transaction per micro-batch."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> QueenCommitMessage:
        """Stage this task's rows (executor)."""
        from pyspark import TaskContext

        context = TaskContext.get()
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        if not query_id or batch_id is None:
            raise RuntimeError("the queen stream writer runs outside a streaming task (no query/batch id)")
        return _stage_task(self.options, iterator, query_id, int(batch_id))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Push the micro-batch, once (driver side)."""
        query_id, tokens, counts = _tokens(messages)
        if query_id is None:
            return
        with SparkBroker(self.options.url, self.options.token) as broker:
            result = broker.commit(query_id, batchId, tokens, counts,
                                   pipelined=self.options.commit_mode == "pipelined")
        if result.duplicate:
            log.warning(
                "queen sink: batch %s of query %s was committed before; nothing pushed", batchId, query_id
            )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Drop the micro-batch's staged rows (driver side; idempotent)."""
        query_id, tokens, _ = _tokens(messages)
        if query_id is None or not tokens:
            return
        with SparkBroker(self.options.url, self.options.token) as broker:
            broker.abort(query_id, batchId, tokens)


class QueenBatchWriter(DataSourceArrowWriter):
    """``df.write.format("queen").option("queue", ...).mode("append").save()``: all rows in one transaction.

    The staging key is ``("batch-" + writeId, 0)``; with a stable ``writeId`` option, running the same write
    again pushes nothing (the broker answers ``duplicate``).
    """

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.query_id = "batch-" + (options.write_id or uuid.uuid4().hex)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> QueenCommitMessage:
        return _stage_task(self.options, iterator, self.query_id, 0)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        query_id, tokens, counts = _tokens(messages)
        with SparkBroker(self.options.url, self.options.token) as broker:
            broker.commit(query_id or self.query_id, 0, tokens, counts)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        query_id, tokens, _ = _tokens(messages)
        if tokens:
            with SparkBroker(self.options.url, self.options.token) as broker:
                broker.abort(query_id or self.query_id, 0, tokens)


def sink_options(options: Mapping[str, str], schema: StructType) -> SinkOptions:
    """Parse and check the sink options against the DataFrame's columns (raises ValueError)."""
    parsed = SinkOptions.parse(options)
    check_sink_schema(schema.fieldNames(), parsed)
    return parsed
