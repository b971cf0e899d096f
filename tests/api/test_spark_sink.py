"""The Spark sink's pipelined commit over HTTP: the commit answers "pending" and the broker applies the batch by
itself right after (services/spark_apply.py); a flush applies what is left; bad modes answer 400."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from helpers import unique, wait_until


@pytest.fixture(scope="module")
def http(broker: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30) as client:
        yield client


def stage(http: httpx.Client, query: str, batch: int, token: str, queue: str, texts: list[str]) -> None:
    response = http.post("/api/v1/spark/rows", json={
        "queryId": query, "batchId": batch, "token": token, "queue": queue, "data": texts,
        "partitions": ["p"] * len(texts), "transactionIds": [f"{token}-{i}" for i in range(len(texts))]})
    assert response.status_code == 200, response.text
    assert response.json()["staged"] == len(texts)


def head(http: httpx.Client, queue: str) -> int:
    response = http.get("/api/v1/spark/offsets", params={"queue": queue})
    return sum(p["head"] for p in response.json().get("partitions", [])) if response.status_code == 200 else 0


def test_pipelined_commit_is_applied_by_the_broker_after_it_answers(http: httpx.Client, broker: Any) -> None:
    query, queue = unique("pq"), unique("pipelined")
    stage(http, query, 0, "t0", queue, ['{"n": 1}', '{"n": 2}'])
    commit = http.post("/api/v1/spark/commit", json={"queryId": query, "batchId": 0, "tokens": ["t0"],
                                                     "counts": [2], "mode": "pipelined"})
    assert commit.status_code == 200, commit.text
    assert (commit.json()["pending"], commit.json()["pushed"]) == (True, 0)
    wait_until(lambda: head(http, queue) == 2, message="the broker applying the pending batch")
    with psycopg.connect(broker.database_url) as conn:
        row = conn.execute("SELECT pushed, pending_tokens FROM queen.spark_sink_batches WHERE query_id = %s",
                           (query,)).fetchone()
        assert row == (2, None)
        left = conn.execute("SELECT count(*) FROM queen.spark_staging_rows WHERE query_id = %s", (query,))
        assert left.fetchone() == (0,)
    # replaying the batch pushes nothing; a flush finds nothing pending
    stage(http, query, 0, "t0-replay", queue, ['{"n": 1}'])
    again = http.post("/api/v1/spark/commit", json={"queryId": query, "batchId": 0, "tokens": ["t0-replay"],
                                                    "counts": [1], "mode": "pipelined"})
    assert again.json()["duplicate"] is True
    flushed = http.post("/api/v1/spark/flush", json={"queryId": query})
    assert flushed.status_code == 200 and flushed.json()["applied"] == 0
    assert head(http, queue) == 2


def test_flush_applies_a_batch_recorded_but_not_applied(http: httpx.Client, broker: Any) -> None:
    query, queue = unique("pq"), unique("pipelined")
    stage(http, query, 5, "t5", queue, ['"a"', '"b"', '"c"'])
    with psycopg.connect(broker.database_url, autocommit=True) as conn:  # as a broker killed after recording
        conn.execute("INSERT INTO queen.spark_sink_batches (query_id, batch_id, pushed, pending_tokens) "
                     "VALUES (%s, 5, 0, ARRAY['t5'])", (query,))
    flushed = http.post("/api/v1/spark/flush", json={"queryId": query})
    assert flushed.status_code == 200, flushed.text
    assert (flushed.json()["applied"], flushed.json()["pushed"]) == (1, 3)
    assert head(http, queue) == 3


@pytest.mark.parametrize(("body", "word"), [
    ({"queryId": "q", "batchId": 0, "tokens": ["t"], "counts": [1], "mode": "later"}, "mode"),
    ({"queryId": "q", "batchId": 0, "tokens": ["t"], "mode": "pipelined"}, "counts"),
])
def test_bad_commit_modes_answer_400(http: httpx.Client, body: dict[str, Any], word: str) -> None:
    response = http.post("/api/v1/spark/commit", json=body)
    assert response.status_code == 400 and word in response.json()["error"]


def test_flush_needs_a_query_id(http: httpx.Client) -> None:
    response = http.post("/api/v1/spark/flush", json={})
    assert response.status_code == 400 and "queryId" in response.json()["error"]
