"""The README's JavaScript example, run as a reader would paste it (an ES module,
``node --input-type=module``) with Queen's own client against the session broker; only the URL and the queue
name are changed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from markdown_it import MarkdownIt

from helpers import unique

HERE = Path(__file__).parent
README = HERE.parents[1] / "README.md"

pytestmark = [
    pytest.mark.js,
    pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js 20+ (Debian package nodejs)"),
    pytest.mark.skipif(
        not (HERE / "node_modules" / "queen-mq" / "package.json").exists(),
        reason="needs the queen-mq JS client in tests/js/node_modules (see .ci/run)",
    ),
]


def test_the_javascript_example_pushes_pops_and_acknowledges(broker: Any) -> None:
    [script] = [
        token.content
        for token in MarkdownIt("commonmark").parse(README.read_text(encoding="utf-8"))
        if token.type == "fence" and token.info.strip() == "js"
    ]
    queue = unique("readme-js")
    script = re.sub(r"\borders\b", queue, script.replace("http://localhost:6632", broker.url))
    # run from tests/js, so that `import ... from 'queen-mq'` resolves to tests/js/node_modules
    done = subprocess.run(
        ["node", "--input-type=module", "-e", script],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["{ id: 2 }"]
    params = {"wait": "false", "batch": 10, "consumerGroup": "shipping"}
    left = httpx.get(f"{broker.url}/api/v1/pop/queue/{queue}", params=params, timeout=30).json()
    assert left["messages"] == []  # acknowledged by the group
