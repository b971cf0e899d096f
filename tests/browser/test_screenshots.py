r"""Screenshots of the console's main views on a broker with some traffic (PNG, 1400x900).

Always taken (into the test's temporary directory, and checked to be real PNGs of the rendered view); with
``QUEENPY_SCREENSHOTS=docs/screenshots`` they are also written there, which is how the pictures in
docs/operations.md are made:

    QUEENPY_SCREENSHOTS=docs/screenshots .venv/bin/python -m pytest -m browser \
        tests/browser/test_screenshots.py

``QUEENPY_SCREENSHOTS_BROKER=<url>`` points the pictures at a broker that has run for a while (so the
throughput chart has minutes to show); that broker needs a queue ``orders``, a group ``billing`` on it and a
trace name ``checkout`` (``examples/console_traffic.py`` makes them).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from helpers import unique

pytestmark = pytest.mark.browser

PNG = b"\x89PNG\r\n\x1a\n"
VIEWS = [
    ("overview", "/", "[data-test=overview-queues] tbody tr"),
    ("queues", "/#/queues", "[data-test=queues] tbody tr"),
    ("queue", "/#/queue/{orders}", "[data-test=partitions] tbody tr"),
    ("dlq", "/#/dlq", "[data-test=dlq] tbody tr"),
    ("group", "/#/group/{group}", "[data-test=group-lag]"),
    ("messages", "/#/messages?queue={orders}", "[data-test=messages] tbody tr"),
    ("traces", "/#/traces/{trace}", "[data-test=traces] tbody tr"),
    ("system", "/#/system", "[data-test=maintenance-push]:enabled"),
]


def traffic(client: httpx.Client) -> dict[str, str]:
    """A few queues with depth, a consumer group with lag, dead letters and a named trace."""
    names = {"orders": unique("orders"), "group": unique("billing"), "trace": unique("checkout")}
    for queue, partitions, count in [
        (names["orders"], 4, 120),
        (unique("payments"), 2, 64),
        (unique("emails"), 1, 17),
        (unique("audit"), 3, 8),
    ]:
        items = [
            {"queue": queue, "partition": f"p{i % partitions}", "payload": {"id": i, "amount": i * 3}}
            for i in range(count)
        ]
        client.post("/api/v1/push", json={"items": items}).raise_for_status()
    popped = client.get(
        f"/api/v1/pop/queue/{names['orders']}/partition/p0",
        params={"batch": 10, "wait": "false", "consumerGroup": names["group"]},
    ).json()["messages"]
    for index, message in enumerate(popped):
        ack = {
            "transactionId": message["transactionId"],
            "partitionId": message["partitionId"],
            "consumerGroup": names["group"],
            "status": "dlq" if index < 3 else "completed",
            "error": "payment gateway timeout" if index < 3 else None,
        }
        client.post("/api/v1/ack", json=ack).raise_for_status()
        client.post(
            "/api/v1/traces",
            json={
                "transactionId": message["transactionId"],
                "partitionId": message["partitionId"],
                "eventType": "step",
                "data": {"stage": "charged" if index >= 3 else "failed"},
                "traceNames": [names["trace"]],
            },
        ).raise_for_status()
    client.post("/api/v1/stats/refresh").raise_for_status()
    return names


def test_screenshots_of_the_main_views(
    broker: Any, console: Callable[..., Any], api: Callable[..., httpx.Client], tmp_path: Path
) -> None:
    external = os.environ.get("QUEENPY_SCREENSHOTS_BROKER")
    if external:
        broker = SimpleNamespace(url=external.rstrip("/"))
        names = {"orders": "orders", "group": "billing", "trace": "checkout"}
    else:
        names = traffic(api(broker))
    target = os.environ.get("QUEENPY_SCREENSHOTS")
    for view, path, ready in VIEWS:
        page = console(broker, path.format(**names))
        expect(page.locator(ready).first).to_be_visible()
        page.wait_for_load_state("networkidle")
        shot = tmp_path / f"console-{view}.png"
        page.screenshot(path=str(shot), full_page=False)
        assert shot.read_bytes().startswith(PNG) and shot.stat().st_size > 10_000, view
        if target:
            Path(target).mkdir(parents=True, exist_ok=True)
            shutil.copy(shot, Path(target) / shot.name)
        page.close()
