"""Queen Streams (issue 21, API.md section 19): the official Streams SDK of ``queen-mq==0.15.0``
(``from queen import Stream``), unchanged, against a real ``queenpy serve`` (the session ``broker``).

Every pipeline here is built with the SDK's own fluent API and run by its own ``Runner``; the sink is read
from PostgreSQL (``queen.messages``), so duplicates and losses are counted exactly, and nothing consumes it.
Event-time tests use synthetic timestamps and close their windows with a far-future event, so their output is
a pure function of the input; processing-time tests push each window's records in one request (one
``createdAt``) and compute the expected windows from the ``created_at`` PostgreSQL stored. Conditions are
polled with a deadline, never slept on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from queen import Queen, Stream, token_bucket_gate

from conftest import BrokerProcess
from helpers import unique

DEADLINE_S = 40.0
BASE_MS = 1_699_999_980_000  # a whole minute (cron windows align to it)
CLOSE_MS = BASE_MS + 1_000_000  # far past every window: closes them all
WORKER = Path(__file__).with_name("streams_worker.py")
SEP = "\u001f"


@pytest.fixture
def db(broker: BrokerProcess) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(broker.database_url, autocommit=True) as conn:
        yield conn


@contextlib.asynccontextmanager
async def running(
    stream: Stream, query_id: str, broker: BrokerProcess, **options: Any
) -> AsyncIterator[tuple[Any, list[str]]]:
    """``stream.run(...)`` with a short long-poll: (the runner, the cycle errors it reported; the SDK logs
    them and goes on). The runner is stopped on exit."""
    errors: list[str] = []
    runner = await stream.run(
        query_id=query_id,
        url=broker.url,
        max_wait_millis=200,
        on_error=lambda err, ctx: errors.append(f"{ctx}: {err}"),
        **options,
    )
    try:
        yield runner, errors
    finally:
        await runner.stop()


async def eventually(probe: Callable[[], Any], what: str, deadline_s: float = DEADLINE_S) -> Any:
    end = time.monotonic() + deadline_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline_s}s waiting for {what}")
        await asyncio.sleep(0.05)


def sink(db: psycopg.Connection[Any], queue: str) -> list[tuple[str, Any]]:
    """(partition name, payload) of every message of ``queue``, in partition then offset order."""
    return [
        (row[0], row[1])
        for row in db.execute(
            "SELECT p.name, m.payload FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id "
            "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = %s ORDER BY p.name, m.seq",
            (queue,),
        )
    ]


def consumed(db: psycopg.Connection[Any], queue: str, group: str) -> bool:
    """Every partition of ``queue`` consumed to its end by ``group``."""
    row = db.execute(
        "SELECT count(*) FILTER (WHERE coalesce(c.last_consumed_seq, 0) < p.last_seq), count(*) "
        "FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
        "LEFT JOIN queen.partition_consumers c ON c.partition_id = p.id AND c.consumer_group = %s "
        "WHERE q.name = %s",
        (group, queue),
    ).fetchone()
    return row is not None and row[1] > 0 and row[0] == 0


def state_keys(db: psycopg.Connection[Any], query_name: str) -> list[str]:
    return [
        row[0]
        for row in db.execute(
            "SELECT s.key FROM queen_streams.state s JOIN queen_streams.queries q ON q.id = s.query_id "
            "WHERE q.name = %s ORDER BY s.key",
            (query_name,),
        )
    ]


def created_ms(db: psycopg.Connection[Any], queue: str) -> list[int]:
    """Distinct ``created_at`` of a queue's messages, in epoch milliseconds as the SDK reads them."""
    return [
        int(row[0])
        for row in db.execute(
            "SELECT DISTINCT floor(extract(epoch FROM m.created_at) * 1000) FROM queen.messages m "
            "JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id "
            "WHERE q.name = %s ORDER BY 1",
            (queue,),
        )
    ]


async def push(q: Queen, queue: str, records: list[Any], partition: str = "Default") -> None:
    """One push request (all records share one ``createdAt``)."""
    await q.queue(queue).partition(partition).push([{"data": record} for record in records])


def window_record(value: Any, ctx: dict[str, Any]) -> dict[str, Any]:
    """Post-window map: the window's key and bounds with its value."""
    return {"key": ctx["key"], "start": ctx["windowStart"], "end": ctx["windowEnd"], "value": value}


# -- stateless -----------------------------------------------------------------------------------------------


async def test_a_stateless_map_and_filter_reach_the_sink_once_in_order(
    q: Queen, broker: BrokerProcess, db: psycopg.Connection[Any]
) -> None:
    source, target, query = unique("src"), unique("sink"), unique("map")
    for partition in ("p1", "p2"):
        await push(q, source, [{"n": n, "p": partition} for n in range(12)], partition)
    stream = (
        Stream.from_(q.queue(source))
        .filter(lambda m: m["data"]["n"] % 3 != 0)
        .map(lambda m: {"n": m["data"]["n"], "square": m["data"]["n"] ** 2, "from": m["data"]["p"]})
        .to(q.queue(target))
    )
    async with running(stream, query, broker) as (_, errors):
        await eventually(
            lambda: consumed(db, source, f"streams.{query}") and len(sink(db, target)) >= 16,
            "the source consumed and 16 records in the sink",
        )
    expected = [(p, {"n": n, "square": n * n, "from": p}) for p in ("p1", "p2") for n in range(12) if n % 3]
    assert sink(db, target) == expected  # same partition names, source order, each once
    assert errors == []
    assert state_keys(db, query) == []  # stateless: no state rows


# -- windows -------------------------------------------------------------------------------------------------


def window_starts(kind: str, ts: int) -> list[tuple[int, int]]:
    """(start, end) of the windows of one timestamp: the SDK's assignment, written out (sessions aside)."""
    if kind == "tumbling":
        start = ts // 10_000 * 10_000
        return [(start, start + 10_000)]
    if kind == "sliding":  # size 4 s, slide 2 s
        latest = ts // 2_000 * 2_000
        return [(s, s + 4_000) for s in (latest, latest - 2_000) if s <= ts < s + 4_000]
    if kind == "cron":  # every minute
        start = ts // 60_000 * 60_000
        return [(start, start + 60_000)]
    raise ValueError(kind)


def event_time_window(stream: Stream, kind: str) -> Stream:
    event_time = {"event_time": lambda m: m["data"]["ts"], "idle_flush_ms": 200}
    if kind == "tumbling":
        return stream.window_tumbling(seconds=10, **event_time)
    if kind == "sliding":
        return stream.window_sliding(size=4, slide=2, **event_time)
    if kind == "cron":
        return stream.window_cron(every="minute", **event_time)
    return stream.window_session(gap=3, **event_time)


EVENTS = [
    ("a", 1_000, 1),
    ("b", 2_000, 10),
    ("a", 4_500, 2),
    ("a", 11_000, 4),
    ("b", 12_000, 20),
    ("b", 15_000, 40),
    ("a", 25_000, 8),
    ("a", 70_000, 16),
    ("b", 130_500, 80),
    ("a", 131_000, 32),
]


def expected_event_time(kind: str) -> list[dict[str, Any]]:
    """Sum of x per (key, window) for EVENTS, in the shape ``window_record`` gives."""
    sums: dict[tuple[str, int, int], int] = {}
    if kind == "session":  # gap 3 s: a session ends 3 s after its last event
        by_key: dict[str, list[tuple[int, int]]] = {}
        for key, ts, x in EVENTS:
            by_key.setdefault(key, []).append((BASE_MS + ts, x))
        for key, events in by_key.items():
            start, last, total = events[0][0], events[0][0], 0
            for ts, x in events:
                if ts > last + 3_000:
                    sums[(key, start, last + 3_000)] = total
                    start, total = ts, 0
                last, total = ts, total + x
            sums[(key, start, last + 3_000)] = total
    else:
        for key, ts, x in EVENTS:
            for start, end in window_starts(kind, BASE_MS + ts):
                sums[(key, start, end)] = sums.get((key, start, end), 0) + x
    return sorted(
        ({"key": k, "start": s, "end": e, "value": v} for (k, s, e), v in sums.items()),
        key=lambda r: (r["key"], r["start"]),
    )


@pytest.mark.parametrize("kind", ["tumbling", "sliding", "session", "cron"])
async def test_event_time_windows_reduce_to_exactly_the_expected_results(
    kind: str, q: Queen, broker: BrokerProcess, db: psycopg.Connection[Any]
) -> None:
    """Synthetic event times, one push, then a far-future event that moves the watermark past every window:
    each (key, window) is emitted once with the reduced sum. A late event (behind the watermark) is
    dropped."""
    source, target, query = unique("src"), unique("sink"), unique(f"et-{kind}")
    records = [{"k": k, "ts": BASE_MS + ts, "x": x} for k, ts, x in EVENTS]
    await push(q, source, [*records, {"k": "zz", "ts": CLOSE_MS, "x": 0}])
    stream = event_time_window(Stream.from_(q.queue(source)).key_by(lambda m: m["data"]["k"]), kind)
    stream = stream.reduce(lambda acc, value: acc + value["x"], 0).map(window_record).to(q.queue(target))
    expected = expected_event_time(kind)
    async with running(stream, query, broker) as (runner, errors):
        await eventually(
            lambda: consumed(db, source, f"streams.{query}") and len(sink(db, target)) >= len(expected),
            f"{len(expected)} windows in the sink",
        )
        await push(q, source, [{"k": "a", "ts": BASE_MS + 1_500, "x": 1000}])  # late: dropped
        await eventually(lambda: consumed(db, source, f"streams.{query}"), "the late event consumed")
        late = 1 if kind == "session" else len(window_starts(kind, BASE_MS + 1_500))  # one per window it hit
        await eventually(lambda: runner.metrics()["lateEventsTotal"] == late, "the late event counted")
    got = sorted((payload for _, payload in sink(db, target)), key=lambda r: (r["key"], r["start"]))
    assert got == expected
    assert errors == []
    assert all("zz" in key or key == "__wm__" for key in state_keys(db, query))  # only the open window left


def expected_processing_time(kind: str, created: int, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """count/sum/max per key for records that all have ``createdAt`` = ``created`` (epoch ms)."""
    if kind == "session":  # gap 0.5 s
        windows = [(created, created + 500)]
    elif kind == "sliding":  # size 2 s, slide 1 s
        latest = created // 1000 * 1000
        windows = [(latest - 1000, latest + 1000), (latest, latest + 2000)]
    else:  # tumbling 1 s, cron every second
        windows = [(created // 1000 * 1000, created // 1000 * 1000 + 1000)]
    out = []
    for key in sorted({r["k"] for r in records}):
        xs = [r["x"] for r in records if r["k"] == key]
        for start, end in windows:
            out.append(
                {
                    "key": key,
                    "start": start,
                    "end": end,
                    "value": {"count": len(xs), "sum": sum(xs), "max": max(xs)},
                }
            )
    return out


def processing_time_window(stream: Stream, kind: str) -> Stream:
    if kind == "tumbling":
        return stream.window_tumbling(seconds=1, idle_flush_ms=100)
    if kind == "sliding":
        return stream.window_sliding(size=2, slide=1, idle_flush_ms=100)
    if kind == "cron":
        return stream.window_cron(every="second", idle_flush_ms=100)
    return stream.window_session(gap=0.5, idle_flush_ms=100)


@pytest.mark.parametrize("kind", ["tumbling", "sliding", "session", "cron"])
async def test_processing_time_windows_aggregate_what_arrived_together(
    kind: str, q: Queen, broker: BrokerProcess, db: psycopg.Connection[Any]
) -> None:
    """Processing time is the broker's ``createdAt``: two pushes, the second after the first one's windows
    were emitted, give separate windows, each closed by the idle-flush timer once the wall clock passes it."""
    source, target, query = unique("src"), unique("sink"), unique(f"pt-{kind}")
    stream = processing_time_window(Stream.from_(q.queue(source)).key_by(lambda m: m["data"]["k"]), kind)
    stream = stream.aggregate({"count": lambda v: 1, "sum": lambda v: v["x"], "max": lambda v: v["x"]})
    stream = stream.map(
        lambda agg, ctx: window_record({name: agg[name] for name in ("count", "sum", "max")}, ctx)
    ).to(q.queue(target))
    first = [{"k": "a", "x": 1}, {"k": "b", "x": 10}, {"k": "a", "x": 5}, {"k": "a", "x": 3}]
    second = [{"k": "b", "x": 7}, {"k": "c", "x": 2}]
    async with running(stream, query, broker) as (_, errors):
        await push(q, source, first)
        created_first = await eventually(lambda: created_ms(db, source), "the first push stored")
        expected = expected_processing_time(kind, created_first[0], first)
        await eventually(lambda: len(sink(db, target)) >= len(expected), "the first windows emitted")
        await push(q, source, second)
        created_second = (await eventually(lambda: created_ms(db, source)[1:], "the second push stored"))[0]
        expected += expected_processing_time(kind, created_second, second)
        await eventually(lambda: len(sink(db, target)) >= len(expected), "the second windows emitted")
        await eventually(lambda: state_keys(db, query) == [], "no open window left")
    got = sorted((payload for _, payload in sink(db, target)), key=lambda r: (r["start"], r["key"]))
    assert got == sorted(expected, key=lambda r: (r["start"], r["key"]))
    assert errors == []


# -- gate ----------------------------------------------------------------------------------------------------


async def test_the_token_bucket_gate_throttles_and_keeps_order(
    q: Queen, broker: BrokerProcess, db: psycopg.Connection[Any]
) -> None:
    """Capacity 4, 4 tokens/s, 14 messages in one batch: the gate lets the first 4 through, acks them with
    the lease kept (``release_lease: false``), and the denied tail comes back when the 1 s lease expires.
    Everything passes in the end, once each, in source order; the bucket's state counts 14 allowed."""
    source, target, query = unique("src"), unique("sink"), unique("gate")
    await q.queue(source).config({"leaseTime": 1}).create()
    await push(q, source, [{"n": n} for n in range(14)], "p1")
    stream = (
        Stream.from_(q.queue(source))
        .gate(token_bucket_gate(capacity=4, refill_per_sec=4))
        .to(q.queue(target))
    )
    async with running(stream, query, broker) as (runner, errors):
        await eventually(
            lambda: consumed(db, source, f"streams.{query}") and len(sink(db, target)) >= 14,
            "all 14 through the gate",
        )
        metrics = runner.metrics()
    assert sink(db, target) == [("p1", {"n": n}) for n in range(14)]
    assert metrics["gateAllowsTotal"] == 14 and metrics["gateDenialsTotal"] > 0
    assert errors == []
    bucket = db.execute(
        "SELECT s.value FROM queen_streams.state s JOIN queen_streams.queries q "
        "ON q.id = s.query_id WHERE q.name = %s",
        (query,),
    ).fetchall()
    assert len(bucket) == 1 and bucket[0][0]["allowedTotal"] == 14


# -- config change -------------------------------------------------------------------------------------------


def summing(q: Queen, source: str, target: str, seconds: int) -> Stream:
    return (
        Stream.from_(q.queue(source))
        .key_by(lambda m: m["data"]["k"])
        .window_tumbling(seconds=seconds, event_time=lambda m: m["data"]["ts"], idle_flush_ms=200)
        .reduce(lambda acc, value: acc + value["x"], 0)
        .map(window_record)
        .to(q.queue(target))
    )


async def test_a_changed_operator_chain_is_refused_unless_reset_which_wipes_the_state(
    q: Queen, broker: BrokerProcess, db: psycopg.Connection[Any]
) -> None:
    source, target, query = unique("src"), unique("sink"), unique("cfg")
    group = f"streams.{query}"
    ten, twenty = summing(q, source, target, 10), summing(q, source, target, 20)

    reported: list[str] = []
    async with running(ten, query, broker) as (_, errors):  # window [0, 10 s) of key a stays open
        reported += errors
        await push(
            q, source, [{"k": "a", "ts": BASE_MS + 1_000, "x": 1}, {"k": "a", "ts": BASE_MS + 2_000, "x": 2}]
        )
        await eventually(lambda: consumed(db, source, group), "the first events consumed")
    kept = state_keys(db, query)
    assert any(key.startswith(f"tumb:10{SEP}") for key in kept)

    with pytest.raises(Exception, match="config_hash mismatch"):  # another window size, no reset
        await twenty.run(query_id=query, url=broker.url, max_wait_millis=200)
    assert state_keys(db, query) == kept

    async with running(ten, query, broker) as (_, errors):  # the same chain again: the state is still there
        reported += errors
        await push(
            q,
            source,
            [{"k": "a", "ts": BASE_MS + 3_000, "x": 4}, {"k": "z", "ts": BASE_MS + 100_000, "x": 0}],
        )
        await eventually(
            lambda: len(sink(db, target)) >= 1 and consumed(db, source, group), "window [0, 10 s)"
        )
    assert [payload for _, payload in sink(db, target)] == [
        {"key": "a", "start": BASE_MS, "end": BASE_MS + 10_000, "value": 7}
    ]
    assert any(key.startswith(f"tumb:10{SEP}") and key.endswith(f"{SEP}z") for key in state_keys(db, query))

    async with running(twenty, query, broker, reset=True) as (_, errors):  # z's open 10 s window: wiped
        reported += errors
        assert not any(key.startswith(f"tumb:10{SEP}") for key in state_keys(db, query))
        await push(
            q,
            source,
            [{"k": "a", "ts": BASE_MS + 121_000, "x": 16}, {"k": "z", "ts": BASE_MS + 300_000, "x": 0}],
        )
        await eventually(
            lambda: len(sink(db, target)) >= 2 and consumed(db, source, group), "window [120, 140 s)"
        )
    assert [payload for _, payload in sink(db, target)] == [
        {"key": "a", "start": BASE_MS, "end": BASE_MS + 10_000, "value": 7},
        {"key": "a", "start": BASE_MS + 120_000, "end": BASE_MS + 140_000, "value": 16},
    ]
    assert reported == []


# -- recovery ------------------------------------------------------------------------------------------------


def worker(broker: BrokerProcess, source: str, target: str, query: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, str(WORKER), broker.url, source, target, query],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def expected_windows(events: dict[str, list[dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """Closed 10 s windows per (partition, key) with count and sum: what an uninterrupted run emits."""
    out = []
    for partition, records in events.items():
        windows: dict[tuple[str, int], list[int]] = {}
        for r in records:
            windows.setdefault((r["k"], r["ts"] // 10_000 * 10_000), []).append(r["x"])
        closing = max(r["ts"] for r in records)
        for (key, start), xs in windows.items():
            if start + 10_000 <= closing:
                out.append(
                    (
                        partition,
                        {"key": key, "start": start, "end": start + 10_000, "count": len(xs), "sum": sum(xs)},
                    )
                )
    return sorted(out, key=lambda row: (row[0], row[1]["key"], row[1]["start"]))


def by_window(rows: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    return sorted(rows, key=lambda row: (row[0], row[1]["key"], row[1]["start"]))


def progress(db: psycopg.Connection[Any], query: str) -> int:
    row = db.execute(
        "SELECT coalesce(sum(total_messages_consumed), 0) FROM queen.partition_consumers "
        "WHERE consumer_group = %s",
        (f"streams.{query}",),
    ).fetchone()
    return int(row[0]) if row else 0


async def test_a_runner_killed_mid_window_and_restarted_emits_every_window_once(
    q: Queen, broker: BrokerProcess, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """Two runner processes read the same source (each its own query and consumer group): one runs through,
    the other is SIGKILLed once about 40% of the source is consumed (windows already emitted, others half
    full in the state, a cycle usually in flight) and started again. Both sinks end up with exactly the
    windows computed from the input, each once."""
    source, query, reference = unique("src"), unique("crash"), unique("ref")
    await q.queue(source).config({"leaseTime": 1}).create()  # a killed runner's lease lapses quickly
    events = {
        p: [{"k": "abc"[n % 3], "ts": BASE_MS + n * 700 + (i * 50), "x": n + 1} for n in range(40)]
        for i, p in enumerate(("p1", "p2"))
    }
    for partition, records in events.items():
        records.append({"k": "zz", "ts": CLOSE_MS, "x": 0})
        await push(q, source, records, partition)
    expected = expected_windows(events)
    total = sum(len(records) for records in events.values())

    ref_process = worker(broker, source, f"{reference}-sink", reference, tmp_path / "reference.log")
    crashing = worker(broker, source, f"{query}-sink", query, tmp_path / "crash.log")
    processes = [ref_process, crashing]
    try:
        await eventually(
            lambda: progress(db, query) >= total * 0.4 and sink(db, f"{query}-sink"),
            "40% consumed and a window emitted",
        )
        os.killpg(crashing.pid, signal.SIGKILL)
        crashing.wait()
        before = progress(db, query)
        assert before < total  # killed mid-stream: windows still open in the state
        assert any(SEP in key for key in state_keys(db, query))
        emitted_before = len(sink(db, f"{query}-sink"))
        print(
            f"killed at {before}/{total} consumed, {emitted_before}/{len(expected)} windows emitted, "
            f"{len(state_keys(db, query))} state rows"
        )
        assert 0 < emitted_before < len(expected)

        restarted = worker(broker, source, f"{query}-sink", query, tmp_path / "crash.log")
        processes.append(restarted)
        for name in (query, reference):
            await eventually(
                lambda name=name: (
                    consumed(db, source, f"streams.{name}") and len(sink(db, f"{name}-sink")) >= len(expected)
                ),
                f"{name} finished",
                60,
            )
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    crashed_run, reference_run = (
        by_window(sink(db, f"{query}-sink")),
        by_window(sink(db, f"{reference}-sink")),
    )
    assert crashed_run == expected, (tmp_path / "crash.log").read_text()[-3000:]
    assert reference_run == expected


# -- the wire: levels, encryption, producerSub ---------------------------------------------------------------


def test_levels_and_sink_payloads_as_sent(db_url: str, start_broker: Callable[..., BrokerProcess]) -> None:
    """API.md sections 13 and 19: state/get needs read-only, queries and cycle read-write; sink pushes store
    the payload as sent (not encrypted even on an encrypted queue) and no producerSub, even with a ``sub``."""
    import jwt

    secret = "test-secret-that-is-long-enough-for-hs256"
    secured = start_broker(
        db_url,
        workers=1,
        extra_env={
            "JWT_ENABLED": "true",
            "JWT_SECRET": secret,
            "QUEEN_ENCRYPTION_KEY": "0123456789abcdef" * 4,
        },
    )

    def auth(role: str) -> dict[str, str]:
        token = jwt.encode(
            {"sub": "svc", "role": role, "exp": int(time.time()) + 600}, secret, algorithm="HS256"
        )
        return {"Authorization": f"Bearer {token}"}

    with httpx.Client(base_url=secured.url, timeout=30) as http:
        register = {"name": unique("lv"), "source_queue": "src", "config_hash": "h"}
        assert http.post("/streams/v1/queries", json=register, headers=auth("read-only")).status_code == 403
        registered = http.post("/streams/v1/queries", json=register, headers=auth("read-write")).json()
        assert registered["success"] is True and registered["fresh"] is True
        sealed = unique("sealed")
        http.post(
            "/api/v1/configure",
            json={"queue": sealed, "options": {"encryptionEnabled": True}},
            headers=auth("read-write"),
        ).raise_for_status()
        partition = "00000000-0000-0000-0000-000000000001"
        body = {
            "query_id": registered["query_id"],
            "partition_id": partition,
            "state_ops": [{"type": "upsert", "key": "k", "value": {"n": 1}}],
            "push_items": [
                {"queue": sealed, "payload": {"card": "4111"}, "producerSub": "forged", "isEncrypted": True}
            ],
        }
        assert http.post("/streams/v1/cycle", json=body, headers=auth("read-only")).status_code == 403
        done = http.post("/streams/v1/cycle", json=body, headers=auth("read-write")).json()
        assert done["success"] is True and done["push_results"][0]["status"] == "queued"
        read = http.post(
            "/streams/v1/state/get",
            json={"query_id": registered["query_id"], "partition_id": partition},
            headers=auth("read-only"),
        )
        assert read.status_code == 200 and [r["value"] for r in read.json()["rows"]] == [{"n": 1}]
        assert http.post("/streams/v1/state/get", json={}).status_code == 401
    with psycopg.connect(db_url) as conn:
        stored = conn.execute(
            "SELECT m.payload, m.is_encrypted, m.producer_sub FROM queen.messages m "
            "JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id "
            "WHERE q.name = %s",
            (sealed,),
        ).fetchall()
    assert stored == [({"card": "4111"}, False, None)]
