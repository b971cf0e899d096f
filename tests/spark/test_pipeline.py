"""``queenpy spark run examples/spark_pipeline.py`` on local[2]: 100 produced, 86 notified, 14 dead letters,
0 duplicates, exit 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import unique

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def test_spark_run_pipeline_prints_the_expected_counts(broker, tmp_path: Path) -> None:
    env = {**os.environ, "QUEEN_URL": broker.url}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "queenpy",
            "spark",
            "run",
            str(ROOT / "examples" / "spark_pipeline.py"),
            "--master",
            "local[2]",
            "--url",
            broker.url,
            "--suffix",
            "." + unique("sp"),
            "--workdir",
            str(tmp_path / "work"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
        cwd=tmp_path,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr[-4000:]
    for line in (
        "produced: 100 ok",
        "poisoned: 14 ok",
        "spark translate attempts: 100 ok",
        "retry path attempts: 42 ok",
        "routed: 86 ok",
        "notified: 86 ok",
        "dead letters: 14 ok",
        "duplicates: 0 ok",
        "pipeline ok",
    ):
        assert line in out, out
    # progress lines: batch ids, rows/s and lag per queue on stderr
    assert "batch" in result.stderr and "rows/s" in result.stderr and "lag chat.translate." in result.stderr
