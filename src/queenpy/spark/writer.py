"""Writers of the ``queen`` sink: streaming (:class:`QueenStreamWriter`) and batch
(:class:`QueenBatchWriter`).

Two commit modes (docs/spark.md, "Direct or staged"):

**Direct** (``commit=direct``, the default when every row has a stable identity, see :func:`plan_commit`):

1. ``write()`` (executors, once per task attempt) pushes its rows itself with ``POST /api/v1/spark/push``, in
   iterator order, in requests bounded by ``stageBatchSize`` rows and ``stageBatchBytes`` bytes, each row with
   a transaction id derived from the query id, the batch id and the row's identity (:class:`RowEncoder`).
   The broker stores a row unless its ``(partition, transactionId)`` is stored already, so a retried task or a
   replayed micro-batch pushes the same ids and stores nothing twice; it answers ``committed`` for a batch
   recorded before (the task then pushes nothing more), and refuses a replay older than the target queue keeps
   transaction ids (``staleReplay``).
2. ``commit(messages, batchId)`` (driver side) only records ``(queryId, batchId)`` with
   ``POST /api/v1/spark/commit`` ``{"mode": "direct"}``, for progress and the broker's views.

A direct batch's rows are visible as its tasks push them, before Spark commits the batch.

**Staged** (``commit=staged``, or ``pipelined``; the fallback when the rows have no stable identity, said once
in the log): ``write()`` stages its rows with ``POST /api/v1/spark/rows`` under ``(queryId, batchId, token)``
(``token`` fresh per task attempt); ``commit`` calls ``POST /api/v1/spark/commit`` with the tokens of the
successful tasks, in task order, and their row counts: the broker checks every token's rows are staged, pushes
them and records the batch in one PostgreSQL transaction (``pipelined``: records it, and pushes in a second
transaction while Spark runs the next micro-batch, ``services/spark_apply.py``); a replayed batch is answered
``duplicate`` and pushes nothing. ``abort`` deletes the batch's staged rows of the given tokens; it is
idempotent and never touches a committed batch (Spark may call it after a commit whose worker died).

The key is ``sql.streaming.queryId``, stable across restarts from one checkpoint (never the batch id alone:
it restarts at 0 with a new checkpoint), and the ``streaming.sql.batchId`` task property.

Per-partition order: a task's rows go in iterator order. The source puts each partition's range of a
micro-batch in one task (:func:`queenpy.spark.offsets.plan_tasks`), so in a copy each target partition is
written by one task, in source order (direct); staged commits also keep task order.

The encoding is columnar (pyarrow compute and numpy): no Python code runs per row for JSON text ``data``,
source identities, partitions and the request sizes (``benchmarks/spark_cost.py`` measures the workers).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
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
    import numpy as np
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = [
    "CommitPlan",
    "QueenBatchWriter",
    "QueenCommitMessage",
    "QueenStreamWriter",
    "RowEncoder",
    "check_sink_schema",
    "chunk_bounds",
    "derive_prefix",
    "first_non_json",
    "plan_commit",
]

log = logging.getLogger("queenpy.spark")

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"

#: bytes counted per row for its other columns (partition, transaction id, trace id) and JSON syntax
ROW_OVERHEAD_BYTES = 128

_LOGGED: set[tuple[str, str]] = set()  # (query id, what): log lines of the driver's sink runner, once each


def derive_prefix(query_id: str, batch_id: int, identity: str) -> str:
    """The transaction-id prefix of one identity group: ``"spark-" + 24 hex digits + "-"`` (BLAKE2b-96 of the
    query id, the batch id and ``identity``). A row's transaction id is the prefix of its group plus its
    place in it (see :class:`RowEncoder`), so it depends only on these and the row's identity."""
    key = f"{query_id}\x1f{batch_id}\x1f{identity}".encode()
    return "spark-" + hashlib.blake2b(key, digest_size=12).hexdigest() + "-"


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
    required.extend(options.id_columns)
    missing = [name for name in required if name not in names]
    if missing:
        raise ValueError(f"the queen sink needs column(s) {missing}; the rows have {list(names)}")


@dataclass(frozen=True)
class CommitPlan:
    """How the micro-batches of a streaming query reach the queue: ``mode`` is ``direct``, ``sync`` (staged,
    applied by the commit) or ``pipelined`` (staged, applied after it); ``identity`` what a direct row's
    transaction id derives from (``source``: the columns ``partitionId`` and ``offset``; ``columns``:
    ``idColumns``; ``given``: ``transactionIdColumn``; ``position``: the row's place in its task, staged
    only); ``fallback`` why a direct request became staged, else None."""

    mode: str
    identity: str
    fallback: str | None = None


def plan_commit(names: Sequence[str], options: SinkOptions) -> CommitPlan:
    """The commit plan of a sink with these columns: direct when each row has a stable identity (the
    transaction id column, the ``idColumns``, or the source columns ``partitionId`` and ``offset``), else
    staged with the reason. A replayed micro-batch reads the same input, so any of these gives a row the same
    transaction id again; a row's place in a task does not (a shuffle may deliver rows in another order)."""
    if options.transaction_id_column:
        identity = "given"
    elif options.id_columns:
        identity = "columns"
    elif "partitionId" in names and "offset" in names:
        identity = "source"
    else:
        identity = "position"
    if options.commit_mode != "direct":
        return CommitPlan(options.commit_mode, "given" if identity == "given" else "position")
    if identity == "position":
        return CommitPlan(
            "sync",
            identity,
            "the rows have no stable identity: neither the source columns "
            "partitionId and offset, nor idColumns, nor transactionIdColumn",
        )
    return CommitPlan("direct", identity)


class RowEncoder:
    """Turns the Arrow record batches of one task into request columns, numbering rows for their transaction
    ids (the ``identity`` of :class:`CommitPlan`):

    - ``source``: prefix of ``(partitionId)`` + ``offset`` (+ ``"." + k`` for the k-th output row of one input
      message, k > 0: the rows of one message must be adjacent, as a select, filter or explode leaves them);
    - ``columns``: prefix of the ``idColumns`` values (JSON) (+ ``"." + k`` for repeated values);
    - ``given``: the ``transactionIdColumn`` as text;
    - ``position``: prefix of the task + the row's number in it (staged commits only).

    ``data`` may be JSON text (sent as it is; the broker rejects a row that is not JSON, and
    :func:`first_non_json` then names it) or any other Spark type (structs become objects).
    """

    def __init__(self, options: SinkOptions, query_id: str, batch_id: int, task: int, identity: str) -> None:
        self.options = options
        self.query_id = query_id
        self.batch_id = batch_id
        self.task = task
        self.identity = identity
        self.rows = 0
        self._prefixes: dict[str, str] = {}
        self._last: tuple[Any, ...] | None = None  # the last identity seen, and how often in a row
        self._high: dict[str, int] = {}  # source identity: the highest offset seen per partitionId
        self._seen: dict[str, list[np.ndarray]] = {}  # ... and the offsets, checked when they go back
        self._occurrences: dict[str, int] = {}  # idColumns: occurrences per identity

    def _prefix(self, identity: str) -> str:
        prefix = self._prefixes.get(identity)
        if prefix is None:
            prefix = self._prefixes[identity] = derive_prefix(self.query_id, self.batch_id, identity)
        return prefix

    def encode(self, batch: pa.RecordBatch) -> Encoded:
        """One record batch → :class:`Encoded` columns."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        names = batch.schema.names
        n = batch.num_rows
        data: pa.Array = batch.column(names.index("data"))
        if not (pa.types.is_string(data.type) or pa.types.is_large_string(data.type)):
            data = pa.array(
                [
                    None if value is None else orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
                    for value in data.to_pylist()
                ],
                type=pa.string(),
            )
        options = self.options
        if options.partition is not None:
            partitions: pa.Array = pa.array([options.partition] * n, type=pa.string())
        else:
            column = options.partition_column or ("partition" if "partition" in names else None)
            partitions = batch.column(names.index(column)) if column else pa.nulls(n, pa.string())
            if not pa.types.is_string(partitions.type):
                partitions = pc.cast(partitions, pa.string())
        trace_ids = None
        if "traceId" in names:
            column = batch.column(names.index("traceId"))
            if column.null_count < n:
                trace_ids = pc.cast(column, pa.string())
        transaction_ids = self._transaction_ids(batch, n)
        # UTF-8 bytes, not the JSON escapes of the request body: counting quotes cost 2-3 µs per 1 KB row
        # (pyarrow's count_substring), more than the rest of the encoding; stageBatchBytes stays far enough
        # below the broker's body limit for them (options.py)
        sizes = pc.fill_null(pc.binary_length(data), 0)
        self.rows += n
        return Encoded(
            data,
            partitions,
            transaction_ids,
            trace_ids,
            np.asarray(sizes.to_numpy(zero_copy_only=False), dtype=np.int64) + ROW_OVERHEAD_BYTES,
        )

    def _transaction_ids(self, batch: pa.RecordBatch, n: int) -> pa.Array:
        import pyarrow as pa
        import pyarrow.compute as pc

        names = batch.schema.names
        if self.identity == "given":
            column = batch.column(names.index(self.options.transaction_id_column or ""))
            return column if pa.types.is_string(column.type) else pc.cast(column, pa.string())
        if self.identity == "columns":
            return self._column_ids(batch, n)
        if self.identity == "source":
            return self._source_ids(
                batch.column(names.index("partitionId")), batch.column(names.index("offset"))
            )
        return self._position_ids(n)

    def _position_ids(self, n: int) -> pa.Array:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        numbers = pc.cast(pa.array(np.arange(self.rows, self.rows + n, dtype=np.int64)), pa.string())
        return pc.binary_join_element_wise(self._prefix(f"task:{self.task}"), numbers, "")

    def _column_ids(self, batch: pa.RecordBatch, n: int) -> pa.Array:
        import pyarrow as pa

        names = batch.schema.names
        values = [batch.column(names.index(name)).to_pylist() for name in self.options.id_columns]
        ids = []
        for row in zip(*values, strict=True):
            identity = orjson.dumps(row, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
            k = self._occurrences.get(identity, 0)
            self._occurrences[identity] = k + 1
            ids.append(self._prefix("cols:" + identity) + str(k))
        return pa.array(ids, type=pa.string())

    def _source_ids(self, partition_ids: pa.Array, offsets: pa.Array) -> pa.Array:
        """``prefix(partitionId) + offset (+ "." + k)``, computed on whole columns.

        Raises:
            ValueError: a row has no partitionId or offset, or rows of one input message are not adjacent.
        """
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(offsets)
        if n == 0:
            return pa.array([], type=pa.string())
        if partition_ids.null_count or offsets.null_count:
            raise ValueError(
                "a row has no partitionId or offset, so no stable transaction id for a direct commit: "
                'name the columns that identify a row with .option("idColumns", ...), or use '
                '.option("commit", "staged")'
            )
        encoded = (
            pc.dictionary_encode(partition_ids).combine_chunks()
            if isinstance(partition_ids, pa.ChunkedArray)
            else pc.dictionary_encode(partition_ids)
        )
        pids: list[str] = encoded.dictionary.to_pylist()
        index = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        values = np.asarray(offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        repeats = self._repeats(pids, index, values)
        prefixes = pa.array([self._prefix(f"src:{pid}") for pid in pids], type=pa.string()).take(
            encoded.indices
        )
        ids = pc.binary_join_element_wise(prefixes, pc.cast(offsets, pa.string()), "")
        if repeats is None:
            return ids
        suffix = pc.binary_join_element_wise(".", pc.cast(pa.array(repeats), pa.string()), "")
        return pc.if_else(pa.array(repeats > 0), pc.binary_join_element_wise(ids, suffix, ""), ids)

    def _repeats(self, pids: list[str], index: np.ndarray, offsets: np.ndarray) -> np.ndarray | None:
        """k per row (its place among the adjacent rows of one input message), or None when all are 0.

        Raises:
            ValueError: rows of one input message are not adjacent (their k would depend on row order, which a
                replay need not repeat).
        """
        import numpy as np

        n = len(offsets)
        same = np.zeros(n, dtype=bool)
        same[1:] = (index[1:] == index[:-1]) & (offsets[1:] == offsets[:-1])
        last = self._last
        carried = last is not None and last[0] == pids[index[0]] and last[1] == offsets[0]
        same[0] = carried
        # each partitionId's offsets must not come back to a message seen before (other than by adjacency)
        order = np.lexsort((offsets, index))
        keys_equal = (index[order][1:] == index[order][:-1]) & (offsets[order][1:] == offsets[order][:-1])
        if np.any(keys_equal & (order[1:] != order[:-1] + 1)):
            raise ValueError(_NOT_ADJACENT)
        for i, pid in enumerate(pids):
            mine = offsets[index == i]
            high = self._high.get(pid)
            if high is not None:
                back = mine[mine <= high]
                if carried and pid == pids[index[0]]:
                    back = back[back != offsets[0]]
                if len(back) and np.isin(back, np.concatenate(self._seen[pid])).any():
                    raise ValueError(_NOT_ADJACENT)
            self._seen.setdefault(pid, []).append(mine)
            self._high[pid] = int(mine.max()) if high is None else max(high, int(mine.max()))
        k = None
        if same.any():
            positions = np.arange(n)
            starts = np.where(same, 0, positions)
            np.maximum.accumulate(starts, out=starts)
            k = positions - starts
            if carried and last is not None:
                k[starts == 0] += last[2] + 1
        self._last = (pids[index[-1]], int(offsets[-1]), int(k[-1]) if k is not None else 0)
        return k


_NOT_ADJACENT = (
    "rows of one input message (partitionId, offset) are not adjacent in a write task, so their "
    "transaction ids would depend on an order a replay may not repeat: name the columns that "
    'identify an output row with .option("idColumns", ...), or use .option("commit", "staged")'
)


@dataclass
class Encoded:
    """One record batch as request columns (Arrow arrays) and each row's estimated size in a request body."""

    data: Any
    partitions: Any
    transaction_ids: Any
    trace_ids: Any
    sizes: Any = field(repr=False)

    def staging_columns(self, lo: int, hi: int) -> dict[str, list[Any]]:
        """Rows ``lo:hi`` as ``/spark/rows`` columns."""
        columns = {
            "data": self.data[lo:hi].to_pylist(),
            "partitions": self.partitions[lo:hi].to_pylist(),
            "transactionIds": self.transaction_ids[lo:hi].to_pylist(),
        }
        if self.trace_ids is not None:
            columns["traceIds"] = self.trace_ids[lo:hi].to_pylist()
        return columns

    def push_columns(self, lo: int, hi: int) -> tuple[dict[str, Any], Any]:
        """Rows ``lo:hi`` as ``/spark/push`` columns (the distinct partition names and one index per row, and
        ``dataBytes``: each payload's length in bytes, -1 for null) and the payloads' bytes: a slice of the
        Arrow column's own buffer, sent as it is."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        encoded = pc.dictionary_encode(pc.fill_null(self.partitions[lo:hi], "Default"))
        data = self.data[lo:hi]
        wide = pa.types.is_large_string(data.type)
        offsets = np.frombuffer(
            data.buffers()[1],
            dtype=np.int64 if wide else np.int32,
            count=len(data) + 1,
            offset=data.offset * (8 if wide else 4),
        )
        lengths = np.diff(offsets)
        if data.null_count:
            lengths = np.where(data.is_valid().to_numpy(zero_copy_only=False), lengths, -1)
        columns: dict[str, Any] = {
            "partitions": encoded.dictionary.to_pylist(),
            "partitionIndexes": np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int32),
            "transactionIds": self.transaction_ids[lo:hi].to_pylist(),
            "dataBytes": lengths.astype(np.int32),
        }
        if self.trace_ids is not None:
            columns["traceIds"] = self.trace_ids[lo:hi].to_pylist()
        blob = data.buffers()[2]
        return columns, (memoryview(blob)[int(offsets[0]) : int(offsets[-1])] if blob is not None else b"")


def chunk_bounds(sizes: Sequence[int] | np.ndarray, max_rows: int, max_bytes: int) -> list[tuple[int, int]]:
    """Cut rows of the given sizes (bytes) into consecutive requests of at most ``max_rows`` rows and
    ``max_bytes`` bytes, each with at least one row: ``[(lo, hi), ...]``."""
    import numpy as np

    total = np.cumsum(np.asarray(sizes, dtype=np.int64))
    bounds = []
    lo = 0
    n = len(total)
    while lo < n:
        base = total[lo - 1] if lo else 0
        hi = int(np.searchsorted(total, base + max_bytes, side="right"))
        hi = max(lo + 1, min(hi, lo + max_rows, n))
        bounds.append((lo, hi))
        lo = hi
    return bounds


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
    """What one task reports to the driver: the staging key and how many items it staged (staged), or how
    many it pushed and found stored already (direct)."""

    query_id: str
    batch_id: int
    token: str
    staged: int
    task: int
    attempt: int
    direct: bool = False
    duplicates: int = 0
    fallback: str | None = None


def _task_context() -> tuple[int, int]:
    from pyspark import TaskContext

    context = TaskContext.get()
    return (context.partitionId(), context.attemptNumber()) if context else (0, 0)


def _raise_bad_json(exc: InvalidRequest, data: list[Any], first_row: int) -> None:
    bad = first_non_json(data)
    if bad is not None:
        raise ValueError(f"row {first_row + bad[0]}: column data is not JSON text ({bad[1]})") from exc
    raise exc


def _stage_task(
    options: SinkOptions, plan: CommitPlan, batches: Iterator[pa.RecordBatch], query_id: str, batch_id: int
) -> QueenCommitMessage:
    task, attempt = _task_context()
    token = uuid.uuid4().hex
    encoder = RowEncoder(options, query_id, batch_id, task, plan.identity)
    staged = 0
    broker = SparkBroker(options.url, options.token)
    for batch in batches:
        encoded = encoder.encode(batch)
        for lo, hi in chunk_bounds(encoded.sizes, options.stage_batch_size, options.stage_batch_bytes):
            columns = encoded.staging_columns(lo, hi)
            try:
                staged += broker.stage_rows(query_id, batch_id, token, staged, options.queue, columns)
            except InvalidRequest as exc:
                _raise_bad_json(exc, columns["data"], staged)
    return QueenCommitMessage(query_id, batch_id, token, staged, task, attempt, fallback=plan.fallback)


def _push_task(
    options: SinkOptions, plan: CommitPlan, batches: Iterator[pa.RecordBatch], query_id: str, batch_id: int
) -> QueenCommitMessage:
    task, attempt = _task_context()
    token = uuid.uuid4().hex
    encoder = RowEncoder(options, query_id, batch_id, task, plan.identity)
    pushed = duplicates = rows = 0
    committed = stale = False
    broker = SparkBroker(options.url, options.token)
    for batch in batches:
        if committed:
            continue  # the batch was recorded before: its rows are in; read the rest of the input and stop
        encoded = encoder.encode(batch)
        for lo, hi in chunk_bounds(encoded.sizes, options.stage_batch_size, options.stage_batch_bytes):
            columns, payloads = encoded.push_columns(lo, hi)
            try:
                result = broker.push_direct(
                    query_id,
                    batch_id,
                    task,
                    token,
                    options.queue,
                    columns,
                    payloads,
                    stale_ok=options.stale_replay == "warn",
                )
            except InvalidRequest as exc:
                _raise_bad_json(exc, encoded.data[lo:hi].to_pylist(), rows)
            rows += hi - lo
            if result.committed:
                committed = True
                break
            if result.stale and not stale:
                stale = True
                log.warning(
                    "queen sink: task %s of batch %s of query %s replays an attempt older than queue "
                    "%s keeps transaction ids; pushing anyway (staleReplay=warn)",
                    task,
                    batch_id,
                    query_id,
                    options.queue,
                )
            pushed += result.pushed
            duplicates += result.duplicates
    return QueenCommitMessage(
        query_id, batch_id, token, pushed, task, attempt, direct=True, duplicates=duplicates
    )


def _tokens(messages: Sequence[WriterCommitMessage | None]) -> tuple[str | None, list[str], list[int]]:
    ours = [m for m in messages if isinstance(m, QueenCommitMessage)]
    ours.sort(key=lambda m: m.task)
    return (ours[0].query_id if ours else None), [m.token for m in ours], [m.staged for m in ours]


def _log_once(query_id: str, what: str, message: str, *args: Any) -> None:
    if (query_id, what) not in _LOGGED:
        _LOGGED.add((query_id, what))
        log.warning(message, *args)


class QueenStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("queen").option("queue", ...)``: direct pushes, or one broker transaction per
    micro-batch (see the module docstring and :func:`plan_commit`)."""

    def __init__(self, options: SinkOptions, plan: CommitPlan | None = None) -> None:
        self.options = options
        self.plan = plan or CommitPlan(
            options.commit_mode if options.commit_mode != "direct" else "sync", "position"
        )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> QueenCommitMessage:
        """Push (direct) or stage (staged) this task's rows (executor)."""
        from pyspark import TaskContext

        context = TaskContext.get()
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        if not query_id or batch_id is None:
            raise RuntimeError("the queen stream writer runs outside a streaming task (no query/batch id)")
        if self.plan.mode == "direct":
            return _push_task(self.options, self.plan, iterator, query_id, int(batch_id))
        return _stage_task(self.options, self.plan, iterator, query_id, int(batch_id))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Record the micro-batch (direct), or push it, once (staged; driver side)."""
        query_id, tokens, counts = _tokens(messages)
        if query_id is None:
            return
        ours = [m for m in messages if isinstance(m, QueenCommitMessage)]
        fallback = next((m.fallback for m in ours if m.fallback), None)
        if fallback:
            _log_once(
                query_id,
                "fallback",
                "queen sink: query %s commits its micro-batches staged, not direct: %s",
                query_id,
                fallback,
            )
        with SparkBroker(self.options.url, self.options.token) as broker:
            if ours and all(m.direct for m in ours):
                result = broker.commit_direct(query_id, batchId)
            else:
                result = broker.commit(
                    query_id, batchId, tokens, counts, pipelined=self.plan.mode == "pipelined"
                )
        if result.duplicate:
            log.warning(
                "queen sink: batch %s of query %s was committed before; nothing pushed", batchId, query_id
            )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Drop the micro-batch's staged rows (driver side; idempotent). Rows a direct task pushed stay: the
        replay of the batch pushes the same transaction ids, which the broker skips."""
        query_id, tokens, _ = _tokens(messages)
        staged = [m.token for m in messages if isinstance(m, QueenCommitMessage) and not m.direct]
        if query_id is None or not staged:
            return
        with SparkBroker(self.options.url, self.options.token) as broker:
            broker.abort(query_id, batchId, tokens)


class QueenBatchWriter(DataSourceArrowWriter):
    """``df.write.format("queen").option("queue", ...).mode("append").save()``: all rows in one transaction
    (staged).

    The staging key is ``("batch-" + writeId, 0)``; with a stable ``writeId`` option, running the same write
    again pushes nothing (the broker answers ``duplicate``).
    """

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.query_id = "batch-" + (options.write_id or uuid.uuid4().hex)
        self.plan = CommitPlan("sync", "given" if options.transaction_id_column else "position")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> QueenCommitMessage:
        return _stage_task(self.options, self.plan, iterator, self.query_id, 0)

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
