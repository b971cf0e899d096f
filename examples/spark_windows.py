"""Windowed aggregations on Spark, queue → queue: tumbling, sliding and session windows with an event-time
watermark, and late readings routed to a late queue.

A producer writes ``--events`` readings ``{"key", "value", "tsMs"}`` to ``sensor.readings<suffix>``, one
partition per key. Each key is active in bursts (readings 2 s apart, then an idle gap longer than the session
gap), in event-time order; every ``LATE_EVERY``-th reading after the first quarter is written ``LATE_BY_MS``
(3 hours) older than its neighbours: a reading behind its time. A last reading per key, ``"flush": true``, 3
hours after the others, moves the watermark past every window so they all close (its own
window stays open and is never written; it must not be filtered out before the aggregation: Spark pushes such
a filter below the watermark operator, and the watermark would then never see it).

Queries, each ``Trigger.AvailableNow`` over the same source with the same ``maxMessagesPerTrigger`` (spread
over the partitions in proportion to their backlog, so partitions advance in step), hence the same
micro-batches:

``late``       ``foreachBatch``: a reading of micro-batch N is late when it is at or below the watermark
               Spark's stateful operators drop late rows with in batch N: the watermark of batch N-1, that is
               the largest event time of micro-batches 0..N-2 minus ``WATERMARK_MS`` (none in batches 0 and 1;
               Spark 3.4+ filters late input with the previous batch's watermark,
               ``eventTimeWatermarkForLateEvents``, and evicts state with the current one). Late readings are
               appended to ``sensor.late<suffix>`` (one batch write per micro-batch, keyed on the batch id, so
               a replay pushes nothing twice). The running maximum is kept per batch id in the query's
               checkpoint directory.
``tumbling``   sum and count per key and 1-minute window → ``sensor.tumbling<suffix>``
``sliding``    per key, 2-minute windows every minute → ``sensor.sliding<suffix>``
``session``    per key, sessions closed by a 3-minute gap → ``sensor.session<suffix>``

The aggregations keep a ``withWatermark`` of the same delay, so Spark itself drops the late readings. A
reading 3 hours behind that arrives in micro-batch 1 is not late by that rule (batch 0 ran without a
watermark): Spark aggregates it, and its windows, already past the current watermark, close in the same
micro-batch. Each closed window is appended once as
``{"key", "windowStartMs", "windowEndMs", "total", "count"}`` (partition = key).

The script recomputes everything in plain Python from the readings: the micro-batches (with the connector's
own admission function), the late set by the watermark rule, and the windows of the on-time readings. It exits
0 only if every queue holds exactly those results, each once (1 if not, 2 if the broker cannot be reached).

    queenpy spark run examples/spark_windows.py --url http://localhost:6632
    python examples/spark_windows.py --url http://localhost:6632 --events 20000 --keys 8 --kinds session
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

WINDOW_MS = 60_000
SLIDE_WINDOW_MS, SLIDE_EVERY_MS = 120_000, 60_000
SESSION_GAP_MS = 180_000
WATERMARK_MS = 120_000
WATERMARK = "2 minutes"
LATE_EVERY = 50
LATE_BY_MS = 3 * 3_600_000
BURST = 10
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
KINDS = ("tumbling", "sliding", "session")
Window = tuple[str, int, int, int, int]  # key, windowStartMs, windowEndMs, total, count
Reading = dict[str, Any]


@dataclass
class WindowsResult:
    """Readings produced; per kind the windows Spark wrote and the windows Python computed; the late readings
    (``(key, tsMs, value)``) in the late queue and those Python expects."""

    readings: int
    spark: dict[str, list[Window]] = field(default_factory=dict)
    python: dict[str, list[Window]] = field(default_factory=dict)
    late_spark: list[tuple[str, int, int]] = field(default_factory=list)
    late_python: list[tuple[str, int, int]] = field(default_factory=list)

    def duplicates(self, kind: str) -> int:
        return sum(n - 1 for n in Counter(self.spark[kind]).values() if n > 1)

    @property
    def ok(self) -> bool:
        return sorted(self.late_spark) == sorted(self.late_python) and all(
            self.duplicates(k) == 0 and sorted(self.spark[k]) == sorted(self.python[k]) for k in self.spark
        )


def make_readings(events: int, keys: int, seed: int) -> dict[str, list[Reading]]:
    """Readings by key, each key's list in write order, then one flush reading per key. Every key follows the
    same schedule (bursts of BURST readings 2 s apart, then an idle gap longer than the session gap; key k 0.1
    k s later), so the proportional admission keeps the keys in step in event time too. Every LATE_EVERY-th
    reading after the first quarter is LATE_BY_MS older than its neighbours: more than a micro-batch spans
    plus the watermark delay, so it is behind the watermark of any micro-batch after the first two."""
    rng = random.Random(seed)
    per_key = max(1, events // keys)
    stamps, at = [], BASE_MS
    for i in range(per_key):
        stamps.append(at)
        at += 2_000 if (i + 1) % BURST else SESSION_GAP_MS + 60_000
    by_key: dict[str, list[Reading]] = {}
    for k in range(keys):
        key = f"sensor-{k}"
        items = [
            {
                "key": key,
                "value": rng.randint(-50, 100),
                "tsMs": stamp + 100 * k - (LATE_BY_MS if i > per_key // 4 and i % LATE_EVERY == 0 else 0),
            }
            for i, stamp in enumerate(stamps)
        ]
        items.append({"key": key, "value": 0, "tsMs": at + LATE_BY_MS, "flush": True})
        by_key[key] = items
    return by_key


def micro_batches(readings: dict[str, list[Reading]], budget: int) -> list[list[Reading]]:
    """The micro-batches the queries read: the connector's proportional admission over the partitions (one
    per key), until everything is read (availableNow)."""
    from queenpy.spark.offsets import admit

    heads = {key: len(items) for key, items in readings.items()}
    start = {key: 0 for key in readings}
    batches = []
    while start != heads:
        end = admit(start, heads, budget)
        batches.append([r for key in sorted(readings) for r in readings[key][start[key] : end[key]]])
        start = end
    return batches


def python_late(batches: list[list[Reading]]) -> list[tuple[str, int, int]]:
    """Readings Spark's stateful operators drop as late: in micro-batch N, those at or below the watermark of
    batch N-1 (the largest event time of batches 0..N-2 minus the delay; none for batches 0 and 1). Spark 3.4+
    filters late input with the previous batch's watermark (``eventTimeWatermarkForLateEvents``) and evicts
    state with the current one."""
    late: list[tuple[str, int, int]] = []
    seen: int | None = None  # the largest event time of batches 0..N-2 while batch N is read
    for n, batch in enumerate(batches):
        watermark = None if seen is None else seen - WATERMARK_MS
        late += [
            (r["key"], r["tsMs"], r["value"])
            for r in batch
            if watermark is not None and r["tsMs"] <= watermark
        ]
        if n >= 1:
            top = max(r["tsMs"] for r in batches[n - 1])
            seen = top if seen is None else max(seen, top)
    return sorted(late)


def behind_but_on_time(batches: list[list[Reading]]) -> int:
    """Readings LATE_BY_MS behind their neighbours that Spark still aggregates (they arrive in micro-batch 0
    or 1, before any watermark applies to late rows)."""
    late = set(python_late(batches))
    return sum(
        1
        for batch in batches
        for r in batch
        if r["tsMs"] < BASE_MS and (r["key"], r["tsMs"], r["value"]) not in late
    )


def python_windows(kind: str, readings: list[Reading]) -> list[Window]:
    """The windows of ``kind`` over on-time, non-flush readings, as Spark defines them: tumbling and sliding
    windows aligned to the epoch, ``[start, start + size)``; a session starts at its first reading and ends
    SESSION_GAP_MS after its last, and a reading less than the gap after the previous one extends it."""
    sums: dict[tuple[str, int, int], list[int]] = defaultdict(lambda: [0, 0])
    if kind == "session":
        by_key: dict[str, list[Reading]] = defaultdict(list)
        for r in readings:
            by_key[r["key"]].append(r)
        for key, items in by_key.items():
            items.sort(key=lambda r: r["tsMs"])
            start = end = None
            members: list[Reading] = []
            for r in [*items, None]:
                if r is not None and end is not None and r["tsMs"] < end:
                    members.append(r)
                    end = max(end, r["tsMs"] + SESSION_GAP_MS)
                    continue
                if members and start is not None and end is not None:
                    sums[(key, start, end)] = [sum(m["value"] for m in members), len(members)]
                if r is not None:
                    start, end, members = r["tsMs"], r["tsMs"] + SESSION_GAP_MS, [r]
    else:
        size, every = (WINDOW_MS, WINDOW_MS) if kind == "tumbling" else (SLIDE_WINDOW_MS, SLIDE_EVERY_MS)
        for r in readings:
            first = r["tsMs"] - r["tsMs"] % every - size + every
            for start in range(first, r["tsMs"] + 1, every):
                acc = sums[(r["key"], start, start + size)]
                acc[0] += r["value"]
                acc[1] += 1
    return sorted((key, start, end, total, count) for (key, start, end), (total, count) in sums.items())


def produce(url: str, queue: str, readings: dict[str, list[Reading]]) -> int:
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


READING_SCHEMA = "key STRING, value BIGINT, tsMs BIGINT, flush BOOLEAN"


def _source(spark: SparkSession, url: str, queue: str, budget: int) -> DataFrame:
    from pyspark.sql import functions as F

    return (
        spark.readStream.format("queen")
        .option("url", url)
        .option("queue", queue)
        .option("maxMessagesPerTrigger", str(budget))
        .load()
        .select(F.from_json("data", READING_SCHEMA).alias("r"))
        .select("r.*", F.timestamp_millis(F.col("r.tsMs")).alias("eventTime"))
    )


def _await(query: Any, what: str) -> None:
    try:
        query.awaitTermination()
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"{what} query failed: {query.exception()}")


def route_late(
    spark: SparkSession, url: str, source: str, late_queue: str, budget: int, checkpoint: str
) -> None:
    """The ``late`` query (see the module docstring)."""
    from pyspark.sql import functions as F

    marks = Path(checkpoint) / "late-router-max-event-time"
    marks.mkdir(parents=True, exist_ok=True)

    def handle(batch: DataFrame, batch_id: int) -> None:
        # marks/K holds the largest event time of batches 0..K; batch N (= batch_id) meets the watermark of
        # batch N-1, made from batches 0..N-2
        previous = marks / str(batch_id - 1)
        seen = int(previous.read_text()) if previous.exists() else None
        before = marks / str(batch_id - 2)
        watermark_seen = int(before.read_text()) if before.exists() else None
        if watermark_seen is not None:
            late = batch.where(F.col("tsMs") <= watermark_seen - WATERMARK_MS)
            (
                late.select(
                    F.to_json(F.struct("key", "value", "tsMs")).alias("data"), F.col("key").alias("partition")
                )
                .write.format("queen")
                .option("url", url)
                .option("queue", late_queue)
                .option("writeId", f"{late_queue}-{batch_id}")
                .mode("append")
                .save()
            )
        top = batch.agg(F.max("tsMs")).first()
        newest = (
            max(v for v in (seen, top[0] if top else None) if v is not None)
            if (seen is not None or (top and top[0] is not None))
            else None
        )
        if newest is not None:
            mark = marks / str(batch_id)
            partial = mark.with_suffix(".tmp")
            partial.write_text(str(newest))
            partial.replace(mark)  # atomic: a replay of this batch recomputes the same value

    query = (
        _source(spark, url, source, budget)
        .writeStream.foreachBatch(handle)
        .option("checkpointLocation", checkpoint)
        .queryName("late")
        .trigger(availableNow=True)
        .start()
    )
    _await(query, "late")


def aggregate(
    spark: SparkSession, url: str, kind: str, source: str, target: str, budget: int, checkpoint: str
) -> None:
    """One windowed query of ``kind`` (tumbling | sliding | session), appending closed windows to
    ``target``."""
    from pyspark.sql import functions as F

    readings = _source(spark, url, source, budget).withWatermark("eventTime", WATERMARK)
    if kind == "tumbling":
        window = F.window("eventTime", "1 minute")
    elif kind == "sliding":
        window = F.window("eventTime", "2 minutes", "1 minute")
    elif kind == "session":
        window = F.session_window("eventTime", "3 minutes")
    else:
        raise ValueError(f"unknown window kind {kind!r}; known: {', '.join(KINDS)}")
    totals = readings.groupBy(window.alias("w"), "key").agg(
        F.sum("value").alias("total"), F.count(F.lit(1)).alias("count")
    )
    out = totals.select(
        F.to_json(
            F.struct(
                "key",
                F.unix_millis(F.col("w.start")).alias("windowStartMs"),
                F.unix_millis(F.col("w.end")).alias("windowEndMs"),
                "total",
                "count",
            )
        ).alias("data"),
        F.col("key").alias("partition"),
    )
    query = (
        out.writeStream.format("queen")
        .option("url", url)
        .option("queue", target)
        .option("checkpointLocation", checkpoint)
        .outputMode("append")
        .queryName(kind)
        .trigger(availableNow=True)
        .start()
    )
    _await(query, kind)


def read_windows(spark: SparkSession, url: str, queue: str) -> list[Window]:
    from pyspark.sql import functions as F

    rows = (
        spark.read.format("queen")
        .option("url", url)
        .option("queue", queue)
        .load()
        .select(
            F.from_json(
                "data", "key STRING, windowStartMs BIGINT, windowEndMs BIGINT, total BIGINT, count BIGINT"
            ).alias("w")
        )
        .select("w.*")
        .collect()
    )
    return [(r.key, r.windowStartMs, r.windowEndMs, r.total, r["count"]) for r in rows]


def read_late(spark: SparkSession, url: str, queue: str) -> list[tuple[str, int, int]]:
    from pyspark.sql import functions as F

    rows = (
        spark.read.format("queen")
        .option("url", url)
        .option("queue", queue)
        .load()
        .select(F.from_json("data", READING_SCHEMA).alias("r"))
        .select("r.*")
        .collect()
    )
    return [(r.key, r.tsMs, r.value) for r in rows]


@dataclass
class Prepared:
    """Readings produced to ``source``, with what Python expects of them."""

    url: str
    suffix: str
    source: str
    budget: int
    produced: int
    on_time: list[Reading]
    late: list[tuple[str, int, int]]
    behind: int = 0  # readings LATE_BY_MS behind that are on time all the same (micro-batches 0 and 1)


def prepare(
    url: str, suffix: str, *, events: int = 3000, keys: int = 4, max_per_trigger: int = 400, seed: int = 11
) -> Prepared:
    """Produce the readings and compute in Python the micro-batches, the late readings and the on-time
    ones."""
    source = f"sensor.readings{suffix}"
    readings = make_readings(events, keys, seed)
    produced = produce(url, source, readings)
    batches = micro_batches(readings, max_per_trigger)
    late = python_late(batches)
    late_keys = Counter(late)
    on_time = []
    for items in readings.values():
        for r in items:
            key = (r["key"], r["tsMs"], r["value"])
            if late_keys[key]:
                late_keys[key] -= 1
            elif not r.get("flush"):
                on_time.append(r)
    return Prepared(
        url, suffix, source, max_per_trigger, produced, on_time, late, behind_but_on_time(batches)
    )


def run_windows(
    spark: SparkSession,
    prepared: Prepared,
    kinds: tuple[str, ...] = KINDS,
    *,
    checkpoint: str | None = None,
    route: bool = True,
) -> WindowsResult:
    """Run the late router (unless ``route`` is false) and the windowed queries of ``kinds``; read back."""
    base = checkpoint or tempfile.mkdtemp(prefix="queenpy-windows-")
    url, suffix = prepared.url, prepared.suffix
    result = WindowsResult(prepared.produced, late_python=prepared.late)
    if route:
        late_queue = f"sensor.late{suffix}"
        httpx.post(
            f"{url}/api/v1/configure", json={"queue": late_queue, "options": {}}, timeout=30
        ).raise_for_status()
        route_late(spark, url, prepared.source, late_queue, prepared.budget, os.path.join(base, "late"))
        result.late_spark = read_late(spark, url, late_queue)
    else:
        result.late_spark = list(prepared.late)
    for kind in kinds:
        target = f"sensor.{kind}{suffix}"
        httpx.post(
            f"{url}/api/v1/configure", json={"queue": target, "options": {}}, timeout=30
        ).raise_for_status()
        aggregate(spark, url, kind, prepared.source, target, prepared.budget, os.path.join(base, kind))
        result.spark[kind] = read_windows(spark, url, target)
        result.python[kind] = python_windows(kind, prepared.on_time)
    return result


def main(argv: list[str] | None = None) -> int:
    """Command line: run, print the comparison, exit 0 only if Spark's output equals Python's."""
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
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--keys", type=int, default=4)
    parser.add_argument("--max-per-trigger", type=int, default=400)
    parser.add_argument("--kinds", default=",".join(KINDS), help="window kinds, comma-separated")
    parser.add_argument("--checkpoint", default=None, help="checkpoint directory (default: a temp dir)")
    args = parser.parse_args(argv)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        parser.error(f"unknown window kind(s) {unknown}; known: {', '.join(KINDS)}")

    from queenpy.spark import get_session

    try:
        httpx.get(f"{args.url}/health", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        print(f"error: broker {args.url} unreachable: {exc}", file=sys.stderr)
        return 2
    started = time.monotonic()
    prepared = prepare(
        args.url, args.suffix, events=args.events, keys=args.keys, max_per_trigger=args.max_per_trigger
    )
    result = run_windows(get_session("spark-windows"), prepared, kinds, checkpoint=args.checkpoint)
    print(f"readings: {result.readings} ({args.keys} keys + 1 flush each)")
    print(f"late readings: {len(result.late_spark)} in the late queue, {len(result.late_python)} from python")
    for kind in kinds:
        print(
            f"{kind} windows: {len(result.spark[kind])} from spark, {len(result.python[kind])} from python, "
            f"duplicates: {result.duplicates(kind)}"
        )
    print(f"elapsed: {time.monotonic() - started:.1f} s")
    if not result.ok:
        for kind in kinds:
            missing = sorted(set(result.python[kind]) - set(result.spark[kind]))[:3]
            extra = sorted(set(result.spark[kind]) - set(result.python[kind]))[:3]
            if missing or extra:
                print(f"MISMATCH {kind}: missing {missing} extra {extra}", file=sys.stderr)
        if sorted(result.late_spark) != sorted(result.late_python):
            print("MISMATCH late readings", file=sys.stderr)
        return 1
    print("windows ok: Spark's windows and late readings equal the Python computation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
