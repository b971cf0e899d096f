"""Exactly-once queue → Spark → queue with the sink's direct commits (each task pushes its rows; the broker's
dedupe on derived transaction ids absorbs replays), across SIGKILLs in the middle of micro-batches:

1. the copy query runs in a child driver (tests/spark/exactly_once.py ``--driver``, ``local[2,3]`` so a
   failed task is retried) while a producer writes the source; when a micro-batch has pushed rows that Spark
   has not committed, the executors' Python workers (``pyspark.daemon pyspark.worker`` and its forks, where
   ``write()`` runs) get SIGKILL: their tasks fail and are retried, pushing the same transaction ids again;
2. later, again mid-batch, the child's whole process group (the driver JVM and every Python worker) gets
   SIGKILL; the next run restarts from the checkpoint and replays that micro-batch;
3. this test drains the rest from the same checkpoint on the session's SparkSession.

Then the target must hold exactly the source's messages, each once, in per-partition order; the sink's batch
records count every message once; no staging row nor uncommitted task row is left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import exactly_once as script
import psycopg
import pytest
from spark_helpers import configure, read_queue

from helpers import unique

pytestmark = pytest.mark.spark

SCRIPT = Path(script.__file__).resolve()
MESSAGES = 12_000
PER_TRIGGER = 3000
KILL_TRIES = 5
PRODUCE_S = 30.0  # long enough for KILL_TRIES caught batches and the driver kill after them


def task_failed(driver_log: str) -> bool:
    """Whether Spark logged a task that failed (its Python worker killed under it)."""
    return any(
        line in driver_log for line in ("Python worker exited unexpectedly", "Lost task", "Exception in task")
    )


def driver(
    broker: Any, source: str, target: str, group: str, checkpoint: Path, log: Path
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        str(SCRIPT),
        "--driver",
        "--url",
        broker.url,
        "--source",
        source,
        "--target",
        target,
        "--group",
        group,
        "--checkpoint",
        str(checkpoint),
        "--master",
        "local[2,3]",
        "--max-per-trigger",
        str(PER_TRIGGER),
        "--commit",
        "direct",
        # small sink requests: a task pushes its rows in several requests, so a kill that sees pushed rows
        # lands while tasks still run far more often than when each task pushes once
        "--stage-batch-size",
        "200",
    ]
    with log.open("ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def query_id(checkpoint: Path) -> str | None:
    try:
        return str(json.loads((checkpoint / "metadata").read_text())["id"])
    except (OSError, ValueError, KeyError):
        return None


def pushed_uncommitted(database_url: str, query: str) -> int:
    """Messages pushed by tasks of micro-batches the sink has not recorded yet (a batch in flight)."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(t.pushed), 0) FROM queen.spark_direct_tasks t "
            "WHERE t.query_id = %s AND NOT EXISTS "
            "(SELECT 1 FROM queen.spark_sink_batches b "
            "WHERE b.query_id = t.query_id AND b.batch_id = t.batch_id)",
            (query,),
        ).fetchone()
    return int(row[0]) if row else 0


def mid_batch(broker: Any, checkpoint: Path, child: subprocess.Popen[bytes], timeout_s: float = 180) -> int:
    """Wait until a micro-batch has pushed rows and is not committed; returns how many it pushed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert child.poll() is None, "the driver exited by itself"
        query = query_id(checkpoint)
        if query is not None:
            pushed = pushed_uncommitted(broker.database_url, query)
            if pushed:
                return pushed
        time.sleep(0.02)
    raise AssertionError("no micro-batch was caught in flight")


def executor_workers(root: int) -> list[int]:
    """The forked Python workers (not the daemon) under ``root`` that run tasks
    (``pyspark.daemon pyspark.worker``)."""
    procs: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            procs[int(entry)] = (int(stat.rsplit(")", 1)[1].split()[1]), cmdline)

    def under(pid: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = procs.get(pid, (0, ""))[0]
        return False

    def is_daemon(pid: int) -> bool:
        return procs.get(pid, (0, ""))[1].strip().endswith("pyspark.daemon pyspark.worker")

    return [pid for pid, (parent, _) in procs.items() if is_daemon(parent) and is_daemon(pid) and under(pid)]


def test_direct_copy_survives_sigkill_of_executors_and_driver_with_each_message_once(
    spark, broker, tmp_path: Path
) -> None:
    source, target, group = unique("deo-src"), unique("deo-dst"), unique("deo-g")
    checkpoint, log = tmp_path / "ck", tmp_path / "driver.log"
    configure(broker.url, source)
    configure(broker.url, target)
    done = threading.Event()
    producer = threading.Thread(
        target=script.produce, args=(broker.url, source, MESSAGES, 4, PRODUCE_S, done, 64), daemon=True
    )
    producer.start()

    child = driver(broker, source, target, group, checkpoint, log)
    try:
        # 1. the executors' Python workers, mid-batch: their tasks are retried (local[2,3]) and push again. A
        # kill can land after the batch's tasks returned (their workers idle, waiting for the next task): then
        # nothing fails, so catch another batch, up to KILL_TRIES times, until the log shows a failed task.
        caught_executor, failed_task = 0, False
        for _ in range(KILL_TRIES):
            caught_executor = mid_batch(broker, checkpoint, child)
            workers = executor_workers(child.pid)
            assert workers, "no executor Python worker found"
            for pid in workers:
                os.kill(pid, signal.SIGKILL)
            before = script.total(broker.url, target)
            deadline = time.monotonic() + 120
            while script.total(broker.url, target) <= before and time.monotonic() < deadline:
                assert child.poll() is None, log.read_text()[-3000:]
                time.sleep(0.1)
            failed_task = task_failed(log.read_text())
            if failed_task:
                break
        # 2. the whole driver, mid-batch
        caught_driver = mid_batch(broker, checkpoint, child)
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert caught_executor > 0 and caught_driver > 0
    assert failed_task, f"{KILL_TRIES} executor kills failed no task: " + log.read_text()[-3000:]
    done.wait(120)
    producer.join()

    # 3. the rest, from the same checkpoint (the killed batch is replayed first)
    query = script.copy_query(
        spark, broker.url, source, target, group, str(checkpoint), PER_TRIGGER, drain=True, commit="direct"
    )
    try:
        assert query.awaitTermination(180)
    finally:
        query.stop()
    assert query.exception() is None

    assert script.verify(broker.url, source, target) == {
        "source": MESSAGES,
        "target": MESSAGES,
        "duplicates": 0,
        "missing": 0,
        "out_of_order": 0,
        "foreign": 0,
    }
    src = {name: ms for name, ms in read_queue(broker.url, source).items() if ms}
    dst = {name: ms for name, ms in read_queue(broker.url, target).items() if ms}
    assert sorted(src) == sorted(dst) == ["p0", "p1", "p2", "p3"]
    for name, messages in src.items():
        assert [m["data"] for m in dst[name]] == [m["data"] for m in messages]
    with psycopg.connect(broker.database_url) as conn:
        row = conn.execute(
            "SELECT (SELECT coalesce(sum(pushed), 0) FROM queen.spark_sink_batches WHERE query_id = %(q)s), "
            "(SELECT bool_and(direct) FROM queen.spark_sink_batches WHERE query_id = %(q)s), "
            "(SELECT count(*) FROM queen.spark_direct_tasks WHERE query_id = %(q)s), "
            "(SELECT count(*) FROM queen.spark_staging_rows WHERE query_id = %(q)s)",
            {"q": str(query.id)},
        ).fetchone()
    assert row == (MESSAGES, True, 0, 0)
