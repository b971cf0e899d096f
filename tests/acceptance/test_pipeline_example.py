"""``examples/pipeline.py`` run as a user would, against the real broker: its counts must be exact."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipeline.py"

EXPECTED_LINES = [
    "produced: 100 ok",
    "poisoned: 14 ok",
    "translate attempts: 128 ok",
    "translate failures: 42 ok",
    "routed: 86 ok",
    "notified: 86 ok",
    "dead letters: 14 ok",
    "duplicates: 0 ok",
    "pipeline ok",
]


def run_example(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_pipeline_counts_are_exact_and_a_rerun_gives_the_same(broker: Any) -> None:
    env = dict(os.environ, QUEEN_URL=broker.url, QUEEN_PIPELINE_SUFFIX=f".{uuid.uuid4().hex[:8]}")
    for _ in range(2):  # the second run deletes and recreates its queues
        done = run_example(env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.splitlines() == EXPECTED_LINES


def test_pipeline_exits_non_zero_when_the_broker_is_unreachable() -> None:
    done = run_example("--url", "http://127.0.0.1:9", env=dict(os.environ))
    assert done.returncode == 2 and "DatabaseUnavailable" in done.stderr
