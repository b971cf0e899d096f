"""The README's curl and Python examples, run as a reader would paste them, against a real ``queenpy serve``
(the session ``broker``). Only the URL and the queue name are changed: the session broker listens elsewhere,
and other tests share it. The JavaScript example is run by ``tests/js/test_readme_example.py``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from markdown_it import MarkdownIt

from helpers import unique

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_example(language: str, first_line: str, url: str, queue: str) -> str:
    """The README's fenced ``language`` block that starts with ``first_line``, pointed at ``url`` and
    ``queue``."""
    blocks = [
        token.content
        for token in MarkdownIt("commonmark").parse(README.read_text(encoding="utf-8"))
        if token.type == "fence" and token.info.strip() == language and token.content.startswith(first_line)
    ]
    assert len(blocks) == 1, (
        f"want one {language} block starting {first_line!r} in README.md, found {len(blocks)}"
    )
    host = url.removeprefix("http://")
    return re.sub(r"\borders\b", queue, blocks[0].replace("localhost:6632", host))


@pytest.mark.skipif(shutil.which("curl") is None or shutil.which("jq") is None, reason="needs curl and jq")
def test_the_curl_example_pushes_pops_and_acknowledges(broker: Any) -> None:
    queue = unique("readme-curl")
    script = readme_example("bash", "curl -s localhost:6632/health", broker.url, queue)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    health, pushed, popped, acked = json_values(done.stdout)
    assert health["status"] == "healthy"
    assert [item["status"] for item in pushed] == ["queued"]
    assert [message["data"] for message in popped["messages"]] == [{"id": 1}]
    assert [(result["success"], result["leaseReleased"]) for result in acked] == [(True, True)]
    assert left_to_pop(broker.url, queue) == []


def json_values(text: str) -> list[Any]:
    """The JSON documents curl printed one after the other (it adds no newline after a body)."""
    decoder, values, rest = json.JSONDecoder(), [], text.lstrip()
    while rest:
        value, end = decoder.raw_decode(rest)
        values.append(value)
        rest = rest[end:].lstrip()
    return values


def left_to_pop(url: str, queue: str, group: str | None = None) -> list[Any]:
    params: dict[str, Any] = {"wait": "false", "batch": 10, **({"consumerGroup": group} if group else {})}
    return list(httpx.get(f"{url}/api/v1/pop/queue/{queue}", params=params, timeout=30).json()["messages"])


def test_the_python_example_pushes_pops_and_acknowledges(broker: Any) -> None:
    queue = unique("readme-python")
    script = readme_example("python", "from queenpy.client import Queen", broker.url, queue)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["{'id': 1}"]
    assert left_to_pop(broker.url, queue, group="billing") == []  # acknowledged by the group
    assert [m["data"] for m in left_to_pop(broker.url, queue)] == [{"id": 1}]  # still there for the others
