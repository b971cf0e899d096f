"""The chat pipeline of examples/pipeline.py on Spark: translate → route → notify through queues.

Queues ``chat.translate``, ``chat.route`` and ``chat.notify`` (plus ``--suffix``, random by default so reruns
do not collide) are partitioned by chat id and configured as in the broker pipeline: ``leaseTime`` 8 s,
``retryLimit`` 2, dead-letter queue on. The script produces 100 messages (every 7th poisoned) and runs three
Spark streaming queries, each with its own checkpoint, on one SparkSession:

``translate``  reads ``chat.translate`` and runs the translate handler on every message in Spark. In each
               micro-batch (``foreachBatch``) the healthy results are appended to ``chat.route`` with a batch
               write keyed on (query id, batch id), so a replayed micro-batch pushes nothing twice. A message
               whose handler raised is *not* failed in Spark (one bad record would fail the whole
               micro-batch); it is handed to the broker's own retry path instead: the consumer group
               ``spark.translate.retries`` is positioned just before the message (``/api/v1/spark/cursor``),
               then the message is popped with a lease, the handler runs again, and a failed ack returns it,
               exactly as a broker consumer does. After retryLimit + 1 = 3 failed deliveries the broker moves
               it to the ``chat.translate`` dead-letter queue with the handler's error. So a poisoned message
               costs one attempt in Spark plus the same 3 attempts on the broker as in the broker pipeline; a
               message that succeeds on a retry is forwarded to ``chat.route`` in the ack's transaction.
               Messages already in the DLQ are skipped, so a replayed micro-batch dead-letters nothing twice.
``route``      reads ``chat.route``, adds the route, and streams into ``chat.notify`` with the ``queen`` sink
               (one broker transaction per micro-batch, idempotent per query id and batch id).
``notify``     reads ``chat.notify`` and delivers the notifications: one JSON-lines file per micro-batch,
               written atomically under the batch id (a replay rewrites the same file).

Expected with the defaults: 100 produced, 14 poisoned, 100 translate attempts in Spark + 42 on the broker's
retry path (14 × 3), 86 routed, 86 notified, 14 dead letters, 0 duplicates. The script prints its counts and
exits 1 if any differs (2 if the broker cannot be reached).

    queenpy spark run examples/spark_pipeline.py --master 'local[2]' --url http://localhost:6632
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from queenpy.client import Queen
from queenpy.errors import QueenError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

POISON_EVERY = 7
RETRY_LIMIT = 2
LEASE_TIME_S = 8
TRIGGER = "500 milliseconds"


# -- the handlers (the same as the broker pipeline's) --------------------------------------------------------


def translate(message: dict[str, Any]) -> dict[str, Any]:
    """The translate handler: raises on a poisoned message."""
    if message["poison"]:
        raise ValueError(f"cannot translate message {message['n']}")
    return {**message, "text": message["text"].replace("hello", "hola")}


@dataclass
class Counts:
    """What the pipeline did; ``expected(n)`` is what it must do for ``n`` produced messages."""

    produced: int = 0
    poisoned: int = 0
    spark_translate_attempts: int = 0
    retry_path_attempts: int = 0
    routed: int = 0
    notified: int = 0
    dead_letters: int = 0
    duplicates: int = 0

    @staticmethod
    def expected(messages: int) -> dict[str, int]:
        poisoned = messages // POISON_EVERY
        return {
            "produced": messages,
            "poisoned": poisoned,
            "spark_translate_attempts": messages,
            "retry_path_attempts": poisoned * (RETRY_LIMIT + 1),
            "routed": messages - poisoned,
            "notified": messages - poisoned,
            "dead_letters": poisoned,
            "duplicates": 0,
        }

    def report(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.expected(0)}


@dataclass
class Pipeline:
    """Names and places of one run."""

    url: str
    suffix: str
    workdir: Path
    translate_q: str = field(init=False)
    route_q: str = field(init=False)
    notify_q: str = field(init=False)

    def __post_init__(self) -> None:
        self.translate_q, self.route_q, self.notify_q = (
            f"chat.{stage}{self.suffix}" for stage in ("translate", "route", "notify")
        )

    @property
    def retry_group(self) -> str:
        return f"spark.translate.retries{self.suffix}"

    @property
    def notifications(self) -> Path:
        return self.workdir / "notifications"

    def checkpoint(self, stage: str) -> str:
        return str(self.workdir / "checkpoints" / stage)


# -- set up and produce --------------------------------------------------------------------------------------


def set_up(q: Queen, p: Pipeline, messages: int, chats: int) -> int:
    """Create the three queues as the broker pipeline does, produce ``messages``; returns how many were
    queued."""
    for name in (p.translate_q, p.route_q, p.notify_q):
        q.queue(name).delete()
        q.queue(name).config(
            {
                "leaseTime": LEASE_TIME_S,
                "retryLimit": RETRY_LIMIT,
                "retryDelay": 0,
                "deadLetterQueue": True,
                "dlqAfterMaxRetries": True,
            }
        ).create()
    by_chat: dict[str, list[dict[str, Any]]] = {}
    for n in range(1, messages + 1):
        chat = f"chat-{n % chats}"
        by_chat.setdefault(chat, []).append(
            {
                "data": {"n": n, "chat": chat, "text": f"hello {n}", "poison": n % POISON_EVERY == 0},
                "transactionId": f"msg-{n}",
            }
        )
    queued = 0
    for chat, items in by_chat.items():
        queued += sum(r.status == "queued" for r in q.queue(p.translate_q).partition(chat).push(items))
    return queued


# -- stage 1: translate, with the broker's retry path for failures -------------------------------------------


def retry_on_broker(q: Queen, p: Pipeline, row: Any) -> int:
    """Run one failed message through the broker's retries; returns the delivery attempts made (0 if it was
    dead-lettered before, e.g. by a replayed micro-batch)."""
    if row.offset > 1:
        httpx.post(
            f"{p.url}/api/v1/spark/cursor",
            timeout=30,
            json={
                "queue": p.translate_q,
                "consumerGroup": p.retry_group,
                "offsets": {row.partitionId: row.offset - 1},
            },
        ).raise_for_status()
    attempts = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        popped = (
            q.queue(p.translate_q).partition(row.partition).group(p.retry_group).batch(1).wait(False).pop()
        )
        if not popped:
            time.sleep(0.05)
            continue
        message = popped[0]
        if message.transaction_id != row.transactionId:
            raise RuntimeError(
                f"retry path: expected {row.transactionId}, the broker delivered "
                f"{message.transaction_id} from {row.partition}"
            )
        attempts += 1
        try:
            result = translate(message.data)
        except Exception as exc:  # noqa: BLE001 (the handler's failure is the message's, as in a consumer)
            if q.ack(message, False, error=str(exc)).dlq:
                return attempts
            continue
        (
            q.transaction()
            .ack(message)
            .queue(p.route_q)
            .partition(message.partition)
            .push([{"data": result, "transactionId": f"{message.transaction_id}.translated"}])
            .commit()
        )
        return attempts
    raise RuntimeError(f"retry path: {row.transactionId} neither succeeded nor reached the DLQ in 60 s")


def start_translate(spark: SparkSession, q: Queen, p: Pipeline, counts: Counts) -> StreamingQuery:
    from pyspark.sql import functions as F

    def attempt(data):  # type: ignore[no-untyped-def]  # (no hints: Spark would try to infer a pandas UDF)
        """(ok, translated JSON, error) for one message."""
        try:
            return True, json.dumps(translate(json.loads(data))), None
        except Exception as exc:  # noqa: BLE001 (a failed record is routed, not raised)
            return False, None, str(exc)

    attempt_udf = F.udf(attempt, "struct<ok:boolean,data:string,error:string>")

    def each_batch(batch: DataFrame, batch_id: int) -> None:
        query_id = batch.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
        tried = batch.withColumn("t", attempt_udf("data")).persist()
        try:
            rows = tried.count()
            (
                tried.where("t.ok")
                .select(F.col("t.data").alias("data"), "partition", "partitionId", "offset")
                .write.format("queen")
                .option("url", p.url)
                .option("queue", p.route_q)
                .option("writeId", f"{query_id}.{batch_id}")
                .mode("append")
                .save()
            )
            failed = (
                tried.where("NOT t.ok")
                .select("transactionId", "partition", "partitionId", "offset")
                .orderBy("partition", "offset")
                .collect()
            )
        finally:
            tried.unpersist()
        counts.spark_translate_attempts += rows
        if failed:
            already = {
                d.transaction_id
                for d in q.queue(p.translate_q).dlq(p.retry_group).limit(10_000).get().messages
            }
            for row in failed:
                if row.transactionId not in already:
                    counts.retry_path_attempts += retry_on_broker(q, p, row)

    return (
        read(spark, p, p.translate_q)
        .writeStream.foreachBatch(each_batch)
        .queryName("translate")
        .option("checkpointLocation", p.checkpoint("translate"))
        .trigger(processingTime=TRIGGER)
        .start()
    )


# -- stage 2: route ------------------------------------------------------------------------------------------


def start_route(spark: SparkSession, p: Pipeline) -> StreamingQuery:
    from pyspark.sql import functions as F

    message = F.from_json("data", "n INT, chat STRING, text STRING, poison BOOLEAN")
    routed = (
        read(spark, p, p.route_q)
        .withColumn("m", message)
        .select(
            F.to_json(F.struct("m.*", F.concat(F.lit("push:"), F.col("m.chat")).alias("route"))).alias(
                "data"
            ),
            "partition",
            "partitionId",
            "offset",
        )
    )
    return (
        routed.writeStream.format("queen")
        .option("url", p.url)
        .option("queue", p.notify_q)
        .option("checkpointLocation", p.checkpoint("route"))
        .queryName("route")
        .trigger(processingTime=TRIGGER)
        .start()
    )


# -- stage 3: notify -----------------------------------------------------------------------------------------


def start_notify(spark: SparkSession, p: Pipeline) -> StreamingQuery:
    p.notifications.mkdir(parents=True, exist_ok=True)

    def each_batch(batch: DataFrame, batch_id: int) -> None:
        lines = [
            json.dumps({**json.loads(r.data), "transactionId": r.transactionId})
            for r in batch.select("data", "transactionId").collect()
        ]
        target = p.notifications / f"batch-{batch_id:06d}.jsonl"
        partial = target.with_suffix(".partial")
        partial.write_text("".join(line + "\n" for line in lines))
        os.replace(partial, target)  # atomic: a replayed batch id rewrites the same notifications

    return (
        read(spark, p, p.notify_q)
        .writeStream.foreachBatch(each_batch)
        .queryName("notify")
        .option("checkpointLocation", p.checkpoint("notify"))
        .trigger(processingTime=TRIGGER)
        .start()
    )


def read(spark: SparkSession, p: Pipeline, queue: str) -> DataFrame:
    return (
        spark.readStream.format("queen")
        .option("url", p.url)
        .option("queue", queue)
        .option("consumerGroup", f"spark.{queue}")
        .option("startingOffsets", "earliest")
        .load()
    )


# -- run -----------------------------------------------------------------------------------------------------


def notified(p: Pipeline) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for f in sorted(p.notifications.glob("batch-*.jsonl"))
        for line in f.read_text().splitlines()
        if line
    ]


def queue_messages(url: str, queue: str) -> list[dict[str, Any]]:
    """Every message of a queue (all partitions) through the range-read API."""
    out: list[dict[str, Any]] = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for part in client.get("/api/v1/spark/offsets", params={"queue": queue}).json()["partitions"]:
            page = client.get(
                "/api/v1/spark/messages",
                params={"partitionId": part["partitionId"], "after": 0, "upto": part["head"], "limit": 50000},
            ).json()
            out.extend(page["messages"])
    return out


def run_pipeline(
    spark: SparkSession,
    url: str,
    suffix: str,
    workdir: Path,
    messages: int = 100,
    chats: int = 10,
    deadline_s: float = 180.0,
) -> Counts:
    """Set up, produce, run the three stages until every message is notified or dead-lettered (or the deadline
    passes), stop them, and count."""
    p = Pipeline(url, suffix, workdir)
    counts = Counts(poisoned=messages // POISON_EVERY)
    with Queen(url) as q:
        counts.produced = set_up(q, p, messages, chats)
        queries = [start_translate(spark, q, p, counts), start_route(spark, p), start_notify(spark, p)]
        try:
            wait(lambda: len(notified(p)) + dead_letter_total(q, p) >= counts.produced, queries, deadline_s)
        finally:
            for query in queries:
                query.stop()
        for query in queries:
            if query.exception() is not None:
                raise RuntimeError(f"query {query.name} failed: {query.exception()}")
        counts.dead_letters = dead_letter_total(q, p)
    notes = notified(p)
    counts.notified = len({n["n"] for n in notes})
    routed = queue_messages(url, p.notify_q)
    counts.routed = len({m["data"]["n"] for m in routed})
    translated = queue_messages(url, p.route_q)
    counts.duplicates = (
        sum(c - 1 for c in Counter(n["n"] for n in notes).values() if c > 1)
        + (len(routed) - counts.routed)
        + (len(translated) - len({m["data"]["n"] for m in translated}))
    )
    return counts


def dead_letter_total(q: Queen, p: Pipeline) -> int:
    return q.queue(p.translate_q).dlq().limit(1).get().total


def wait(done: Callable[[], bool], queries: list[StreamingQuery], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if any(query.exception() is not None or not query.isActive for query in queries):
            return
        if done():
            time.sleep(1.0)  # let in-flight micro-batches finish, so a duplicate would show up
            return
        time.sleep(0.25)


def main(argv: list[str] | None = None) -> int:
    """Command line: run the pipeline, print the counts, exit 0 only if they are the expected ones."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("QUEEN_URL", "http://localhost:6632"),
        help="broker URL (env QUEEN_URL, default http://localhost:6632)",
    )
    parser.add_argument(
        "--suffix",
        default=os.environ.get("QUEEN_PIPELINE_SUFFIX") or f".{uuid.uuid4().hex[:8]}",
        help="appended to the queue names, e.g. --suffix=.run2 (default: random)",
    )
    parser.add_argument("--messages", type=int, default=100, help="messages to produce (default 100)")
    parser.add_argument(
        "--workdir", default=None, help="checkpoints and notifications (default: temp, removed)"
    )
    parser.add_argument("--deadline-s", type=float, default=180.0, help="give up after this many seconds")
    args = parser.parse_args(argv)

    try:
        httpx.get(f"{args.url}/health", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        print(f"error: broker {args.url} unreachable: {exc}", file=sys.stderr)
        return 2
    from queenpy.spark import get_session

    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="queenpy-spark-pipeline-"))
    started = time.monotonic()
    try:
        counts = run_pipeline(
            get_session("spark-pipeline"),
            args.url,
            args.suffix,
            workdir,
            args.messages,
            deadline_s=args.deadline_s,
        )
    except QueenError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    expected = Counts.expected(args.messages)
    actual = counts.report()
    for name, value in actual.items():
        mark = "ok" if value == expected[name] else f"MISMATCH (expected {expected[name]})"
        print(f"{name.replace('_', ' ')}: {value} {mark}")
    print(f"elapsed: {time.monotonic() - started:.1f} s")
    if actual != expected:
        print("pipeline counts differ from the expected ones", file=sys.stderr)
        return 1
    print("pipeline ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
