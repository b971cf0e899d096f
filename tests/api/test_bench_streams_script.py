"""The streams scenario's wrk script (``src/queenpy/bench/lua/streams.lua``) against the real broker.

LuaJIT 2.1 (wrk's Lua, through lupa) runs the script exactly as the suite hands it to wrk; each request it
makes is sent to the session broker over HTTP and the answer fed back to its ``response``, as wrk does on
one connection. The window arithmetic and the exactly-once ledger the benchmark relies on are checked in
PostgreSQL: 250 messages in windows of 100 give two emitted windows of 100 and one open window of 50.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from queenpy.bench.wrk import render_script

from helpers import unique

luajit = pytest.importorskip("lupa.luajit21", reason="lupa (a test dependency) ships LuaJIT 2.1, wrk's Lua")

WRK_TABLE = """
wrk = {headers = {}}
function wrk.format(method, path, headers, body) return method .. " " .. path .. "\\n" .. (body or "") end
"""


def test_the_streams_script_runs_tumbling_windows_exactly_once(broker: Any, tmp_path: Path) -> None:
    source, sink, query = unique("bench-src"), unique("bench-sink"), unique("bench-q")
    with httpx.Client(base_url=broker.url, timeout=30) as http:
        pushed = http.post(
            "/api/v1/push",
            json={"items": [{"queue": source, "partition": "p0", "payload": {"n": n}} for n in range(250)]},
        ).json()
        assert {r["status"] for r in pushed} == {"queued"}
        query_id = http.post(
            "/streams/v1/queries", json={"name": query, "source_queue": source, "config_hash": "bench"}
        ).json()["query_id"]
        runtime = luajit.LuaRuntime()
        runtime.execute(WRK_TABLE)
        runtime.execute(
            render_script(
                "streams",
                {
                    "queue": source,
                    "group": f"streams.{query}",
                    "batch": 100,
                    "timeout_ms": 100,
                    "query_id": query_id,
                    "sink": sink,
                    "window_ms": 100,
                },
                tmp_path,
            ).read_text()
        )
        lua = runtime.globals()
        lua.init(None)
        for _ in range(40):  # pop, state/get, cycle per batch; stop at the first empty pop
            head, _, body = lua.request().partition("\n")
            method, path = head.split(" ", 1)
            answer = http.request(method, path, content=body or None)
            lua.response(answer.status_code, None, answer.text)
            if lua.empty_pops:
                break
    counters = {
        name: lua[name]
        for name in (
            "pops",
            "empty_pops",
            "delivered",
            "state_gets",
            "cycles_ok",
            "cycles_failed",
            "emitted",
            "acked",
            "parse_errors",
            "bad_responses",
        )
    }
    assert counters == {
        "pops": 4,
        "empty_pops": 1,
        "delivered": 250,
        "state_gets": 3,
        "cycles_ok": 3,
        "cycles_failed": 0,
        "emitted": 2,
        "acked": 250,
        "parse_errors": 0,
        "bad_responses": 0,
    }
    with psycopg.connect(broker.database_url) as conn:
        emitted = [
            row[0]
            for row in conn.execute(
                "SELECT m.payload FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id "
                "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = %s AND p.name = 'p0' ORDER BY m.seq",
                (sink,),
            )
        ]
        open_windows = [
            row[0]
            for row in conn.execute(
                "SELECT s.value FROM queen_streams.state s WHERE s.query_id = %s AND s.key LIKE 'tumb:%%'",
                (query_id,),
            )
        ]
    assert [(e["windowStart"], e["count"]) for e in emitted] == [(0, 100), (100, 100)]
    assert open_windows == [{"acc": 50, "windowStart": 200, "windowEnd": 300}]
