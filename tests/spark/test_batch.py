"""Batch read and write through the ``queen`` source, found by format name (no register call)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from spark_helpers import configure, partitions, push, read_queue

from helpers import unique

pytestmark = pytest.mark.spark


def test_batch_read_returns_every_message_with_its_offset(spark, broker) -> None:
    queue = unique("sp-read")
    configure(broker.url, queue)
    sizes = {"a": 1200, "b": 700, "c": 1}
    for name, n in sizes.items():
        push(broker.url, queue, name, [{"n": i, "p": name} for i in range(n)], f"{name}")

    df = (
        spark.read.format("queen")
        .option("url", broker.url)
        .option("queue", queue)
        .option("messagesPerTask", "500")
        .option("pageSize", "300")
        .load()
    )
    assert df.columns == [
        "data",
        "transactionId",
        "queue",
        "partition",
        "partitionId",
        "offset",
        "createdAt",
        "traceId",
        "producerSub",
    ]
    rows = df.collect()
    assert len(rows) == sum(sizes.values())
    by_partition: dict[str, list] = {}
    for row in rows:
        by_partition.setdefault(row.partition, []).append(row)
    for name, n in sizes.items():
        got = sorted(by_partition[name], key=lambda r: r.offset)
        assert [r.offset for r in got] == list(range(1, n + 1))
        assert [json.loads(r.data) for r in got] == [{"n": i, "p": name} for i in range(n)]
        assert [r.transactionId for r in got] == [f"{name}-{i}" for i in range(n)]
        assert {r.queue for r in got} == {queue}
        assert isinstance(got[0].createdAt, datetime)


def test_batch_read_of_an_offset_range(spark, broker) -> None:
    queue = unique("sp-range")
    configure(broker.url, queue)
    push(broker.url, queue, "only", [{"n": i} for i in range(100)], "m")
    (pid,) = [p["partitionId"] for p in partitions(broker.url, queue) if p["partition"] == "only"]
    df = (
        spark.read.format("queen")
        .option("url", broker.url)
        .option("queue", queue)
        .option("startingOffsets", json.dumps({pid: 10}))
        .option("endingOffsets", json.dumps({pid: 20}))
        .load()
    )
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(11, 21))


def test_batch_write_then_rerun_with_the_same_write_id_pushes_nothing(spark, broker) -> None:
    queue = unique("sp-write")
    configure(broker.url, queue)
    df = spark.createDataFrame(
        [(json.dumps({"k": i}), f"p{i % 3}") for i in range(300)], "data string, partition string"
    )
    writer = df.write.format("queen").option("url", broker.url).option("queue", queue).option("writeId", "w1")
    writer.mode("append").save()
    writer.mode("append").save()
    written = read_queue(broker.url, queue)
    assert sorted(name for name, messages in written.items() if messages) == ["p0", "p1", "p2"]
    assert sorted(m["data"]["k"] for ms in written.values() for m in ms) == list(range(300))


def test_a_task_with_more_than_the_broker_body_limit_is_staged_in_several_requests(spark, broker) -> None:
    """3,000 rows of 4 KB in one task (12 MB) against the broker's 10 MiB body limit: staged in byte-bounded
    requests (stageBatchBytes), every row stored once (a single request was a 413)."""
    queue = unique("sp-big")
    configure(broker.url, queue)
    text = "x" * 4000
    df = spark.createDataFrame(
        [(json.dumps({"k": i, "pad": text}),) for i in range(3000)], "data string"
    ).coalesce(1)
    df.write.format("queen").option("url", broker.url).option("queue", queue).mode("append").save()
    written = read_queue(broker.url, queue)
    assert sorted(m["data"]["k"] for ms in written.values() for m in ms) == list(range(3000))


def test_a_batch_read_builds_only_the_columns_of_a_given_schema(spark, broker) -> None:
    queue = unique("sp-cols")
    configure(broker.url, queue)
    push(broker.url, queue, "only", [{"n": i} for i in range(50)], "m")
    df = (
        spark.read.format("queen")
        .schema("offset BIGINT, data STRING")
        .option("url", broker.url)
        .option("queue", queue)
        .load()
    )
    assert df.columns == ["offset", "data"]
    assert sorted((r.offset, json.loads(r.data)["n"]) for r in df.collect()) == [
        (i + 1, i) for i in range(50)
    ]
    with pytest.raises(Exception, match="no column 'payload'"):
        spark.read.format("queen").schema("payload STRING").option("url", broker.url).option(
            "queue", queue
        ).load().collect()


def test_a_copy_schema_reads_the_same_rows_and_the_broker_leaves_the_other_fields_out(spark, broker) -> None:
    """The copy's schema (``data, partition, partitionId, offset, traceId``) gives the rows of the full
    schema, column for column; the broker answers such a read without the fields no column needs
    (transaction ids, push times, producer subjects: PostgreSQL does not compute them, spark_read_v5), and a
    read of offsets only carries no payload bytes."""
    import httpx

    from queenpy.errors import InvalidRequest
    from queenpy.spark.api import SparkBroker
    from queenpy.spark.schema import blocks_to_arrow, read_fields

    queue = unique("sp-copycols")
    configure(broker.url, queue)
    trace = "0b3e5a56-6f8e-4b8a-9d2c-3f1e2d4c5b6a"
    items = [
        {
            "queue": queue,
            "partition": f"p{i % 3}",
            "payload": {"n": i, "s": "é" * (i % 4)},
            "transactionId": f"t{i}",
        }
        | ({"traceId": trace} if i % 5 == 0 else {})
        for i in range(90)
    ]
    httpx.post(f"{broker.url}/api/v1/push", json={"items": items}, timeout=30).raise_for_status()
    copy = ["data", "partition", "partitionId", "offset", "traceId"]

    def rows(df: Any) -> list[tuple[Any, ...]]:
        return sorted(tuple(r[c] for c in copy) for r in df.select(*copy).collect())

    reader = spark.read.format("queen").option("url", broker.url).option("queue", queue)
    full = rows(reader.load())
    some = rows(
        reader.schema(", ".join(f"{c} {'BIGINT' if c == 'offset' else 'STRING'}" for c in copy)).load()
    )
    assert len(full) == 90 and some == full
    assert sorted(json.loads(d)["n"] for d, *_ in some) == list(range(90))
    assert sum(1 for *_, t in some if t == trace) == 18

    heads = partitions(broker.url, queue)
    ranges = [(p["partitionId"], 0, int(p["head"])) for p in heads if p["head"]]  # p0, p1, p2
    with SparkBroker(broker.url) as client:
        fields = read_fields(copy)
        assert fields == ["data", "traceIds"]
        blocks = client.read(ranges, fields)
        assert len(blocks) == 3
        for block in blocks:
            assert not {"transactionIds", "createdAtUs", "producerSubs"} & set(block)
            assert len(block["dataBytes"]) == len(block["offsets"]) == len(block["traceIds"]) == 30
        built = blocks_to_arrow(sorted(blocks, key=lambda b: b["index"]), copy)
        assert sorted(zip(*(built.column(c).to_pylist() for c in copy), strict=True)) == full
        bare = client.read(ranges, [])
        assert [len(b["offsets"]) for b in bare] == [30, 30, 30]
        assert not {"dataBytes", "traceIds"} & set(bare[0]) and len(bare[0]["blob"]) == 0
        with pytest.raises(InvalidRequest, match="columns"):
            client.read(ranges, ["payload"])
