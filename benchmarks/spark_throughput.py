"""Throughput through Spark (queue → Spark → queue, 1 KB messages) next to the broker's own consume rate.

On one broker, in one run:

1. push ``--messages`` messages of ``--size`` bytes over ``--partitions`` partitions (push rate shown);
2. the broker's own consumers on that backlog, each in a fresh consumer group, ``--consumers`` concurrent
   clients popping ``--batch`` at a time:
   - ``pop+ack``: pop, then one ``POST /api/v1/ack/batch`` per pop;
   - ``pop+tx``: pop ``--tx-batch`` (100), then one ``POST /api/v1/transaction`` acking the batch and pushing a
     copy of each message to another queue (the broker-native queue → queue hand-off, the same work as the Spark
     copy; queenbench's ``handoff-tx``);
3. Spark on ``--master`` (default ``local[2]``): an availableNow streaming copy of the queue to another queue
   through the ``queen`` source and sink, ``--max-per-trigger`` messages per micro-batch. Reported: the whole
   query (including its start, after a warm-up query on the same session) and the steady rate over the
   micro-batches after the first.
4. optionally (``--batch-read N``) a batch read of a queue of N small messages into a DataFrame (count).

    python benchmarks/spark_throughput.py --start-broker
    python benchmarks/spark_throughput.py --url http://127.0.0.1:6632 --messages 200000 --batch-read 1000000

The machine is shared: read the rates as of this run, and compare them with each other rather than across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spark_exactly_once import start_broker  # (benchmarks/ is not a package)


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def push_backlog(url: str, queue: str, messages: int, partitions: int, size: int) -> float:
    """Push the backlog with 4 concurrent clients; returns seconds."""
    filler = "x" * max(0, size - 40)

    async def pusher(worker: int, client: httpx.AsyncClient) -> None:
        for lo in range(worker * 1000, messages, 4 * 1000):
            p = (lo // 1000) % partitions
            items = [
                {
                    "queue": queue,
                    "partition": f"p{p}",
                    "transactionId": f"m-{i}",
                    "payload": {"i": i, "text": filler},
                }
                for i in range(lo, min(lo + 1000, messages))
            ]
            (await client.post("/api/v1/push", json={"items": items})).raise_for_status()

    async def main() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            await client.post("/api/v1/configure", json={"queue": queue, "options": {}})
            await asyncio.gather(*(pusher(w, client) for w in range(4)))

    started = time.monotonic()
    asyncio.run(main())
    return time.monotonic() - started


def broker_consume(
    url: str, queue: str, messages: int, consumers: int, batch: int, handoff: str | None
) -> float:
    """Consume the whole queue in a fresh group; ack each pop, or hand it off to ``handoff`` in a transaction.
    Returns messages/s."""
    group = f"bench-{uuid.uuid4().hex[:8]}"
    done = 0

    async def consumer(client: httpx.AsyncClient) -> None:
        nonlocal done
        empty = 0
        while done < messages and empty < 20:
            response = await client.get(
                f"/api/v1/pop/queue/{queue}", params={"consumerGroup": group, "batch": batch, "wait": "false"}
            )
            body = response.json() if response.content else {}
            popped: list[dict[str, Any]] = body.get("messages") or []
            if not popped:
                empty += 1
                await asyncio.sleep(0.05)
                continue
            empty = 0
            acks = [
                {
                    "transactionId": m["transactionId"],
                    "partitionId": m["partitionId"],
                    "status": "completed",
                    "leaseId": m.get("leaseId"),
                }
                for m in popped
            ]
            if handoff is None:
                answer = await client.post(
                    "/api/v1/ack/batch", json={"consumerGroup": group, "acknowledgments": acks}
                )
            else:
                operations: list[dict[str, Any]] = [
                    {"type": "ack", **ack, "consumerGroup": group} for ack in acks
                ]
                operations.append(
                    {
                        "type": "push",
                        "items": [
                            {
                                "queue": handoff,
                                "partition": m.get("partitionName") or m.get("partition") or "Default",
                                "payload": m["data"],
                                "transactionId": f"h-{group}-{m['id']}",
                            }
                            for m in popped
                        ],
                    }
                )
                answer = await client.post("/api/v1/transaction", json={"operations": operations})
            answer.raise_for_status()
            done += len(popped)

    async def main() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            await asyncio.gather(*(consumer(client) for _ in range(consumers)))

    started = time.monotonic()
    asyncio.run(main())
    elapsed = time.monotonic() - started
    if done < messages:
        log(f"warning: the broker consumers saw {done} of {messages} messages")
    return done / elapsed


def spark_copy(
    spark: Any, url: str, source: str, target: str, max_per_trigger: int
) -> tuple[float, float, int]:
    """availableNow copy; returns (whole query msgs/s, steady msgs/s after the first batch, batches)."""
    checkpoint = tempfile.mkdtemp(prefix="queenpy-bench-ck-")
    started = time.monotonic()
    query = (
        spark.readStream.format("queen")
        .option("url", url)
        .option("queue", source)
        .option("maxMessagesPerTrigger", str(max_per_trigger))
        .load()
        .select("data", "partition", "partitionId", "offset")
        .writeStream.format("queen")
        .option("url", url)
        .option("queue", target)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    batches = [p for p in query.recentProgress if p.numInputRows]
    for p in batches:
        d = p.durationMs
        log(
            f"  batch {p.batchId}: {p.numInputRows:,} rows in {d.get('triggerExecution', 0):,} ms "
            f"(addBatch {d.get('addBatch', 0):,}, latestOffset {d.get('latestOffset', 0):,}, "
            f"walCommit {d.get('walCommit', 0):,}, commitOffsets {d.get('commitOffsets', 0):,})"
        )
    rows = sum(p.numInputRows for p in batches)
    later = batches[1:]
    steady_ms = sum(p.durationMs.get("triggerExecution", 0) for p in later)
    steady = sum(p.numInputRows for p in later) / (steady_ms / 1000) if steady_ms else rows / elapsed
    return rows / elapsed, steady, len(batches)


def total(url: str, queue: str) -> int:
    body = httpx.get(f"{url}/api/v1/spark/offsets", params={"queue": queue}, timeout=60).json()
    return sum(p["head"] for p in body["partitions"])


def run(args: argparse.Namespace) -> int:
    broker = None
    if args.start_broker:
        args.url, broker = start_broker(Path(tempfile.mkdtemp(prefix="queenpy-bench-")))
        log(f"broker on {args.url}")
    try:
        return measure(args)
    finally:
        if broker is not None:
            broker.send_signal(signal.SIGTERM)
            broker.wait(timeout=60)


def measure(args: argparse.Namespace) -> int:
    run_id = uuid.uuid4().hex[:8]
    source = f"bench.spark.src.{run_id}"
    seconds = push_backlog(args.url, source, args.messages, args.partitions, args.size)
    push_rate = args.messages / seconds
    log(f"pushed {args.messages:,} x {args.size} B in {seconds:.1f} s: {push_rate:,.0f} msg/s")

    ack_rate = broker_consume(args.url, source, args.messages, args.consumers, args.batch, None)
    log(f"broker pop+ack ({args.consumers} clients, batch {args.batch}): {ack_rate:,.0f} msg/s")
    handoff = f"bench.spark.handoff.{run_id}"
    httpx.post(f"{args.url}/api/v1/configure", json={"queue": handoff, "options": {}}, timeout=30)
    tx_rate = broker_consume(args.url, source, args.messages, args.consumers, args.tx_batch, handoff)
    log(f"broker pop+transaction(ack+push) queue->queue, batch {args.tx_batch}: {tx_rate:,.0f} msg/s")

    from queenpy.spark.session import build_session

    started = time.monotonic()
    spark = build_session(
        args.master, app_name="spark-throughput", config={"spark.sql.shuffle.partitions": "2"}
    )
    warm_src = f"bench.spark.warm.{run_id}"
    push_backlog(args.url, warm_src, 2000, 2, args.size)
    spark_copy(spark, args.url, warm_src, warm_src + ".dst", 1000)
    log(f"Spark session + warm-up query: {time.monotonic() - started:.1f} s")
    whole, steady, batches = spark_copy(
        spark, args.url, source, f"bench.spark.dst.{run_id}", args.max_per_trigger
    )
    copied = total(args.url, f"bench.spark.dst.{run_id}")
    log(
        f"Spark queue->queue ({args.master}, {batches} micro-batches of <= {args.max_per_trigger:,}): "
        f"{whole:,.0f} msg/s whole query, {steady:,.0f} msg/s steady; copied {copied:,}"
    )

    read_rate = None
    if args.batch_read:
        big = f"bench.spark.big.{run_id}"
        seconds = push_backlog(args.url, big, args.batch_read, args.partitions, 100)
        log(f"pushed {args.batch_read:,} x 100 B for the batch read in {seconds:.1f} s")
        started = time.monotonic()
        count = spark.read.format("queen").option("url", args.url).option("queue", big).load().count()
        read_s = time.monotonic() - started
        read_rate = count / read_s
        log(
            f"batch read of {count:,} messages into a DataFrame (count): {read_s:.1f} s, {read_rate:,.0f} msg/s"
        )
    spark.stop()

    print()
    print(f"| what ({args.size} B messages, {args.partitions} partitions) | msg/s |")
    print("| --- | --- |")
    print(f"| broker push (4 clients x 1000) | {push_rate:,.0f} |")
    print(f"| broker pop+ack ({args.consumers} clients, batch {args.batch}) | {ack_rate:,.0f} |")
    print(f"| broker pop + transaction(ack + push), queue -> queue, batch {args.tx_batch} | {tx_rate:,.0f} |")
    print(f"| Spark {args.master} queue -> queue, whole availableNow query | {whole:,.0f} |")
    print(f"| Spark {args.master} queue -> queue, steady (batches after the first) | {steady:,.0f} |")
    if read_rate is not None:
        print(f"| Spark batch read of {args.batch_read:,} messages (100 B) | {read_rate:,.0f} |")
    return 0 if copied == args.messages else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("QUEEN_URL", "http://localhost:6632"))
    parser.add_argument("--start-broker", action="store_true", help="run an embedded broker in a temp dir")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024, help="payload bytes (about)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1000, help="pop batch of the pop+ack consumers")
    parser.add_argument(
        "--tx-batch",
        type=int,
        default=100,
        help="pop batch of the pop+transaction hand-off (a transaction of 1000 acks is slow)",
    )
    parser.add_argument("--max-per-trigger", type=int, default=50_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--batch-read", type=int, default=0, help="also batch-read a queue of N messages")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
