"""The Queen Streams procedures (``src/queenpy/sql/procedures/100_streams.sql``, API.md section 19) against
PostgreSQL itself: register with config hash and reset, the cycle's state ops, source ack and sink pushes in
one transaction (every error path rolls all of it back), and state reads by keys, prefix and ripeness.

Also the message-id order the Streams SDK relies on: it sorts each popped batch by (createdAt in
milliseconds, id) and acknowledges the last message, so ids must increase with the offsets of a partition.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import orjson
import psycopg
import pytest

from helpers import call_procedure, wait_until

GROUP = "streams.q"


def connect(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def call(conn: psycopg.Connection[Any], procedure: str, body: dict[str, Any]) -> dict[str, Any]:
    row = conn.execute(
        f"SELECT queen.{procedure}(%s::jsonb)::text", (orjson.dumps(body).decode(),)
    ).fetchone()
    assert row is not None
    result: dict[str, Any] = orjson.loads(row[0])
    return result


def register(
    conn: psycopg.Connection[Any],
    name: str,
    config_hash: str = "h1",
    reset: bool = False,
    source: str = "src",
) -> dict[str, Any]:
    return call(
        conn,
        "streams_register_v1",
        {
            "name": name,
            "source_queue": source,
            "sink_queue": "sink",
            "config_hash": config_hash,
            "reset": reset,
        },
    )


def push(
    conn: psycopg.Connection[Any], queue: str, payloads: list[Any], partition: str = "Default", **extra: Any
) -> list[dict[str, Any]]:
    return call_procedure(
        conn,
        "push_items_v1",
        [{"queue": queue, "partition": partition, "payload": p, **extra} for p in payloads],
    )


def pop(conn: psycopg.Connection[Any], queue: str, batch: int = 10, group: str = GROUP) -> dict[str, Any]:
    return call_procedure(
        conn,
        "pop_v1",
        [{"queue": queue, "partition": None, "consumerGroup": group, "batch": batch, "autoAck": False}],
    )[0]


def state(conn: psycopg.Connection[Any], query_id: str, partition_id: str, **filters: Any) -> dict[str, Any]:
    result = call(
        conn, "streams_state_get_v1", {"query_id": query_id, "partition_id": partition_id, **filters}
    )
    assert result["success"] is True
    return {row["key"]: row["value"] for row in result["rows"]}


def cycle(conn: psycopg.Connection[Any], query_id: str, partition_id: str, **fields: Any) -> dict[str, Any]:
    return call(
        conn,
        "streams_cycle_v1",
        {
            "query_id": query_id,
            "partition_id": partition_id,
            "consumer_group": GROUP,
            "release_lease": True,
            **fields,
        },
    )


def cursor(conn: psycopg.Connection[Any], partition_id: str, group: str = GROUP) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT last_consumed_seq, worker_id, total_messages_consumed FROM queen.partition_consumers "
        "WHERE partition_id = %s AND consumer_group = %s",
        (partition_id, group),
    ).fetchone()
    assert row is not None
    return tuple(row)


def sink_payloads(conn: psycopg.Connection[Any], queue: str = "sink") -> list[Any]:
    return [
        row[0]
        for row in conn.execute(
            "SELECT m.payload FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id "
            "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = %s ORDER BY p.name, m.seq",
            (queue,),
        )
    ]


@pytest.fixture
def conn(db_url: str) -> Any:
    with connect(db_url) as connection:
        yield connection


def test_register_creates_reuses_refuses_and_resets(conn: psycopg.Connection[Any]) -> None:
    first = register(conn, "q")
    assert first["success"] is True and first["fresh"] is True and first["reset"] is False
    again = register(conn, "q")
    assert (again["query_id"], again["fresh"], again["reset"]) == (first["query_id"], False, False)
    partition = str(uuid.uuid4())
    assert cycle(conn, first["query_id"], partition, state_ops=[{"type": "upsert", "key": "k", "value": 1}])[
        "success"
    ]

    refused = register(conn, "q", config_hash="h2")
    assert refused == {
        "success": False,
        "query_id": first["query_id"],
        "name": "q",
        "error": (
            "config_hash mismatch: operator chain changed for queryId 'q'. Pass reset:true to wipe existing "
            "state, or use a new queryId."
        ),
    }
    assert state(conn, first["query_id"], partition) == {"k": 1}  # refused: nothing touched

    same_hash_reset = register(conn, "q", reset=True)
    assert same_hash_reset["reset"] is False and state(conn, first["query_id"], partition) == {"k": 1}

    wiped = register(conn, "q", config_hash="h2", reset=True)
    assert (wiped["success"], wiped["query_id"], wiped["reset"], wiped["config_hash"]) == (
        True,
        first["query_id"],
        True,
        "h2",
    )
    assert state(conn, first["query_id"], partition) == {}
    assert register(conn, "q", config_hash="h2")["reset"] is False


def test_state_ops_apply_in_order_and_the_last_op_on_a_key_wins(conn: psycopg.Connection[Any]) -> None:
    query = register(conn, "q")["query_id"]
    partition = str(uuid.uuid4())
    done = cycle(
        conn,
        query,
        partition,
        state_ops=[
            {"type": "upsert", "key": "a", "value": 1},
            {"type": "upsert", "key": "b", "value": {"x": [1]}},
            {"type": "upsert", "key": "a", "value": 2},
            {"type": "upsert", "key": "c", "value": None},
        ],
    )
    assert done["success"] is True and done["state_ops_applied"] == 4 and done["ack_result"] is None
    assert state(conn, query, partition) == {"a": 2, "b": {"x": [1]}, "c": None}
    done = cycle(
        conn,
        query,
        partition,
        state_ops=[
            {"type": "delete", "key": "a"},
            {"type": "upsert", "key": "a", "value": 3},
            {"type": "delete", "key": "b"},
        ],
    )
    assert done["success"] is True
    assert state(conn, query, partition) == {"a": 3, "c": None}
    assert state(conn, query, str(uuid.uuid4())) == {}  # state is per (query, partition)


def test_a_delete_of_a_key_that_is_gone_fails_the_whole_cycle(conn: psycopg.Connection[Any]) -> None:
    """The SDK deletes only rows it read in the same cycle; a missing one was emitted by another cycle (the
    idle-flush timer, or a retried request that had committed), so this cycle's output would be a
    duplicate."""
    query = register(conn, "q")["query_id"]
    partition = str(uuid.uuid4())
    cycle(conn, query, partition, state_ops=[{"type": "upsert", "key": "w1", "value": {"acc": 1}}])
    emit = {
        "state_ops": [{"type": "delete", "key": "w1"}],
        "push_items": [{"queue": "sink", "partition": "p", "payload": {"window": "w1"}}],
    }
    assert cycle(conn, query, partition, **emit)["success"] is True
    again = cycle(conn, query, partition, **emit)
    assert again["success"] is False and "w1" in again["error"] and "not in the state" in again["error"]
    assert sink_payloads(conn) == [{"window": "w1"}]


def test_a_cycle_acks_pushes_and_writes_state_atomically(conn: psycopg.Connection[Any]) -> None:
    query = register(conn, "q")["query_id"]
    push(conn, "src", [{"n": n} for n in range(5)])
    batch = pop(conn, "src")
    partition, last = batch["partitionId"], batch["messages"][-1]
    done = cycle(
        conn,
        query,
        partition,
        state_ops=[{"type": "upsert", "key": "sum", "value": 10}],
        push_items=[
            {"queue": "sink", "partition": "Default", "payload": {"sum": 10}},
            {"queue": "sink", "partition": "Default", "payload": {"sum": 10}, "transactionId": "s1"},
            {"queue": "sink", "partition": "Default", "payload": {"dup": 1}, "transactionId": "s1"},
        ],
        ack={"transactionId": last["transactionId"], "leaseId": last["leaseId"], "count": 5},
    )
    assert done["success"] is True, done
    assert done["queueName"] == "src"
    assert [r["status"] for r in done["push_results"]] == ["queued", "queued", "duplicate"]
    assert done["ack_result"] == {"success": True, "count": 5, "lease_released": True, "dlq": False}
    assert [["sink", "Default"]] == done["touched"]
    assert cursor(conn, partition) == (5, None, 5)
    assert state(conn, query, partition) == {"sum": 10}
    assert sink_payloads(conn) == [{"sum": 10}, {"sum": 10}]
    assert pop(conn, "src")["messages"] == []


@pytest.mark.parametrize(
    "failure", ["message not found", "invalid lease", "unknown status", "sink full", "unknown query"]
)
def test_every_error_rolls_the_whole_cycle_back(conn: psycopg.Connection[Any], failure: str) -> None:
    query = register(conn, "q")["query_id"]
    push(conn, "src", [{"n": n} for n in range(3)])
    conn.execute(queue_options("full", max_queue_size=1))
    push(conn, "full", [{"n": 0}])
    batch = pop(conn, "src")
    partition, last = batch["partitionId"], batch["messages"][-1]
    ack = {"transactionId": last["transactionId"], "leaseId": last["leaseId"], "count": 3}
    items = [{"queue": "sink", "payload": {"out": 1}}]
    expected = {
        "message not found": "Message not found",
        "invalid lease": "Invalid or expired lease",
        "unknown status": "Unknown ack.status: finished",
        "sink full": "queue full",
        "unknown query": "Query not found",
    }[failure]
    if failure == "message not found":
        ack["transactionId"] = "no-such-message"
    elif failure == "invalid lease":
        ack["leaseId"] = str(uuid.uuid4())
    elif failure == "unknown status":
        ack["status"] = "finished"
    elif failure == "sink full":
        items.append({"queue": "full", "payload": {"out": 2}})
    elif failure == "unknown query":
        query = str(uuid.uuid4())
    conn.execute(
        "INSERT INTO queen_streams.state (query_id, partition_id, key, value) "
        "SELECT id, %s, 'gone', '1' FROM queen_streams.queries",
        (partition,),
    )
    failed = cycle(
        conn,
        query,
        partition,
        state_ops=[{"type": "upsert", "key": "k", "value": 1}, {"type": "delete", "key": "gone"}],
        push_items=items,
        ack=ack,
    )
    assert failed["success"] is False and expected in failed["error"], failed
    assert (failed["query_id"], failed["partition_id"]) == (query, partition)
    assert sink_payloads(conn) == []
    assert cursor(conn, partition) == (0, last["leaseId"], 0)  # lease still held, cursor where it was
    assert conn.execute("SELECT key FROM queen_streams.state").fetchall() == [("gone",)]


def queue_options(queue: str, **options: int) -> str:
    columns = ", ".join(f"{name} = {int(value)}" for name, value in options.items())
    return (
        f"INSERT INTO queen.queues (name) VALUES ('{queue}') ON CONFLICT DO NOTHING; "
        f"UPDATE queen.queues SET {columns} WHERE name = '{queue}'"
    )


def test_release_lease_false_keeps_the_lease_and_the_tail_comes_back(conn: psycopg.Connection[Any]) -> None:
    """The gate's partial ack: the cursor moves past the allowed prefix, the lease stays until it expires,
    then the unacked tail is delivered again, in order."""
    query = register(conn, "q")["query_id"]
    conn.execute(queue_options("src", lease_time=1))
    push(conn, "src", [{"n": n} for n in range(6)])
    batch = pop(conn, "src")
    partition, third = batch["partitionId"], batch["messages"][2]
    done = cycle(
        conn,
        query,
        partition,
        release_lease=False,
        ack={"transactionId": third["transactionId"], "leaseId": third["leaseId"], "count": 3},
    )
    assert done["ack_result"]["lease_released"] is False
    assert cursor(conn, partition) == (3, third["leaseId"], 3)
    assert pop(conn, "src")["messages"] == []  # the lease is still held
    conn.execute("UPDATE queen.partition_consumers SET lease_expires_at = now() - interval '1 second'")
    assert [m["data"]["n"] for m in pop(conn, "src")["messages"]] == [3, 4, 5]


def test_a_failed_ack_dead_letters_the_message_and_releases_the_lease(conn: psycopg.Connection[Any]) -> None:
    query = register(conn, "q")["query_id"]
    push(conn, "src", [{"n": 0}, {"n": 1}])
    batch = pop(conn, "src")
    partition, first = batch["partitionId"], batch["messages"][0]
    done = cycle(
        conn,
        query,
        partition,
        release_lease=False,
        ack={"transactionId": first["transactionId"], "leaseId": first["leaseId"], "status": "dlq"},
    )
    assert done["ack_result"] == {"success": True, "count": 1, "lease_released": True, "dlq": True}
    assert cursor(conn, partition) == (1, None, 1)
    row = conn.execute("SELECT consumer_group, error_message FROM queen.dead_letter_queue").fetchall()
    assert row == [(GROUP, "Streaming cycle reported failure")]
    assert [m["data"]["n"] for m in pop(conn, "src")["messages"]] == [1]


def test_an_ack_never_moves_the_cursor_backwards(conn: psycopg.Connection[Any]) -> None:
    query = register(conn, "q")["query_id"]
    push(conn, "src", [{"n": n} for n in range(4)])
    batch = pop(conn, "src")
    partition, messages = batch["partitionId"], batch["messages"]
    assert cycle(conn, query, partition, ack={"transactionId": messages[3]["transactionId"], "count": 4})[
        "success"
    ]
    assert cycle(conn, query, partition, ack={"transactionId": messages[1]["transactionId"]})["success"]
    assert cursor(conn, partition)[0] == 4


def test_state_get_filters_by_keys_prefix_and_ripeness(conn: psycopg.Connection[Any]) -> None:
    query = register(conn, "q")["query_id"]
    partition = str(uuid.uuid4())
    sep = "\u001f"
    rows = {
        f"tumb:5{sep}w1{sep}a": {"acc": 1, "windowEnd": 1000},
        f"tumb:5{sep}w2{sep}a": {"acc": 2, "windowEnd": 2000},
        f"tumb:5{sep}w3{sep}b": {"acc": 3, "windowEnd": "2000"},
        "__wm__": {"eventTimeMs": 1500},
        "tumb:50%_": {"windowEnd": 0},
    }
    cycle(
        conn, query, partition, state_ops=[{"type": "upsert", "key": k, "value": v} for k, v in rows.items()]
    )
    assert list(state(conn, query, partition)) == sorted(rows)  # ordered by key, bytewise
    assert state(conn, query, partition, keys=[]) == rows
    assert state(conn, query, partition, keys=["__wm__", "nope"]) == {"__wm__": {"eventTimeMs": 1500}}
    assert set(state(conn, query, partition, key_prefix="tumb:5" + sep)) == set(list(rows)[:3])
    assert set(state(conn, query, partition, key_prefix="tumb:5%")) == set()  # a prefix is literal, not LIKE
    ripe = state(conn, query, partition, key_prefix="tumb:5" + sep, ripe_at_or_before=1500)
    assert ripe == {f"tumb:5{sep}w1{sep}a": {"acc": 1, "windowEnd": 1000}}
    assert set(state(conn, query, partition, ripe_at_or_before=2000.0)) == {
        f"tumb:5{sep}w1{sep}a",
        f"tumb:5{sep}w2{sep}a",
        "tumb:50%_",
    }  # windowEnd "2000" is not a number
    result = call(
        conn, "streams_state_get_v1", {"query_id": query, "partition_id": partition, "keys": ["__wm__"]}
    )
    assert result["rows"][0]["updated_at"].endswith("+00:00")


def test_cycles_of_one_query_partition_run_one_at_a_time(db_url: str) -> None:
    """A cycle holds the (query, partition) advisory lock until COMMIT: a second cycle of the same query and
    partition waits for it (in any session), one of another partition does not."""
    with connect(db_url) as conn:
        query = register(conn, "q")["query_id"]
    partition, other = str(uuid.uuid4()), str(uuid.uuid4())
    body = {
        "query_id": query,
        "partition_id": partition,
        "state_ops": [{"type": "upsert", "key": "n", "value": 1}],
    }
    second: list[Any] = []

    def run(target: str, value: int) -> None:
        with connect(db_url) as conn:
            second.append(
                cycle(conn, query, target, state_ops=[{"type": "upsert", "key": "n", "value": value}])
            )

    with psycopg.connect(db_url) as holder:  # a transaction that has run a cycle and not committed yet
        holder.execute("SELECT queen.streams_cycle_v1(%s::jsonb)", (orjson.dumps(body).decode(),))
        waiter = threading.Thread(target=run, args=(partition, 2))
        waiter.start()
        with connect(db_url) as observer:
            wait_until(
                lambda: (
                    observer.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory'"
                    ).fetchone()
                    == (1,)
                ),
                message="the second cycle waiting on the advisory lock",
            )
            run(other, 3)  # another partition: not blocked
            assert second == [{**second[0], "success": True}] and second[0]["partition_id"] == other
            assert state(observer, query, partition) == {}
        holder.commit()
        waiter.join(timeout=30)
    assert len(second) == 2 and second[1]["success"] is True
    with connect(db_url) as conn:
        assert state(conn, query, partition) == {"n": 2} and state(conn, query, other) == {"n": 3}


def test_message_ids_increase_with_offsets_within_a_millisecond(conn: psycopg.Connection[Any]) -> None:
    """Ordered by (created_at truncated to the millisecond, id), as the Streams SDK orders a batch, every
    partition's messages come in offset order: across many small pushes in the same millisecond, and after
    the clock stepped back (a newest id from the future)."""
    for round_ in range(30):
        for partition in ("a", "b"):
            push(conn, "ids", [{"r": round_, "k": k} for k in range(3)], partition=partition)
    future = "ffffffff-ffff-7fff-8000-000000000000"  # a newest id with a millisecond far ahead of the clock
    conn.execute("UPDATE queen.partitions SET last_message_id = %s WHERE name = 'b'", (future,))
    push(conn, "ids", [{"after": k} for k in range(3)], partition="b")
    rows = conn.execute(
        "SELECT p.name, m.seq, m.id, date_trunc('milliseconds', m.created_at) FROM queen.messages m "
        "JOIN queen.partitions p ON p.id = m.partition_id ORDER BY p.name, m.seq"
    ).fetchall()
    for name in ("a", "b"):
        mine = [row for row in rows if row[0] == name]
        assert [row[1] for row in sorted(mine, key=lambda row: (row[3], str(row[2])))] == [
            row[1] for row in mine
        ]
        assert all(uuid.UUID(str(row[2])).version == 7 for row in mine)
    assert len({row[2] for row in rows}) == len(rows) == 183


async def test_a_committed_cycle_wakes_the_long_polls_of_its_sink_partitions(db_url: str) -> None:
    """The engine announces the sink partitions that got a message after COMMIT (in-process waiters at
    once); a cycle that rolled back wakes nobody."""
    from queenpy.engine import Engine
    from queenpy.settings import Settings
    from queenpy.store.database import Database

    database = Database(db_url, pool_size=2)
    await database.open()
    try:
        engine = Engine(database, Settings())
        with connect(db_url) as conn:
            query = register(conn, "q")["query_id"]
        woken = engine.waiters.register("sink", "p1")
        other = engine.waiters.register("sink", "p2")
        failed = await engine.stream_cycle(
            {
                "query_id": query,
                "partition_id": str(uuid.uuid4()),
                "state_ops": [{"type": "delete", "key": "missing"}],
                "push_items": [{"queue": "sink", "partition": "p1", "payload": 1}],
            }
        )
        assert failed["success"] is False and not woken.event.is_set()
        done = await engine.stream_cycle(
            {
                "query_id": query,
                "partition_id": str(uuid.uuid4()),
                "push_items": [{"queue": "sink", "partition": "p1", "payload": 1}],
            }
        )
        assert done["success"] is True and "touched" not in done
        assert woken.event.is_set() and not other.event.is_set()
        await engine.stop()
    finally:
        await database.close()
