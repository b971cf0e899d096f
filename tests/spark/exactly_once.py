"""Exactly-once under SIGKILL: a Spark streaming query copies a queue to another queue while a producer
writes to the source; the query's whole process group (driver JVM and Python workers) is killed with SIGKILL
``--kills`` times at random points and restarted from its checkpoint; a final availableNow run drains the
rest.

Then every target partition must hold exactly the source partition's messages, each once, in the same order.
Prints the numbers and exits 0 only if so (1 otherwise). Staging rows left behind are counted too when
``--database-url`` is given (with ``--start-broker``, in the embedded PostgreSQL).

    python tests/spark/exactly_once.py --url http://127.0.0.1:6632 --messages 300000 --kills 3
    python tests/spark/exactly_once.py --start-broker            # embedded broker in a temp dir

tests/spark/test_exactly_once.py runs it at CI size (``--no-drain``) and drains and verifies with the
functions here. Its broker (``--start-broker``) comes from the process harness (:mod:`queenpy.harness`).

The copy query (``--driver`` mode, run as a child process in its own session):
``readStream.format("queen")`` (maxMessagesPerTrigger, consumer group) → ``writeStream.format("queen")``
(``--commit sync``, ``pipelined`` or ``direct``), ``processingTime`` 500 ms, or ``availableNow`` for the final
drain (then a flush of the sink, so a pipelined sink's last micro-batch is visible).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import httpx

from queenpy.harness import BrokerProcess, HarnessError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


# -- broker helpers ------------------------------------------------------------------------------------------


def heads(url: str, queue: str) -> dict[str, dict[str, Any]]:
    response = httpx.get(f"{url}/api/v1/spark/offsets", params={"queue": queue}, timeout=60)
    response.raise_for_status()
    return {p["partition"]: p for p in response.json()["partitions"]}


def total(url: str, queue: str) -> int:
    return sum(p["head"] for p in heads(url, queue).values())


def read_partition(client: httpx.Client, partition_id: str, head: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    after = 0
    while after < head:
        page = client.get(
            "/api/v1/spark/messages",
            params={"partitionId": partition_id, "after": after, "upto": head, "limit": 50000},
        ).json()
        batch = page.get("messages") or []
        if not batch:
            break
        messages.extend(batch)
        after = batch[-1]["offset"]
    return messages


def start_broker(tmp: Path) -> BrokerProcess:
    """A healthy two-worker broker on its embedded PostgreSQL in ``tmp/pg``; its log is ``tmp/broker.log``."""
    broker = BrokerProcess(None, tmp / "broker.log", workers=2, env={"QUEENPY_DATA_DIR": str(tmp / "pg")})
    try:
        return broker.start(timeout_s=120)
    except HarnessError as exc:
        raise SystemExit(str(exc)) from exc


# -- the copy query (child process) --------------------------------------------------------------------------


def copy_query(
    spark: SparkSession,
    url: str,
    source: str,
    target: str,
    group: str,
    checkpoint: str,
    max_per_trigger: int,
    *,
    drain: bool,
    commit: str = "sync",
    stage_batch_size: int = 10_000,
) -> StreamingQuery:
    """Start the copy: ``source`` → ``target`` keeping partitions, availableNow if ``drain`` else every 500
    ms; ``commit`` is the sink's commit mode (``sync`` | ``pipelined`` | ``direct``); ``stage_batch_size``
    the most rows per sink request (the sink's ``stageBatchSize``)."""
    reader = (
        spark.readStream.format("queen")
        .option("url", url)
        .option("queue", source)
        .option("consumerGroup", group)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", str(max_per_trigger))
        .load()
    )
    writer = (
        reader.select("data", "partition", "partitionId", "offset")
        .writeStream.format("queen")
        .option("url", url)
        .option("queue", target)
        .option("commit", commit)
        .option("stageBatchSize", str(stage_batch_size))
        .option("checkpointLocation", checkpoint)
        .queryName("copy")
    )
    writer = writer.trigger(availableNow=True) if drain else writer.trigger(processingTime="500 milliseconds")
    return writer.start()


def run_driver(args: argparse.Namespace) -> int:
    from queenpy.spark.session import build_session

    spark = build_session(
        args.master,
        app_name="exactly-once-copy",
        config={"spark.sql.shuffle.partitions": "2", "spark.sql.streaming.stopTimeout": "10s"},
    )
    query = copy_query(
        spark,
        args.url,
        args.source,
        args.target,
        args.group,
        args.checkpoint,
        args.max_per_trigger,
        drain=args.drain,
        commit=args.commit,
        stage_batch_size=args.stage_batch_size,
    )
    query.awaitTermination()
    error = query.exception()
    if error is None and args.drain:
        from queenpy.spark import flush_sink

        flush_sink(query, args.url)  # a pipelined sink's last micro-batches are visible now
    spark.stop()
    if error is not None:
        print(f"query failed: {error}", file=sys.stderr)
        return 1
    return 0


def driver_command(args: argparse.Namespace, drain: bool) -> list[str]:
    command = [
        sys.executable,
        __file__,
        "--driver",
        "--url",
        args.url,
        "--source",
        args.source,
        "--target",
        args.target,
        "--group",
        args.group,
        "--checkpoint",
        args.checkpoint,
        "--master",
        args.master,
        "--max-per-trigger",
        str(args.max_per_trigger),
        "--commit",
        args.commit,
    ]
    return command + (["--drain"] if drain else [])


# -- the experiment ------------------------------------------------------------------------------------------


def produce(
    url: str,
    queue: str,
    messages: int,
    partitions: int,
    duration_s: float,
    done: threading.Event,
    padding: int,
) -> None:
    """Push ``messages`` over ``partitions`` partitions in requests of 1000, spread over ``duration_s``."""
    chunk = 1000
    sent = [0] * partitions
    pad = "x" * padding
    started = time.monotonic()
    try:
        with httpx.Client(base_url=url, timeout=120) as client:
            for n, lo in enumerate(range(0, messages, chunk)):
                p = n % partitions
                items = []
                for _ in range(lo, min(lo + chunk, messages)):
                    items.append(
                        {
                            "queue": queue,
                            "partition": f"p{p}",
                            "transactionId": f"src-{p}-{sent[p]}",
                            "payload": {"p": p, "i": sent[p], "pad": pad},
                        }
                    )
                    sent[p] += 1
                response = client.post("/api/v1/push", json={"items": items})
                response.raise_for_status()
                due = started + duration_s * (lo + chunk) / messages
                time.sleep(max(0.0, due - time.monotonic()))
    finally:
        done.set()


def verify(url: str, source: str, target: str) -> dict[str, int]:
    src, dst = heads(url, source), heads(url, target)
    counts = {"source": 0, "target": 0, "duplicates": 0, "missing": 0, "out_of_order": 0, "foreign": 0}
    with httpx.Client(base_url=url, timeout=120) as client:
        for name, p in src.items():
            expected = [
                (m["data"]["p"], m["data"]["i"]) for m in read_partition(client, p["partitionId"], p["head"])
            ]
            counts["source"] += len(expected)
            got: list[tuple[int, int]] = []
            if name in dst:
                got = [
                    (m["data"]["p"], m["data"]["i"])
                    for m in read_partition(client, dst[name]["partitionId"], dst[name]["head"])
                ]
            counts["target"] += len(got)
            seen = set(got)
            counts["duplicates"] += len(got) - len(seen)
            counts["missing"] += len(set(expected) - seen)
            counts["foreign"] += len(seen - set(expected))
            if got != expected and len(got) == len(expected) and seen == set(expected):
                counts["out_of_order"] += 1
        for name in set(dst) - set(src):
            counts["foreign"] += dst[name]["head"]
    return counts


def staging_rows(database_url: str, query_id: str | None = None) -> int:
    """Rows left in both staging tables (version 1 items, version 2 rows), of one query id or of all."""
    import psycopg

    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM queen.spark_staging WHERE query_id = coalesce(%(q)s, query_id)) "
            "+ (SELECT count(*) FROM queen.spark_staging_rows WHERE query_id = coalesce(%(q)s, query_id))",
            {"q": query_id},
        ).fetchone()
    return int(row[0]) if row else -1


def pending_batches(database_url: str, query_id: str | None = None) -> int:
    """Micro-batches a pipelined sink recorded that the broker has not applied yet (of one query id or
    all)."""
    import psycopg

    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM queen.spark_sink_batches WHERE pending_tokens IS NOT NULL "
            "AND query_id = coalesce(%(q)s, query_id)",
            {"q": query_id},
        ).fetchone()
    return int(row[0]) if row else -1


def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="queenpy-eo-"))
    broker = None
    if args.start_broker:
        broker = start_broker(tmp)
        args.url = broker.url
        log(f"broker on {args.url}")
        if not args.database_url:  # the embedded PostgreSQL's socket, to count staging rows left behind
            from pgserver.utils import PostmasterInfo

            info = PostmasterInfo.read_from_pgdata(tmp / "pg")
            args.database_url = info.get_uri() if info is not None else ""
    suffix = uuid.uuid4().hex[:8]
    args.source = args.source or f"eo.source.{suffix}"
    args.target = args.target or f"eo.target.{suffix}"
    args.group = args.group or f"eo-{suffix}"
    args.checkpoint = args.checkpoint or str(tmp / "checkpoint")
    for queue in (args.source, args.target):
        httpx.post(
            f"{args.url}/api/v1/configure", json={"queue": queue, "options": {}}, timeout=30
        ).raise_for_status()
    log(
        f"copy {args.source} -> {args.target}: {args.messages} messages over {args.partitions} partitions, "
        f"{args.kills} SIGKILLs, {args.commit} commits, checkpoint {args.checkpoint}"
    )

    done = threading.Event()
    producer = threading.Thread(
        target=produce,
        args=(
            args.url,
            args.source,
            args.messages,
            args.partitions,
            args.produce_seconds,
            done,
            args.padding,
        ),
        daemon=True,
    )
    started = time.monotonic()
    producer.start()
    kills: list[dict[str, Any]] = []
    try:
        with (tmp / "driver.log").open("ab") as driver_log:
            code = _kill_and_drain(args, rng, tmp, done, driver_log, kills)
        producer.join()
        elapsed = time.monotonic() - started
        if code != 0 or args.no_drain:
            print(f"kills: {len(kills)}")
            return code
        return report(args, kills, elapsed)
    finally:
        if broker is not None:
            broker.stop(timeout_s=60)


def report(args: argparse.Namespace, kills: list[dict[str, Any]], elapsed: float) -> int:
    """Verify the target against the source, print the numbers, and return the exit code."""
    counts = verify(args.url, args.source, args.target)
    if args.database_url:
        counts["staging_left"] = staging_rows(args.database_url)
        counts["pending_batches"] = pending_batches(args.database_url)
    for name, value in counts.items():
        print(f"{name}: {value}")
    print(f"kills: {len(kills)}")
    print(f"elapsed_s: {elapsed:.1f}")
    ok = (
        counts["source"] == args.messages == counts["target"]
        and counts["duplicates"] == 0
        and counts["missing"] == 0
        and counts["out_of_order"] == 0
        and counts["foreign"] == 0
        and counts.get("staging_left", 0) == 0
        and counts.get("pending_batches", 0) == 0
        and len(kills) >= args.kills
    )
    print("exactly-once: ok" if ok else "exactly-once: FAILED")
    return 0 if ok else 1


def _kill_and_drain(
    args: argparse.Namespace,
    rng: random.Random,
    tmp: Path,
    done: threading.Event,
    driver_log: IO[bytes],
    kills: list[dict[str, Any]],
) -> int:
    for k in range(args.kills):
        before = total(args.url, args.target)
        child = subprocess.Popen(
            driver_command(args, drain=False),
            stdout=driver_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        # kill at a random point after the restarted query has written something new
        deadline = time.monotonic() + 180
        while total(args.url, args.target) <= before and time.monotonic() < deadline and child.poll() is None:
            if done.is_set() and before >= total(args.url, args.source):
                break  # nothing left to copy: this kill hits an idle query
            time.sleep(0.2)
        if child.poll() is not None:
            log(f"driver exited by itself with {child.returncode}; see {tmp / 'driver.log'}")
            return 1
        time.sleep(rng.uniform(0.0, args.max_kill_delay))
        copied = total(args.url, args.target)
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        time.sleep(1.0)  # a commit already sent to the broker may still land; count it before the restart
        kills.append({"kill": k + 1, "source": total(args.url, args.source), "target": copied})
        log(f"SIGKILL {k + 1}: source {kills[-1]['source']:,}, target {copied:,}")
    done.wait()
    if args.no_drain:
        log("producer done; no drain run (--no-drain)")
        return 0
    log("producer done; final availableNow run drains the rest")
    drain = subprocess.run(
        driver_command(args, drain=True),
        check=False,
        stdout=driver_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        timeout=1800,
    )
    if drain.returncode != 0:
        log(f"drain run failed with {drain.returncode}; see {tmp / 'driver.log'}")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("QUEEN_URL", "http://localhost:6632"))
    parser.add_argument("--start-broker", action="store_true", help="run an embedded broker in a temp dir")
    parser.add_argument(
        "--database-url",
        default="",
        help="count staging rows left behind (psycopg; with --start-broker: its own PostgreSQL)",
    )
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--padding", type=int, default=64, help="payload padding in bytes")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--max-kill-delay", type=float, default=6.0, help="seconds after first new output")
    parser.add_argument("--produce-seconds", type=float, default=60.0)
    parser.add_argument("--max-per-trigger", type=int, default=30_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--commit", choices=("sync", "pipelined", "direct"), default="sync", help="the sink's commit mode"
    )
    parser.add_argument(
        "--stage-batch-size", type=int, default=10_000, help="most rows per sink request (stageBatchSize)"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--source", default="")
    parser.add_argument("--target", default="")
    parser.add_argument("--group", default="")
    parser.add_argument("--checkpoint", default="")
    parser.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--drain", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--no-drain",
        action="store_true",
        help="stop after the kills (the caller drains with copy_query and verifies)",
    )
    args = parser.parse_args(argv)
    return run_driver(args) if args.driver else run(args)


if __name__ == "__main__":
    sys.exit(main())
