"""The Spark sink's pipelined commit over HTTP: the commit answers "pending" and the broker applies the batch
by itself right after (services/spark_apply.py); a flush applies what is left; bad modes answer 400."""

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
    response = http.post(
        "/api/v1/spark/rows",
        json={
            "queryId": query,
            "batchId": batch,
            "token": token,
            "queue": queue,
            "data": texts,
            "partitions": ["p"] * len(texts),
            "transactionIds": [f"{token}-{i}" for i in range(len(texts))],
        },
    )
    assert response.status_code == 200, response.text
    assert response.json()["staged"] == len(texts)


def head(http: httpx.Client, queue: str) -> int:
    response = http.get("/api/v1/spark/offsets", params={"queue": queue})
    return sum(p["head"] for p in response.json().get("partitions", [])) if response.status_code == 200 else 0


def test_pipelined_commit_is_applied_by_the_broker_after_it_answers(http: httpx.Client, broker: Any) -> None:
    query, queue = unique("pq"), unique("pipelined")
    stage(http, query, 0, "t0", queue, ['{"n": 1}', '{"n": 2}'])
    commit = http.post(
        "/api/v1/spark/commit",
        json={"queryId": query, "batchId": 0, "tokens": ["t0"], "counts": [2], "mode": "pipelined"},
    )
    assert commit.status_code == 200, commit.text
    assert (commit.json()["pending"], commit.json()["pushed"]) == (True, 0)
    wait_until(lambda: head(http, queue) == 2, message="the broker applying the pending batch")
    with psycopg.connect(broker.database_url) as conn:
        row = conn.execute(
            "SELECT pushed, pending_tokens FROM queen.spark_sink_batches WHERE query_id = %s", (query,)
        ).fetchone()
        assert row == (2, None)
        left = conn.execute("SELECT count(*) FROM queen.spark_staging_rows WHERE query_id = %s", (query,))
        assert left.fetchone() == (0,)
    # replaying the batch pushes nothing; a flush finds nothing pending
    stage(http, query, 0, "t0-replay", queue, ['{"n": 1}'])
    again = http.post(
        "/api/v1/spark/commit",
        json={"queryId": query, "batchId": 0, "tokens": ["t0-replay"], "counts": [1], "mode": "pipelined"},
    )
    assert again.json()["duplicate"] is True
    flushed = http.post("/api/v1/spark/flush", json={"queryId": query})
    assert flushed.status_code == 200 and flushed.json()["applied"] == 0
    assert head(http, queue) == 2


def test_flush_applies_a_batch_recorded_but_not_applied(http: httpx.Client, broker: Any) -> None:
    query, queue = unique("pq"), unique("pipelined")
    stage(http, query, 5, "t5", queue, ['"a"', '"b"', '"c"'])
    with psycopg.connect(broker.database_url, autocommit=True) as conn:  # as a broker killed after recording
        conn.execute(
            "INSERT INTO queen.spark_sink_batches (query_id, batch_id, pushed, pending_tokens) "
            "VALUES (%s, 5, 0, ARRAY['t5'])",
            (query,),
        )
    flushed = http.post("/api/v1/spark/flush", json={"queryId": query})
    assert flushed.status_code == 200, flushed.text
    assert (flushed.json()["applied"], flushed.json()["pushed"]) == (1, 3)
    assert head(http, queue) == 3


@pytest.mark.parametrize(
    ("body", "word"),
    [
        ({"queryId": "q", "batchId": 0, "tokens": ["t"], "counts": [1], "mode": "later"}, "mode"),
        ({"queryId": "q", "batchId": 0, "tokens": ["t"], "mode": "pipelined"}, "counts"),
    ],
)
def test_bad_commit_modes_answer_400(http: httpx.Client, body: dict[str, Any], word: str) -> None:
    response = http.post("/api/v1/spark/commit", json=body)
    assert response.status_code == 400 and word in response.json()["error"]


def test_flush_needs_a_query_id(http: httpx.Client) -> None:
    response = http.post("/api/v1/spark/flush", json={})
    assert response.status_code == 400 and "queryId" in response.json()["error"]


def push(
    http: httpx.Client, query: str, batch: int, token: str, queue: str, texts: list[str], **extra: Any
) -> httpx.Response:
    body = {
        "queryId": query,
        "batchId": batch,
        "task": 0,
        "token": token,
        "queue": queue,
        "partitions": ["p"],
        "partitionIndexes": [0] * len(texts),
        "transactionIds": [f"x{i}" for i in range(len(texts))],
        "data": texts,
        **extra,
    }
    return http.post("/api/v1/spark/push", json=body)


def test_direct_push_then_record_then_a_replay_pushes_nothing(http: httpx.Client) -> None:
    query, queue = unique("dq"), unique("direct")
    first = push(http, query, 0, "a0", queue, ['{"n": 1}', '{"n": 2}'])
    assert first.status_code == 200, first.text
    assert (first.json()["pushed"], first.json()["committed"]) == (2, False)
    assert head(http, queue) == 2  # visible before the batch is recorded
    retry = push(http, query, 0, "a1", queue, ['{"n": 1}', '{"n": 2}', '{"n": 3}'])
    assert (retry.json()["pushed"], retry.json()["duplicates"]) == (1, 2)
    recorded = http.post("/api/v1/spark/commit", json={"queryId": query, "batchId": 0, "mode": "direct"})
    assert recorded.status_code == 200, recorded.text
    assert (recorded.json()["duplicate"], recorded.json()["pushed"]) == (False, 3)
    replay = push(http, query, 0, "a2", queue, ['{"n": 9}'], transactionIds=["x9"])
    assert (replay.json()["committed"], replay.json()["pushed"]) == (True, 0)
    assert head(http, queue) == 3


@pytest.mark.parametrize(
    ("extra", "word"),
    [
        ({"partitionIndexes": [1]}, "partitionIndexes"),
        ({"partitions": ["p", "p"]}, "repeat"),
        ({"partitions": []}, "partitions"),
        ({"task": -1}, "task"),
        ({"data": [{"n": 1}]}, "data"),
        ({"data": ["{oops"]}, "JSON"),
    ],
)
def test_bad_direct_pushes_answer_400(http: httpx.Client, extra: dict[str, Any], word: str) -> None:
    response = push(http, unique("dq"), 0, "t", unique("direct"), ['{"n": 1}'], **extra)
    assert response.status_code == 400 and word in response.json()["error"], response.text


def test_range_read_answers_payload_bytes_after_a_json_header_when_asked(http: httpx.Client) -> None:
    import orjson

    queue = unique("binread")
    payloads = [{"n": 1, "t": 'é"q'}, [1, 2], "text", None]
    pushed = http.post(
        "/api/v1/push", json={"items": [{"queue": queue, "partition": "p", "payload": p} for p in payloads]}
    )
    assert pushed.status_code == 200, pushed.text
    pid = http.get("/api/v1/spark/offsets", params={"queue": queue}).json()["partitions"][0]["partitionId"]
    request = {"ranges": [{"partitionId": pid, "after": 0, "upto": 4}]}
    as_json = http.post("/api/v1/spark/read", json=request).json()["ranges"][0]
    raw = http.post("/api/v1/spark/read", json=request, headers={"Accept": "application/octet-stream"})
    assert raw.headers["content-type"] == "application/octet-stream"
    size = int.from_bytes(raw.content[:4], "big")
    block = orjson.loads(raw.content[4 : 4 + size])["ranges"][0]
    blob = raw.content[4 + size :]
    texts, position = [], 0
    for length in block.pop("dataBytes"):
        texts.append(blob[position : position + length].decode())
        position += length
    assert position == len(blob)
    assert texts == as_json.pop("data")
    assert [orjson.loads(t) for t in texts] == payloads
    assert block == as_json


def test_range_read_leaves_out_the_fields_not_asked_for(http: httpx.Client) -> None:
    import orjson

    queue = unique("colread")
    items = [
        {"queue": queue, "partition": "p", "payload": {"n": i}, "transactionId": f"c{i}"} for i in range(3)
    ]
    assert http.post("/api/v1/push", json={"items": items}).status_code == 200
    pid = http.get("/api/v1/spark/offsets", params={"queue": queue}).json()["partitions"][0]["partitionId"]
    ranges = [{"partitionId": pid, "after": 0, "upto": 3}]
    identity = {"index", "partitionId", "partition", "queue", "offsets"}
    as_json = http.post("/api/v1/spark/read", json={"ranges": ranges, "columns": ["traceIds"]}).json()
    assert set(as_json["ranges"][0]) == identity | {"traceIds"}
    raw = http.post(
        "/api/v1/spark/read",
        json={"ranges": ranges, "columns": ["transactionIds"]},
        headers={"Accept": "application/octet-stream"},
    )
    size = int.from_bytes(raw.content[:4], "big")
    block = orjson.loads(raw.content[4 : 4 + size])["ranges"][0]
    assert set(block) == identity | {"transactionIds"} and raw.content[4 + size :] == b""
    assert (block["offsets"], block["transactionIds"]) == ([1, 2, 3], ["c0", "c1", "c2"])
    for bad in (["payload"], "data", None):
        response = http.post("/api/v1/spark/read", json={"ranges": ranges, "columns": bad})
        assert response.status_code == 400 and "columns" in response.json()["error"], response.text


def binary_push(
    http: httpx.Client, query: str, queue: str, texts: list[str | None], **extra: Any
) -> httpx.Response:
    import orjson

    header = orjson.dumps(
        {
            "queryId": query,
            "batchId": 0,
            "task": 0,
            "token": "b0",
            "queue": queue,
            "partitions": ["p"],
            "partitionIndexes": [0] * len(texts),
            "transactionIds": [f"x{i}" for i in range(len(texts))],
            "dataBytes": [-1 if t is None else len(t.encode()) for t in texts],
            **extra,
        }
    )
    blob = b"".join(t.encode() for t in texts if t is not None)
    return http.post(
        "/api/v1/spark/push",
        content=len(header).to_bytes(4, "big") + header + blob,
        headers={"Content-Type": "application/octet-stream"},
    )


def test_a_binary_direct_push_passes_the_payload_bytes_through(http: httpx.Client) -> None:
    queue = unique("binpush")
    texts = ['{"n": 1, "t": "é\\"q"}', None, "[1, 2]"]
    response = binary_push(http, unique("dq"), queue, texts)
    assert response.status_code == 200, response.text
    assert response.json()["pushed"] == 3
    pid = http.get("/api/v1/spark/offsets", params={"queue": queue}).json()["partitions"][0]["partitionId"]
    page = http.get("/api/v1/spark/messages", params={"partitionId": pid, "after": 0, "upto": 3}).json()
    assert [m["data"] for m in page["messages"]] == [{"n": 1, "t": 'é"q'}, None, [1, 2]]
    assert [m["transactionId"] for m in page["messages"]] == ["x0", "x1", "x2"]


@pytest.mark.parametrize(
    ("texts", "extra", "word"),
    [
        (["{oops"], {}, "JSON"),
        (['"a"'], {"dataBytes": [5]}, "lengths"),
        (['"a"'], {"dataBytes": ["3"]}, "dataBytes"),
    ],
)
def test_bad_binary_pushes_answer_400(
    http: httpx.Client, texts: list[str], extra: dict[str, Any], word: str
) -> None:
    response = binary_push(http, unique("dq"), unique("binpush"), texts, **extra)
    assert response.status_code == 400 and word in response.json()["error"], response.text


def test_a_binary_body_without_its_header_length_answers_400(http: httpx.Client) -> None:
    response = http.post(
        "/api/v1/spark/push",
        content=b"\x00\x00\xff\xff{}",
        headers={"Content-Type": "application/octet-stream"},
    )
    assert response.status_code == 400 and "4-byte" in response.json()["error"]
