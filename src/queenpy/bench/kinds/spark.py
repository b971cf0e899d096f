"""The Spark scenario: an availableNow queue → queue copy through ``format("queen")`` both ways.

One SparkSession (``local[*]``, the connector's defaults) serves every round; it starts the first time a Spark
scenario runs and stops with the bench. Each round copies the same 1 KB backlog (``scenario.partitions``
partitions, loaded once by SQL like the consumption backlogs) into a new target queue from a new checkpoint:

- warm-up: a small copy of its own (two micro-batches), so every round's measured query meets warm Python
  workers and a warm JIT, as a long-running pipeline would;
- the measured query starts; the harness polls PostgreSQL every 20 ms for the target queue's rows. The sink
  commits a micro-batch in one transaction, so the rows jump from 0 to the first batch's size at once: that
  moment ends the *first micro-batch* (its latency is query start → that commit) and opens the measured window,
  which closes when the last row has landed. ``msg/s`` is the rows committed in the window over its length:
  the steady rate after the first micro-batch, counted by PostgreSQL.

Valid only when the target holds exactly the source: the same number of messages in every partition (by
name), ``count(*)`` equal to the partition offsets, every transaction id once, no staging rows left (either
staging table), no sink batch left pending, and the query ended without an exception.

``spark-handoff`` uses the sink's default ``commit=sync``; ``spark-handoff-pipelined`` the pipelined commits
(the broker applies a micro-batch while Spark runs the next one), whose last micro-batch lands a moment after
the query has ended: the window closes when it has. CPU per message adds Spark's own (the JVM process tree: the JVM and its
Python workers) to the broker's and PostgreSQL's; the scenario's ratio is also given to ``push-100-1KB`` and
``handoff-tx`` of the same round when they ran.

Without the spark extra (or without ``java``) the scenario is skipped with a one-line reason.
"""

from __future__ import annotations

import importlib.util
import shutil
import time
from pathlib import Path
from typing import Any

from queenpy.bench import procfs
from queenpy.bench.catalog import Scenario, payload
from queenpy.bench.core import BULK_LOAD, Q_CHECKPOINTS, Q_QUEUE_ROWS, BenchCore

__all__ = ["ScenarioSkipped", "SparkRuns", "spark_missing"]

POLL_S = 0.02
WARM_PER_PARTITION = 10

Q_PER_PARTITION = ("SELECT p.name, p.last_seq, (SELECT count(*) FROM queen.messages m WHERE m.partition_id = p.id), "
                   "(SELECT count(DISTINCT m.transaction_id) FROM queen.messages m WHERE m.partition_id = p.id) "
                   "FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1")
Q_STAGING = ("SELECT (SELECT count(*) FROM queen.spark_staging WHERE query_id = $1) "
             "+ (SELECT count(*) FROM queen.spark_staging_rows WHERE query_id = $1)")
Q_SINK_BATCHES = ("SELECT count(*), coalesce(sum(pushed), 0), count(*) FILTER (WHERE pending_tokens IS NOT NULL) "
                  "FROM queen.spark_sink_batches WHERE query_id = $1")


class ScenarioSkipped(Exception):
    """The scenario cannot run on this installation; the message is the one-line reason."""


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


class SparkRuns(BenchCore):
    _spark: Any = None
    _spark_start_s: float | None = None
    _spark_backlog: int = 0  # messages per partition of the 1 KB backlog

    def close(self) -> None:
        super().close()
        if self._spark is not None:
            self._spark.stop()
            self._spark = None

    def _session(self) -> Any:
        if self._spark is None:
            reason = spark_missing()
            if reason:
                raise ScenarioSkipped(reason)
            from queenpy.spark.session import build_session

            self.log("  starting the SparkSession (local[*])")
            started = time.monotonic()
            self._spark = build_session(app_name="queenbench")
            self._spark_start_s = time.monotonic() - started
            self.log(f"  SparkSession up in {self._spark_start_s:.1f}s")
        return self._spark

    def _jvm_pid(self) -> int:
        return int(self._spark.sparkContext._gateway.proc.pid)

    def _spark_source(self, scenario: Scenario, per_partition: int) -> str:
        queue = f"spark-backlog-p{scenario.partitions}-{scenario.payload_bytes}B"
        if self._spark_backlog == 0:
            self._precreate(queue, scenario.partitions)
            self._spark_backlog = 1
        if per_partition > self._spark_backlog:
            self._load_backlog(queue, scenario.partitions, per_partition - self._spark_backlog,
                               scenario.payload_bytes, 20_000)
            self._spark_backlog = per_partition
        return queue

    def _copy(self, source: str, target: str, checkpoint: Path, per_trigger: int, commit: str) -> Any:
        spark = self._spark
        url = self.broker.url
        return (spark.readStream.format("queen").option("url", url).option("queue", source)
                .option("maxMessagesPerTrigger", str(per_trigger)).load()
                .writeStream.format("queen").option("url", url).option("queue", target).option("commit", commit)
                .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())

    def _run_spark(self, scenario: Scenario, round_no: int) -> dict[str, Any]:
        run = self._new_run(scenario, round_no)
        options = self.options
        self._session()
        per_trigger = scenario.batch
        estimate = self.estimates.get(scenario.name, scenario.initial_rate)
        steady = max(3 * per_trigger, int(estimate * options.seconds))
        total = per_trigger * (1 + -(-steady // per_trigger))
        source = self._spark_source(scenario, -(-total // scenario.partitions))
        expected = int(self.sql.fetchval(Q_QUEUE_ROWS, source))
        target = f"{scenario.name}-r{round_no}-out"
        if options.warmup > 0:
            warm = f"{scenario.name}-r{round_no}-warm"
            self._precreate(warm, scenario.partitions)
            self.sql.execute(BULK_LOAD, warm, WARM_PER_PARTITION - 1, payload(scenario.payload_bytes))
            query = self._copy(warm, warm + "-out", self.workdir / f"{scenario.name}-ck-{round_no}-warm",
                               WARM_PER_PARTITION * scenario.partitions // 2, scenario.mode)
            query.awaitTermination()
            if query.exception() is not None:
                run["problems"].append(f"warm-up query failed: {query.exception()}")
                return run
        self._checkpoint()

        def rows() -> int:
            return int(self.sql.fetchval(Q_QUEUE_ROWS, target))

        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS))
        jvm = self._jvm_pid()
        started = time.monotonic()
        query = self._copy(source, target, self.workdir / f"{scenario.name}-ck-{round_no}", per_trigger, scenario.mode)
        first = start = end = None
        first_rows = 0
        spark_start = spark_end = None
        deadline = started + 600
        landing: float | None = None  # pipelined: the last micro-batch lands after the query has ended
        while time.monotonic() < deadline:
            count = rows()
            if first is None and count > 0:
                first, first_rows = time.monotonic(), count
                self.memory.mark()
                self.waits.mark()
                start = self._mark()
                spark_start = procfs.tree_ticks(jvm, _spark_kind)
            if count < expected and not query.isActive and scenario.mode == "pipelined" and query.exception() is None:
                landing = landing or time.monotonic() + 60
                if time.monotonic() < landing:
                    time.sleep(POLL_S)
                    continue
            if count >= expected or not query.isActive:
                if count >= expected and first is not None:
                    end = self._mark()
                    spark_end = procfs.tree_ticks(jvm, _spark_kind)
                break
            time.sleep(POLL_S)
        query.awaitTermination(120)
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS)) - checkpoints
        if query.isActive:
            query.stop()
            run["problems"].append("the query did not finish within 600 s")
        if query.exception() is not None:
            run["problems"].append(f"query failed: {str(query.exception()).splitlines()[0]}")
        if first is None or start is None or end is None or spark_start is None or spark_end is None:
            run["problems"].append(f"target holds {rows()} of {expected} messages when the query ended")
            return run
        spark_cpu = procfs.cpu_by_kind_s(spark_start, spark_end)
        messages = rows() - first_rows
        self._fill_window(run, messages, start, end, [], None, checkpoints, extra_cpu_s={"spark": sum(
            spark_cpu.values())})
        progress = [p for p in query.recentProgress if p.numInputRows]
        run["spark"] = {
            "first_batch_s": first - started, "first_batch_messages": first_rows, "max_per_trigger": per_trigger,
            "messages": expected, "batches": len(progress),
            "session_start_s": self._spark_start_s if round_no == 1 else None,
            "spark_cpu_us_per_msg": {kind: seconds / messages * 1e6 for kind, seconds in spark_cpu.items()
                                     if seconds and messages},
            "durations_ms": [{"batch": p.batchId, "rows": p.numInputRows, **dict(p.durationMs)} for p in progress],
        }
        for other in ("push-100-1KB", "handoff-tx"):
            figure = self.scenario_results.get((round_no, other), {}).get("msg_per_s")
            run["spark"][f"vs_{other}"] = run["msg_per_s"] / figure if figure else None
        self.estimates[scenario.name] = max(1000.0, run["msg_per_s"])
        run["spark"]["commit"] = scenario.mode
        self._check_copy(run, source, target, expected, str(query.id))
        return run

    def _check_copy(self, run: dict[str, Any], source: str, target: str, expected: int, query_id: str) -> None:
        src = {row[0]: (int(row[1]), int(row[2]), int(row[3])) for row in self.sql.fetch(Q_PER_PARTITION, source)}
        dst = {row[0]: (int(row[1]), int(row[2]), int(row[3])) for row in self.sql.fetch(Q_PER_PARTITION, target)}
        stored = sum(head for head, _, _ in dst.values())
        staged = int(self.sql.fetchval(Q_STAGING, query_id))
        batches, pushed, pending = self.sql.fetch(Q_SINK_BATCHES, query_id)[0]
        run["ground_truth"].update({"source_messages": expected, "target_messages": stored,
                                    "target_rows_counted": sum(n for _, n, _ in dst.values()),
                                    "target_distinct_transaction_ids": sum(d for _, _, d in dst.values()),
                                    "staging_rows_left": staged, "sink_batches": int(batches),
                                    "sink_batches_pending": int(pending), "sink_pushed": int(pushed)})
        if stored != expected:
            kind = "lost" if stored < expected else "duplicated"
            run["problems"].append(f"{kind}: the source holds {expected}, the target {stored}")
        wrong = sorted(name for name in src.keys() | dst.keys() if src.get(name, (0,))[0] != dst.get(name, (0,))[0])
        if wrong:
            run["problems"].append(f"{len(wrong)} partition(s) differ in size, e.g. {wrong[0]}")
        for name, (head, counted, distinct) in dst.items():
            if counted != head or distinct != head:
                run["problems"].append(f"target partition {name}: offsets {head}, rows {counted}, "
                                       f"distinct transaction ids {distinct}")
                break
        if staged:
            run["problems"].append(f"{staged} staging rows left")
        if pending:
            run["problems"].append(f"{pending} sink batches recorded but not applied")
        if int(pushed) != stored:
            run["problems"].append(f"the sink recorded {pushed} pushed, the target holds {stored}")
