"""Tumbling-window count per key with Spark Structured Streaming, reading and writing queues through
``format("queen")``.

The same job as ``streams_window_count.py`` (docs/pipelines.md compares the two): ``{"key", "tsMs"}`` events
from a queue (one partition per key), counted per key and 1-minute event-time window with a 2-minute
watermark, each closed window appended to a second queue as ``{"key", "windowStartMs", "windowEndMs",
"count"}`` (partition = key). ``maxMessagesPerTrigger`` is spread over the partitions in proportion to their
backlog, so the partitions advance in step and Spark's one watermark (the newest event time seen, minus 2
minutes) never overtakes a slower partition.

    queenpy spark run examples/spark_window_count.py --url http://localhost:6632

It pushes the demo events of ``window_count_data.py``, runs the query to their end (``availableNow``), and
exits 0 only if the windows equal the plain Python computation (1 if not, 2 if the broker cannot be reached).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from typing import TYPE_CHECKING

import httpx
from window_count_data import Window, check, expected_windows, make_events, produce

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def run_window_count(
    spark: SparkSession,
    url: str,
    source: str,
    sink: str,
    checkpoint: str | None = None,
    max_per_trigger: int = 400,
) -> list[Window]:
    """Run the windowed query over everything in ``source`` (availableNow), return the windows in ``sink``."""
    from pyspark.sql import functions as F

    events = (
        spark.readStream.format("queen")
        .option("url", url)
        .option("queue", source)
        .option("maxMessagesPerTrigger", str(max_per_trigger))
        .load()
    )
    event = F.from_json("data", "key STRING, tsMs BIGINT").alias("e")
    counts = (
        events.select(event)
        .select("e.key", F.timestamp_millis("e.tsMs").alias("eventTime"))
        .withWatermark("eventTime", "2 minutes")
        .groupBy(F.window("eventTime", "1 minute"), "key")
        .count()
    )
    out = counts.select(
        F.to_json(
            F.struct(
                "key",
                F.unix_millis("window.start").alias("windowStartMs"),
                F.unix_millis("window.end").alias("windowEndMs"),
                "count",
            )
        ).alias("data"),
        F.col("key").alias("partition"),
    )
    query = (
        out.writeStream.format("queen")
        .option("url", url)
        .option("queue", sink)
        .option("checkpointLocation", checkpoint or tempfile.mkdtemp(prefix="queenpy-window-count-"))
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"window count failed: {query.exception()}")
    rows = (
        spark.read.format("queen")
        .option("url", url)
        .option("queue", sink)
        .load()
        .select(
            F.from_json("data", "key STRING, windowStartMs BIGINT, windowEndMs BIGINT, count BIGINT").alias(
                "w"
            )
        )
        .select("w.*")
        .collect()
    )
    return sorted((r.key, r.windowStartMs, r.windowEndMs, r["count"]) for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("QUEEN_URL", "http://localhost:6632"),
        help="broker URL (env QUEEN_URL)",
    )
    parser.add_argument("--events", type=int, default=2000, help="demo events")
    args = parser.parse_args(argv)
    try:
        httpx.get(f"{args.url}/health", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        print(f"error: broker {args.url} unreachable: {exc}", file=sys.stderr)
        return 2
    from queenpy.spark import get_session

    suffix = uuid.uuid4().hex[:8]
    source, sink = f"clicks.{suffix}", f"clicks.{suffix}.counts"
    events = make_events(args.events)
    produced = produce(args.url, source, events)
    windows = run_window_count(get_session("window-count"), args.url, source, sink)
    return check(produced, windows, expected_windows(events))


if __name__ == "__main__":
    sys.exit(main())
