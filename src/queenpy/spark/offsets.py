"""Offset arithmetic of the ``queen`` Spark source: pure functions, no Spark, no network.

Shapes:

- A broker partition is named by its ``partitionId`` (a UUID string). Its messages carry gap-free, strictly
  increasing ``offset`` integers starting at 1; the partition's ``head`` is its newest offset (0 if empty).
- An *offset map* ``{partitionId: n}`` says "everything up to and including offset ``n`` is read".
  A partition that is absent from a map is at 0 (nothing read), so partitions created after a query started
  are read from their first message.
- A Spark offset is the JSON dict ``{"v": 1, "queue": "<queue>", "p": {"<partitionId>": n, ...}}`` with the
  partition ids in sorted order (:class:`QueueOffset`), stored verbatim in ``checkpoint/offsets/<batch>``.
- A range ``(partitionId, after, upto)`` holds the messages with ``after < offset <= upto``.

Admission control (:func:`admit`) spreads a ``maxMessagesPerTrigger`` budget over the partitions in proportion
to their backlog (largest-remainder rounding), so partitions advance in step and a global event-time watermark
does not run ahead of the slower partitions (SPARK-NOTES.md section 6, pitfall 9).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "EARLIEST",
    "GROUP",
    "LATEST",
    "OFFSET_VERSION",
    "OffsetRange",
    "QueueOffset",
    "StartingOffsets",
    "admit",
    "backlog",
    "cap",
    "lag",
    "missing_offsets",
    "pages",
    "parse_starting_offsets",
    "plan_tasks",
    "resolve_starting_offsets",
    "split_ranges",
]

OFFSET_VERSION = 1
EARLIEST = "earliest"
LATEST = "latest"
GROUP = "group"

# Kafka's conventions inside a JSON startingOffsets map
_JSON_EARLIEST = -2
_JSON_LATEST = -1


def _offset_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where} must be an integer offset, got {value!r}")  # noqa: TRY004 (bad option)
    return value


@dataclass(frozen=True)
class QueueOffset:
    """A Spark offset of the ``queen`` source: per-partition last offset read from ``queue``.

    Attributes:
        queue: the queue name (checked on load, so a checkpoint cannot silently switch queues).
        partitions: ``{partitionId: last offset included}``; each value >= 0.
    """

    queue: str
    partitions: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON-able dict Spark stores: ``{"v": 1, "queue": q, "p": {...}}`` with sorted partition
        keys."""
        return {
            "v": OFFSET_VERSION,
            "queue": self.queue,
            "p": {pid: int(self.partitions[pid]) for pid in sorted(self.partitions)},
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | str, queue: str | None = None) -> QueueOffset:
        """Parse a stored offset (dict or JSON text).

        Raises:
            ValueError: unknown version, a different ``queue`` than expected, or a non-integer/negative
                offset.
        """
        data = json.loads(value) if isinstance(value, str) else value
        if not isinstance(data, Mapping) or data.get("v") != OFFSET_VERSION:
            raise ValueError(f"not a queen offset of version {OFFSET_VERSION}: {data!r}")
        stored_queue = data.get("queue")
        if not isinstance(stored_queue, str):
            raise ValueError(f"queen offset without a queue name: {data!r}")  # noqa: TRY004
        if queue is not None and stored_queue != queue:
            raise ValueError(f"the checkpoint reads queue {stored_queue!r}, but the query asks for {queue!r}")
        raw = data.get("p", {})
        if not isinstance(raw, Mapping):
            raise ValueError(f"queen offset field 'p' must be an object: {data!r}")  # noqa: TRY004
        partitions: dict[str, int] = {}
        for pid, offset in raw.items():
            number = _offset_int(offset, f"offset of partition {pid}")
            if number < 0:
                raise ValueError(f"offset of partition {pid} is negative: {number}")
            partitions[str(pid)] = number
        return cls(stored_queue, partitions)

    def get(self, partition_id: str) -> int:
        """Last offset read in ``partition_id`` (0 when the partition is not in this offset)."""
        return int(self.partitions.get(partition_id, 0))


@dataclass(frozen=True)
class OffsetRange:
    """Messages ``after < offset <= upto`` of one broker partition (one Spark input partition)."""

    partition_id: str
    after: int
    upto: int

    @property
    def count(self) -> int:
        """Number of messages in the range (offsets are gap-free)."""
        return max(0, self.upto - self.after)


@dataclass(frozen=True)
class StartingOffsets:
    """Where a new query starts: ``kind`` is ``group``, ``earliest``, ``latest`` or ``json``.

    For ``json``, ``partitions`` maps partitionId to an offset, or to -2 (earliest) / -1 (latest);
    partitions not listed start at the earliest message.
    """

    kind: str
    partitions: Mapping[str, int] = field(default_factory=dict)


def parse_starting_offsets(value: str | None, queue: str, *, has_group: bool) -> StartingOffsets:
    """Parse the ``startingOffsets`` option.

    Args:
        value: ``group`` | ``earliest`` | ``latest`` | JSON (``{"<partitionId>": n}`` or a full queen offset
            ``{"v": 1, "queue": ..., "p": {...}}``); None or empty means ``group`` when a consumer group is
            configured, else ``earliest``.
        queue: the queue the query reads (a full offset must name it).
        has_group: whether the ``consumerGroup`` option is set (``group`` requires it).

    Raises:
        ValueError: an unknown word, bad JSON, or ``group`` without a consumer group.
    """
    text = (value or "").strip()
    if not text:
        return StartingOffsets(GROUP if has_group else EARLIEST)
    word = text.lower()
    if word in (EARLIEST, LATEST):
        return StartingOffsets(word)
    if word == GROUP:
        if not has_group:
            raise ValueError("startingOffsets=group needs the consumerGroup option")
        return StartingOffsets(GROUP)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"startingOffsets must be group, earliest, latest or a JSON object; got {text[:80]!r}"
        ) from exc
    if not isinstance(data, dict):
        raise ValueError(f"startingOffsets JSON must be an object, got {text[:80]!r}")  # noqa: TRY004
    if "v" in data:
        return StartingOffsets("json", dict(QueueOffset.from_json(data, queue).partitions))
    partitions: dict[str, int] = {}
    for pid, offset in data.items():
        number = _offset_int(offset, f"startingOffsets[{pid!r}]")
        if number < _JSON_EARLIEST:
            raise ValueError(f"startingOffsets[{pid!r}] must be >= -2, got {number}")
        partitions[str(pid)] = number
    return StartingOffsets("json", partitions)


def resolve_starting_offsets(
    spec: StartingOffsets,
    heads: Mapping[str, int],
    cursors: Mapping[str, int | None] | None = None,
    earliests: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """The initial offset map for ``spec`` given the partitions' current ``heads``, the group's ``cursors``
    and the partitions' ``earliests`` (offsets at or below them may have been removed by retention or
    eviction, so ``earliest`` starts there and reads no gap; absent: 0).

    Returns ``{partitionId: offset}`` over the known partitions (values clamped to ``[0, head]``); partitions
    appearing later start at 0 (a gap there is data loss, as with Kafka's new partitions).
    """
    cursors = cursors or {}
    earliests = earliests or {}
    start: dict[str, int] = {}
    for pid, head in heads.items():
        earliest = int(earliests.get(pid) or 0)
        if spec.kind == LATEST:
            value = head
        elif spec.kind == GROUP:
            value = cursors.get(pid) or 0
        elif spec.kind == "json":
            wanted = spec.partitions.get(pid, _JSON_EARLIEST)
            value = head if wanted == _JSON_LATEST else earliest if wanted == _JSON_EARLIEST else wanted
        else:
            value = earliest
        start[pid] = max(0, min(int(value), int(head)))
    if spec.kind == "json":
        # partitions named explicitly but not (yet) visible keep their requested position
        for pid, wanted in spec.partitions.items():
            if pid not in start and wanted >= 0:
                start[pid] = wanted
    return start


def backlog(start: Mapping[str, int], heads: Mapping[str, int]) -> dict[str, int]:
    """Messages waiting per partition: ``max(0, head - start)`` (partitions missing from ``start`` are at
    0)."""
    return {pid: max(0, int(head) - int(start.get(pid, 0))) for pid, head in heads.items()}


def cap(heads: Mapping[str, int], target: Mapping[str, int] | None) -> dict[str, int]:
    """Heads limited to an availableNow ``target``: partitions missing from the target get no new messages.

    (A partition created after ``prepareForTriggerAvailableNow`` is not part of that run.)
    """
    if target is None:
        return dict(heads)
    return {pid: min(int(head), int(target[pid])) for pid, head in heads.items() if pid in target}


def admit(start: Mapping[str, int], heads: Mapping[str, int], max_messages: int | None) -> dict[str, int]:
    """End offsets of the next micro-batch: read up to ``max_messages`` in total, proportional to backlog.

    Args:
        start: the previous batch's end (``{partitionId: offset}``).
        heads: newest offsets per partition (already capped by :func:`cap` under availableNow).
        max_messages: the budget (``maxMessagesPerTrigger``); None or <= 0 means everything available.

    Returns:
        ``{partitionId: end}`` covering every partition of ``start`` and ``heads``; ``end >= start`` always,
        and ``sum(end - start) == min(max_messages, total backlog)``. Each partition gets
        ``floor(budget * backlog_p / total)``; the messages left over by rounding go one each to the
        partitions with the largest remainders (ties: smaller partitionId first), never above a partition's
        backlog.
    """
    waiting = backlog(start, heads)
    total = sum(waiting.values())
    end = {pid: int(offset) for pid, offset in start.items()}
    for pid in heads:
        end.setdefault(pid, 0)
    if total == 0:
        return end
    if max_messages is None or max_messages <= 0 or total <= max_messages:
        for pid, count in waiting.items():
            end[pid] += count
        return end
    shares: dict[str, int] = {}
    remainders: list[tuple[int, str]] = []
    for pid, count in waiting.items():
        share, remainder = divmod(max_messages * count, total)
        shares[pid] = share
        if count > share:
            remainders.append((remainder, pid))
    left = max_messages - sum(shares.values())
    for _, pid in sorted(remainders, key=lambda item: (-item[0], item[1]))[:left]:
        shares[pid] += 1
    for pid, share in shares.items():
        end[pid] += share
    return end


def split_ranges(
    start: Mapping[str, int], end: Mapping[str, int], max_per_range: int | None = None
) -> list[OffsetRange]:
    """The ranges to read between two offset maps, in sorted partition order then offset order.

    Partitions whose end is not above their start yield nothing, so ``start == end`` gives ``[]``. A partition
    range longer than ``max_per_range`` (when > 0) is cut into consecutive chunks of at most that size.

    Raises:
        ValueError: an end offset below its start (offsets never move backwards).
    """
    ranges: list[OffsetRange] = []
    for pid in sorted(end):
        lo, hi = int(start.get(pid, 0)), int(end[pid])
        if hi < lo:
            raise ValueError(f"partition {pid}: end offset {hi} is below the start offset {lo}")
        step = max_per_range if max_per_range and max_per_range > 0 else max(1, hi - lo)
        while lo < hi:
            upto = min(hi, lo + step)
            ranges.append(OffsetRange(pid, lo, upto))
            lo = upto
    return ranges


def plan_tasks(ranges: Iterable[OffsetRange], tasks: int) -> list[list[OffsetRange]]:
    """Group the ranges of a micro-batch into at most ``tasks`` Spark tasks of about equal message counts,
    each partition's ranges whole in one task (in offset order).

    One task per partition range made 100 tasks for a micro-batch over 100 partitions, each paying Spark's
    per-task cost (scheduling, a Python worker round trip, one HTTP request each way): 20,000 messages of
    1 KB took 20 s on two cores. Two tasks read and write the same messages in well under a second.

    A partition is never split over tasks: the rows of one source partition then reach the sink in offset
    order from one task, so a direct sink (tasks push concurrently) keeps each partition's order in a copy.
    The partitions go largest first to the task with the fewest messages so far (ties: the earlier task), and
    each task reads its partitions in the given order; a partition bigger than a fair share makes a bigger
    task. Deterministic in its arguments (a replayed micro-batch is planned alike). Returns the non-empty
    tasks in order of their first partition; ``[]`` when there is nothing to read.
    """
    import heapq

    groups: dict[str, list[OffsetRange]] = {}
    for r in ranges:
        if r.count > 0:
            groups.setdefault(r.partition_id, []).append(r)
    if not groups:
        return []
    position = {pid: i for i, pid in enumerate(groups)}
    sizes = {pid: sum(r.count for r in group) for pid, group in groups.items()}
    bins: list[list[str]] = [[] for _ in range(max(1, min(tasks, len(groups))))]
    loads = [(0, i) for i in range(len(bins))]
    for pid in sorted(groups, key=lambda p: (-sizes[p], position[p])):
        load, i = heapq.heappop(loads)
        bins[i].append(pid)
        heapq.heappush(loads, (load + sizes[pid], i))
    planned = [sorted(members, key=position.__getitem__) for members in bins if members]
    planned.sort(key=lambda members: position[members[0]])
    return [[r for pid in members for r in groups[pid]] for members in planned]


def pages(ranges: Iterable[OffsetRange], page_size: int) -> list[list[OffsetRange]]:
    """Cut a task's ranges into requests of at most ``page_size`` offsets each (in order; a range longer than
    a page is split). Offsets are gap-free, so a request's size is known before it is sent."""
    return _fill(ranges, max(1, page_size))


def _fill(ranges: Iterable[OffsetRange], size: int) -> list[list[OffsetRange]]:
    """Consecutive groups of ``size`` offsets (the last one shorter), cutting ranges where a group is full."""
    planned: list[list[OffsetRange]] = []
    current: list[OffsetRange] = []
    filled = 0
    for r in ranges:
        after = r.after
        while after < r.upto:
            take = min(r.upto - after, size - filled)
            current.append(OffsetRange(r.partition_id, after, after + take))
            after += take
            filled += take
            if filled == size:
                planned.append(current)
                current, filled = [], 0
    if current:
        planned.append(current)
    return planned


def missing_offsets(after: int, upto: int, offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Gaps in a range read: the inclusive ``(first, last)`` offset runs of ``(after, upto]`` not in
    ``offsets``.

    ``offsets`` must be increasing (the broker returns offset order).
    """
    gaps: list[tuple[int, int]] = []
    expected = after + 1
    for offset in offsets:
        if offset > expected:
            gaps.append((expected, min(offset, upto + 1) - 1))
        expected = max(expected, offset + 1)
    if expected <= upto:
        gaps.append((expected, upto))
    return gaps


def lag(end: Mapping[str, Any] | None, heads: Mapping[str, Any] | None) -> int:
    """Messages not yet read: ``sum(max(0, head - end))`` over two queen offsets (dicts as Spark reports
    them).

    Accepts full queen offsets (``{"v": 1, "p": {...}}``), plain maps, or JSON text of either; a missing or
    unparsable side counts as empty.
    """

    def partitions(value: Mapping[str, Any] | str | None) -> dict[str, int]:
        if value is None:
            return {}
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                return {}
        if not isinstance(value, Mapping):
            return {}
        raw = value.get("p", value) if "v" in value else value
        return {str(k): int(v) for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool)}

    return sum(backlog(partitions(end), partitions(heads)).values())
