"""GET /api/v1/consumer-groups/{group} and /api/v1/consumer-groups/lagging in pages (issue 44): keyset cursors
(``nextCursor`` in the detail's queue objects and the ``X-Next-Cursor`` header), pages that together hold
every row exactly once, v1's shapes otherwise, and 400 naming the parameter for a bad cursor or limit."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg

from helpers import unique

PARTITIONS = 7


def _group_with_lag(http: httpx.Client) -> tuple[str, str]:
    queue, group = unique("paged"), unique("g")
    items = [
        {"queue": queue, "partition": f"p{n}", "payload": {"n": n}} for n in range(PARTITIONS) for _ in (0, 1)
    ]
    assert all(r["status"] == "queued" for r in http.post("/api/v1/push", json={"items": items}).json())
    for n in range(PARTITIONS):  # one of each partition's two messages consumed: every cursor lags by one
        popped = http.get(
            f"/api/v1/pop/queue/{queue}/partition/p{n}",
            params={"batch": 1, "wait": "false", "consumerGroup": group, "autoAck": "true"},
        ).json()
        assert len(popped["messages"]) == 1
    return queue, group


def test_group_detail_pages_cover_every_partition_once(broker: Any) -> None:
    with httpx.Client(base_url=broker.url, timeout=30) as http:
        queue, group = _group_with_lag(http)
        whole = http.get(f"/api/v1/consumer-groups/{group}").json()
        assert list(whole) == [queue]
        assert whole[queue]["nextCursor"] is None and whole[queue]["estimated"] is True
        assert len(whole[queue]["partitions"]) == PARTITIONS
        assert {p["offsetLag"] for p in whole[queue]["partitions"]} == {1}
        # the queue's total lag, as the stats job counts it (the console shows it beside one page)
        assert broker.database_url is not None
        with psycopg.connect(broker.database_url, autocommit=True) as conn:
            conn.execute("SELECT queen.stats_refresh_v4(false)")
        assert http.get(f"/api/v1/consumer-groups/{group}").json()[queue]["offsetLag"] == PARTITIONS

        seen: list[str] = []
        cursor = None
        for _ in range(PARTITIONS):
            params = {"limit": "3", **({"cursor": cursor} if cursor else {})}
            response = http.get(f"/api/v1/consumer-groups/{group}", params=params)
            assert response.status_code == 200
            page = response.json()
            parts = page[queue]["partitions"] if page else []
            assert len(parts) <= 3
            seen += [p["partitionId"] for p in parts]
            cursor = page[queue]["nextCursor"] if page else None
            assert response.headers.get("x-next-cursor") == cursor
            if cursor is None:
                break
        assert seen == [p["partitionId"] for p in whole[queue]["partitions"]] and len(set(seen)) == PARTITIONS

        for bad in ({"cursor": "p3"}, {"limit": "0"}, {"limit": "x"}):
            answer = http.get(f"/api/v1/consumer-groups/{group}", params=bad)
            assert answer.status_code == 400 and next(iter(bad)) in answer.json()["error"], answer.text


def test_lagging_pages_cover_every_lagging_partition_once(broker: Any) -> None:
    with httpx.Client(base_url=broker.url, timeout=30) as http:
        queue, group = _group_with_lag(http)
        ids: list[str] = []
        cursor = None
        for _ in range(1000):  # other tests' groups share the broker: their rows come in their own pages
            params = {"minLagSeconds": "0", "limit": "2", **({"cursor": cursor} if cursor else {})}
            response = http.get("/api/v1/consumer-groups/lagging", params=params)
            assert response.status_code == 200
            rows = response.json()
            assert isinstance(rows, list) and len(rows) <= 2
            for row in rows:
                if row["consumer_group"] == group:
                    assert row["queue_name"] == queue and row["offset_lag"] == 1
                    ids.append(row["partition_id"])
            cursor = response.headers.get("x-next-cursor")
            if cursor is None:
                break
        assert cursor is None
        assert len(ids) == PARTITIONS and len(set(ids)) == PARTITIONS
        # nothing of this group lags by an hour yet; v1's default
        rows = http.get("/api/v1/consumer-groups/lagging").json()
        assert all(row["consumer_group"] != group for row in rows)
        for bad in ({"cursor": "not-a-cursor"}, {"limit": "10001"}):
            answer = http.get("/api/v1/consumer-groups/lagging", params=bad)
            assert answer.status_code == 400 and next(iter(bad)) in answer.json()["error"], answer.text
