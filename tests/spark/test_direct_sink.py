"""The sink's direct commits on a real SparkSession: a copy keeps each partition's order (one task per source
partition, even with more tasks than partitions), records its micro-batches as direct and stages nothing; rows
without a stable identity fall back to staged commits; a windowed aggregation in append mode commits directly
with ``idColumns``, and its output equals the plain Python computation."""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from spark_helpers import configure, push, read_queue

from helpers import unique

pytestmark = pytest.mark.spark


def sink_batches(database_url: str, queue_id: str) -> list[tuple[int, int, bool]]:
    with psycopg.connect(database_url) as conn:
        return [
            tuple(row)
            for row in conn.execute(
                "SELECT batch_id, pushed, direct FROM queen.spark_sink_batches "
                "WHERE query_id = %s ORDER BY batch_id",
                (queue_id,),
            ).fetchall()
        ]


def leftovers(database_url: str, query_id: str) -> tuple[int, int]:
    """Staging rows and uncommitted direct task rows of a query."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM queen.spark_staging_rows WHERE query_id = %(q)s), "
            "(SELECT count(*) FROM queen.spark_direct_tasks WHERE query_id = %(q)s)",
            {"q": query_id},
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def run(query: Any) -> Any:
    try:
        assert query.awaitTermination(180)
    finally:
        query.stop()
    assert query.exception() is None
    return query


def test_a_direct_copy_keeps_each_partition_in_order(spark, broker, tmp_path: Path) -> None:
    source, target = unique("dc-src"), unique("dc-dst")
    configure(broker.url, source)
    sent = {"a": 1500, "b": 900}
    for name, count in sent.items():
        push(broker.url, source, name, [{"p": name, "i": i} for i in range(count)], f"{name}")
    query = run(
        spark.readStream.format("queen")
        .option("url", broker.url)
        .option("queue", source)
        .option("minTasks", "4")
        .option("messagesPerTask", "300")
        .option("maxMessagesPerTrigger", "1000")
        .load()
        .select("data", "partition", "partitionId", "offset")
        .writeStream.format("queen")
        .option("url", broker.url)
        .option("queue", target)
        .option("stageBatchSize", "100")  # many requests per task: concurrent tasks would interleave them
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    copied = read_queue(broker.url, target)
    for name, count in sent.items():
        assert [json.loads(m["data"]) if isinstance(m["data"], str) else m["data"] for m in copied[name]] == [
            {"p": name, "i": i} for i in range(count)
        ]
    batches = sink_batches(broker.database_url, str(query.id))
    assert len(batches) >= 3 and all(direct for _, _, direct in batches)
    assert sum(pushed for _, pushed, _ in batches) == sum(sent.values())
    assert leftovers(broker.database_url, str(query.id)) == (0, 0)


def test_rows_without_a_stable_identity_fall_back_to_staged_commits(spark, broker, tmp_path: Path) -> None:
    source, target = unique("fb-src"), unique("fb-dst")
    configure(broker.url, source)
    push(broker.url, source, "p", [{"i": i} for i in range(300)], "fb")
    query = run(
        spark.readStream.format("queen")
        .option("url", broker.url)
        .option("queue", source)
        .option("maxMessagesPerTrigger", "100")
        .load()
        .select("data", "partition")  # no partitionId and offset: a row's place in a task is all it has
        .writeStream.format("queen")
        .option("url", broker.url)
        .option("queue", target)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert [m["data"]["i"] for m in read_queue(broker.url, target)["p"]] == list(range(300))
    batches = sink_batches(broker.database_url, str(query.id))
    assert len(batches) == 3 and not any(direct for _, _, direct in batches)
    assert sum(pushed for _, pushed, _ in batches) == 300
    assert leftovers(broker.database_url, str(query.id)) == (0, 0)


def test_staged_stays_selectable(spark, broker, tmp_path: Path) -> None:
    source, target = unique("st-src"), unique("st-dst")
    configure(broker.url, source)
    push(broker.url, source, "p", [{"i": i} for i in range(200)], "st")
    query = run(
        spark.readStream.format("queen")
        .option("url", broker.url)
        .option("queue", source)
        .load()
        .writeStream.format("queen")
        .option("url", broker.url)
        .option("queue", target)
        .option("commit", "staged")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert [m["data"]["i"] for m in read_queue(broker.url, target)["p"]] == list(range(200))
    assert [direct for _, _, direct in sink_batches(broker.database_url, str(query.id))] == [False]


def test_a_windowed_count_in_append_mode_commits_directly_with_id_columns(
    spark, broker, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    source, target = unique("wa-src"), unique("wa-dst")
    configure(broker.url, source)
    rng = random.Random(5)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    events = []
    for i in range(1200):  # mostly in time order, a little jitter, over 8 one-minute windows and 3 keys
        at = start + timedelta(seconds=i * 0.4 + rng.uniform(-2, 2))
        events.append({"key": f"k{rng.randrange(3)}", "at": at.isoformat()})
    for lo in range(0, len(events), 400):  # three partitions in step
        for p in range(3):
            push(broker.url, source, f"p{p}", events[lo + p : lo + 400 : 3], f"wa-{p}-{lo}")
    schema = "key STRING, at TIMESTAMP"
    windows = (
        spark.readStream.format("queen")
        .option("url", broker.url)
        .option("queue", source)
        .option("maxMessagesPerTrigger", "300")
        .load()
        .select(F.from_json("data", schema).alias("e"))
        .select("e.*")
        .withWatermark("at", "10 seconds")
        .groupBy(F.window("at", "1 minute"), "key")
        .count()
        .select(
            F.to_json(F.struct(F.col("window.start").cast("string").alias("start"), "key", "count")).alias(
                "data"
            ),
            F.col("window.start").alias("window_start"),
            "key",
        )
    )
    query = run(
        windows.writeStream.format("queen")
        .option("url", broker.url)
        .option("queue", target)
        .option("idColumns", "window_start,key")
        .outputMode("append")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    emitted = [m["data"] for m in read_queue(broker.url, target).get("Default", [])]
    expected = Counter()
    for event in events:
        at = datetime.fromisoformat(event["at"])
        expected[(at.replace(second=0, microsecond=0), event["key"])] += 1
    watermark = max(datetime.fromisoformat(e["at"]) for e in events) - timedelta(seconds=10)
    closed = {k: v for k, v in expected.items() if k[0] + timedelta(minutes=1) <= watermark}
    got = {(datetime.fromisoformat(w["start"]).replace(tzinfo=UTC), w["key"]): w["count"] for w in emitted}
    assert len(emitted) == len(got)  # each window once
    assert len(closed) >= 15
    # rows arriving after the watermark passed their window are dropped by Spark, as they should be
    assert {k: v for k, v in got.items() if k in closed} == {k: v for k, v in closed.items() if k in got}
    assert set(got) <= set(closed) and len(got) >= len(closed) - 3
    batches = sink_batches(broker.database_url, str(query.id))
    assert batches and all(direct for _, _, direct in batches)


def test_a_copy_reading_only_the_columns_it_needs_keeps_order_and_identity(
    spark, broker, tmp_path: Path
) -> None:
    """The source builds only the columns of a schema the query gives (no select needed): a direct copy of
    data, partition, partitionId and offset."""
    source, target = unique("cols-src"), unique("cols-dst")
    configure(broker.url, source)
    sent = {"a": 700, "b": 400}
    for name, count in sent.items():
        push(broker.url, source, name, [{"p": name, "i": i} for i in range(count)], f"{name}")
    rows = (
        spark.readStream.format("queen")
        .schema("data STRING, partition STRING, partitionId STRING, offset BIGINT")
        .option("url", broker.url)
        .option("queue", source)
        .option("maxMessagesPerTrigger", "500")
        .load()
    )
    assert rows.columns == ["data", "partition", "partitionId", "offset"]
    query = run(
        rows.writeStream.format("queen")
        .option("url", broker.url)
        .option("queue", target)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    copied = read_queue(broker.url, target)
    for name, count in sent.items():
        assert [json.loads(m["data"]) if isinstance(m["data"], str) else m["data"] for m in copied[name]] == [
            {"p": name, "i": i} for i in range(count)
        ]
    batches = sink_batches(broker.database_url, str(query.id))
    assert len(batches) >= 3 and all(direct for _, _, direct in batches)
    assert sum(pushed for _, pushed, _ in batches) == sum(sent.values())
