"""Readers of the ``queen`` source: streaming (:class:`QueenStreamReader`) and batch
(:class:`QueenBatchReader`).

Where each method runs (SPARK-NOTES.md section 3): ``initialOffset``, ``latestOffset``, ``partitions`` and
``commit`` run in one long-lived driver-side Python process per query run, on one reader instance; ``read``
runs in executor Python workers on a *pickled copy* made at planning time, so it sees the options only.

Exactly-once reading: Spark writes each micro-batch's ``(start, end)`` offsets to its checkpoint before
running it and replays exactly that range after a crash; ``read`` fetches ``(after, upto]`` by offset with
``GET /api/v1/spark/messages``, which takes no lease and is deterministic because offsets are gap-free and
visible in commit order. A micro-batch's ranges over all partitions are packed into a few tasks of about equal
size, each partition whole in one task (:func:`offsets.plan_tasks`: ``minTasks``, by default the driver host's
cores, or more when a batch exceeds ``messagesPerTask`` per task), and a task fetches its ranges with ``POST
/api/v1/spark/read``, several ranges per request, ``pageSize`` messages at most, one Arrow record batch per
request (payloads as bytes, :func:`queenpy.spark.schema.blocks_to_arrow`). ``latestOffset(start)`` and
``commit(end)`` only advance the consumer group's cursor to offsets of finished micro-batches (advisory, for
lag, retention and dashboards: the checkpoint is the authority).

Retention and the reader agree (docs/operations.md, "Background services"): completed retention deletes only
offsets at or below every consumer group's cursor, and a query's group cursor never passes a micro-batch Spark
has not finished, so a query with a ``consumerGroup`` never meets a gap made by completed retention, across
restarts too. ``earliest`` starts at the partition's earliest offset (``/spark/offsets``: what retention and
eviction removed lies at or below it). Gaps that remain are data loss for the query: ``retentionSeconds`` or
``maxWaitTimeSeconds`` deleting messages it had not read, a query without ``consumerGroup`` (no cursor
protects it) or a checkpoint behind its group's cursor falling behind completed retention, or messages deleted
by hand; ``failOnDataLoss`` (default true) fails the batch with :class:`DataLossError`, false skips them with
a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from queenpy.errors import QueenError

from .api import SparkBroker
from .offsets import (
    LATEST,
    OffsetRange,
    QueueOffset,
    StartingOffsets,
    admit,
    cap,
    missing_offsets,
    pages,
    parse_starting_offsets,
    plan_tasks,
    resolve_starting_offsets,
    split_ranges,
)
from .options import SourceOptions

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DataLossError", "QueenBatchReader", "QueenInputPartition", "QueenStreamReader", "read_range"]

log = logging.getLogger("queenpy.spark")


class DataLossError(QueenError):
    """Messages of an offset range are gone (deleted or expired) and ``failOnDataLoss`` is true."""


@dataclass
class QueenInputPartition(InputPartition):
    """One Spark task: consecutive offset ranges ``(partitionId, after, upto)`` (messages ``after < offset <=
    upto`` of each), read in this order."""

    ranges: list[tuple[str, int, int]]


def _partitions_of(ranges: list[OffsetRange], options: SourceOptions) -> list[InputPartition]:
    total = sum(r.count for r in ranges)
    tasks = max(options.min_tasks, -(-total // options.messages_per_task))
    return [
        QueenInputPartition([(r.partition_id, r.after, r.upto) for r in task])
        for task in plan_tasks(ranges, tasks)
    ]


def read_range(
    broker: SparkBroker,
    part: QueenInputPartition,
    *,
    page_size: int,
    fail_on_data_loss: bool,
    columns: Sequence[str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Fetch the task's ranges, ``page_size`` offsets per request, and yield one Arrow record batch of
    ``columns`` (default: all, see :func:`queenpy.spark.schema.columns_of`) per request, in range and offset
    order. The broker is asked for the fields these columns need only (:func:`schema.read_fields`).

    Raises:
        DataLossError: offsets are missing inside a range and ``fail_on_data_loss`` is set (otherwise the gap
            is logged and skipped).
    """
    from .schema import blocks_to_arrow, read_fields

    fields = read_fields(columns)
    for page in pages((OffsetRange(*r) for r in part.ranges), page_size):
        blocks = {
            int(b["index"]): b for b in broker.read([(r.partition_id, r.after, r.upto) for r in page], fields)
        }
        found = []
        for i, r in enumerate(page):
            block = blocks.get(i)
            offsets = block["offsets"] if block else []
            if len(offsets) != r.count:  # (after, upto] holds distinct offsets: equal counts mean no gap
                _gap(r, block, [int(o) for o in offsets], fail_on_data_loss)
            if block and offsets:
                found.append(block)
        if found:
            yield blocks_to_arrow(found, columns)


def _gap(r: OffsetRange, block: dict[str, Any] | None, offsets: list[int], fail: bool) -> None:
    gaps = missing_offsets(r.after, r.upto, offsets)
    if not gaps:
        return
    where = (
        f"queue {block.get('queue')!r} partition {block.get('partition')!r} ({r.partition_id})"
        if block
        else f"partition {r.partition_id} (not found)"
    )
    text = ", ".join(f"{lo}..{hi}" if lo != hi else str(lo) for lo, hi in gaps[:5])
    if fail:
        raise DataLossError(
            f"offsets {text} of {where} are missing (deleted or expired). Set failOnDataLoss=false "
            "to skip them, or restart the query from a new checkpoint."
        )
    log.warning("skipping missing offsets %s of %s", text, where)


def _heads(broker: SparkBroker, options: SourceOptions, with_group: bool = False) -> dict[str, Any]:
    return {
        p.partition_id: p
        for p in broker.offsets(options.queue, options.consumer_group if with_group else None)
    }


class QueenStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader of one queue: offsets ``{"v": 1, "queue": q, "p": {partitionId: n}}``.

    ``maxMessagesPerTrigger`` is spread over partitions in proportion to their backlog; availableNow runs stop
    at the heads seen by ``prepareForTriggerAvailableNow``.
    """

    def __init__(self, options: SourceOptions, columns: Sequence[str] | None = None) -> None:
        self.options = options
        self.columns = columns  # None: all (the source's own schema)
        self.broker = SparkBroker(options.url, options.token)
        self._initial: dict[str, Any] | None = None
        self._target: dict[str, int] | None = None
        self._latest_heads: dict[str, int] | None = None
        self._cursor: dict[str, int] = {}  # what this run last wrote to the group's cursor

    # -- driver side -----------------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Fresh checkpoint only: ``startingOffsets`` resolved against the heads and the group's cursors.

        Computed once per run (Spark asks twice) so ``latest`` cannot move between the two calls.
        """
        if self._initial is None:
            spec = parse_starting_offsets(
                self.options.starting_offsets, self.options.queue, has_group=bool(self.options.consumer_group)
            )
            partitions = _heads(self.broker, self.options, with_group=True)
            start = resolve_starting_offsets(
                spec,
                {pid: p.head for pid, p in partitions.items()},
                {pid: p.cursor for pid, p in partitions.items()},
                {pid: p.earliest for pid, p in partitions.items()},
            )
            self._initial = QueueOffset(self.options.queue, start).to_json()
            log.info("queue %s: starting at %s", self.options.queue, self._initial)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxMessagesPerTrigger)``, or everything when the option is 0."""
        budget = self.options.max_messages_per_trigger
        return ReadMaxRows(budget) if budget > 0 else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Remember today's heads: this run reads up to them and no further."""
        self._target = {pid: p.head for pid, p in _heads(self.broker, self.options).items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """End of the next micro-batch: one ``/spark/offsets`` call, then :func:`offsets.admit`.

        ``start`` is the end of the last micro-batch, which Spark has finished (sink committed, commit log
        written) before it asks for the next one, so it is also a safe consumer-group cursor: advancing it
        here keeps the broker's lag current (``commit(end)`` alone lags a batch, and never comes for the last
        one).
        """
        begin = QueueOffset.from_json(start, self.options.queue).partitions
        self._advance_cursor(begin)
        heads = {pid: p.head for pid, p in _heads(self.broker, self.options).items()}
        self._latest_heads = heads
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = admit(begin, cap(heads, self._target), budget)
        return QueueOffset(self.options.queue, end).to_json()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The heads seen by the last ``latestOffset`` (Spark shows them as ``latestOffset`` in progress)."""
        if self._latest_heads is None:
            return None
        return QueueOffset(self.options.queue, self._latest_heads).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """The batch's ranges packed into tasks (:func:`offsets.plan_tasks`); [] when ``start == end``.

        Deterministic in ``(start, end)`` and the options, so a replayed batch reads the same tasks.
        """
        begin = QueueOffset.from_json(start, self.options.queue).partitions
        finish = QueueOffset.from_json(end, self.options.queue).partitions
        return _partitions_of(split_ranges(begin, finish), self.options)

    def commit(self, end: dict[str, Any]) -> None:
        """Advance the consumer group's cursor to ``end`` (no-op without ``consumerGroup``)."""
        self._advance_cursor(QueueOffset.from_json(end, self.options.queue).partitions)

    def _advance_cursor(self, offsets: Mapping[str, int]) -> None:
        group = self.options.consumer_group
        if not group:
            return
        changed = {pid: n for pid, n in offsets.items() if n > self._cursor.get(pid, 0)}
        if not changed:
            return
        try:
            self.broker.advance_cursor(self.options.queue, group, changed)
        except QueenError as exc:  # advisory: never fail the query for it; the next batch retries
            log.warning(
                "queue %s: could not advance the cursor of group %s: %s", self.options.queue, group, exc
            )
            return
        self._cursor.update(changed)

    def stop(self) -> None:
        self.broker.close()

    # -- executor side ---------------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Messages of one range as Arrow record batches (see :func:`read_range`)."""
        return _read_partition(self.options, partition, self.columns)


class QueenBatchReader(DataSourceReader):
    """``spark.read.format("queen")``: the messages between ``startingOffsets`` (default earliest, or the
    group's cursor when ``consumerGroup`` is set) and ``endingOffsets`` (default ``latest``: the heads at
    planning time; a JSON ``{partitionId: n}`` ends the named partitions at ``n`` and the others at their
    head). Reading does not move the group's cursor."""

    def __init__(self, options: SourceOptions, columns: Sequence[str] | None = None) -> None:
        self.options = options
        self.columns = columns  # None: all (the source's own schema)

    def partitions(self) -> list[InputPartition]:
        options = self.options
        with SparkBroker(options.url, options.token) as broker:
            partitions = _heads(broker, options, with_group=True)
        heads = {pid: p.head for pid, p in partitions.items()}
        spec = parse_starting_offsets(
            options.starting_offsets, options.queue, has_group=bool(options.consumer_group)
        )
        start = resolve_starting_offsets(
            spec,
            heads,
            {pid: p.cursor for pid, p in partitions.items()},
            {pid: p.earliest for pid, p in partitions.items()},
        )
        ending = options.ending_offsets
        if ending is None or ending.lower() == LATEST:
            end = heads
        else:
            wanted = parse_starting_offsets(ending, options.queue, has_group=False)
            if wanted.kind == "json":  # partitions not named end at their head
                wanted = StartingOffsets("json", {**{pid: -1 for pid in heads}, **wanted.partitions})
            end = resolve_starting_offsets(wanted, heads)
        end = {pid: max(int(end.get(pid, 0)), start.get(pid, 0)) for pid in heads}
        return _partitions_of(split_ranges(start, end), options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.options, partition, self.columns)


def _read_partition(
    options: SourceOptions, partition: InputPartition, columns: Sequence[str] | None
) -> Iterator[pa.RecordBatch]:
    """Executor side of both readers: one range, on a connection of its own."""
    assert isinstance(partition, QueenInputPartition)
    with SparkBroker(options.url, options.token) as broker:
        yield from read_range(
            broker,
            partition,
            page_size=options.page_size,
            fail_on_data_loss=options.fail_on_data_loss,
            columns=columns,
        )
