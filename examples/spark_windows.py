"""Windowed aggregation on Spark: per-key tumbling 1-minute sums with an event-time watermark, queue → queue.

A producer writes ``--events`` readings ``{"key", "value", "tsMs"}`` to the queue ``sensor.readings<suffix>``,
one partition per key, each partition in event-time order over ``--minutes`` minutes. A Spark streaming query
reads the queue (``maxMessagesPerTrigger`` spread over the partitions in proportion to their backlog, so the
partitions advance in step and the global watermark never overtakes a slower partition), keeps a 2-minute
watermark on ``tsMs``, sums ``value`` per key and 1-minute tumbling window, and appends each closed window to the
queue ``sensor.minute_totals<suffix>`` as ``{"key", "windowStartMs", "windowEndMs", "total", "count"}``
(partition = key). A last reading per key, ``"flush": true``, 10 minutes after the others, moves the watermark
past every window so they all close; its own window stays open, so it is never written. (It must not be
filtered out before the aggregation: Spark pushes such a filter below the watermark operator, and the watermark
would then never see the flush readings.)

The script then recomputes the windows in plain Python from the readings and exits 0 only if the queue holds
exactly those results, each window once (1 if not, 2 if the broker cannot be reached).

    queenpy spark run examples/spark_windows.py --url http://localhost:6632
    python examples/spark_windows.py --url http://localhost:6632 --events 20000 --keys 8
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

WINDOW_MS = 60_000
WATERMARK = "2 minutes"
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
Window = tuple[str, int, int, int, int]  # key, windowStartMs, windowEndMs, total, count


@dataclass
class WindowsResult:
    """Readings produced, the windows Spark wrote, the windows Python computed."""

    readings: int
    spark: list[Window]
    python: list[Window]

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in Counter(self.spark).values() if n > 1)

    @property
    def ok(self) -> bool:
        return self.duplicates == 0 and sorted(self.spark) == sorted(self.python)


def make_readings(events: int, keys: int, minutes: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Readings by key, each key's list in event-time order, plus one flush reading per key at the end."""
    rng = random.Random(seed)
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    stamps = sorted(BASE_MS + rng.randrange(minutes * WINDOW_MS) for _ in range(events))
    for ts in stamps:
        key = f"sensor-{rng.randrange(keys)}"
        by_key[key].append({"key": key, "value": rng.randint(-50, 100), "tsMs": ts})
    end = BASE_MS + (minutes + 10) * WINDOW_MS
    for k in range(keys):
        by_key[f"sensor-{k}"].append({"key": f"sensor-{k}", "value": 0, "tsMs": end, "flush": True})
    return dict(by_key)


def python_windows(readings: dict[str, list[dict[str, Any]]]) -> list[Window]:
    """The same aggregation in plain Python (flush readings excluded)."""
    sums: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for key, items in readings.items():
        for r in items:
            if r.get("flush"):
                continue
            start = r["tsMs"] - r["tsMs"] % WINDOW_MS
            acc = sums[(key, start)]
            acc[0] += r["value"]
            acc[1] += 1
    return sorted(
        (key, start, start + WINDOW_MS, total, count) for (key, start), (total, count) in sums.items()
    )


def produce(url: str, queue: str, readings: dict[str, list[dict[str, Any]]]) -> int:
    with httpx.Client(base_url=url, timeout=60) as client:
        client.post("/api/v1/configure", json={"queue": queue, "options": {}}).raise_for_status()
        for key, items in readings.items():
            for lo in range(0, len(items), 2000):
                chunk = [
                    {"queue": queue, "partition": key, "payload": r, "transactionId": f"{key}-{lo + i}"}
                    for i, r in enumerate(items[lo : lo + 2000])
                ]
                client.post("/api/v1/push", json={"items": chunk}).raise_for_status()
    return sum(len(items) for items in readings.values())


def run_windows(
    spark: SparkSession,
    url: str,
    suffix: str,
    *,
    events: int = 5000,
    keys: int = 5,
    minutes: int = 10,
    max_per_trigger: int = 1000,
    checkpoint: str | None = None,
    seed: int = 11,
) -> WindowsResult:
    """Produce, run the windowed query to the end of the readings (availableNow), read the results back."""
    from pyspark.sql import functions as F

    readings_q, totals_q = f"sensor.readings{suffix}", f"sensor.minute_totals{suffix}"
    readings = make_readings(events, keys, minutes, seed)
    produced = produce(url, readings_q, readings)
    httpx.post(
        f"{url}/api/v1/configure", json={"queue": totals_q, "options": {}}, timeout=30
    ).raise_for_status()

    schema = "key STRING, value BIGINT, tsMs BIGINT, flush BOOLEAN"
    source = (
        spark.readStream.format("queen")
        .option("url", url)
        .option("queue", readings_q)
        .option("maxMessagesPerTrigger", str(max_per_trigger))
        .load()
    )
    reading = F.from_json("data", schema)
    totals = (
        source.select(reading.alias("r"))
        .select("r.*", F.timestamp_millis(F.col("r.tsMs")).alias("eventTime"))
        .withWatermark("eventTime", WATERMARK)
        .groupBy(F.window("eventTime", "1 minute"), "key")
        .agg(F.sum("value").alias("total"), F.count(F.lit(1)).alias("count"))
    )
    out = totals.select(
        F.to_json(
            F.struct(
                "key",
                F.unix_millis(F.col("window.start")).alias("windowStartMs"),
                F.unix_millis(F.col("window.end")).alias("windowEndMs"),
                "total",
                "count",
            )
        ).alias("data"),
        F.col("key").alias("partition"),
    )
    checkpoint = checkpoint or tempfile.mkdtemp(prefix="queenpy-windows-")
    query = (
        out.writeStream.format("queen")
        .option("url", url)
        .option("queue", totals_q)
        .option("checkpointLocation", checkpoint)
        .outputMode("append")
        .queryName("minute-totals")
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"windowed query failed: {query.exception()}")

    rows = (
        spark.read.format("queen")
        .option("url", url)
        .option("queue", totals_q)
        .load()
        .select(
            F.from_json(
                "data", "key STRING, windowStartMs BIGINT, windowEndMs BIGINT, total BIGINT, count BIGINT"
            ).alias("w")
        )
        .select("w.*")
        .collect()
    )
    spark_windows = [(r.key, r.windowStartMs, r.windowEndMs, r.total, r["count"]) for r in rows]
    return WindowsResult(produced, spark_windows, python_windows(readings))


def main(argv: list[str] | None = None) -> int:
    """Command line: run, print the comparison, exit 0 only if Spark's windows equal Python's."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("QUEEN_URL", "http://localhost:6632"),
        help="broker URL (env QUEEN_URL)",
    )
    parser.add_argument(
        "--suffix",
        default=os.environ.get("QUEEN_PIPELINE_SUFFIX") or f".{uuid.uuid4().hex[:8]}",
        help="appended to the queue names (default: random)",
    )
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--max-per-trigger", type=int, default=1000)
    parser.add_argument("--checkpoint", default=None, help="checkpoint directory (default: a temp dir)")
    args = parser.parse_args(argv)

    from queenpy.spark import get_session

    try:
        httpx.get(f"{args.url}/health", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        print(f"error: broker {args.url} unreachable: {exc}", file=sys.stderr)
        return 2
    started = time.monotonic()
    result = run_windows(
        get_session("spark-windows"),
        args.url,
        args.suffix,
        events=args.events,
        keys=args.keys,
        minutes=args.minutes,
        max_per_trigger=args.max_per_trigger,
        checkpoint=args.checkpoint,
    )
    print(f"readings: {result.readings} ({args.keys} keys + 1 flush each)")
    print(f"windows from spark: {len(result.spark)}")
    print(f"windows from python: {len(result.python)}")
    print(f"duplicates: {result.duplicates}")
    print(f"elapsed: {time.monotonic() - started:.1f} s")
    if not result.ok:
        missing = sorted(set(result.python) - set(result.spark))[:5]
        extra = sorted(set(result.spark) - set(result.python))[:5]
        print(f"MISMATCH: missing {missing} extra {extra}", file=sys.stderr)
        return 1
    print("windows ok: Spark's windows equal the Python computation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
