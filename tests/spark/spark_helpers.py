"""Broker helpers of the Spark tests: configure, push fast, read a queue back in offset order (no Spark)."""

from __future__ import annotations

from typing import Any

import httpx


def configure(url: str, queue: str, **options: Any) -> None:
    response = httpx.post(f"{url}/api/v1/configure", json={"queue": queue, "options": options}, timeout=30)
    response.raise_for_status()


def push(url: str, queue: str, partition: str, payloads: list[Any], prefix: str, chunk: int = 2000) -> None:
    """Push ``payloads`` to one partition, in order, with transaction ids ``prefix-<index>``."""
    with httpx.Client(base_url=url, timeout=60) as client:
        for lo in range(0, len(payloads), chunk):
            items = [
                {
                    "queue": queue,
                    "partition": partition,
                    "payload": payload,
                    "transactionId": f"{prefix}-{lo + i}",
                }
                for i, payload in enumerate(payloads[lo : lo + chunk])
            ]
            response = client.post("/api/v1/push", json={"items": items})
            response.raise_for_status()
            statuses = {r.get("status") for r in response.json()}
            assert statuses == {"queued"}, response.text[:300]


def partitions(url: str, queue: str, group: str | None = None) -> list[dict[str, Any]]:
    params = {"queue": queue, **({"consumerGroup": group} if group else {})}
    response = httpx.get(f"{url}/api/v1/spark/offsets", params=params, timeout=30)
    response.raise_for_status()
    return list(response.json()["partitions"])


def total(url: str, queue: str) -> int:
    return sum(p["head"] for p in partitions(url, queue))


def read_queue(url: str, queue: str) -> dict[str, list[dict[str, Any]]]:
    """Every message of ``queue`` by partition name, in offset order (checks offsets are 1..head)."""
    result: dict[str, list[dict[str, Any]]] = {}
    with httpx.Client(base_url=url, timeout=60) as client:
        for p in partitions(url, queue):
            messages: list[dict[str, Any]] = []
            after = 0
            while after < p["head"]:
                page = client.get(
                    "/api/v1/spark/messages",
                    params={
                        "partitionId": p["partitionId"],
                        "after": after,
                        "upto": p["head"],
                        "limit": 50000,
                    },
                ).json()
                batch = page["messages"]
                assert batch, f"partition {p['partition']}: nothing after {after} below head {p['head']}"
                messages.extend(batch)
                after = batch[-1]["offset"]
            assert [m["offset"] for m in messages] == list(range(1, p["head"] + 1))
            result[p["partition"]] = messages
    return result
