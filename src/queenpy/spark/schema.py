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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["COLUMNS", "SCHEMA_DDL", "arrow_schema", "blocks_to_arrow", "messages_to_arrow"]

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


def arrow_schema() -> pa.Schema:
    """The Arrow schema ``read()`` yields; it must equal Spark's ``to_arrow_schema`` of :data:`SCHEMA_DDL`."""
    import pyarrow as pa

    kinds = {"STRING": pa.string(), "BIGINT": pa.int64(), "TIMESTAMP": pa.timestamp("us", tz="UTC")}
    return pa.schema([pa.field(name, kinds[kind]) for name, kind in COLUMNS])


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


def blocks_to_arrow(blocks: Sequence[Mapping[str, Any]]) -> pa.RecordBatch:
    """Range blocks of ``POST /api/v1/spark/read`` (column lists per range) → one Arrow record batch, in block
    order. ``data`` is already JSON text and ``createdAtUs`` microseconds, so nothing is parsed per message."""
    import pyarrow as pa

    schema = arrow_schema()
    columns: dict[str, list[Any]] = {name: [] for name, _ in COLUMNS}
    for block in blocks:
        n = len(block["offsets"])
        columns["data"].extend(block["data"])
        columns["transactionId"].extend(block["transactionIds"])
        columns["queue"].extend([block["queue"]] * n)
        columns["partition"].extend([block["partition"]] * n)
        columns["partitionId"].extend([block["partitionId"]] * n)
        columns["offset"].extend(block["offsets"])
        columns["createdAt"].extend(block["createdAtUs"])
        columns["traceId"].extend(block["traceIds"])
        columns["producerSub"].extend(block["producerSubs"])
    return pa.RecordBatch.from_arrays(
        [pa.array(columns[field.name], type=field.type) for field in schema], schema=schema
    )
