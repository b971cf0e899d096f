"""Where the CPU of a Spark queue → queue copy goes: µs per message for the JVM, the Python workers,
PostgreSQL and the broker, next to a plain push of the same messages (100 per request) on the same broker.

One-off measuring script for issue 42 (the direct sink and Spark's own cost); the bench scenario is
``queenpy bench --only spark-handoff...``. On a private broker (embedded PostgreSQL in a temp dir):

1. push ``--messages`` messages of about 1 KB over ``--partitions`` partitions, 100 per request from 8
   concurrent clients: the *push* reference (CPU of PostgreSQL and of the broker per message);
2. a local SparkSession copies a small queue (warm-up: JIT, Python workers), then copies the backlog
   ``--repeats`` times, each into a new queue from a new checkpoint, availableNow, ``--max-per-trigger``
   messages per micro-batch, with the sink's ``--commit`` mode. Per copy: wall time, msg/s, and the CPU
   of each component from /proc over the whole query (first micro-batch included), and the JVM's CPU by
   thread name (``C1``/``C2 CompilerThread``: the JIT compilers; ``Executor task launch worker``: the tasks;
   the GC threads...).

With ``--py-spy DIR`` the executors' Python workers (the ``pyspark.daemon`` tree) are sampled by py-spy during
the first measured copy; DIR gets the collapsed stacks (``workers-<pid>.txt``) and the top functions are
printed.

    .venv/bin/python benchmarks/spark_cost.py --commit staged --repeats 3
    .venv/bin/python benchmarks/spark_cost.py --commit direct --repeats 3 --py-spy /tmp/spark-cost

The machine may be shared: compare the proportions per component, and repeat before believing a figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from queenpy.bench import procfs
from queenpy.harness import BrokerProcess


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def push(
    url: str, queue: str, messages: int, partitions: int, size: int, per_request: int = 100, clients: int = 8
) -> float:
    filler = "x" * max(0, size - 40)

    async def pusher(worker: int, client: httpx.AsyncClient) -> None:
        for lo in range(worker * per_request, messages, clients * per_request):
            items = [
                {
                    "queue": queue,
                    "partition": f"p{(i // per_request) % partitions}",
                    "transactionId": f"m-{i}",
                    "payload": {"i": i, "text": filler},
                }
                for i in range(lo, min(lo + per_request, messages))
            ]
            (await client.post("/api/v1/push", json={"items": items})).raise_for_status()

    async def main() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            await asyncio.gather(*(pusher(w, client) for w in range(clients)))

    started = time.monotonic()
    asyncio.run(main())
    return time.monotonic() - started


def total(url: str, queue: str) -> int:
    body = httpx.get(f"{url}/api/v1/spark/offsets", params={"queue": queue}, timeout=60).json()
    return sum(p["head"] for p in body.get("partitions", []))


def kind_of(pid: int) -> str:
    """``jvm``, or ``python:<what>`` for Spark's Python processes (the daemon's worker module, or the runner),
    else the command's name."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    if comm == "java":
        return "jvm"
    if comm.startswith("python"):
        words = [a.decode() for a in args if a]
        return "python:" + (words[-1].rsplit(".", 1)[-1] if words else "?")
    return comm


class Meter:
    """CPU seconds of the components: the JVM and its Python workers (JVM tree), PostgreSQL (postmaster
    tree) and the broker (its process tree without PostgreSQL)."""

    def __init__(self, jvm: int | None, postmaster: int, broker: int) -> None:
        self.jvm, self.postmaster, self.broker = jvm, postmaster, broker

    def snapshot(self) -> dict[str, Any]:
        snap: dict[str, Any] = {
            "pg": procfs.tree_cpu_s([self.postmaster]),
            "broker": procfs.tree_ticks(self.broker, kind_of),
        }
        if self.jvm is not None:
            snap["spark"] = procfs.tree_ticks(self.jvm, kind_of)
        return snap

    @staticmethod
    def delta(start: dict[str, Any], end: dict[str, Any]) -> dict[str, float]:
        broker = procfs.cpu_by_kind_s(start["broker"], end["broker"])
        out = {
            "pg": end["pg"] - start["pg"],
            "broker": sum(v for k, v in broker.items() if k not in ("postgres",)),
        }
        if "spark" in start:
            spark = procfs.cpu_by_kind_s(start["spark"], end["spark"])
            out["jvm"] = spark.get("jvm", 0.0)
            out["python"] = sum(v for k, v in spark.items() if k != "jvm")
            out.update({k: v for k, v in spark.items() if k.startswith("python:") or k == "exited"})
        return out


def postmaster_of(data_dir: Path) -> int:
    """The embedded PostgreSQL's postmaster: the first line of its postmaster.pid."""
    return int((data_dir / "postmaster.pid").read_text().split()[0])


def copy(
    spark: Any,
    url: str,
    source: str,
    target: str,
    per_trigger: int,
    commit: str,
    options: dict[str, str],
    columns: list[str],
    checkpoint: Path,
    schema: str = "",
) -> tuple[float, Any]:
    reader = spark.readStream.format("queen")
    if schema:
        reader = reader.schema(schema)
    rows = (
        reader.option("url", url)
        .option("queue", source)
        .option("maxMessagesPerTrigger", str(per_trigger))
        .load()
    )
    if columns:
        rows = rows.select(*columns)
    writer = (
        rows.writeStream.format("queen")
        .option("url", url)
        .option("queue", target)
        .option("commit", commit)
        .option("checkpointLocation", str(checkpoint))
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    started = time.monotonic()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return time.monotonic() - started, query


def python_children(jvm: int) -> list[int]:
    """The JVM's Python processes (the daemons that fork the workers, and the runners it starts itself)."""
    children = [stat.pid for stat in procfs.tree_of(jvm) if stat.ppid == jvm]
    return [pid for pid in children if kind_of(pid).startswith("python")]


def jvm_threads(jvm: int) -> dict[int, tuple[str, int]]:
    """The JVM's threads: tid → (name, digits folded to N but the JIT tier's, utime+stime ticks so far)."""
    threads = {}
    for entry in os.scandir(f"/proc/{jvm}/task"):
        try:
            name = Path(entry.path, "comm").read_text().strip()
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # the thread ended while we looked
        fields = stat[stat.rindex(")") + 2 :].split()
        if not name.startswith(("C1 ", "C2 ")):  # the JIT compilers' threads keep their tier
            name = re.sub(r"\d+", "N", name)
        threads[int(entry.name)] = (name, int(fields[11]) + int(fields[12]))
    return threads


def thread_shares(start: dict[int, tuple[str, int]], end: dict[int, tuple[str, int]]) -> Counter[str]:
    """CPU seconds per thread name between two :func:`jvm_threads` snapshots (threads that ended in between
    are not counted)."""
    used: Counter[str] = Counter()
    for tid, (name, ticks) in end.items():
        used[name] += (ticks - start.get(tid, (name, 0))[1]) / procfs.TICKS_PER_SECOND
    return used


def top_functions(collapsed: list[Path], n: int = 30) -> list[tuple[str, float]]:
    """Self time per function (leaf frame) from py-spy's raw (collapsed) outputs, as shares of all samples."""
    leaves: Counter[str] = Counter()
    samples = 0
    lines = [line for path in collapsed for line in path.read_text().splitlines()]
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        leaves[stack.split(";")[-1]] += int(count)
        samples += int(count)
    return [(name, count / samples) for name, count in leaves.most_common(n)] if samples else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--max-per-trigger", type=int, default=20_000)
    parser.add_argument(
        "--commit", default="direct", help="the sink's commit option (direct, staged, pipelined)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--sink-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--columns", default="", help="columns the copy passes to the sink (default: all)")
    parser.add_argument(
        "--schema", default="", help="the schema the copy reads with (DDL, a subset of the source's columns)"
    )
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark settings")
    parser.add_argument("--py-spy", default="", metavar="DIR", help="profile the Python workers of copy 1")
    args = parser.parse_args(argv)
    sink_options = dict(item.split("=", 1) for item in args.sink_option)
    columns = [name for name in args.columns.split(",") if name]

    tmp = Path(tempfile.mkdtemp(prefix="queenpy-cost-"))
    broker = BrokerProcess(None, tmp / "broker.log", workers=2, env={"QUEENPY_DATA_DIR": str(tmp / "pg")})
    broker.start(timeout_s=120)
    url = broker.url
    try:
        meter = Meter(None, postmaster_of(tmp / "pg"), broker.pid)
        run_id = uuid.uuid4().hex[:6]
        source = f"cost.src.{run_id}"
        before = meter.snapshot()
        seconds = push(url, source, args.messages, args.partitions, args.size)
        used = meter.delta(before, meter.snapshot())
        per = {k: v / args.messages * 1e6 for k, v in used.items()}
        log(
            f"push (100 per request, 8 clients): {args.messages / seconds:,.0f} msg/s; µs/msg "
            f"PostgreSQL {per['pg']:.1f}, broker {per['broker']:.1f}"
        )

        from queenpy.spark.session import build_session

        config = {"spark.sql.shuffle.partitions": "2", **dict(item.split("=", 1) for item in args.conf)}
        spark = build_session(args.master, app_name="spark-cost", config=config)
        jvm = int(spark.sparkContext._gateway.proc.pid)
        meter.jvm = jvm
        warm = f"cost.warm.{run_id}"
        push(url, warm, 20 * args.partitions, args.partitions, args.size)
        copy(
            spark,
            url,
            warm,
            warm + ".out",
            10 * args.partitions,
            args.commit,
            sink_options,
            columns,
            tmp / "ck-warm",
            args.schema,
        )
        log("warm-up copy done")
        rows = []
        for n in range(1, args.repeats + 1):
            target = f"cost.dst.{run_id}.{n}"
            spies = []
            if args.py_spy and n == 1:
                spy_bin = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
                out = Path(args.py_spy)
                out.mkdir(parents=True, exist_ok=True)
                for pid in python_children(jvm):
                    spies.append(
                        subprocess.Popen(
                            [
                                spy_bin,
                                "record",
                                "--pid",
                                str(pid),
                                "--subprocesses",
                                "--format",
                                "raw",
                                "--rate",
                                "200",
                                "--nonblocking",
                                "-o",
                                str(out / f"workers-{pid}.txt"),
                            ],
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                        )
                    )
                time.sleep(1.0)
            before = meter.snapshot()
            threads_before = jvm_threads(jvm)
            elapsed, query = copy(
                spark,
                url,
                source,
                target,
                args.max_per_trigger,
                args.commit,
                sink_options,
                columns,
                tmp / f"ck-{n}",
                args.schema,
            )
            used = meter.delta(before, meter.snapshot())
            by_thread = thread_shares(threads_before, jvm_threads(jvm))
            for spy in spies:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=60)
            copied = total(url, target)
            per = {k: v / args.messages * 1e6 for k, v in used.items()}
            batches = [p for p in query.recentProgress if p.numInputRows]
            first_s = batches[0].durationMs.get("triggerExecution", 0) / 1000 if batches else float("nan")
            rows.append({"msg_per_s": args.messages / elapsed, **per})
            log(
                f"copy {n} ({args.commit}): {copied:,}/{args.messages:,} in {elapsed:.1f} s = "
                f"{args.messages / elapsed:,.0f} msg/s, first micro-batch {first_s:.2f} s; µs/msg JVM "
                f"{per['jvm']:.1f}, Python {per['python']:.1f}, PostgreSQL {per['pg']:.1f}, "
                f"broker {per['broker']:.1f}"
            )
            log(
                "  Python by process: "
                + ", ".join(
                    f"{k.removeprefix('python:')} {v:.1f}"
                    for k, v in per.items()
                    if k.startswith("python:") or k == "exited"
                )
            )
            log(
                "  JVM by thread (µs/msg): "
                + ", ".join(
                    f"{name} {seconds / args.messages * 1e6:.1f}"
                    for name, seconds in by_thread.most_common(8)
                    if seconds > 0
                )
            )
            if copied != args.messages:
                log("the target does not hold the source's messages")
                return 1
        if rows:
            print(f"\n| {args.commit}, {args.repeats} copies | median | min | max |\n|---|---|---|---|")
            for key in ("msg_per_s", "jvm", "python", "pg", "broker"):
                values = [r[key] for r in rows]
                print(
                    f"| {key} | {statistics.median(values):,.1f} | {min(values):,.1f} | {max(values):,.1f} |"
                )
        if args.py_spy:
            print("\nSpark's Python processes, self time by function (py-spy, copy 1, idle time left out):")
            for name, share in top_functions(sorted(Path(args.py_spy).glob("workers-*.txt"))):
                print(f"  {share:6.1%}  {name}")
        spark.stop()
        return 0
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # the embedded PostgreSQL's data and the checkpoints


if __name__ == "__main__":
    sys.exit(main())
