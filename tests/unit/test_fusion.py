"""The fusion policy: fire when a slot is free, batch what accumulates, split results by index."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from queenpy.engine import Engine
from queenpy.engine.engine import _waiting_payloads
from queenpy.engine.fusion import Fusion, StaticLimit, VegasLimit
from queenpy.engine.longpoll import WaiterRegistry, backoff_ms
from queenpy.settings import Settings
from queenpy.store.database import Database


class RecordingProcedure:
    """Stands in for the database round trip: answers one result per item, echoing its index."""

    def __init__(self) -> None:
        self.batches: list[list[dict[str, Any]]] = []
        self.release = asyncio.Event()
        self.release.set()
        self.fail_with: Exception | None = None

    async def __call__(self, payload: str) -> str:
        items = orjson.loads(payload)
        self.batches.append(items)
        await self.release.wait()
        if self.fail_with:
            raise self.fail_with
        return orjson.dumps([{"index": item["index"], "echo": item["value"]} for item in items]).decode()


async def test_single_request_fires_at_once_without_hold() -> None:
    procedure = RecordingProcedure()
    fusion = Fusion("push", procedure, max_batch_size=100, limit=StaticLimit(1))
    results = await fusion.submit([{"value": "a"}, {"value": "b"}])
    assert [r["echo"] for r in results] == ["a", "b"]
    assert len(procedure.batches) == 1


async def test_requests_accumulate_while_slots_are_busy_and_results_split_back() -> None:
    procedure = RecordingProcedure()
    procedure.release.clear()
    fusion = Fusion("push", procedure, max_batch_size=100, limit=StaticLimit(1))
    first = asyncio.create_task(fusion.submit([{"value": 0}]))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(fusion.submit([{"value": i}, {"value": -i}])) for i in range(1, 6)]
    await asyncio.sleep(0)
    assert len(procedure.batches) == 1  # the slot is busy: the others queue up
    procedure.release.set()
    assert [r["echo"] for r in await first] == [0]
    results = await asyncio.gather(*waiting)
    assert [[r["echo"] for r in rs] for rs in results] == [[i, -i] for i in range(1, 6)]
    assert [len(b) for b in procedure.batches] == [1, 10]  # five requests fused into one call


async def test_max_batch_size_splits_calls_but_never_a_request() -> None:
    procedure = RecordingProcedure()
    procedure.release.clear()
    fusion = Fusion("ack", procedure, max_batch_size=3, limit=StaticLimit(1))
    blocker = asyncio.create_task(fusion.submit([{"value": "x"}]))
    await asyncio.sleep(0)
    tasks = [asyncio.create_task(fusion.submit([{"value": i}] * 2)) for i in range(3)]
    await asyncio.sleep(0)
    procedure.release.set()
    await blocker
    await asyncio.gather(*tasks)
    assert [len(b) for b in procedure.batches] == [1, 2, 2, 2]


async def test_transactions_are_capped_by_operations_bytes_and_requests() -> None:
    """A client transaction is one request weighing its operations and its bytes (Engine.transaction): a group
    closes before the one that would pass either cap, or the count of requests; one larger than a cap goes
    alone."""
    procedure = RecordingProcedure()
    procedure.release.clear()
    fusion = Fusion(
        "transaction",
        procedure,
        max_batch_size=10,
        limit=StaticLimit(1),
        max_batch_bytes=1000,
        max_batch_requests=3,
    )
    blocker = asyncio.create_task(fusion.submit([{"value": "x"}], weight=1, size_bytes=10))
    await asyncio.sleep(0)
    sizes = [
        (4, 100),
        (4, 100),
        (4, 100),  # operations: the third would make 12
        (1, 600),
        (1, 600),  # bytes: the second would make 1,300 with the two before
        (20, 10),  # alone: more operations than a group may have
        (1, 1),
        (1, 1),
        (1, 1),
        (1, 1),
    ]  # requests: at most 3
    tasks = [
        asyncio.create_task(fusion.submit([{"value": i}], weight=w, size_bytes=b))
        for i, (w, b) in enumerate(sizes)
    ]
    await asyncio.sleep(0)
    procedure.release.set()
    await blocker
    results = await asyncio.gather(*tasks)
    assert [r[0]["echo"] for r in results] == list(range(len(sizes)))
    assert [[item["value"] for item in b] for b in procedure.batches] == [
        ["x"],
        [0, 1],
        [2, 3],
        [4],
        [5],
        [6, 7, 8],
        [9],
    ]


async def test_an_error_reaches_every_request_of_the_batch_and_the_next_batch_still_runs() -> None:
    procedure = RecordingProcedure()
    procedure.release.clear()
    fusion = Fusion("pop", procedure, max_batch_size=10, limit=StaticLimit(1))
    blocker = asyncio.create_task(fusion.submit([{"value": 1}]))
    await asyncio.sleep(0)
    procedure.fail_with = RuntimeError("database went away")
    a = asyncio.create_task(fusion.submit([{"value": 2}]))
    b = asyncio.create_task(fusion.submit([{"value": 3}]))
    await asyncio.sleep(0)
    procedure.release.set()
    for task in (blocker, a, b):
        with pytest.raises(RuntimeError, match="database went away"):
            await task
    procedure.fail_with = None
    assert [r["echo"] for r in await fusion.submit([{"value": 4}])] == [4]


async def test_concurrency_limit_bounds_calls_in_flight() -> None:
    procedure = RecordingProcedure()
    procedure.release.clear()
    fusion = Fusion("push", procedure, max_batch_size=1, limit=StaticLimit(3))
    tasks = [asyncio.create_task(fusion.submit([{"value": i}])) for i in range(10)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert fusion.inflight == 3 and len(procedure.batches) == 3
    procedure.release.set()
    await asyncio.gather(*tasks)
    assert len(procedure.batches) == 10


def test_vegas_grows_at_min_rtt_and_shrinks_when_postgres_queues() -> None:
    limit = VegasLimit(initial=4, min_limit=1, max_limit=32, alpha=3, beta=6)
    for _ in range(10):
        limit.on_sample(0.002, inflight=limit.limit)
    grown = limit.limit
    assert grown > 4
    for _ in range(10):
        limit.on_sample(0.050, inflight=limit.limit)  # 25x the minimum: a queue formed
    assert limit.limit < grown
    assert limit.limit >= 1


def test_vegas_ignores_samples_when_the_limit_was_not_the_constraint() -> None:
    limit = VegasLimit(initial=8, min_limit=1, max_limit=32)
    limit.on_sample(0.001, inflight=8)
    before = limit.limit
    limit.on_sample(0.5, inflight=1)
    assert limit.limit == before


def test_long_poll_backoff_follows_queen_schedule() -> None:
    schedule = [backoff_ms(n, 100, 3, 2.0, 1000) for n in range(1, 7)]
    assert schedule == [100, 100, 100, 800, 1000, 1000]


async def test_waiters_wake_by_queue_and_partition() -> None:
    registry = WaiterRegistry()
    any_partition = registry.register("orders", None)
    only_a = registry.register("orders", "a")
    other_queue = registry.register("billing", None)
    assert registry.wake("orders", "b") == 1
    assert any_partition.event.is_set() and not only_a.event.is_set() and not other_queue.event.is_set()
    registry.wake_notification("orders/a")
    assert only_a.event.is_set()
    registry.unregister(any_partition)
    registry.unregister(only_a)
    registry.unregister(other_queue)
    assert len(registry) == 0


async def test_a_push_wakes_one_wildcard_waiter_per_group_oldest_first() -> None:
    registry = WaiterRegistry()
    workers = [registry.register("orders", None, "workers") for _ in range(5)]
    audit = [registry.register("orders", None, "audit") for _ in range(2)]
    on_a = [registry.register("orders", "a", "workers") for _ in range(2)]
    assert registry.wake("orders", "a") == 4  # both pops of partition a, one wildcard pop per group
    assert [w.event.is_set() for w in workers] == [True, False, False, False, False]
    assert [w.event.is_set() for w in audit] == [True, False]
    assert all(w.event.is_set() for w in on_a)
    registry.wake_notification("orders/b")  # the next partition goes to the next waiter not yet woken
    assert [w.event.is_set() for w in workers] == [True, True, False, False, False]
    assert [w.event.is_set() for w in audit] == [True, True]
    assert registry.wake("orders", "c") == 1  # audit has no waiter left that is not woken
    assert registry.wake("orders") == 9  # the whole queue: everyone
    assert all(w.event.is_set() for w in workers + audit + on_a)


async def test_a_waiter_leaving_with_a_wake_passes_it_on() -> None:
    registry = WaiterRegistry()
    first, second, third = (registry.register("orders", None, "g") for _ in range(3))
    other_group = registry.register("orders", None, "h")
    registry.wake("orders", "a")
    first.event.clear()
    other_group.event.clear()
    registry.unregister(first)  # left without a pending wake: nobody else is woken
    assert not second.event.is_set() and not third.event.is_set()
    registry.wake("orders", "b")
    assert second.event.is_set() and other_group.event.is_set()
    other_group.event.clear()
    registry.unregister(second)  # its pop took other messages: partition b's wake goes to third
    assert third.event.is_set() and not other_group.event.is_set()
    registry.unregister(second)  # a second unregister changes nothing
    registry.unregister(third)
    registry.unregister(other_group)
    assert len(registry) == 0


async def test_laned_fusion_keeps_a_key_on_one_lane_and_runs_lanes_in_parallel() -> None:
    from queenpy.engine.fusion import LanedFusion

    procedure = RecordingProcedure()
    procedure.release.clear()
    fusion = LanedFusion("push", procedure, max_batch_size=100, lanes=8, key=lambda item: item["p"])
    tasks = [asyncio.create_task(fusion.submit([{"value": i, "p": f"partition-{i % 4}"}])) for i in range(40)]
    for _ in range(5):
        await asyncio.sleep(0)
    first_calls = list(procedure.batches)
    # each distinct partition got its own lane's call at once; nothing waits behind another partition
    assert len({frozenset(item["p"] for item in batch) for batch in first_calls}) == len(first_calls)
    assert all(len({item["p"] for item in batch}) == 1 for batch in first_calls)
    assert fusion.inflight == len(first_calls) <= 4
    procedure.release.set()
    results = await asyncio.gather(*tasks)
    assert [r[0]["echo"] for r in results] == list(range(40))
    # every call carried items of one lane only; later calls fused what queued behind the first ones
    import zlib

    for batch in procedure.batches:
        assert len({zlib.crc32(item["p"].encode()) % 8 for item in batch}) == 1
    assert sum(len(batch) for batch in procedure.batches) == 40
    assert len(procedure.batches) < 40


def test_announcements_of_parked_pops_fit_a_notify_payload_and_bad_ones_are_ignored() -> None:
    """WAITING_CHANNEL payloads stay under PostgreSQL's 8000-byte NOTIFY limit (queue names up to 255
    characters, escaped); a malformed announcement is ignored, a well-formed one is remembered."""
    names = [f"{i:03d}" + "\u0001" * 252 for i in range(100)]  # control characters escape to 6 bytes each
    payloads = _waiting_payloads(names, probe=True)
    assert all(len(p.encode()) < 8000 for p in payloads)
    decoded = [orjson.loads(p) for p in payloads]
    assert [q for d in decoded for q in d["queues"]] == names
    assert [d.get("probe") for d in decoded] == [None] * (len(decoded) - 1) + [True]
    assert _waiting_payloads([], probe=True) == ['{"queues":[],"probe":true}']
    assert _waiting_payloads([], probe=False) == []

    engine = Engine(Database("postgresql://unused"), Settings())
    for bad in ("not json", "[1, 2]", '"text"', '{"queues": "orders"}'):
        engine._on_waiting_notification(bad)
    engine._on_waiting_notification('{"queues": ["orders", 5, null]}')
    assert engine.remote_waiting_queues == ["orders"]


async def test_push_answers_are_expanded_into_the_results_of_each_request() -> None:
    """queen.push_items_v3 answers [position, status, message id, partition id] per item (020_push.sql); each
    request gets API.md 4.1's results for its own items, fields the broker knows filled from the items."""
    from queenpy.engine.engine import push_results

    release = asyncio.Event()

    async def procedure(payload: str) -> str:
        items = orjson.loads(payload)
        await release.wait()
        answer = [
            [
                item["index"],
                "f" if item["payload"] == "full" else "d" if item.get("transactionId") == "t0" else "q",
                f"m{item['index']}",
                "p1",
            ]
            for item in items
        ]
        return orjson.dumps(list(reversed(answer))).decode()  # any order: results go by position

    fusion = Fusion("push", procedure, max_batch_size=100, limit=StaticLimit(1), decode=push_results)
    busy = asyncio.create_task(fusion.submit([{"queue": "q", "payload": 0}]))
    await asyncio.sleep(0)
    fused = asyncio.gather(  # these two wait for the busy slot, then go as one call
        fusion.submit([{"queue": "q", "payload": 1, "transactionId": "t0", "traceId": "tr"}]),
        fusion.submit([{"queue": "q", "payload": 2}, {"queue": "r", "payload": "full"}]),
    )
    await asyncio.sleep(0)
    release.set()
    await busy
    first, second = await fused
    assert first == [
        {
            "index": 0,
            "transaction_id": "t0",
            "status": "duplicate",
            "message_id": "m0",
            "partition_id": "p1",
            "trace_id": "tr",
            "queueName": "q",
        }
    ]
    assert second == [
        {
            "index": 1,
            "transaction_id": "m1",
            "status": "queued",
            "message_id": "m1",
            "partition_id": "p1",
            "trace_id": None,
            "queueName": "q",
        },
        {"index": 2, "transaction_id": "m2", "status": "failed", "error": "queue full", "queueName": "r"},
    ]
