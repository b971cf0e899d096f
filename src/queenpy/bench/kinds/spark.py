"""The Spark scenarios: an availableNow queue → queue copy through ``format("queen")`` both ways, and a batch
read of a queue into a DataFrame.

One SparkSession (``local[*]``, the connector's defaults) serves every round; it starts the first time a Spark
scenario runs and stops with the bench. Each round copies the same 1 KB backlog (``scenario.partitions``
partitions, loaded once by SQL like the consumption backlogs) into a new target queue from a new checkpoint:

- warm-up: a small copy of its own (two micro-batches), so every round's measured query meets warm Python
  workers and a JVM that has run the copy's code, as a long-running pipeline would (not a settled JIT: with
  C2, Spark's per-micro-batch code kept compiling for minutes; :func:`queenpy.spark.session.build_session`);
- the measured query starts; it reads the columns a copy forwards (:data:`COPY_SCHEMA`), as a copy pipeline
  would, not all nine; the harness polls PostgreSQL every 20 ms for the target queue's rows. The sink
  commits a micro-batch in one transaction, so the rows jump from 0 to the first batch's size at once: that
  moment ends the *first micro-batch* (its latency is query start → that commit) and opens the measured
  window, which closes when the last row has landed. ``msg/s`` is the rows committed in the window over its
  length: the steady rate after the first micro-batch, counted by PostgreSQL. ``whole_query_msg_per_s`` is the
  whole query's rate, its start and first micro-batch included.

Valid only when the target holds exactly the source: the same number of messages in every partition (by
name), ``count(*)`` equal to the partition offsets, every transaction id once, no staging rows left (either
staging table), no sink batch left pending, no direct task left uncommitted, and the query ended without an
exception.

``spark-handoff`` uses the sink's staged commits (``commit=sync``); ``spark-handoff-pipelined`` the pipelined
commits (the broker applies a micro-batch while Spark runs the next one), whose last micro-batch lands a
moment after the query has ended: the window closes when it has; ``spark-handoff-direct`` the direct commits
(the connector's default: each task pushes its rows, the commit records the batch), whose rows land while a
batch runs, so its first micro-batch ends when the query's first batch record appears. CPU per message adds
Spark's own (the JVM process tree: the JVM and its Python workers) to the broker's and PostgreSQL's; the
scenario's ratio is also given to ``push-100-1KB`` and ``handoff-tx`` of the same round when they ran.

``spark-batch-read`` (mode ``read``) reads the same backlog with ``spark.read.format("queen")`` (earliest to
latest) and counts it: the window is the read, valid when the count equals the backlog's messages.

The master is ``--spark-master`` (default ``local[*]``). Without the spark extra (or without ``java``) the
scenarios are skipped with a one-line reason.
"""

from __future__ import annotations

import importlib.util
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from queenpy.bench import procfs
from queenpy.bench.catalog import Scenario, payload
from queenpy.bench.core import BULK_LOAD, Q_QUEUE_ROWS, Context, Kind, ScenarioSkipped, Window
from queenpy.bench.parsing import median
from queenpy.bench.report import number

__all__ = ["KIND", "report_lines", "run", "spark_missing", "summarize"]

#: what the copy reads: the columns its sink forwards (payload, partition, trace id) and the row identity of a
#: direct commit; the source builds only these (queenpy.spark.schema)
COPY_SCHEMA = "data STRING, partition STRING, partitionId STRING, offset BIGINT, traceId STRING"
POLL_S = 0.02
WARM_PER_PARTITION = 10
#: the measured copy runs at least this many micro-batches after the first: at three (60,000 messages, 2-3 s)
#: one autovacuum worker's half second moved PostgreSQL's µs/msg by a third (benchmarks/journal/2026-11.md,
#: issue 42)
MIN_STEADY_BATCHES = 10
QUERY_LIMIT_S = 600

Q_PER_PARTITION = (
    "SELECT p.name, p.last_seq, (SELECT count(*) FROM queen.messages m WHERE m.partition_id = p.id), "
    "(SELECT count(DISTINCT m.transaction_id) FROM queen.messages m WHERE m.partition_id = p.id) "
    "FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1"
)
Q_STAGING = (
    "SELECT (SELECT count(*) FROM queen.spark_staging WHERE query_id = $1) "
    "+ (SELECT count(*) FROM queen.spark_staging_rows WHERE query_id = $1)"
)
Q_DIRECT_TASKS = "SELECT count(*) FROM queen.spark_direct_tasks WHERE query_id = $1"
Q_SINK_BATCHES = (
    "SELECT count(*), coalesce(sum(pushed), 0), count(*) FILTER (WHERE pending_tokens IS NOT NULL) "
    "FROM queen.spark_sink_batches WHERE query_id = $1"
)


def spark_missing() -> str | None:
    """Why Spark scenarios cannot run here (one line), or None when they can."""
    if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("pyarrow") is None:
        return "needs the spark extra: pip install 'queenpy[spark]'"
    if shutil.which("java") is None:
        return "needs Java 17 or 21 on PATH (apt-get install openjdk-17-jre-headless)"
    return None


def _spark_kind(pid: int) -> str:
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "gone"
    return "jvm" if name == "java" else "python" if name.startswith("python") else name


@dataclass
class _Spark:
    """What the Spark scenarios share over a session: one SparkSession, how long it took to start, and the
    messages per partition of the backlog loaded so far."""

    session: Any = None
    start_s: float | None = None
    backlog_per_partition: int = 0

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()
            self.session = None

    @property
    def jvm_pid(self) -> int:
        return int(self.session.sparkContext._gateway.proc.pid)


def _spark(context: Context) -> _Spark:
    """The session's Spark state, its SparkSession started on first use (stopped when the bench closes)."""
    spark = context.state("spark", _Spark)
    if spark.session is None:
        reason = spark_missing()
        if reason:
            raise ScenarioSkipped(reason)
        from queenpy.spark.session import build_session

        context.log(f"  starting the SparkSession ({context.options.spark_master})")
        started = time.monotonic()
        spark.session = build_session(context.options.spark_master, app_name="queenbench")
        spark.start_s = time.monotonic() - started
        context.at_close(spark.stop)
        context.log(f"  SparkSession up in {spark.start_s:.1f}s")
    return spark


def _source(context: Context, spark: _Spark, scenario: Scenario, per_partition: int) -> str:
    """The backlog every Spark scenario reads, topped up to ``per_partition`` messages a partition."""
    queue = f"{context.queue_prefix}spark-backlog-p{scenario.partitions}-{scenario.payload_bytes}B"
    if spark.backlog_per_partition == 0:
        context.precreate(queue, scenario.partitions)
        spark.backlog_per_partition = 1
    if per_partition > spark.backlog_per_partition:
        context.load_backlog(
            queue,
            scenario.partitions,
            per_partition - spark.backlog_per_partition,
            scenario.payload_bytes,
            20_000,
        )
        spark.backlog_per_partition = per_partition
    return queue


def _copy(
    context: Context, spark: _Spark, source: str, target: str, checkpoint: Path, per_trigger: int, commit: str
) -> Any:
    url = context.broker_url
    return (
        spark.session.readStream.format("queen")
        .schema(COPY_SCHEMA)
        .option("url", url)
        .option("queue", source)
        .option("maxMessagesPerTrigger", str(per_trigger))
        .load()
        .writeStream.format("queen")
        .option("url", url)
        .option("queue", target)
        .option("commit", commit)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def _warm_up(context: Context, spark: _Spark, run: dict[str, Any], scenario: Scenario, round_no: int) -> bool:
    """A small job of the same shape first (a copy of two micro-batches, or a batch read), so the measured one
    meets warm Python workers and a JVM that has run its code, as a long-running pipeline would; False (and a
    problem) when it failed."""
    if context.options.warmup <= 0:
        return True
    warm = f"{context.queue_prefix}{scenario.name}-r{round_no}-warm"
    context.precreate(warm, scenario.partitions)
    context.sql.execute(BULK_LOAD, warm, WARM_PER_PARTITION - 1, payload(scenario.payload_bytes))
    if scenario.mode == "read":
        spark.session.read.format("queen").option("url", context.broker_url).option(
            "queue", warm
        ).load().count()
        return True
    query = _copy(
        context,
        spark,
        warm,
        warm + "-out",
        context.workdir / f"{scenario.name}-ck-{round_no}-warm",
        WARM_PER_PARTITION * scenario.partitions // 2,
        scenario.mode,
    )
    query.awaitTermination()
    if query.exception() is not None:
        run["problems"].append(f"warm-up query failed: {query.exception()}")
        return False
    return True


def run(context: Context, scenario: Scenario, round_no: int) -> dict[str, Any]:
    """The copy (``mode`` ``sync`` or ``pipelined``: the sink's commit option), or the batch read (``read``)
    of the same backlog."""
    run = context.new_run(scenario, round_no)
    spark = _spark(context)
    per_trigger = scenario.batch
    estimate = context.estimates.get(scenario.name, scenario.initial_rate)
    steady = max(MIN_STEADY_BATCHES * per_trigger, int(estimate * context.options.seconds))
    total = per_trigger * (1 + -(-steady // per_trigger))
    source = _source(context, spark, scenario, -(-total // scenario.partitions))
    expected = int(context.sql.fetchval(Q_QUEUE_ROWS, source))
    if not _warm_up(context, spark, run, scenario, round_no):
        return run
    context.checkpoint()
    if scenario.mode == "read":
        _read(context, spark, run, source, expected)
    else:
        _copy_window(context, spark, run, scenario, round_no, source, expected)
    if "msg_per_s" in run:
        for other in ("push-100-1KB", "handoff-tx"):
            figure = context.scenario_results.get((round_no, other), {}).get("msg_per_s")
            run["spark"][f"vs_{other}"] = run["msg_per_s"] / figure if figure else None
        run["spark"]["session_start_s"] = spark.start_s if round_no == 1 else None
        context.estimates[scenario.name] = max(1000.0, run["msg_per_s"])
    return run


def _read(context: Context, spark: _Spark, run: dict[str, Any], source: str, expected: int) -> None:
    """The batch read: ``spark.read.format("queen")`` of the whole backlog, counted; the window is the
    read."""
    jvm = spark.jvm_pid
    window = context.open_window()
    tracker = procfs.TreeTracker(jvm, _spark_kind).start()
    counted = int(
        spark.session.read.format("queen")
        .option("url", context.broker_url)
        .option("queue", source)
        .load()
        .count()
    )
    context.close_window(window)
    spark_cpu = tracker.split()
    context.fill_window(run, counted, window, [], None, extra_cpu_s={"spark": sum(spark_cpu.values())})
    run["spark"] = {
        "mode": "read",
        "messages": expected,
        "read_s": window.seconds,
        "spark_cpu_us_per_msg": {
            kind: seconds / counted * 1e6 for kind, seconds in spark_cpu.items() if seconds and counted
        },
    }
    run["ground_truth"].update({"source_messages": expected, "rows_counted_by_spark": counted})
    if counted != expected:
        kind = "lost" if counted < expected else "duplicated"
        run["problems"].append(f"{kind}: the queue holds {expected}, the batch read counted {counted}")


def _copy_window(
    context: Context,
    spark: _Spark,
    run: dict[str, Any],
    scenario: Scenario,
    round_no: int,
    source: str,
    expected: int,
) -> None:
    """The measured copy: the window opens when the first micro-batch has landed in the target (the sink
    commits a micro-batch in one transaction) and closes when the last has."""
    target = f"{context.queue_prefix}{scenario.name}-r{round_no}-out"

    def rows() -> int:
        return int(context.sql.fetchval(Q_QUEUE_ROWS, target))

    def first_batch_done(count: int) -> bool:
        """Staged commits land a micro-batch at once; direct ones while it runs, recorded at its end."""
        if scenario.mode != "direct":
            return count > 0
        return int(context.sql.fetch(Q_SINK_BATCHES, str(query.id))[0][0]) > 0

    jvm = spark.jvm_pid
    started = time.monotonic()
    query = _copy(
        context,
        spark,
        source,
        target,
        context.workdir / f"{scenario.name}-ck-{round_no}",
        scenario.batch,
        scenario.mode,
    )
    first: tuple[float, int] | None = None  # (when, rows) of the first micro-batch
    window: Window | None = None
    tracker: procfs.TreeTracker | None = None
    spark_cpu: dict[str, float] | None = None
    landing: float | None = None  # pipelined: the last micro-batch lands after the query has ended
    while time.monotonic() < started + QUERY_LIMIT_S:
        count = rows()
        if first is None and first_batch_done(count):
            first = time.monotonic(), rows()
            window = context.open_window()
            tracker = procfs.TreeTracker(jvm, _spark_kind).start()
        if (
            count < expected
            and not query.isActive
            and scenario.mode == "pipelined"
            and query.exception() is None
        ):
            landing = landing or time.monotonic() + 60
            if time.monotonic() < landing:
                time.sleep(POLL_S)
                continue
        if count >= expected or not query.isActive:
            if count >= expected and window is not None:
                context.close_window(window)
                spark_cpu = tracker.split() if tracker is not None else None
            break
        time.sleep(POLL_S)
    query.awaitTermination(120)
    if query.isActive:
        query.stop()
        run["problems"].append(f"the query did not finish within {QUERY_LIMIT_S} s")
    if query.exception() is not None:
        run["problems"].append(f"query failed: {str(query.exception()).splitlines()[0]}")
    if tracker is not None and spark_cpu is None:
        tracker.stop()
    if first is None or window is None or window.end is None or spark_cpu is None:
        run["problems"].append(f"target holds {rows()} of {expected} messages when the query ended")
        return
    messages = rows() - first[1]
    context.fill_window(run, messages, window, [], None, extra_cpu_s={"spark": sum(spark_cpu.values())})
    progress = [p for p in query.recentProgress if p.numInputRows]
    run["spark"] = {
        "first_batch_s": first[0] - started,
        "first_batch_messages": first[1],
        "max_per_trigger": scenario.batch,
        "messages": expected,
        "batches": len(progress),
        "whole_query_msg_per_s": expected / (window.end.at - started),
        "spark_cpu_us_per_msg": {
            kind: seconds / messages * 1e6 for kind, seconds in spark_cpu.items() if seconds and messages
        },
        "durations_ms": [
            {"batch": p.batchId, "rows": p.numInputRows, **dict(p.durationMs)} for p in progress
        ],
        "commit": scenario.mode,
    }
    _check_copy(context, run, source, target, expected, str(query.id))


def _check_copy(
    context: Context, run: dict[str, Any], source: str, target: str, expected: int, query_id: str
) -> None:
    """The target holds exactly the source: per partition, every transaction id once, nothing left staged."""
    sql = context.sql
    src = {row[0]: (int(row[1]), int(row[2]), int(row[3])) for row in sql.fetch(Q_PER_PARTITION, source)}
    dst = {row[0]: (int(row[1]), int(row[2]), int(row[3])) for row in sql.fetch(Q_PER_PARTITION, target)}
    stored = sum(head for head, _, _ in dst.values())
    staged = int(sql.fetchval(Q_STAGING, query_id))
    direct_tasks = int(sql.fetchval(Q_DIRECT_TASKS, query_id))
    batches, pushed, pending = sql.fetch(Q_SINK_BATCHES, query_id)[0]
    run["ground_truth"].update(
        {
            "source_messages": expected,
            "target_messages": stored,
            "target_rows_counted": sum(n for _, n, _ in dst.values()),
            "target_distinct_transaction_ids": sum(d for _, _, d in dst.values()),
            "staging_rows_left": staged,
            "direct_tasks_left": direct_tasks,
            "sink_batches": int(batches),
            "sink_batches_pending": int(pending),
            "sink_pushed": int(pushed),
        }
    )
    if stored != expected:
        kind = "lost" if stored < expected else "duplicated"
        run["problems"].append(f"{kind}: the source holds {expected}, the target {stored}")
    wrong = sorted(
        name for name in src.keys() | dst.keys() if src.get(name, (0,))[0] != dst.get(name, (0,))[0]
    )
    if wrong:
        run["problems"].append(f"{len(wrong)} partition(s) differ in size, e.g. {wrong[0]}")
    for name, (head, counted, distinct) in dst.items():
        if counted != head or distinct != head:
            run["problems"].append(
                f"target partition {name}: offsets {head}, rows {counted}, "
                f"distinct transaction ids {distinct}"
            )
            break
    if staged:
        run["problems"].append(f"{staged} staging rows left")
    if pending:
        run["problems"].append(f"{pending} sink batches recorded but not applied")
    if direct_tasks:
        run["problems"].append(f"{direct_tasks} direct tasks pushed but never committed")
    if int(pushed) != stored:
        run["problems"].append(f"the sink recorded {pushed} pushed, the target holds {stored}")


def summarize(measured: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("first_batch_s", "vs_push-100-1KB", "vs_handoff-tx", "batches", "whole_query_msg_per_s", "read_s")
    spark: dict[str, Any] = {k: median(r["spark"].get(k) for r in measured) for k in keys}
    spark["session_start_s"] = next(
        (r["spark"]["session_start_s"] for r in measured if r["spark"].get("session_start_s")), None
    )
    spark["max_per_trigger"] = next(
        (r["spark"]["max_per_trigger"] for r in measured if "max_per_trigger" in r["spark"]), None
    )
    return {"spark": spark}


def report_lines(entry: dict[str, Any]) -> list[str]:
    """The steady rate, its ratios to the same round's push and handoff figures, the first micro-batch (or the
    read), and Spark's CPU next to the broker's and PostgreSQL's."""
    m = entry.get("median") or {}
    spark = m.get("spark")
    if not spark:
        return []
    cpu = m["cpu_us_per_msg"]
    vs_push, vs_handoff = spark.get("vs_push-100-1KB"), spark.get("vs_handoff-tx")
    start, whole = spark.get("session_start_s"), spark.get("whole_query_msg_per_s")
    if spark.get("first_batch_s") is None:  # the batch read
        shape = f"batch read {number(m['msg_per_s'])} msg/s ({number(spark.get('read_s'), 1)} s)"
    else:
        shape = f"steady {number(m['msg_per_s'])} msg/s after the first micro-batch" + (
            f" ({number(whole)} msg/s over the whole query)" if whole else ""
        )
    return [
        f"{entry['scenario']}: {shape}"
        + (f" = {vs_push:.2f} of push-100-1KB" if vs_push else "")
        + (f", {vs_handoff:.1f}x handoff-tx" if vs_handoff else "")
        + " (same round, medians)"
        + (
            f"; first micro-batch {number(spark['first_batch_s'], 1)} s after query start "
            f"({number(spark.get('max_per_trigger'))} messages), {number(spark['batches'])} micro-batches"
            if spark.get("first_batch_s") is not None
            else ""
        )
        + f"; CPU µs/msg: Spark {number(cpu.get('spark'), 1)}, broker "
        f"{number(cpu.get('broker'), 1)}, PG {number(cpu.get('postgres'), 1)}"
        + (f"; SparkSession start {start:.1f} s" if start else "")
    ]


KIND = Kind("spark", run, summarize, report_lines)
