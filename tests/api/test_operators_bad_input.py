"""Bad input to the operators' routes: ``limit``/``offset``/``from``/``to``/``interval``/``status`` and path
UUIDs are validated before any SQL runs, answered 400 with an error naming the field, never 500 and never a
database error in a 200 body."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

PARTITION = str(uuid.uuid4())

CASES = [
    ("/api/v1/messages", {"limit": "ten"}, "limit"),
    ("/api/v1/messages", {"limit": "0"}, "limit"),
    ("/api/v1/messages", {"limit": "99999999999"}, "limit"),
    ("/api/v1/messages", {"offset": "-1"}, "offset"),
    ("/api/v1/messages", {"from": "yesterday"}, "from"),
    ("/api/v1/messages", {"to": "2024-13-45T00:00:00Z"}, "to"),
    ("/api/v1/messages", {"from": "2024-02-01T00:00:00Z", "to": "2024-01-01T00:00:00Z"}, "from"),
    ("/api/v1/messages", {"status": "done"}, "status"),
    ("/api/v1/messages", {"queue": "x" * 300}, "queue"),
    ("/api/v1/messages/not-a-uuid/t1", {}, "partitionId"),
    ("/api/v1/analytics/system-metrics", {"from": "0000-00-00"}, "from"),
    ("/api/v1/analytics/worker-metrics", {"to": "soon"}, "to"),
    ("/api/v1/analytics/queue-lag", {"from": "x"}, "from"),
    ("/api/v1/analytics/queue-ops", {"to": "12:00"}, "to"),
    ("/api/v1/analytics/queue-parked-replicas", {"from": "2024-01-02", "to": "2024-01-01"}, "from"),
    ("/api/v1/analytics/retention", {"from": "99999-01-01"}, "from"),
]


@pytest.fixture
def http(broker: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30) as client:
        yield client


@pytest.mark.parametrize(("path", "params", "field"), CASES)
def test_bad_query_or_path_is_a_400_naming_the_field(
    http: httpx.Client, path: str, params: dict[str, str], field: str
) -> None:
    response = http.get(path, params=params)
    assert response.status_code == 400, response.text
    assert field in response.json()["error"]


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("DELETE", f"/api/v1/messages/{PARTITION[:8]}/t1", None, "partitionId"),
        ("POST", "/api/v1/messages/xyz/t1/dlq", {}, "partitionId"),
        ("POST", f"/api/v1/messages/{PARTITION}/t1/dlq", {"consumerGroup": 5}, "consumerGroup"),
        ("POST", f"/api/v1/messages/{PARTITION}/t1/dlq", {"errorMessage": ["x"]}, "errorMessage"),
        ("POST", "/api/v1/messages/1234/t1/retry", {}, "partitionId"),
        ("POST", "/internal/api/notify", {"partition": "p"}, "queue"),
        ("POST", "/internal/api/notify", {"queue": "q", "partition": 3}, "partition"),
    ],
)
def test_bad_bodies_and_ids_are_400(
    http: httpx.Client, method: str, path: str, body: Any, field: str
) -> None:
    response = http.request(method, path, json=body)
    assert response.status_code == 400, response.text
    assert field in response.json()["error"]


def test_a_message_id_that_exists_nowhere_is_not_found(http: httpx.Client) -> None:
    assert http.get(f"/api/v1/messages/{PARTITION}/nothing").json() == {"error": "Message not found"}
    moved = http.post(f"/api/v1/messages/{PARTITION}/nothing/dlq").json()
    assert moved == {"success": False, "error": "Message not found"}


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/analytics/system-metrics",
        "/api/v1/analytics/worker-metrics",
        "/api/v1/analytics/queue-ops",
        "/api/v1/analytics/queue-parked-replicas",
        "/api/v1/analytics/retention",
    ],
)
def test_an_early_year_comes_back_with_four_digits(http: httpx.Client, path: str) -> None:
    """Found by the fuzzer: year 97 was echoed as ``97-07-07T...`` (``strftime("%Y")``), not a date-time."""
    response = http.get(path, params={"to": "0097-07-06T09:32:48.8-19:51"})
    assert response.status_code == 200, response.text
    window = response.json()["timeRange"]
    assert window["to"] == "0097-07-07T05:23:48.800Z"
    assert re.fullmatch(r"0097-07-0[67]T\d\d:\d\d:\d\d\.\d{3}Z", window["from"]), window


def test_a_window_that_ends_after_year_9999_comes_back_with_four_digits(http: httpx.Client) -> None:
    """The message list's window ends at the minute after ``to``: year 10000 for a ``to`` in 9999's last
    minute, which PostgreSQL's to_char wrote with five digits, not a date-time."""
    response = http.get(
        "/api/v1/messages", params={"from": "9999-12-31T00:00:00Z", "to": "9999-12-31T23:59:30Z"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["timeRange"] == {
        "from": "9999-12-31T00:00:00.000Z",
        "to": "9999-12-31T23:59:59.999Z",
    }
