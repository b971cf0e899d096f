"""``examples/streams_window_count.py`` run as a user would, against the real broker: the windows it emits
equal the plain Python computation of ``examples/window_count_data.py`` (the Spark half of the comparison,
same input, same answer, is ``tests/spark/test_window_count.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "streams_window_count.py"


def test_the_streams_window_count_example_emits_exactly_the_python_windows(broker: Any) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--url", broker.url, "--events", "600"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "windows ok: equal to the Python computation"
    emitted = int(lines[-2].split("windows emitted: ")[1].split(",")[0])
    assert emitted >= 4 * 4  # 4 keys in (nearly) every one of the 6 minutes


def test_the_example_exits_2_when_the_broker_is_unreachable() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--url", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "unreachable" in done.stderr
