"""The benchmark's wrk scripts (src/queenpy/bench/lua), run by LuaJIT 2.1 (wrk's Lua) through lupa.

The scripts are assembled exactly as the suite hands them to wrk (``render_script``). Only wrk's own table
is provided here: ``wrk.format`` returns ``"<method> <path>\\n<body>"`` so a follow-up request can be read
back. The responses are what the broker answers (compact JSON), and the same documents with spaces, which
the helpers must read through their pattern fallback.
"""

from __future__ import annotations

import json
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
ACK_CONSUMER = {"queue": "q", "groups": [""], "batch": 100, "mode": "ack", "timeout_ms": 1000, "target": "",
                "payload": "{}"}


def load(name: str, params: dict[str, Any], tmp_path: Path) -> Any:
    runtime = luajit.LuaRuntime()
    assert runtime.eval("jit.version").startswith("LuaJIT 2.1")
    runtime.execute(WRK_TABLE)
    runtime.execute(render_script(name, params, tmp_path).read_text())
    return runtime


def pop_response(n: int, **dump: Any) -> tuple[str, list[str], str, str]:
    partition_id, lease = str(uuid.uuid4()), str(uuid.uuid4())
    ids = [str(uuid.uuid4()) for _ in range(n)]
    body = {"success": True, "queue": "q", "partition": "p7", "partitionId": partition_id, "leaseId": lease,
            "consumerGroup": "__QUEUE_MODE__", "partitionsClaimed": 1,
            "messages": [{"id": i, "transactionId": i, "traceId": None, "data": {"kind": "bench"},
                          "partitionId": partition_id, "partition": "p7", "offset": k + 1, "leaseId": lease,
                          "consumerGroup": "__QUEUE_MODE__"} for k, i in enumerate(ids)]}
    return json.dumps(body, **dump), ids, partition_id, lease


@pytest.mark.parametrize("dump", [COMPACT, SPACED], ids=["compact", "spaced"])
def test_helpers_read_compact_and_spaced_json(dump: dict[str, Any], tmp_path: Path) -> None:
    lua = load("push", {"queue": "q", "partitions": 1, "per_request": 3, "payload": "{}", "seed": 1,
                        "rate_per_thread": 0}, tmp_path)
    results = json.dumps([{"index": 0, "status": "queued", "transaction_id": "a"},
                          {"index": 1, "status": "duplicate", "transaction_id": "b"},
                          {"index": 2, "status": "queued", "transaction_id": "c"}], **dump)
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
        (partition_id, lease, "completed")}
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
