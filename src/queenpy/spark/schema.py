"""The row shape of the ``queen`` source, as Spark DDL and as Arrow, and the broker page → Arrow conversion.

One row per message:

========== ================== ===================================================================
column     Spark type         meaning
========== ================== ===================================================================
data        STRING            the payload as JSON text (``from_json``/``get_json_object`` it)
transactionId STRING          the message's transaction id (unique per partition)
queue       STRING            queue name
partition   STRING            partition name
partitionId STRING            partition UUID (the key of the offsets)
offset      BIGINT            per-partition offset, gap-free from 1
createdAt   TIMESTAMP         broker time of the push (µs, UTC)
traceId     STRING            trace id, or null
producerSub STRING            JWT subject of the producer, or null
========== ================== ===================================================================

A query that needs fewer columns names them in a schema of its own, e.g.
``spark.readStream.format("queen").schema("data STRING, partitionId STRING, offset BIGINT")``: the source then
builds only those, in that order (:func:`columns_of`), and Spark converts only those between
Arrow and its rows (the Python Data Source API has no column pruning of its own). A copy to a queue needs
``data``, ``partition``, ``partitionId`` and ``offset`` (the row identity of a direct commit), and ``traceId``
when its messages carry trace ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "COLUMNS",
    "SCHEMA_DDL",
    "arrow_schema",
    "blocks_to_arrow",
    "columns_of",
    "messages_to_arrow",
    "read_fields",
]

COLUMNS: tuple[tuple[str, str], ...] = (
    ("data", "STRING"),
    ("transactionId", "STRING"),
    ("queue", "STRING"),
    ("partition", "STRING"),
    ("partitionId", "STRING"),
    ("offset", "BIGINT"),
    ("createdAt", "TIMESTAMP"),
    ("traceId", "STRING"),
    ("producerSub", "STRING"),
)
SCHEMA_DDL = ", ".join(f"`{name}` {kind}" for name, kind in COLUMNS)


_KINDS = dict(COLUMNS)
# the per-message field of a ``/spark/read`` block each column is built from (the others come per range)
_FIELDS = {
    "data": "data",
    "transactionId": "transactionIds",
    "createdAt": "createdAtUs",
    "traceId": "traceIds",
    "producerSub": "producerSubs",
}


def read_fields(columns: Sequence[str] | None) -> list[str] | None:
    """The per-message fields of ``POST /api/v1/spark/read`` that ``columns`` (default: all) are built
    from, for its ``columns`` option: e.g. ``["data", "traceIds"]`` for ``data, partition, partitionId,
    offset, traceId``; None (all) for None."""
    if columns is None:
        return None
    return [field for name, field in _FIELDS.items() if name in columns]


def columns_of(fields: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """The columns a reader builds for a schema given as ``(name, Spark type's simple string)`` pairs, e.g.
    ``[("data", "string"), ("offset", "bigint")]``: their names, in that order.

    Raises:
        ValueError: a name is not a column of :data:`COLUMNS`, has another type, or repeats; or no column.
    """
    names = []
    for name, kind in fields:
        if name not in _KINDS:
            raise ValueError(f"the queen source has no column {name!r}; its columns are {', '.join(_KINDS)}")
        if kind.upper() != _KINDS[name]:
            raise ValueError(f"column {name!r} of the queen source is {_KINDS[name]}, not {kind.upper()}")
        if name in names:
            raise ValueError(f"column {name!r} is named twice in the queen source's schema")
        names.append(name)
    if not names:
        raise ValueError("the queen source's schema names no column")
    return tuple(names)


def arrow_schema(columns: Sequence[str] | None = None) -> pa.Schema:
    """The Arrow schema ``read()`` yields for ``columns`` (default: all of :data:`COLUMNS`); it must equal
    Spark's ``to_arrow_schema`` of the query's schema."""
    import pyarrow as pa

    kinds = {"STRING": pa.string(), "BIGINT": pa.int64(), "TIMESTAMP": pa.timestamp("us", tz="UTC")}
    names = [name for name, _ in COLUMNS] if columns is None else columns
    return pa.schema([pa.field(name, kinds[_KINDS[name]]) for name in names])


def messages_to_arrow(page: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]) -> pa.RecordBatch:
    """One ``GET /api/v1/spark/messages`` page (``page`` gives queue/partition names) → an Arrow record batch.

    ``messages`` is the slice of ``page["messages"]`` to convert (all of it, or what survives a gap check).
    """
    import pyarrow as pa

    schema = arrow_schema()
    n = len(messages)
    created = pa.array([m.get("createdAt") for m in messages], type=pa.string())
    columns = [
        pa.array([orjson.dumps(m.get("data")).decode() for m in messages], type=pa.string()),
        pa.array([m.get("transactionId") for m in messages], type=pa.string()),
        pa.array([page.get("queue")] * n, type=pa.string()),
        pa.array([page.get("partition")] * n, type=pa.string()),
        pa.array([page.get("partitionId")] * n, type=pa.string()),
        pa.array([m["offset"] for m in messages], type=pa.int64()),
        created.cast(schema.field("createdAt").type),
        pa.array([m.get("traceId") for m in messages], type=pa.string()),
        pa.array([m.get("producerSub") for m in messages], type=pa.string()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def blocks_to_arrow(
    blocks: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None
) -> pa.RecordBatch:
    """Range blocks of ``POST /api/v1/spark/read`` (column lists per range, see
    :meth:`queenpy.spark.api.SparkBroker.read`) → one Arrow record batch of ``columns`` (default: all), in
    block order; the columns not asked for are not built.

    Payloads given as ``dataBytes`` + ``blob`` become the ``data`` column without a Python object per message
    (an Arrow string array over the blob's bytes, offsets from the lengths); the blocks must be the blob's in
    order, none left out but empty ones. ``createdAtUs`` is microseconds already, so nothing is parsed per
    message."""
    import numpy as np
    import pyarrow as pa

    schema = arrow_schema(columns)
    wanted = set(schema.names)
    keys = {
        "transactionId": "transactionIds",
        "offset": "offsets",
        "createdAt": "createdAtUs",
        "traceId": "traceIds",
        "producerSub": "producerSubs",
    }
    lists: dict[str, list[Any]] = {name: [] for name in keys if name in wanted}
    repeated: dict[str, list[Any]] = {
        name: [] for name in ("queue", "partition", "partitionId") if name in wanted
    }
    texts: list[Any] = []
    lengths: list[int] = []
    blob = None
    for block in blocks:
        n = len(block["offsets"])
        if "data" not in wanted:
            pass
        elif "dataBytes" in block:
            lengths.extend(block["dataBytes"])
            blob = block["blob"]
        else:
            texts.extend(block["data"])
        for name, values in lists.items():
            values.extend(block[keys[name]])
        for name, parts in repeated.items():
            parts.append(pa.repeat(pa.scalar(block[name], pa.string()), n))
    arrays: dict[str, Any] = {}
    if "data" in wanted:
        if blob is not None:
            offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
            np.cumsum(lengths, out=offsets[1:])
            arrays["data"] = pa.StringArray.from_buffers(
                len(lengths), pa.py_buffer(offsets), pa.py_buffer(blob[: int(offsets[-1])])
            )
        else:
            arrays["data"] = pa.array(texts, type=pa.string())
    for name, parts in repeated.items():
        arrays[name] = pa.concat_arrays(parts) if parts else pa.array([], type=pa.string())
    for field in schema:
        if field.name in lists:
            values = lists[field.name]
            arrays[field.name] = (
                pa.nulls(len(values), field.type)
                if field.name in ("traceId", "producerSub") and not any(values)
                else pa.array(values, type=field.type)
            )
    return pa.RecordBatch.from_arrays([arrays[field.name] for field in schema], schema=schema)
