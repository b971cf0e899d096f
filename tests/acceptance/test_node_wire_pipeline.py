"""Issue 16's pipeline over Node.js's HTTP stack (``node/pipeline.mjs``: fetch/undici, the stack of Queen's JS
client), sending the JS client's wire calls (API.md section 22). An emulation: the official npm ``queen-mq``
client cannot be installed here (the registry answers 404), so this checks that nothing in the HTTP layer
(keep-alive, aborts, empty bodies) changes the retry/DLQ counts a Node client sees."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).parent / "node" / "pipeline.mjs"


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js 18+ (Debian package nodejs)")
def test_pipeline_over_node_fetch_dead_letters_every_poison_message(broker: Any) -> None:
    done = subprocess.run(["node", str(SCRIPT), broker.url], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("FINAL ")]
    counts = json.loads(line.removeprefix("FINAL "))
    assert counts == {"translate attempts": 128, "translate done": 86, "translate failures": 42,
                      "route attempts": 86, "route done": 86, "notify attempts": 86, "notify done": 86,
                      "dlq": 14}, counts
