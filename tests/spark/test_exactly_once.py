"""Exactly-once queue → Spark → queue across a SIGKILL of the driver (the CI-size run of
benchmarks/spark_exactly_once.py: the query's process group is killed mid-stream and restarted from its
checkpoint, then drained with availableNow)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import unique
from spark_helpers import read_queue

pytestmark = pytest.mark.spark

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "spark_exactly_once.py"


def test_copy_survives_sigkill_with_each_message_once_in_order(broker, tmp_path: Path) -> None:
    source, target = unique("eo-src"), unique("eo-dst")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--url", broker.url, "--database-url", broker.database_url,
         "--source", source, "--target", target, "--checkpoint", str(tmp_path / "ck"),
         "--messages", "12000", "--partitions", "4", "--kills", "1", "--max-per-trigger", "3000",
         "--produce-seconds", "6", "--seed", "7"],
        check=False, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "exactly-once: ok" in result.stdout
    assert "staging_left: 0" in result.stdout

    # and checked again here, independently of the script
    src, dst = read_queue(broker.url, source), read_queue(broker.url, target)
    src = {name: messages for name, messages in src.items() if messages}
    dst = {name: messages for name, messages in dst.items() if messages}
    assert sorted(src) == sorted(dst) == ["p0", "p1", "p2", "p3"]
    for name in src:
        assert [m["data"] for m in dst[name]] == [m["data"] for m in src[name]]
    assert sum(len(m) for m in dst.values()) == 12000
