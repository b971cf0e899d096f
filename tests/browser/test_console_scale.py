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


def test_first_render_of_the_overview_with_1000_queues(db_url: str, start_broker: Callable[..., Any],
                                                      chromium: Any, api: Callable[..., httpx.Client],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    own = start_broker(db_url, workers=2)
    client = api(own)
    for start in range(0, QUEUES, 250):
        items = [{"queue": f"scale-{i:04d}", "payload": {"i": i}} for i in range(start, start + 250)
                 for _ in range(1 + i % 3)]
        assert all(r["status"] == "queued" for r in client.post("/api/v1/push", json={"items": items}).json())
    listed = client.get("/api/v1/resources/queues").json()["queues"]
    assert len(listed) == QUEUES

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
                    .find(e => e.name.endsWith('/api/v1/resources/queues'));
                return {html_ms: nav.responseEnd, scripts_run_ms: nav.domContentLoadedEventEnd,
                        queues_api_start_ms: api ? api.startTime : null, queues_api_end_ms: api ? api.responseEnd : null};
            }""")
            timings.append({"load": attempt + 1, "first_render_ms": round(rendered_ms, 1),
                            **{key: None if value is None else round(value, 1) for key, value in steps.items()}})
        # the deepest queues lead (depth 3 for i % 3 == 2), as the API says
        top = page.locator("[data-test=overview-queues] tbody tr").first
        deepest = max(listed, key=lambda q: (q["messages"]["pending"], -ord(q["name"][-1])))
        expect(top.locator("[data-col=depth]")).to_have_text(str(deepest["messages"]["pending"]))
    finally:
        context.close()
    with capsys.disabled():
        print(f"\nconsole first render with {QUEUES} queues (localhost, headless Chromium): {json.dumps(timings)}")
