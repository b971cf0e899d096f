"""The console in Chromium against the session broker: each view shows what the API answers, and its buttons
change what the API then answers (replay a dead letter, seek a group, ...)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from helpers import unique, wait_until

pytestmark = pytest.mark.browser


def push(client: httpx.Client, queue: str, count: int, partition: str = "Default", prefix: str = "m") -> None:
    items = [
        {"queue": queue, "partition": partition, "payload": {"n": i}, "transactionId": f"{prefix}-{i}"}
        for i in range(count)
    ]
    results = client.post("/api/v1/push", json={"items": items}).json()
    assert [r["status"] for r in results] == ["queued"] * count, results


def pop(client: httpx.Client, queue: str, batch: int, group: str | None = None) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"batch": batch, "wait": "false"}
    if group:
        params["consumerGroup"] = group
    answer = client.get(f"/api/v1/pop/queue/{queue}", params=params)
    return list(answer.json()["messages"]) if answer.content else []


def refresh_stats(client: httpx.Client) -> None:
    """Recompute the stats tables now (the console's listings read them; the stats job would within
    STATS_INTERVAL_MS)."""
    answer = client.post("/api/v1/stats/refresh")
    assert answer.status_code == 200 and not answer.json().get("skipped"), answer.text


def queue_row(api_client: httpx.Client, queue: str) -> dict[str, Any]:
    queues = api_client.get("/api/v1/resources/queues", params={"limit": 10_000}).json()["queues"]
    return next(q for q in queues if q["name"] == queue)


def test_the_overview_lists_a_queue_with_its_depth(
    broker: Any, console: Callable[..., Any], api: Callable[..., httpx.Client]
) -> None:
    client = api(broker)
    queue = unique("overview")
    push(client, queue, 42)
    refresh_stats(client)
    listed = queue_row(client, queue)["messages"]
    assert (listed["total"], listed["pending"], listed["processing"]) == (42, 42, 0)
    deepest = [q["name"] for q in client.get("/api/v1/status").json()["queues"]]
    assert queue in deepest[:25]  # on the overview's first page

    page = console(broker, "/")
    row = page.locator(f"[data-test=overview-queues] tr[data-queue='{queue}']")
    expect(row.locator("[data-col=depth]")).to_have_text("42")
    expect(row.locator("[data-col=pending]")).to_have_text("42")
    expect(row.locator("[data-col=inflight]")).to_have_text("0")
    expect(row.locator("[data-col=dlq]")).to_have_text(str(queue_row(client, queue)["deadLetter"]))
    expect(page.locator("[data-test=db-health]")).to_have_text("connected")
    overview = client.get("/api/v1/resources/overview").json()
    expect(page.locator("[data-test=queue-count]")).to_have_text(f"{overview['queues']:,}")
    assert page.console_errors == []


def test_queue_search_sort_and_detail(
    broker: Any, console: Callable[..., Any], api: Callable[..., httpx.Client]
) -> None:
    client = api(broker)
    prefix = unique("sort")
    depths = {f"{prefix}-a": 3, f"{prefix}-b": 7, f"{prefix}-c": 5}
    for name, depth in depths.items():
        push(client, name, depth)
    consumed = pop(client, f"{prefix}-b", 2, group="billing")
    for message in consumed:
        client.post(
            "/api/v1/ack",
            json={
                "transactionId": message["transactionId"],
                "partitionId": message["partitionId"],
                "status": "completed",
                "consumerGroup": "billing",
            },
        )

    refresh_stats(client)
    page = console(broker, "/#/queues")
    page.fill("[data-test=queue-search]", prefix)
    rows = page.locator("[data-test=queues] tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.locator("td:first-child")).to_have_text([f"{prefix}-b", f"{prefix}-c", f"{prefix}-a"])
    page.select_option("[data-test=queue-sort]", "name")
    expect(rows.locator("td:first-child")).to_have_text([f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"])

    rows.filter(has_text=f"{prefix}-b").locator("a").click()
    expect(page.locator("[data-view=queue] h1")).to_have_text(f"Queue {prefix}-b")
    detail = client.get(f"/api/v1/resources/queues/{prefix}-b").json()
    expect(page.locator("[data-test=total-total]")).to_have_text(str(detail["totals"]["total"]))
    expect(page.locator("[data-test=total-pending]")).to_have_text(str(detail["totals"]["pending"]))
    expect(page.locator("[data-test=partitions] tbody tr")).to_have_count(len(detail["partitions"]))
    group_detail = client.get("/api/v1/consumer-groups/billing").json()[f"{prefix}-b"]["partitions"]
    expected_lag = sum(int(p["offsetLag"]) for p in group_detail)
    assert expected_lag == 5
    expect(page.locator("[data-test=queue-groups] tr[data-group=billing] [data-col=lag]")).to_have_text(
        str(expected_lag)
    )

    # another queue in the same view (the fragment changes, the component stays): its own numbers
    page.evaluate("(name) => { location.hash = '#/queue/' + name; }", f"{prefix}-a")
    expect(page.locator("[data-view=queue] h1")).to_have_text(f"Queue {prefix}-a")
    expect(page.locator("[data-test=total-total]")).to_have_text(
        str(client.get(f"/api/v1/resources/queues/{prefix}-a").json()["totals"]["total"])
    )


def test_replay_a_dead_letter(
    broker: Any, console: Callable[..., Any], api: Callable[..., httpx.Client]
) -> None:
    client = api(broker)
    queue = unique("dlq")
    push(client, queue, 3)
    messages = pop(client, queue, 3, group="workers")
    for message in messages[:2]:
        client.post(
            "/api/v1/ack",
            json={
                "transactionId": message["transactionId"],
                "status": "dlq",
                "partitionId": message["partitionId"],
                "consumerGroup": "workers",
                "error": f"boom {message['transactionId']}",
            },
        )
    client.post(
        "/api/v1/ack",
        json={
            "transactionId": messages[2]["transactionId"],
            "status": "completed",
            "partitionId": messages[2]["partitionId"],
            "consumerGroup": "workers",
        },
    )
    listed = client.get("/api/v1/dlq", params={"queue": queue}).json()
    assert listed["total"] == 2

    page = console(broker, f"/#/dlq?queue={queue}")
    rows = page.locator("[data-test=dlq] tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator("[data-test=dlq-total]")).to_have_text("2 dead letters")
    expect(rows.filter(has_text="m-0").locator("td.err")).to_have_text("boom m-0")

    rows.filter(has_text="m-0").locator("[data-test=replay]").click()
    expect(page.locator("[data-test=toast]").first).to_have_text("1 message(s) replayed")
    expect(rows).to_have_count(1)
    assert client.get("/api/v1/dlq", params={"queue": queue}).json()["total"] == 1
    again = pop(client, queue, 10, group="workers")
    assert [m["transactionId"] for m in again] == ["m-0"]

    # replay the rest by selection
    client.post(
        "/api/v1/ack",
        json={
            "transactionId": "m-0",
            "partitionId": again[0]["partitionId"],
            "status": "completed",
            "consumerGroup": "workers",
        },
    )
    page.locator("[data-test=dlq] thead input[type=checkbox]").check()
    expect(page.locator("[data-test=replay-selected]")).to_have_text("replay selected (1)")
    page.locator("[data-test=replay-selected]").click()
    expect(rows).to_have_count(0)
    assert client.get("/api/v1/dlq", params={"queue": queue}).json()["total"] == 0


def test_seek_a_consumer_group_to_the_end(
    broker: Any, console: Callable[..., Any], api: Callable[..., httpx.Client]
) -> None:
    client = api(broker)
    queue, group = unique("seek"), unique("grp")
    push(client, queue, 10)
    for message in pop(client, queue, 3, group=group):
        client.post(
            "/api/v1/ack",
            json={
                "transactionId": message["transactionId"],
                "status": "completed",
                "partitionId": message["partitionId"],
                "consumerGroup": group,
            },
        )

    def lag() -> int:
        return sum(
            int(p["offsetLag"])
            for p in client.get(f"/api/v1/consumer-groups/{group}").json()[queue]["partitions"]
        )

    assert lag() == 7
    page = console(broker, f"/#/group/{group}")
    card = page.locator(f"[data-view=group] .card[data-queue='{queue}']")
    expect(card.locator("[data-test=group-lag]")).to_have_text("7")
    page.once("dialog", lambda dialog: dialog.accept())
    card.locator("[data-test=seek-end]").click()
    expect(card.locator("[data-test=group-lag]")).to_have_text("0")
    assert lag() == 0
    assert pop(client, queue, 10, group=group) == []

    # back to a time before the first message: the whole queue is unconsumed again
    before = client.get("/api/v1/messages", params={"queue": queue, "limit": 10}).json()["messages"][-1][
        "createdAt"
    ]
    local = page.evaluate(
        """(iso) => { const d = new Date(Date.parse(iso) - 60000);
        return new Date(d - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19); }""",
        before,
    )
    card.locator("[data-test=seek-time]").fill(local)
    page.once("dialog", lambda dialog: dialog.accept())
    card.locator("[data-test=seek-time-go]").click()
    expect(card.locator("[data-test=group-lag]")).to_have_text("10")
    assert lag() == 10


def test_traces_by_name(broker: Any, console: Callable[..., Any], api: Callable[..., httpx.Client]) -> None:
    client = api(broker)
    queue, name = unique("traced"), unique("order")
    push(client, queue, 2)
    for message in pop(client, queue, 2):
        client.post(
            "/api/v1/traces",
            json={
                "transactionId": message["transactionId"],
                "partitionId": message["partitionId"],
                "eventType": "step",
                "data": {"seen": message["transactionId"]},
                "traceNames": [name],
            },
        )
    traced = client.get(f"/api/v1/traces/by-name/{name}").json()
    assert traced["total"] == 2

    page = console(broker, "/#/traces")
    page.locator("[data-test=trace-names] a", has_text=name).click()
    rows = page.locator("[data-test=traces] tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.locator("td:nth-child(5)")).to_have_text([re.compile(r'"seen":"m-[01]"')] * 2)
    expect(page).to_have_url(re.compile(f"#/traces/{name}$"))


def test_system_shows_the_workers_numbers(
    broker: Any, console: Callable[..., Any], api: Callable[..., httpx.Client]
) -> None:
    metrics = api(broker).get("/metrics").json()
    page = console(broker, "/#/system")
    rows = page.locator("[data-test=fusion] tbody tr td:first-child")
    expect(rows).to_have_text(list(metrics["fusion"]))
    expect(page.locator("[data-test=pool-size]")).to_have_text(re.compile(r"^\d+$"))


def test_browse_filter_open_and_delete_a_message(
    broker: Any, console: Callable[..., Any], api: Callable[..., httpx.Client]
) -> None:
    client = api(broker)
    queue = unique("browse")
    payload = {"order": {"id": 7, "lines": [{"sku": "a-1", "qty": 2}]}, "note": "é"}
    items = [
        {"queue": queue, "partition": f"p{i % 2}", "payload": {**payload, "n": i}, "transactionId": f"t{i}"}
        for i in range(3)
    ]
    assert all(r["status"] == "queued" for r in client.post("/api/v1/push", json={"items": items}).json())
    first = pop(client, queue, 1)[0]
    client.post(
        "/api/v1/ack",
        json={
            "transactionId": first["transactionId"],
            "partitionId": first["partitionId"],
            "status": "completed",
        },
    )
    client.post(
        "/api/v1/traces",
        json={
            "transactionId": "t2",
            "partitionId": client.get(
                "/api/v1/messages", params={"queue": queue, "partition": "p0", "limit": 10}
            ).json()["messages"][0]["partitionId"],
            "data": {"step": "checked"},
            "traceNames": ["browse-trace"],
        },
    )
    listed = client.get("/api/v1/messages", params={"queue": queue}).json()
    completed = client.get("/api/v1/messages", params={"queue": queue, "status": "completed"}).json()
    assert (listed["total"], completed["total"]) == (3, 1)

    page = console(broker, f"/#/messages?queue={queue}")
    rows = page.locator("[data-test=messages] tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator("[data-test=messages-total]")).to_have_text("1–3 of 3")
    page.select_option("[data-test=message-filters] select[name=status]", "completed")
    page.click("[data-test=message-filters] button[type=submit]")
    expect(rows).to_have_count(1)
    expect(rows.locator("a")).to_have_text(completed["messages"][0]["transactionId"])
    page.select_option("[data-test=message-filters] select[name=status]", "")
    page.fill("[data-test=message-filters] input[name=partition]", "p0")
    page.click("[data-test=message-filters] button[type=submit]")
    expect(rows).to_have_count(2)  # t0 and t2

    rows.filter(has_text="t2").locator("a").click()
    expect(page.locator("[data-view=message] h1")).to_have_text("Message t2")
    t2_partition = next(m["partitionId"] for m in listed["messages"] if m["transactionId"] == "t2")
    stored = client.get(f"/api/v1/messages/{t2_partition}/t2").json()
    expect(page.locator("[data-test=payload]")).to_have_text(
        json.dumps(stored["payload"], indent=2, ensure_ascii=False)
    )
    expect(page.locator("[data-test=message-status]")).to_have_text(stored["status"])
    expect(page.locator("[data-test=message-traces] tbody tr")).to_have_count(1)
    expect(page.locator("[data-test=message-traces] tbody tr")).to_contain_text('"step":"checked"')

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("[data-test=delete]")
    expect(page.locator("[data-test=message-deleted]")).to_be_visible()
    gone = client.get(f"/api/v1/messages/{stored['partitionId']}/t2").json()
    assert gone == {"error": "Message not found"}
    assert client.get("/api/v1/messages", params={"queue": queue}).json()["total"] == 2


def test_toggle_maintenance(
    db_url: str,
    start_broker: Callable[..., Any],
    console: Callable[..., Any],
    api: Callable[..., httpx.Client],
) -> None:
    own = start_broker(db_url, workers=2)  # its own broker: maintenance is global to a database
    client = api(own)
    queue = unique("maint")
    page = console(own, "/#/system")
    push_button = page.locator("[data-test=maintenance-push]")
    expect(push_button).to_have_text("push maintenance: off (turn on)")

    page.once("dialog", lambda dialog: dialog.accept())
    push_button.click()
    expect(push_button).to_have_text("push maintenance: ON (turn off)")
    assert client.get("/api/v1/system/maintenance").json()["maintenanceMode"] is True
    pushed = client.post(
        "/api/v1/push", json={"items": [{"queue": queue, "payload": 1, "transactionId": "b1"}]}
    )
    assert pushed.json()[0]["status"] == "buffered"

    page.once("dialog", lambda dialog: dialog.accept())
    push_button.click()
    expect(push_button).to_have_text("push maintenance: off (turn on)")
    assert client.get("/api/v1/system/maintenance").json()["maintenanceMode"] is False
    wait_until(
        lambda: [m["transactionId"] for m in pop(client, queue, 10)] == ["b1"],
        timeout_s=30,
        message="the buffered push replayed",
    )

    pop_button = page.locator("[data-test=maintenance-pop]")
    overview = console(own, "/")  # every page sees the switch through /health
    banner = overview.locator("[data-test=maintenance-banner]")
    expect(banner).to_be_hidden()
    page.once("dialog", lambda dialog: dialog.accept())
    pop_button.click()
    expect(pop_button).to_have_text("pop maintenance: ON (turn off)")
    assert client.get("/api/v1/system/maintenance/pop").json()["popMaintenanceMode"] is True
    # the overview reads /health once per refresh period (5 s by default): wait longer than one period
    expect(banner).to_have_text("Maintenance mode: pops answer 204", timeout=15_000)
    page.once("dialog", lambda dialog: dialog.accept())
    pop_button.click()
    expect(pop_button).to_have_text("pop maintenance: off (turn on)")
    assert client.get("/api/v1/system/maintenance/pop").json()["popMaintenanceMode"] is False


def test_replay_from_the_message_view_and_delete_a_group(
    broker: Any, console: Callable[..., Any], api: Callable[..., httpx.Client]
) -> None:
    client = api(broker)
    queue, group = unique("msgdlq"), unique("grp")
    push(client, queue, 2)
    first, second = pop(client, queue, 2, group=group)
    client.post(
        "/api/v1/ack",
        json={
            "transactionId": "m-0",
            "partitionId": first["partitionId"],
            "status": "dlq",
            "consumerGroup": group,
            "error": "poisoned",
        },
    )
    client.post(
        "/api/v1/ack",
        json={
            "transactionId": "m-1",
            "partitionId": second["partitionId"],
            "status": "completed",
            "consumerGroup": group,
        },
    )
    assert client.get("/api/v1/dlq", params={"queue": queue}).json()["total"] == 1

    page = console(broker, f"/#/message/{first['partitionId']}/m-0")
    expect(page.locator("[data-test=message-details]")).to_contain_text("poisoned")
    page.click("[data-test=retry]")
    expect(page.locator("[data-test=toast]").first).to_have_text(
        "message m-0 replayed from the dead-letter queue"
    )
    assert client.get("/api/v1/dlq", params={"queue": queue}).json()["total"] == 0
    assert [m["transactionId"] for m in pop(client, queue, 10, group=group)] == ["m-0"]

    page.goto(broker.url + f"/#/group/{group}")
    expect(page.locator(f"[data-view=group] .card[data-queue='{queue}']")).to_be_visible()
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("[data-view=group] .toolbar >> text=delete group")
    expect(page).to_have_url(re.compile("#/groups$"))
    assert client.get(f"/api/v1/consumer-groups/{group}").json() == {}  # no such group: {} (API.md)
    listed = client.get("/api/v1/consumer-groups")
    assert group not in {g["name"] for g in (listed.json() if listed.content else [])}
