"""The guarantees of DESIGN.md sections 4 and 5, proved against PostgreSQL itself (no broker process).

Each test gets a fresh database copied from the migrated template and calls the stored procedures the
broker calls, from several connections and threads at once.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import defaultdict
from typing import Any

import psycopg
import pytest

from helpers import call_procedure, wait_until

QUEUE_MODE = "__QUEUE_MODE__"


def connect(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def push(
    conn: psycopg.Connection[Any], queue: str, payloads: list[Any], partition: str = "Default", **extra: Any
) -> list[dict[str, Any]]:
    items = [{"queue": queue, "partition": partition, "payload": p, **extra} for p in payloads]
    return call_procedure(conn, "push_items_v1", items)


def pop(
    conn: psycopg.Connection[Any],
    queue: str,
    partition: str | None = None,
    group: str = QUEUE_MODE,
    batch: int = 1,
    auto_ack: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    request = {
        "queue": queue,
        "partition": partition,
        "consumerGroup": group,
        "batch": batch,
        "autoAck": auto_ack,
        **extra,
    }
    return call_procedure(conn, "pop_v1", [request])[0]


def ack(
    conn: psycopg.Connection[Any],
    message: dict[str, Any],
    status: str = "completed",
    group: str = QUEUE_MODE,
    error: str | None = None,
) -> dict[str, Any]:
    item = {
        "transactionId": message["transactionId"],
        "partitionId": message["partitionId"],
        "status": status,
        "consumerGroup": group,
        "leaseId": message["leaseId"],
        "error": error,
    }
    return call_procedure(conn, "ack_v1", [item])[0]


def ack_all(
    conn: psycopg.Connection[Any], messages: list[dict[str, Any]], group: str = QUEUE_MODE
) -> list[dict[str, Any]]:
    items = [
        {
            "transactionId": m["transactionId"],
            "partitionId": m["partitionId"],
            "status": "completed",
            "consumerGroup": group,
            "leaseId": m["leaseId"],
        }
        for m in messages
    ]
    return call_procedure(conn, "ack_v1", items)


def test_push_dedupes_by_partition_and_transaction_id(db_url: str) -> None:
    with connect(db_url) as conn:
        first = push(conn, "orders", [{"n": 1}], transactionId="t-1")
        again = call_procedure(
            conn,
            "push_items_v1",
            [
                {"queue": "orders", "payload": {"n": 2}, "transactionId": "t-1"},
                {"queue": "orders", "payload": {"n": 3}, "transactionId": "t-2"},
                {"queue": "orders", "payload": {"n": 4}, "transactionId": "t-2"},
                {"queue": "orders", "partition": "other", "payload": {"n": 5}, "transactionId": "t-1"},
            ],
        )
        assert first[0]["status"] == "queued"
        assert [r["status"] for r in again] == ["duplicate", "queued", "duplicate", "queued"]
        assert again[0]["message_id"] == first[0]["message_id"]
        assert again[2]["message_id"] == again[1]["message_id"]
        rows = conn.execute("SELECT count(*) FROM queen.messages").fetchone()
        assert rows == (3,)


def test_a_push_without_transaction_id_gets_its_message_id_a_uuidv7(db_url: str) -> None:
    """The generated transactionId is the message id's text, a UUIDv7, found through the primary key (the
    dedupe index holds client transactionIds only, migration 017); a client that later sends that id on the
    partition gets a duplicate, in any other spelling (upper case) it is another transactionId."""
    with connect(db_url) as conn:
        results = push(conn, "plain", [{"n": n} for n in range(3)]) + push(conn, "plain", [{"n": 3}])
        assert [r["status"] for r in results] == ["queued"] * 4
        assert all(r["transaction_id"] == r["message_id"] for r in results)
        assert {uuid.UUID(r["transaction_id"]).version for r in results} == {7}
        assert len({r["transaction_id"] for r in results}) == 4
        again = push(conn, "plain", [{"n": 9}], transactionId=results[0]["transaction_id"])
        assert (again[0]["status"], again[0]["message_id"]) == ("duplicate", results[0]["message_id"])
        assert conn.execute("SELECT count(*) FROM queen.messages").fetchone() == (4,)
        upper = push(conn, "plain", [{"n": 10}], transactionId=results[1]["transaction_id"].upper())
        assert upper[0]["status"] == "queued"
        # and that one, a client transactionId, is deduplicated through the dedupe index
        twice = push(conn, "plain", [{"n": 11}], transactionId=results[1]["transaction_id"].upper())
        assert (twice[0]["status"], twice[0]["message_id"]) == ("duplicate", upper[0]["message_id"])
        assert conn.execute("SELECT count(*) FROM queen.messages").fetchone() == (5,)


def test_concurrent_pushers_one_partition_delivered_once_in_order(db_url: str) -> None:
    """Many pushers on one partition while a consumer reads all the while: every message is delivered
    exactly once per group, in offset order, none skipped, and each producer's messages in its order."""
    producers, batches, per_batch = 8, 25, 4
    total = producers * batches * per_batch
    errors: list[BaseException] = []
    received: list[dict[str, Any]] = []
    done_pushing = threading.Event()

    def producer(index: int) -> None:
        try:
            with connect(db_url) as conn:
                for b in range(batches):
                    push(
                        conn,
                        "fifo",
                        [{"producer": index, "n": b * per_batch + k} for k in range(per_batch)],
                        partition="p0",
                    )
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def consumer() -> None:
        try:
            with connect(db_url) as conn:
                while len(received) < total:
                    result = pop(conn, "fifo", "p0", group="g1", batch=7)
                    messages = result.get("messages") or []
                    if not messages:
                        if done_pushing.is_set() and len(received) < total:
                            # drain: the partition must still hand out the remainder
                            continue
                        continue
                    received.extend(messages)
                    results = ack_all(conn, messages, group="g1")
                    assert all(r["success"] for r in results)
                    assert results[-1]["leaseReleased"] is True
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(producers)]
    reader = threading.Thread(target=consumer)
    reader.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done_pushing.set()
    reader.join(timeout=120)
    assert not reader.is_alive(), f"consumer got {len(received)} of {total}"
    assert not errors, errors

    offsets = [m["offset"] for m in received]
    assert offsets == list(range(1, total + 1)), "offsets delivered out of order, twice or with gaps"
    per_producer: dict[int, list[int]] = defaultdict(list)
    for message in received:
        per_producer[message["data"]["producer"]].append(message["data"]["n"])
    for index in range(producers):
        assert per_producer[index] == list(range(batches * per_batch)), f"producer {index} out of order"

    # a second group reading afterwards sees the identical sequence
    with connect(db_url) as conn:
        replay: list[int] = []
        while True:
            messages = pop(conn, "fifo", "p0", group="g2", batch=100, auto_ack=True).get("messages") or []
            if not messages:
                break
            replay.extend(m["offset"] for m in messages)
        assert replay == offsets


def test_concurrent_transactional_pushers_one_partition_delivered_once_in_order(db_url: str) -> None:
    """The same guarantee for pushes made inside client transactions, fused in groups as the broker fuses
    them (queen.transaction_v2: several client transactions per call, each in its own subtransaction, some
    failing and rolled back): every committed message delivered exactly once, in offset order, none
    skipped, each producer's in its order; a failed member's push never shows."""
    producers, calls, members, per_member = 6, 12, 3, 2
    errors: list[BaseException] = []
    received: list[dict[str, Any]] = []
    committed: dict[int, int] = defaultdict(int)
    done = threading.Event()

    def producer(index: int) -> None:
        try:
            with connect(db_url) as conn:
                n = 0
                for c in range(calls):
                    group = []
                    for m in range(members):
                        items = [
                            {
                                "queue": "txfifo",
                                "partition": "p0",
                                "payload": {"producer": index, "n": n + k},
                                "transactionId": f"{index}-{n + k}",
                            }
                            for k in range(per_member)
                        ]
                        if m == 1 and c % 3 == 0:  # a member that fails after its push: rolled back
                            items.append(
                                {
                                    "queue": "txfifo",
                                    "partition": "p0",
                                    "payload": None,
                                    "transactionId": f"{index}-{n}",
                                }
                            )
                        else:
                            n += per_member
                        group.append({"operations": [{"type": "push", "items": items}]})
                    answers = call_procedure(conn, "transaction_v2", group)
                    assert [a["success"] for a in answers] == [
                        not (m == 1 and c % 3 == 0) for m in range(members)
                    ]
                committed[index] = n
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def consumer() -> None:
        try:
            with connect(db_url) as conn:
                while not (done.is_set() and len(received) == sum(committed.values())):
                    messages = pop(conn, "txfifo", "p0", group="g1", batch=5).get("messages") or []
                    if messages:
                        received.extend(messages)
                        assert all(r["success"] for r in ack_all(conn, messages, group="g1"))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    reader = threading.Thread(target=consumer)
    threads = [threading.Thread(target=producer, args=(i,)) for i in range(producers)]
    reader.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    reader.join(timeout=120)
    assert not reader.is_alive(), f"consumer got {len(received)} of {sum(committed.values())}"
    assert not errors, errors
    total = sum(committed.values())
    assert (
        total
        == producers * calls * (members - 1) * per_member + producers * (calls - calls // 3) * per_member
    )
    assert [m["offset"] for m in received] == list(range(1, total + 1)), "out of order, twice or with gaps"
    per_producer: dict[int, list[int]] = defaultdict(list)
    for message in received:
        per_producer[message["data"]["producer"]].append(message["data"]["n"])
    for index in range(producers):
        assert per_producer[index] == list(range(committed[index])), f"producer {index} out of order"


KEYS_STORED = """
SELECT p.name, p.last_seq, (SELECT count(*) FROM queen.messages m WHERE m.partition_id = p.id)
FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'keys' ORDER BY 1
"""
PUSH_WAITING = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%push%'"
NEW_CURSOR = "INSERT INTO queen.partition_consumers (partition_id, consumer_group) VALUES (%s, 'g')"


def test_a_push_never_waits_for_a_key_check_of_its_partitions_so_the_two_cannot_deadlock(db_url: str) -> None:
    """A push locks the rows of its partitions in id order until COMMIT. A foreign-key check (a new cursor, a
    dead letter, a replay, a consumer row updated twice in one transaction) takes a KEY SHARE lock on its
    partition's row, in whatever order its statement reaches them: fused wildcard pops of a new group create
    a cursor per request. When the push locked FOR UPDATE, which conflicts with KEY SHARE, the interleaving
    below deadlocked (a soak benchmark: 58 push requests answered "deadlock detected"). The push takes FOR NO
    KEY UPDATE, which does not: here it commits while the other transaction still holds its key lock."""
    with connect(db_url) as setup:
        placed = push(setup, "keys", [1]) + push(setup, "keys", [2], partition="b")
    first, second = sorted((r["partition_id"] for r in placed), key=uuid.UUID)  # the push's lock order
    outcome: dict[str, Any] = {}

    def pusher() -> None:
        items = [{"queue": "keys", "partition": name, "payload": 3} for name in ("Default", "b")]
        try:
            with connect(db_url) as conn:
                outcome["results"] = call_procedure(conn, "push_items_v1", items)
        except BaseException as exc:  # noqa: BLE001
            outcome["error"] = exc

    with psycopg.connect(db_url) as holder:  # one transaction, open until the end of the block
        holder.execute("SET deadlock_timeout = '100ms'")
        holder.execute(NEW_CURSOR, (second,))  # its key check: KEY SHARE on the second partition's row
        thread = threading.Thread(target=pusher)
        thread.start()
        with connect(db_url) as watcher:
            wait_until(
                lambda: not thread.is_alive() or watcher.execute(PUSH_WAITING).fetchone() != (0,),
                message="the push to end or to wait for a lock",
            )
        # a cursor on the first partition: with the push holding it FOR UPDATE and waiting for the second,
        # this key check closed the cycle
        holder.execute(NEW_CURSOR, (first,))
        thread.join(timeout=30)
        assert not thread.is_alive()
        assert "error" not in outcome, outcome.get("error")
        assert [r["status"] for r in outcome["results"]] == ["queued"] * 2
    with connect(db_url) as check:
        assert check.execute(KEYS_STORED).fetchall() == [("Default", 2, 2), ("b", 2, 2)]
        assert check.execute("SELECT count(*) FROM queen.partition_consumers").fetchone() == (2,)


@pytest.mark.parametrize("pop_procedure", ["pop_v1", "pop_group_v1"])
def test_fused_wildcard_pops_creating_cursors_beside_pushes_never_deadlock(
    db_url: str, pop_procedure: str
) -> None:
    """The load of the test above, from the procedures the broker calls: pushes of 30 messages to random
    partitions of 100, beside fused pops of 10 wildcard requests of a new consumer group each (every request
    creates a cursor: one key check per partition, in the order the requests claim them; pop_group_v1 is the
    broker's fused pop, pop_v1 the SQL API's). With the pushes' FOR UPDATE this deadlocked within seconds (31
    times in 20 s through pop_v1); every call must succeed."""
    with connect(db_url) as conn:
        call_procedure(conn, "push_items_v1", [{"queue": "mixed", "partition": f"p{n}"} for n in range(100)])
    until = time.monotonic() + 4
    done = {"push": 0, "pop": 0}
    errors: list[BaseException] = []

    def pusher(seed: int) -> None:
        chooser = random.Random(seed)
        try:
            with connect(db_url) as conn:
                while time.monotonic() < until:
                    items = [{"queue": "mixed", "partition": f"p{chooser.randrange(100)}"} for _ in range(30)]
                    assert {r["status"] for r in call_procedure(conn, "push_items_v1", items)} == {"queued"}
                    done["push"] += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def popper(worker: int) -> None:
        try:
            with connect(db_url) as conn:
                while time.monotonic() < until:
                    group = f"g{worker}-{done['pop']}"
                    requests = [
                        {"index": i, "queue": "mixed", "partition": None, "consumerGroup": group, "batch": 1}
                        for i in range(10)
                    ]
                    assert len(call_procedure(conn, pop_procedure, requests)) == 10
                    done["pop"] += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=pusher, args=(n,)) for n in range(4)]
    threads += [threading.Thread(target=popper, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert done["push"] > 0 and done["pop"] > 0


def test_one_lease_holder_per_partition_and_group(db_url: str) -> None:
    """Consumers racing on the same partitions never hold the same (partition, group) at once: with
    immediate acks, every message is delivered exactly once."""
    with connect(db_url) as conn:
        for p in range(4):
            push(conn, "leases", [{"p": p, "n": n} for n in range(50)], partition=f"p{p}")
    delivered: list[tuple[str, int]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    held = 0

    def worker(specific: bool) -> None:
        nonlocal held
        try:
            with connect(db_url) as conn:
                idle = 0
                while idle < 20:
                    if specific:
                        result = pop(conn, "leases", "p0", batch=3)
                    else:
                        result = pop(conn, "leases", None, batch=3, partitions=2)
                    messages = result.get("messages") or []
                    if result.get("error") == "lease_held":
                        with lock:
                            held += 1
                    if not messages:
                        idle += 1
                        continue
                    idle = 0
                    with lock:
                        delivered.extend((m["partitionId"], m["offset"]) for m in messages)
                    for message in messages:
                        assert ack(conn, message)["success"] is True
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i % 3 == 0,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert len(delivered) == 200
    assert len(set(delivered)) == 200, "a message was delivered to two lease holders"


def test_lease_blocks_same_group_not_other_groups(db_url: str) -> None:
    with connect(db_url) as conn:
        push(conn, "lg", [{"n": 1}, {"n": 2}])
        first = pop(conn, "lg", "Default", group="a")
        assert len(first["messages"]) == 1 and first["leaseId"]
        assert pop(conn, "lg", "Default", group="a")["error"] == "lease_held"
        assert pop(conn, "lg", None, group="a")["error"] == "no_available_partition"
        other = pop(conn, "lg", "Default", group="b")
        assert [m["data"]["n"] for m in other["messages"]] == [1]


def test_failed_acks_retry_then_dead_letter_queue(db_url: str) -> None:
    """retryLimit=2: a poison message is delivered 3 times, then goes to the DLQ and the cursor moves on."""
    with connect(db_url) as conn:
        call_procedure(
            conn, "configure_queue_v1", {"queue": "retry", "options": {"retryLimit": 2, "retryDelay": 0}}
        )
        push(conn, "retry", [{"n": "poison"}, {"n": "good"}])
        deliveries = 0
        while True:
            result = pop(conn, "retry", "Default")
            message = result["messages"][0]
            if message["data"]["n"] != "poison":
                break
            deliveries += 1
            outcome = ack(conn, message, status="failed", error="boom")
            assert outcome["success"] is True
            if outcome["dlq"]:
                break
        assert deliveries == 3
        dlq = call_procedure(conn, "dlq_list_v1", {"queue": "retry"})
        assert dlq["total"] == 1
        assert dlq["messages"][0]["data"] == {"n": "poison"}
        assert dlq["messages"][0]["errorMessage"] == "boom"
        assert dlq["messages"][0]["retryCount"] == 2
        nxt = pop(conn, "retry", "Default")
        assert [m["data"]["n"] for m in nxt["messages"]] == ["good"]


def test_failed_ack_is_redelivered_at_once_without_an_explicit_retry_delay(db_url: str) -> None:
    """As in Queen: the stored default retryDelay (1000 ms, still reported by configure) does not hold a
    failed batch back; only a retryDelay the queue's configure named does, until a configure without it."""
    with connect(db_url) as conn:
        configured = call_procedure(
            conn, "configure_queue_v1", {"queue": "now", "options": {"retryLimit": 2}}
        )
        assert configured["options"]["retryDelay"] == 1000
        push(conn, "now", [{"n": 1}])
        message = pop(conn, "now", "Default")["messages"][0]
        ack(conn, message, status="failed")
        assert [m["data"]["n"] for m in pop(conn, "now", "Default")["messages"]] == [1]

        call_procedure(conn, "configure_queue_v1", {"queue": "now", "options": {"retryDelay": 60000}})
        message = pop(conn, "now", "Default", group="g")["messages"][0]
        ack(conn, message, status="failed", group="g")
        assert pop(conn, "now", "Default", group="g")["messages"] == []

        call_procedure(conn, "configure_queue_v1", {"queue": "now", "options": {}})  # a full overwrite
        message = pop(conn, "now", "Default", group="h")["messages"][0]
        ack(conn, message, status="failed", group="h")
        assert [m["data"]["n"] for m in pop(conn, "now", "Default", group="h")["messages"]] == [1]

        # the same through Queen's SQL API (ack_messages_v2, the batch acks' procedure); a transaction's
        # failed ack never retries: it dead-letters at once (API.md 20.12)
        message = pop(conn, "now", "Default", group="i")["messages"][0]
        [result] = call_procedure(
            conn,
            "ack_messages_v2",
            [
                {
                    "transactionId": message["transactionId"],
                    "partitionId": message["partitionId"],
                    "status": "failed",
                    "consumerGroup": "i",
                    "leaseId": message["leaseId"],
                }
            ],
        )
        assert result["success"] is True and result["dlq"] is False
        assert [m["data"]["n"] for m in pop(conn, "now", "Default", group="i")["messages"]] == [1]


def test_retry_delay_holds_back_redelivery(db_url: str) -> None:
    with connect(db_url) as conn:
        call_procedure(conn, "configure_queue_v1", {"queue": "delay", "options": {"retryDelay": 60000}})
        push(conn, "delay", [{"n": 1}])
        message = pop(conn, "delay", "Default")["messages"][0]
        ack(conn, message, status="failed")
        assert pop(conn, "delay", "Default")["messages"] == []
        conn.execute("UPDATE queen.partition_consumers SET retry_available_at = now() - interval '1 second'")
        assert [m["data"]["n"] for m in pop(conn, "delay", "Default")["messages"]] == [1]


def test_transaction_whose_ack_fails_leaves_no_pushed_message(db_url: str) -> None:
    with connect(db_url) as conn:
        push(conn, "src", [{"n": 1}])
        message = pop(conn, "src", "Default")["messages"][0]
        result = call_procedure(
            conn,
            "transaction_v1",
            {
                "operations": [
                    {"type": "push", "items": [{"queue": "dst", "payload": {"out": 1}}]},
                    {
                        "type": "ack",
                        "transactionId": "does-not-exist",
                        "partitionId": message["partitionId"],
                        "status": "completed",
                    },
                ]
            },
        )
        assert result["success"] is False
        assert "Message not found" in result["error"]
        assert conn.execute("SELECT count(*) FROM queen.queues WHERE name = 'dst'").fetchone() == (0,)
        assert conn.execute(
            "SELECT count(*) FROM queen.messages m JOIN queen.partitions p ON p.id = "
            "m.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'dst'"
        ).fetchone() == (0,)
        # the source message is still leased to us, unacknowledged
        ok = call_procedure(
            conn,
            "transaction_v1",
            {
                "operations": [
                    {
                        "type": "ack",
                        "transactionId": message["transactionId"],
                        "partitionId": message["partitionId"],
                        "status": "completed",
                        "leaseId": message["leaseId"],
                    },
                    {"type": "push", "items": [{"queue": "dst", "payload": {"out": 1}}]},
                ]
            },
        )
        assert ok["success"] is True
        assert conn.execute("SELECT count(*) FROM queen.messages").fetchone() == (2,)


def test_transaction_duplicate_push_aborts(db_url: str) -> None:
    with connect(db_url) as conn:
        push(conn, "dup", [{"n": 1}], transactionId="same")
        result = call_procedure(
            conn,
            "transaction_v1",
            {
                "operations": [
                    {"type": "push", "items": [{"queue": "other", "payload": 1}]},
                    {"type": "push", "items": [{"queue": "dup", "payload": 2, "transactionId": "same"}]},
                ]
            },
        )
        assert result["success"] is False
        assert conn.execute("SELECT count(*) FROM queen.queues WHERE name = 'other'").fetchone() == (0,)


def test_subscription_mode_new_skips_history(db_url: str) -> None:
    with connect(db_url) as conn:
        push(conn, "subs", [{"n": 1}], partition="a")
        push(conn, "subs", [{"n": 2}], partition="b")
        assert pop(conn, "subs", None, group="late", subscriptionMode="new")["messages"] == []
        push(conn, "subs", [{"n": 3}], partition="b")
        push(conn, "subs", [{"n": 4}], partition="c")
        seen = []
        for _ in range(3):
            seen += [
                m["data"]["n"]
                for m in pop(conn, "subs", None, group="late", batch=10, auto_ack=True)["messages"]
            ]
        assert sorted(seen) == [3, 4]
        everything = []
        for _ in range(4):
            everything += [
                m["data"]["n"]
                for m in pop(conn, "subs", None, group="all", batch=10, auto_ack=True)["messages"]
            ]
        assert sorted(everything) == [1, 2, 3, 4]


def test_ack_to_older_message_moves_cursor_back(db_url: str) -> None:
    with connect(db_url) as conn:
        push(conn, "back", [{"n": 1}, {"n": 2}, {"n": 3}])
        messages = pop(conn, "back", "Default", batch=3, auto_ack=True)["messages"]
        assert pop(conn, "back", None)["error"] == "no_available_partition"
        ack(conn, {**messages[0], "leaseId": ""})
        assert [m["data"]["n"] for m in pop(conn, "back", None, batch=5)["messages"]] == [2, 3]


@pytest.mark.parametrize("seconds", [30])
def test_lease_renewal_extends_live_leases_only(db_url: str, seconds: int) -> None:
    with connect(db_url) as conn:
        push(conn, "renew", [{"n": 1}])
        message = pop(conn, "renew", "Default")["messages"][0]
        renewed = call_procedure(conn, "renew_lease_v1", [{"leaseId": message["leaseId"], "seconds": 3600}])[
            0
        ]
        assert renewed["success"] is True and renewed["expiresAt"]
        unknown = call_procedure(conn, "renew_lease_v1", [{"leaseId": "nope", "seconds": seconds}])[0]
        assert unknown == {
            "index": 0,
            "leaseId": "nope",
            "success": False,
            "expiresAt": None,
            "error": "Lease not found",
        }
        conn.execute("UPDATE queen.partition_consumers SET lease_expires_at = now() - interval '1 second'")
        expired = call_procedure(conn, "renew_lease_v1", [{"leaseId": message["leaseId"], "seconds": 60}])[0]
        assert expired["error"] == "Lease already expired"
        # an expired lease lets the next consumer in, and delivers the same message again
        again = pop(conn, "renew", "Default")["messages"]
        assert [m["transactionId"] for m in again] == [message["transactionId"]]


def test_dlq_replay_redelivers_only_to_its_group_then_cursor_stays(db_url: str) -> None:
    with connect(db_url) as conn:
        call_procedure(
            conn, "configure_queue_v1", {"queue": "replay", "options": {"retryLimit": 0, "retryDelay": 0}}
        )
        push(conn, "replay", [{"n": 1}, {"n": 2}, {"n": 3}])
        first = pop(conn, "replay", None, group="g")["messages"][0]
        assert ack(conn, first, status="failed", group="g")["dlq"] is True
        rest = pop(conn, "replay", None, group="g", batch=10)["messages"]
        assert [m["data"]["n"] for m in rest] == [2, 3]
        for message in rest:
            ack(conn, message, group="g")
        other = pop(conn, "replay", None, group="h", batch=10, auto_ack=True)["messages"]
        assert [m["data"]["n"] for m in other] == [1, 2, 3]

        row = conn.execute(
            "SELECT queen.dlq_replay_v1(%s, %s, NULL)::text", (first["partitionId"], first["transactionId"])
        ).fetchone()
        assert '"success": true' in row[0]  # type: ignore[index]
        assert call_procedure(conn, "dlq_list_v1", {"queue": "replay"})["total"] == 0
        again = pop(conn, "replay", None, group="g", batch=10)["messages"]
        assert [m["data"]["n"] for m in again] == [1]
        assert ack(conn, again[0], group="g")["success"] is True
        assert pop(conn, "replay", None, group="g", batch=10)["error"] == "no_available_partition"
        assert pop(conn, "replay", None, group="h", batch=10)["error"] == "no_available_partition"
        push(conn, "replay", [{"n": 4}])
        assert [m["data"]["n"] for m in pop(conn, "replay", None, group="g", batch=10)["messages"]] == [4]


def test_a_replayed_dead_letter_comes_first_in_one_batch_with_new_messages_and_auto_ack_settles_both(
    db_url: str,
) -> None:
    """One pop joins the replayed dead letter (first) and the messages after the cursor; with autoAck
    the replay is consumed too, so the next pop finds nothing."""
    with connect(db_url) as conn:
        call_procedure(
            conn, "configure_queue_v1", {"queue": "mixed", "options": {"retryLimit": 0, "retryDelay": 0}}
        )
        push(conn, "mixed", [{"n": 1}, {"n": 2}])
        first = pop(conn, "mixed", None, group="g")["messages"][0]
        assert ack(conn, first, status="failed", group="g")["dlq"] is True
        conn.execute(
            "SELECT queen.dlq_replay_v1(%s, %s, NULL)", (first["partitionId"], first["transactionId"])
        )
        push(conn, "mixed", [{"n": 3}])
        both = pop(conn, "mixed", None, group="g", batch=10, auto_ack=True)["messages"]
        assert [(m["data"]["n"], m["offset"]) for m in both] == [(1, 1), (2, 2), (3, 3)]
        assert pop(conn, "mixed", None, group="g", batch=10)["error"] == "no_available_partition"


def test_a_pop_over_several_partitions_returns_them_one_after_another(db_url: str) -> None:
    """``partitions`` > 1: each claimed partition's messages in offset order, partition after partition."""
    with connect(db_url) as conn:
        for name in ("a", "b", "c"):
            call_procedure(
                conn,
                "push_items_v1",
                [
                    {"index": i, "queue": "multi", "partition": name, "payload": {"p": name, "n": i}}
                    for i in range(3)
                ],
            )
        result = pop(conn, "multi", None, batch=7, partitions=3)
        got = [(m["partition"], m["data"]["n"]) for m in result["messages"]]
        assert len(got) == 7 and result["partitionsClaimed"] == 3
        order = list(dict.fromkeys(p for p, _ in got))
        assert sorted(order) == ["a", "b", "c"]
        assert got == [(p, n) for p in order for n in range(3)][:7]


def test_max_size_rejects_items_beyond_capacity(db_url: str) -> None:
    with connect(db_url) as conn:
        call_procedure(conn, "configure_queue_v1", {"queue": "capped", "options": {"maxSize": 3}})
        first = push(conn, "capped", [{"n": 1}, {"n": 2}])
        assert [r["status"] for r in first] == ["queued", "queued"]
        second = push(conn, "capped", [{"n": 3}, {"n": 4}, {"n": 5}])
        assert [r["status"] for r in second] == ["queued", "failed", "failed"]
        assert second[1]["error"] == "queue full"
        assert conn.execute("SELECT count(*) FROM queen.messages").fetchone() == (3,)
        # consuming does not free room; deleting messages (retention) does
        conn.execute("DELETE FROM queen.messages WHERE seq = 1")
        assert [r["status"] for r in push(conn, "capped", [{"n": 6}, {"n": 7}])] == ["queued", "failed"]
        # uncapped queues are unaffected
        assert push(conn, "free", [{"n": 1}] * 1)[0]["status"] == "queued"


def test_max_size_counts_only_new_messages_in_index_order_across_partitions(db_url: str) -> None:
    """Duplicates (of a stored message, or of an earlier item of the batch) take no room; the room goes to
    the queue's new messages in index order, whatever their partition."""
    with connect(db_url) as conn:
        call_procedure(conn, "configure_queue_v1", {"queue": "capped", "options": {"maxSize": 4}})
        assert push(conn, "capped", [{"n": 0}], partition="p1", transactionId="a")[0]["status"] == "queued"
        items = [
            {"partition": "p1", "transactionId": "a"},  # duplicate of the stored message
            {"partition": "p2", "transactionId": "b"},
            {"partition": "p1", "transactionId": "b"},  # another partition: not a duplicate
            {"partition": "p2", "transactionId": "b"},  # duplicate of item 1
            {"partition": "p1"},
            {"partition": "p2"},
            {"partition": "p1"},
        ]
        results = call_procedure(
            conn, "push_items_v1", [{"queue": "capped", "payload": n, **item} for n, item in enumerate(items)]
        )
        assert [r["status"] for r in results] == [
            "duplicate",
            "queued",
            "queued",
            "duplicate",
            "queued",
            "failed",
            "failed",
        ]
        assert results[0]["message_id"] != results[1]["message_id"] == results[3]["message_id"]
        stored = conn.execute(
            "SELECT p.name, m.seq, m.payload FROM queen.messages m JOIN queen.partitions p "
            "ON p.id = m.partition_id ORDER BY 1, 2"
        ).fetchall()
        assert stored == [("p1", 1, {"n": 0}), ("p1", 2, 2), ("p1", 3, 4), ("p2", 1, 1)]
        # the maintained count (queen.queue_capacity) added the admitted messages only
        assert conn.execute(
            "SELECT c.stored FROM queen.queue_capacity c JOIN queen.queues q ON q.id = c.queue_id "
            "WHERE q.name = 'capped'"
        ).fetchone() == (4,)


def test_offsets_and_ids_follow_the_items_index_not_their_place_in_the_array(db_url: str) -> None:
    """SQL callers may number items out of array order (push_messages_v3 with explicit indexes): offsets
    follow the index, results come in index order, and ids increase with the offsets (the order the Streams
    SDK sorts by). push_items_v3, the broker's call, follows the array; push_items_v2 sorts such a batch."""
    with connect(db_url) as conn:
        rows = conn.execute(
            "SELECT queen.push_items_v1(%s::jsonb)::text",
            (
                json.dumps(
                    [{"index": index, "queue": "numbered", "payload": index} for index in (2, 0, 3, 1)]
                ),
            ),
        ).fetchone()
        assert rows is not None
        results = json.loads(rows[0])
        assert [r["index"] for r in results] == [0, 1, 2, 3] and {r["status"] for r in results} == {"queued"}
        stored = conn.execute("SELECT seq, payload, id::text FROM queen.messages ORDER BY seq").fetchall()
        assert [row[1] for row in stored] == [0, 1, 2, 3]
        assert [row[2] for row in stored] == sorted(row[2] for row in stored)
        assert [r["message_id"] for r in results] == [row[2] for row in stored]


def test_a_push_racing_the_deletion_of_its_queue_stores_its_messages_in_the_queue_created_again(
    db_url: str,
) -> None:
    """The push reads its partition, then waits for the partition's row lock while another transaction
    deletes the queue (and with it the partition). It must not answer "queued" for a message it did not
    store, nor store one in a partition that no longer exists: it creates the queue and partition again."""
    with connect(db_url) as conn, connect(db_url) as deleter, connect(db_url) as observer:
        push(conn, "doomed", [{"n": 0}], partition="p")
        pusher = conn.info.backend_pid
        results: list[list[dict[str, Any]]] = []
        with deleter.transaction():
            deleter.execute("DELETE FROM queen.queues WHERE name = 'doomed'")
            thread = threading.Thread(
                target=lambda: results.append(push(conn, "doomed", [{"n": 1}], partition="p"))
            )
            thread.start()
            wait_until(
                lambda: (
                    observer.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", (pusher,)).fetchone()
                    == (True,)
                ),
                message="the push waiting for the deleted partition's lock",
            )
        thread.join(timeout=30)
        assert [r["status"] for r in results[0]] == ["queued"]
        stored = conn.execute(
            "SELECT m.payload, p.name, m.seq FROM queen.messages m JOIN queen.partitions p "
            "ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id "
            "WHERE q.name = 'doomed'"
        ).fetchall()
        assert stored == [({"n": 1}, "p", 1)]
        assert results[0][0]["partition_id"] == str(
            conn.execute(
                "SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
                "WHERE q.name = 'doomed'"
            ).fetchone()[0]  # type: ignore[index]
        )
        assert conn.execute(
            "SELECT count(*) FROM queen.messages m WHERE NOT EXISTS "
            "(SELECT 1 FROM queen.partitions p WHERE p.id = m.partition_id)"
        ).fetchone() == (0,)


def test_deleting_a_queue_or_a_partition_deletes_its_messages_and_nothing_else(db_url: str) -> None:
    """Operators delete a queue with SQL (API.md section 2): everything in it goes, through the cascade from
    queues to partitions and from partitions to messages (migration 015), dead letters included."""
    with connect(db_url) as conn:
        push(conn, "gone", [1, 2], partition="a")
        push(conn, "gone", [3], partition="b")
        push(conn, "kept", [4, 5], partition="a")
        [message] = pop(conn, "gone", "b")["messages"]
        conn.execute("UPDATE queen.queues SET retry_limit = 0, dead_letter_queue = true WHERE name = 'gone'")
        ack(conn, message, status="failed", error="boom")
        assert conn.execute("SELECT count(*) FROM queen.dead_letter_queue").fetchone() == (1,)

        def payloads() -> list[Any]:
            return [row[0] for row in conn.execute("SELECT payload FROM queen.messages ORDER BY payload")]

        conn.execute(
            "DELETE FROM queen.partitions p USING queen.queues q "
            "WHERE q.id = p.queue_id AND q.name = 'gone' AND p.name = 'a'"
        )
        assert payloads() == [3, 4, 5]
        conn.execute("DELETE FROM queen.queues WHERE name = 'gone'")
        assert payloads() == [4, 5]
        assert conn.execute("SELECT count(*) FROM queen.dead_letter_queue").fetchone() == (0,)


def test_transaction_push_op_with_many_items_is_one_all_or_nothing_push(db_url: str) -> None:
    with connect(db_url) as conn:
        push(conn, "tx-src", [{"n": n} for n in range(3)])
        messages = pop(conn, "tx-src", "Default", batch=3)["messages"]
        ops: list[dict[str, Any]] = [
            {
                "type": "ack",
                "transactionId": m["transactionId"],
                "partitionId": m["partitionId"],
                "leaseId": m["leaseId"],
            }
            for m in messages
        ]
        ops.append({"type": "push", "items": [{"queue": "tx-dst", "payload": n} for n in range(3)]})
        result = call_procedure(conn, "transaction_v1", {"operations": ops})
        assert result["success"] is True
        assert [(r["index"], r["type"]) for r in result["results"]] == [
            (0, "ack"),
            (1, "ack"),
            (2, "ack"),
            (3, "push"),
            (4, "push"),
            (5, "push"),
        ]
        call_procedure(conn, "configure_queue_v1", {"queue": "tx-full", "options": {"maxSize": 1}})
        push(conn, "tx-src", [{"n": 9}])
        [last] = pop(conn, "tx-src", "Default")["messages"]
        full = call_procedure(
            conn,
            "transaction_v1",
            {
                "operations": [
                    {
                        "type": "ack",
                        "transactionId": last["transactionId"],
                        "partitionId": last["partitionId"],
                    },
                    {
                        "type": "push",
                        "items": [{"queue": "tx-full", "payload": 1}, {"queue": "tx-full", "payload": 2}],
                    },
                ]
            },
        )
        assert full["success"] is False and "queue full" in full["error"]
        assert conn.execute(
            "SELECT count(*) FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id"
            " JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'tx-full'"
        ).fetchone() == (0,)
