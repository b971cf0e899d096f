"""The console with 1,000 queues: the overview renders a page of them, and the time to that first render is
measured in the browser and recorded (printed; not asserted: speed belongs in the benchmarks)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

QUEUES = 1_000
RENDERED = """() => {
    const rows = document.querySelectorAll('[data-test=overview-queues] tbody tr');
    const count = document.querySelector('[data-test=queue-count]');
    return rows.length === 25 && count && count.textContent === '1,000' ? performance.now() : false;
}"""


def test_first_render_of_the_overview_with_1000_queues(
    db_url: str,
    start_broker: Callable[..., Any],
    chromium: Any,
    api: Callable[..., httpx.Client],
    capsys: pytest.CaptureFixture[str],
) -> None:
    own = start_broker(db_url, workers=2)
    client = api(own)
    for start in range(0, QUEUES, 250):
        items = [
            {"queue": f"scale-{i:04d}", "payload": {"i": i}}
            for i in range(start, start + 250)
            for _ in range(1 + i % 3)
        ]
        assert all(r["status"] == "queued" for r in client.post("/api/v1/push", json={"items": items}).json())
    assert not client.post("/api/v1/stats/refresh").json().get("skipped")
    assert client.get("/api/v1/resources/overview").json()["queues"] == QUEUES
    deepest = client.get("/api/v1/status").json()["queues"][0]

    timings = []
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        for attempt in range(3):  # the first load with an empty cache, then two revalidating ones
            page.goto(own.url + "/", wait_until="commit")
            rendered_ms = page.wait_for_function(RENDERED, polling="raf", timeout=30_000).json_value()
            steps = page.evaluate("""() => {
                const nav = performance.getEntriesByType('navigation')[0];
                const api = performance.getEntriesByType('resource')
                    .find(e => e.name.endsWith('/api/v1/status'));
                return {html_ms: nav.responseEnd, scripts_run_ms: nav.domContentLoadedEventEnd,
                        status_api_start_ms: api ? api.startTime : null,
                        status_api_end_ms: api ? api.responseEnd : null};
            }""")
            timings.append(
                {
                    "load": attempt + 1,
                    "first_render_ms": round(rendered_ms, 1),
                    **{key: None if value is None else round(value, 1) for key, value in steps.items()},
                }
            )
        # the deepest queue leads (depth 3: i % 3 == 2), as the API says
        top = page.locator("[data-test=overview-queues] tbody tr").first
        expect(top).to_have_attribute("data-queue", deepest["name"])
        expect(top.locator("[data-col=depth]")).to_have_text(str(deepest["messages"]["total"]))
    finally:
        context.close()
    with capsys.disabled():
        print(
            f"\nconsole first render with {QUEUES} queues (localhost, headless Chromium): "
            f"{json.dumps(timings)}"
        )
