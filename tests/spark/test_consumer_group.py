"""The streaming source advances its consumer group's cursor: the broker's lag drops to 0 once the query has
committed, and a new checkpoint with ``startingOffsets=group`` resumes where the group stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from spark_helpers import configure, push

from helpers import unique

pytestmark = pytest.mark.spark


def group_lag(url: str, group: str, queue: str) -> dict[str, int]:
    detail = httpx.get(f"{url}/api/v1/consumer-groups/{group}", timeout=30)
    detail.raise_for_status()
    body: dict[str, Any] = detail.json() if detail.content else {}
    return {p["partition"]: p["offsetLag"] for p in body.get(queue, {}).get("partitions", [])}


def copy_once(spark, url: str, queue: str, group: str, target: str, checkpoint: Path) -> int:
    """Run an availableNow copy of ``queue`` under ``group``; returns the rows it read."""
    query = (
        spark.readStream.format("queen")
        .option("url", url)
        .option("queue", queue)
        .option("consumerGroup", group)
        .option("maxMessagesPerTrigger", "250")
        .load()
        .writeStream.format("queen")
        .option("url", url)
        .option("queue", target)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(180)
    finally:
        query.stop()
    assert query.exception() is None
    return sum(p.numInputRows for p in query.recentProgress)


def test_lag_drops_to_zero_and_a_new_checkpoint_resumes_from_the_group(spark, broker, tmp_path: Path) -> None:
    queue, target, group = unique("cg-src"), unique("cg-dst"), unique("spark-g")
    configure(broker.url, queue)
    configure(broker.url, target)
    for name, n in (("a", 400), ("b", 300), ("c", 100)):
        push(broker.url, queue, name, [{"i": i} for i in range(n)], name)

    assert copy_once(spark, broker.url, queue, group, target, tmp_path / "ck1") == 800
    lag = group_lag(broker.url, group, queue)
    assert {name: lag.get(name) for name in ("a", "b", "c")} == {"a": 0, "b": 0, "c": 0}

    # a fresh checkpoint starts from the group's cursor (startingOffsets defaults to group): nothing new
    assert copy_once(spark, broker.url, queue, group, target, tmp_path / "ck2") == 0
    push(broker.url, queue, "b", [{"i": i} for i in range(300, 310)], "b-more")
    assert group_lag(broker.url, group, queue)["b"] == 10
    assert copy_once(spark, broker.url, queue, group, target, tmp_path / "ck3") == 10
    assert group_lag(broker.url, group, queue)["b"] == 0
