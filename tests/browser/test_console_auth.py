"""The console with JWT on (API.md section 13): it asks for a token, sends it, disables what the token's role
may not do, and the broker refuses those calls anyway."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import jwt
import pytest
from playwright.sync_api import expect

from helpers import unique

pytestmark = pytest.mark.browser

SECRET = "console-test-secret-long-enough-for-hs256"


def token(role: str) -> str:
    return jwt.encode(
        {"sub": "operator", "role": role, "exp": int(time.time()) + 600}, SECRET, algorithm="HS256"
    )


@pytest.fixture
def secured(db_url: str, start_broker: Callable[..., Any]) -> Any:
    return start_broker(db_url, workers=1, extra_env={"JWT_ENABLED": "true", "JWT_SECRET": SECRET})


def dead_letter(client: httpx.Client, queue: str) -> None:
    client.post("/api/v1/push", json={"items": [{"queue": queue, "payload": 1, "transactionId": "t1"}]})
    message = client.get(f"/api/v1/pop/queue/{queue}", params={"wait": "false"}).json()["messages"][0]
    client.post(
        "/api/v1/ack",
        json={"transactionId": "t1", "partitionId": message["partitionId"], "status": "dlq", "error": "bad"},
    )


def test_the_console_asks_for_a_token_and_keeps_to_its_role(
    secured: Any, console: Callable[..., Any], api: Callable[..., httpx.Client]
) -> None:
    queue = unique("secured")
    dead_letter(api(secured, token("admin")), queue)

    page = console(secured, f"/#/dlq?queue={queue}")
    login = page.locator("[data-test=login]")
    expect(login).to_be_visible()
    page.fill("[data-test=login] textarea", "not-a-jwt")
    page.click("[data-test=login] button[type=submit]")
    expect(page.locator("[data-test=login-error]")).to_contain_text("Token decode error")

    page.fill("[data-test=login] textarea", token("read-only"))
    page.click("[data-test=login] button[type=submit]")
    expect(login).to_be_hidden()
    expect(page.locator("[data-test=role]")).to_have_text("read-only")
    row = page.locator("[data-test=dlq] tbody tr[data-transaction=t1]")
    expect(row).to_have_count(1)  # the read-only token reads the DLQ...
    replay = row.locator("[data-test=replay]")
    expect(replay).to_be_disabled()  # ...but may not replay it
    expect(replay).to_have_attribute("title", "needs the read-write role")
    # and the broker refuses the call the button would make, with the token the page holds
    status = page.evaluate(
        """async (queue) => {
        const m = (await QC.get(QC.url('/api/v1/dlq', {queue}))).messages[0];
        const r = await fetch(`/api/v1/messages/${m.partitionId}/${m.transactionId}/retry`, {method: 'POST',
            headers: {Authorization: 'Bearer ' + QC.token(), 'Content-Type': 'application/json'},
            body: '{}'});
        return r.status; }""",
        queue,
    )
    assert status == 403

    page.click("header >> text=sign out")
    expect(login).to_be_visible()
    page.fill("[data-test=login] textarea", token("read-write"))
    page.click("[data-test=login] button[type=submit]")
    expect(page.locator("[data-test=role]")).to_have_text("read-write")
    expect(replay).to_be_enabled()
    page.goto(secured.url + "/#/queue/" + queue)
    expect(page.locator("[data-view=queue] button.danger")).to_be_disabled()  # deleting a queue is admin
    page.goto(secured.url + f"/#/dlq?queue={queue}")
    page.locator("[data-test=dlq] tbody tr[data-transaction=t1] [data-test=replay]").click()
    expect(page.locator("[data-test=dlq] tbody tr")).to_have_count(0)
    assert api(secured, token("read-only")).get("/api/v1/dlq", params={"queue": queue}).json()["total"] == 0
