"""Options of the ``queen`` data source, parsed once from Spark's case-insensitive ``str -> str`` options.

Source options:

====================== ==================== =============================================================
option                 default              meaning
====================== ==================== =============================================================
url                    $QUEEN_URL or        broker base URL
                       http://localhost:6632
token                  $QUEEN_TOKEN         bearer token (JWT), if the broker requires one
queue                  (required)           queue to read
consumerGroup          none                 group whose cursor ``commit(end)`` advances (lag, retention)
startingOffsets        group if a group is  ``group`` | ``earliest`` | ``latest`` | JSON (see offsets.py)
                       set, else earliest
endingOffsets          latest               batch reads only: ``latest`` or a JSON ``{partitionId: n}``
maxMessagesPerTrigger  100000               budget per micro-batch over all partitions (0: unlimited)
failOnDataLoss         true                 fail when offsets in a range are missing (retention, deletes)
messagesPerTask        50000                most messages per Spark task of a micro-batch
minTasks               CPU cores of the     fewest Spark tasks per micro-batch (when it has as many messages):
                       driver host          the ranges of all partitions are packed into
                                            ``max(minTasks, messages / messagesPerTask)`` tasks of equal size;
                                            on a cluster, set it to the executors' total cores
pageSize               10000                most messages per HTTP request (<= 50000)
====================== ==================== =============================================================

Sink options:

====================== ==================== =============================================================
queue                  (required)           target queue
partition              none                 one partition name for every row
partitionColumn        ``partition`` if the column holding the partition name; else partition ``Default``
                       column exists
transactionIdColumn    none                 take transaction ids from this column instead of deriving them
writeId                random               batch writes: a stable id makes re-running the write a no-op
stageBatchSize         10000                most rows per ``/spark/rows`` or ``/spark/push`` request
stageBatchBytes        4 MiB                most payload bytes per such request (UTF-8 bytes of ``data``
                                            plus 128 per row; the body's JSON escapes of quotes and
                                            backslashes add up to as much again, so keep it below half the
                                            broker's HTTP_MAX_BODY_BYTES, 10 MiB by default)
commit                 direct               ``direct``: each task pushes its rows with transaction ids derived
                                            from the query, the batch and each row's identity, and the
                                            broker's dedupe makes a replay store nothing twice; the commit
                                            records the batch. Rows are visible as the tasks push them. Needs
                                            a stable identity per row (source columns ``partitionId`` and
                                            ``offset``, ``idColumns`` or ``transactionIdColumn``), else the
                                            query commits staged and says so once in the log. ``staged`` (or
                                            ``sync``): tasks stage their rows and the commit moves a
                                            micro-batch into the queue in one transaction: visible all at once
                                            when Spark's commit returns. ``pipelined``: staged, and the broker
                                            moves the rows after the commit answered, while Spark runs the
                                            next batch (exactly once, in batch order; after a query ends,
                                            ``flush_sink`` waits for the rest)
idColumns              none                 direct commits: comma-separated columns whose values identify an
                                            output row across replays (e.g. ``window,key`` of a windowed
                                            aggregation in append mode); the batch id is always part of the id
staleReplay            fail                 direct commits: a task replayed longer after its first attempt
                                            than the target queue keeps transaction ids (its retention)
                                            ``fail``s, or pushes anyway with a warning (``warn``:
                                            at-least-once)
====================== ==================== =============================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DEFAULT_URL", "SinkOptions", "SourceOptions"]

DEFAULT_URL = "http://localhost:6632"


def _get(options: Mapping[str, str], name: str) -> str | None:
    # Spark hands a CaseInsensitiveDict; plain dicts (tests) are matched case-insensitively here too
    value = options.get(name)
    if value is None:
        lowered = name.lower()
        value = next((v for k, v in options.items() if k.lower() == lowered), None)
    return None if value is None or str(value).strip() == "" else str(value).strip()


def _int(options: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    text = _get(options, name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError as exc:
        raise ValueError(f"option {name} must be an integer, got {text!r}") from exc
    if value < minimum:
        raise ValueError(f"option {name} must be >= {minimum}, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = _get(options, name)
    if text is None:
        return default
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name} must be true or false, got {text!r}")


def _url(options: Mapping[str, str]) -> str:
    return _get(options, "url") or os.environ.get("QUEEN_URL", "").split(",")[0].strip() or DEFAULT_URL


def _token(options: Mapping[str, str]) -> str | None:
    return _get(options, "token") or os.environ.get("QUEEN_TOKEN") or None


def _required(options: Mapping[str, str], name: str, what: str) -> str:
    value = _get(options, name)
    if value is None:
        raise ValueError(f'the queen {what} needs .option("{name}", ...)')
    return value


@dataclass(frozen=True)
class SourceOptions:
    """Parsed source options (see the module docstring). Raises ValueError on a bad value."""

    url: str
    token: str | None
    queue: str
    consumer_group: str | None
    starting_offsets: str | None
    ending_offsets: str | None
    max_messages_per_trigger: int
    fail_on_data_loss: bool
    messages_per_task: int
    min_tasks: int
    page_size: int

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        page_size = _int(options, "pageSize", 10_000, minimum=1)
        if page_size > 50_000:
            raise ValueError(f"option pageSize must be <= 50000, got {page_size}")
        return cls(
            url=_url(options),
            token=_token(options),
            queue=_required(options, "queue", "source"),
            consumer_group=_get(options, "consumerGroup"),
            starting_offsets=_get(options, "startingOffsets"),
            ending_offsets=_get(options, "endingOffsets"),
            max_messages_per_trigger=_int(options, "maxMessagesPerTrigger", 100_000),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            messages_per_task=_int(options, "messagesPerTask", 50_000, minimum=1),
            min_tasks=_int(options, "minTasks", os.cpu_count() or 2, minimum=1),
            page_size=page_size,
        )


@dataclass(frozen=True)
class SinkOptions:
    """Parsed sink options (see the module docstring). Raises ValueError on a bad value."""

    url: str
    token: str | None
    queue: str
    partition: str | None
    partition_column: str | None
    transaction_id_column: str | None
    write_id: str | None
    stage_batch_size: int
    stage_batch_bytes: int = 4 * 1024 * 1024
    commit_mode: str = "direct"
    id_columns: tuple[str, ...] = ()
    stale_replay: str = "fail"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        return cls(
            url=_url(options),
            token=_token(options),
            queue=_required(options, "queue", "sink"),
            partition=_get(options, "partition"),
            partition_column=_get(options, "partitionColumn"),
            transaction_id_column=_get(options, "transactionIdColumn"),
            write_id=_get(options, "writeId"),
            stage_batch_size=_int(options, "stageBatchSize", 10_000, minimum=1),
            stage_batch_bytes=_int(options, "stageBatchBytes", 4 * 1024 * 1024, minimum=1024),
            commit_mode=_choice(
                options, "commit", ("direct", "staged", "sync", "pipelined"), "direct"
            ).replace("staged", "sync"),
            id_columns=tuple(
                name.strip() for name in (_get(options, "idColumns") or "").split(",") if name.strip()
            ),
            stale_replay=_choice(options, "staleReplay", ("fail", "warn"), "fail"),
        )


def _choice(options: Mapping[str, str], name: str, allowed: tuple[str, ...], default: str) -> str:
    value = (_get(options, name) or default).lower()
    if value not in allowed:
        raise ValueError(f"option {name} must be one of {', '.join(allowed)}, got {value!r}")
    return value
