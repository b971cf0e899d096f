"""Exactly-once queue → Spark → queue across a SIGKILL of the driver: the CI-size run of exactly_once.py
(next to this file). The script runs the copy query in a child process while it produces, kills
the child's whole process group with SIGKILL mid-stream and restarts it from its checkpoint; this test then
drains the rest from the same checkpoint on the session's SparkSession (saving a JVM start) and checks that
the target holds exactly the source messages, each once, in per-partition order, with no staging rows left;
with the sink's sync commits and with its pipelined ones (the broker applies a micro-batch after Spark's
commit returned, so a kill lands between the two too)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import exactly_once as script
import pytest
from spark_helpers import read_queue

from helpers import unique

pytestmark = pytest.mark.spark

SCRIPT = Path(script.__file__).resolve()


@pytest.mark.parametrize("commit", ["sync", "pipelined"])
def test_copy_survives_sigkill_with_each_message_once_in_order(
    spark, broker, tmp_path: Path, commit: str
) -> None:
    source, target, group, checkpoint = (
        unique("eo-src"),
        unique("eo-dst"),
        unique("eo-g"),
        str(tmp_path / "ck"),
    )
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--url",
            broker.url,
            "--source",
            source,
            "--target",
            target,
            "--group",
            group,
            "--checkpoint",
            checkpoint,
            "--messages",
            "8000",
            "--partitions",
            "4",
            "--kills",
            "1",
            "--max-per-trigger",
            "2000",
            "--produce-seconds",
            "4",
            "--max-kill-delay",
            "3",
            "--seed",
            "7",
            "--commit",
            commit,
            "--no-drain",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SIGKILL 1" in result.stdout and "kills: 1" in result.stdout

    query = script.copy_query(
        spark, broker.url, source, target, group, checkpoint, 2000, drain=True, commit=commit
    )
    try:
        assert query.awaitTermination(180)
    finally:
        query.stop()
    assert query.exception() is None
    if commit == "pipelined":
        from queenpy.spark import flush_sink

        flush_sink(query, broker.url)  # the drain's last micro-batch, if the broker has not applied it yet

    counts = script.verify(broker.url, source, target)
    assert counts == {
        "source": 8000,
        "target": 8000,
        "duplicates": 0,
        "missing": 0,
        "out_of_order": 0,
        "foreign": 0,
    }
    # the sink's key is the query id, the same in every run from this checkpoint
    assert script.staging_rows(broker.database_url, str(query.id)) == 0
    assert script.pending_batches(broker.database_url, str(query.id)) == 0
    src = {name: ms for name, ms in read_queue(broker.url, source).items() if ms}
    dst = {name: ms for name, ms in read_queue(broker.url, target).items() if ms}
    assert sorted(src) == sorted(dst) == ["p0", "p1", "p2", "p3"]
    for name, messages in src.items():
        assert [m["data"] for m in dst[name]] == [m["data"] for m in messages]
