"""The benchmark's wrk scripts (src/queenpy/bench/lua), run by LuaJIT 2.1 (wrk's Lua) through lupa.

The scripts are assembled exactly as the suite hands them to wrk (``render_script``). Only wrk's own table
is provided here: ``wrk.format`` returns ``"<method> <path>\\n<body>"`` so a follow-up request can be read
back. The responses are what the broker answers (compact JSON), and the same documents with spaces, which
the helpers must read through their pattern fallback.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from queenpy.bench.wrk import render_script

luajit = pytest.importorskip("lupa.luajit21", reason="lupa (a test dependency) ships LuaJIT 2.1, wrk's Lua")

WRK_TABLE = """
wrk = {headers = {}}
function wrk.format(method, path, headers, body) return method .. " " .. path .. "\\n" .. (body or "") end
"""

COMPACT = {"separators": (",", ":")}
SPACED = {"indent": 2, "separators": (", ", " : ")}
# consume.lua's parameters for pops followed by POST /ack/batch, in queue mode
ACK_CONSUMER = {
    "queue": "q",
    "groups": [""],
    "batch": 100,
    "mode": "ack",
    "timeout_ms": 1000,
    "target": "",
    "payload": "{}",
}


def load(name: str, params: dict[str, Any], tmp_path: Path) -> Any:
    runtime = luajit.LuaRuntime()
    assert runtime.eval("jit.version").startswith("LuaJIT 2.1")
    runtime.execute(WRK_TABLE)
    runtime.execute(render_script(name, params, tmp_path).read_text())
    return runtime


def pop_response(n: int, **dump: Any) -> tuple[str, list[str], str, str]:
    partition_id, lease = str(uuid.uuid4()), str(uuid.uuid4())
    ids = [str(uuid.uuid4()) for _ in range(n)]
    body = {
        "success": True,
        "queue": "q",
        "partition": "p7",
        "partitionId": partition_id,
        "leaseId": lease,
        "consumerGroup": "__QUEUE_MODE__",
        "partitionsClaimed": 1,
        "messages": [
            {
                "id": i,
                "transactionId": i,
                "traceId": None,
                "data": {"kind": "bench"},
                "partitionId": partition_id,
                "partition": "p7",
                "offset": k + 1,
                "leaseId": lease,
                "consumerGroup": "__QUEUE_MODE__",
            }
            for k, i in enumerate(ids)
        ],
    }
    return json.dumps(body, **dump), ids, partition_id, lease


@pytest.mark.parametrize("dump", [COMPACT, SPACED], ids=["compact", "spaced"])
def test_helpers_read_compact_and_spaced_json(dump: dict[str, Any], tmp_path: Path) -> None:
    lua = load(
        "push",
        {"queue": "q", "partitions": 1, "per_request": 3, "payload": "{}", "seed": 1, "rate_per_thread": 0},
        tmp_path,
    )
    results = json.dumps(
        [
            {"index": 0, "status": "queued", "transaction_id": "a"},
            {"index": 1, "status": "duplicate", "transaction_id": "b"},
            {"index": 2, "status": "queued", "transaction_id": "c"},
        ],
        **dump,
    )
    assert lua.globals().count_json(results, "status", '"queued"') == 2
    assert lua.globals().count_json(results, "status", '"failed"') == 0
    assert lua.globals().count_json(results, "missing", "true") == 0
    assert list(lua.globals().json_strings(results, "transaction_id").values()) == ["a", "b", "c"]
    assert len(lua.globals().json_strings(results, "missing")) == 0

    lua.globals().response(200, None, results)
    assert (lua.globals().queued, lua.globals().not_queued) == (2, 1)


@pytest.mark.parametrize("dump", [COMPACT, SPACED], ids=["compact", "spaced"])
def test_consumer_acks_every_popped_message(dump: dict[str, Any], tmp_path: Path) -> None:
    lua = load("consume", ACK_CONSUMER, tmp_path)
    g = lua.globals()
    g.init(None)
    body, ids, partition_id, lease = pop_response(60, **dump)

    g.response(200, None, body)
    assert (g.pops, g.delivered, g.parse_errors) == (1, 60, 0)
    request = g.dequeue()
    head, ack_body = request.split("\n", 1)
    assert head == "POST /api/v1/ack/batch"
    ack = json.loads(ack_body)
    assert ack["consumerGroup"] == "__QUEUE_MODE__"
    assert [a["transactionId"] for a in ack["acknowledgments"]] == ids
    assert {(a["partitionId"], a["leaseId"], a["status"]) for a in ack["acknowledgments"]} == {
        (partition_id, lease, "completed")
    }
    assert g.dequeue() is None

    answer = [{"index": k, "transactionId": i, "success": k != 5, "error": None} for k, i in enumerate(ids)]
    g.response(200, None, json.dumps(answer, **dump))
    assert (g.acked, g.ack_failed) == (59, 1)


def test_a_pop_of_two_partitions_is_a_parse_error_not_a_wrong_ack(tmp_path: Path) -> None:
    lua = load("consume", ACK_CONSUMER, tmp_path)
    g = lua.globals()
    g.init(None)
    body, _, partition_id, _ = pop_response(3, **COMPACT)
    g.response(200, None, body.replace(partition_id, str(uuid.uuid4()), 2))  # top level and first message

    assert (g.pops, g.delivered, g.parse_errors) == (1, 3, 1)
    assert g.dequeue() is None


PUSH = {
    "queue": "q",
    "partitions": 4,
    "per_request": 10,
    "payload": '{"n":1}',
    "seed": 1,
    "rate_per_thread": 0,
}


def push_items(request: str) -> list[dict[str, Any]]:
    head, body = request.split("\n", 1)
    assert head == "POST /api/v1/push"
    return json.loads(body)["items"]  # type: ignore[no-any-return]


def test_push_leaves_transaction_ids_to_the_broker_and_reuses_its_requests(tmp_path: Path) -> None:
    g = load("push", PUSH, tmp_path).globals()
    g.init(None)
    requests = [g.request() for _ in range(40)]
    assert len(set(requests)) <= PUSH["partitions"]
    items = push_items(requests[0])
    assert len(items) == 10 and all("transactionId" not in item for item in items)
    assert items[0]["payload"] == {"n": 1} and items[0]["queue"] == "q"


def test_push_with_client_transaction_ids_sends_a_fresh_uuidv7_shaped_one_per_message(tmp_path: Path) -> None:
    """As the official clients do: UUIDv7 (RFC 9562) layout, the time field in Unix milliseconds, unique per
    message across requests and across wrk threads (each thread has its own Lua state and index)."""
    ids: list[str] = []
    before_ms = int(time.time() * 1000)
    for thread_index in (1, 2):
        lua = load("push", {**PUSH, "transaction_ids": True}, tmp_path)
        g = lua.globals()
        g.thread_index = thread_index
        g.init(None)
        sent = [item["transactionId"] for _ in range(30) for item in push_items(g.request())]
        assert [text[-12:] for text in sent] == [f"{thread_index + 1:04x}{n:08x}" for n in range(1, 301)]
        ids += sent
    after_ms = int(time.time() * 1000)
    assert len(ids) == 600 and len(set(ids)) == 600
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text and parsed.version == 7 and parsed.variant == uuid.RFC_4122
        assert before_ms - 1 <= parsed.int >> 80 <= after_ms + 1


def test_a_paced_push_hands_out_send_slots_1000_over_the_rate_ms_apart(tmp_path: Path) -> None:
    g = load("push", {**PUSH, "rate_per_thread": 100}, tmp_path).globals()
    g.init(None)
    delays = [g.delay() for _ in range(5)]
    assert delays[0] == 0
    assert [b - a for a, b in itertools.pairwise(delays)] == pytest.approx([10.0] * 4, abs=0.5)
