"""A group's first contact with a partition (queen.claim_partition_v2, 030_pop.sql).

The claim inserts the group's cursor row at its end, in its final state, under an advisory lock on
(partition, group). These tests hold one side of each race open in an uncommitted transaction and check that:

- a writer that creates the row without the advisory lock (an ack) makes the claim give the messages back
  untouched: the next pop delivers them, once;
- a pop for a named partition waits for a wildcard pop that is creating the row, then continues after it
  instead of reading the same messages again;
- two pops fused into one call (one transaction) meet the row the first one inserted;
- a cursor positioned by the subscription (``subscriptionFrom`` a timestamp) is stored by a leasing pop, so
  the pop after the ack continues from there, whether the pop inserts the row or finds a bare one (as an ack
  creates).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from helpers import call_procedure

GROUP = "first-contact"


@pytest.fixture
def conn(db_url: str) -> Any:
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


def push(conn: psycopg.Connection[Any], queue: str, partition: str, values: list[int]) -> None:
    call_procedure(
        conn, "push_items_v1", [{"queue": queue, "partition": partition, "payload": {"n": n}} for n in values]
    )


def pop_request(
    queue: str, partition: str | None = None, batch: int = 1, auto_ack: bool = True, **extra: Any
) -> dict[str, Any]:
    return {
        "queue": queue,
        "partition": partition,
        "consumerGroup": GROUP,
        "batch": batch,
        "autoAck": auto_ack,
        **extra,
    }


def values(result: dict[str, Any]) -> list[int]:
    return [m["data"]["n"] for m in result["messages"]]


def in_thread(target: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``target()`` in a thread; its return value lands in the dict under "result"."""
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.update(result=target()), daemon=True)
    thread.start()
    return thread, box


def test_a_row_created_by_an_ack_meanwhile_gives_the_messages_back(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    push(conn, "race", "only", [1, 2, 3])
    partition_id = conn.execute("SELECT id FROM queen.partitions WHERE name = 'only'").fetchone()[0]
    with psycopg.connect(db_url) as acker:  # not autocommit: the row it creates stays uncommitted
        acker.execute(
            "INSERT INTO queen.partition_consumers (partition_id, consumer_group) VALUES (%s, %s)",
            (partition_id, GROUP),
        )
        thread, box = in_thread(lambda: call_procedure(conn, "pop_v1", [pop_request("race", batch=10)])[0])
        thread.join(0.5)
        assert thread.is_alive(), "the claim's INSERT waits for the uncommitted row"
        acker.commit()
        thread.join(10)
    assert box["result"]["messages"] == []  # 'busy': nothing was taken
    cursor = conn.execute(
        "SELECT last_consumed_seq FROM queen.partition_consumers WHERE consumer_group = %s", (GROUP,)
    ).fetchone()
    assert cursor == (0,)
    delivered = values(call_procedure(conn, "pop_v1", [pop_request("race", batch=10)])[0])
    assert delivered == [1, 2, 3]
    assert call_procedure(conn, "pop_v1", [pop_request("race", batch=10)])[0]["messages"] == []


def test_a_named_pop_waits_for_a_wildcard_pop_creating_the_row(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    push(conn, "named", "p", [1, 2])
    with psycopg.connect(db_url) as first:  # its wildcard pop stays uncommitted
        taken = call_procedure(first, "pop_v1", [pop_request("named")])[0]
        assert values(taken) == [1]
        thread, box = in_thread(lambda: call_procedure(conn, "pop_v1", [pop_request("named", "p")])[0])
        thread.join(0.5)
        assert thread.is_alive(), "the named pop waits for the advisory lock of the pop creating the row"
        first.commit()
        thread.join(10)
    assert box["result"]["success"] is True
    assert values(box["result"]) == [2]


def test_fused_pops_meet_the_row_the_first_one_inserted(conn: psycopg.Connection[Any]) -> None:
    push(conn, "fused", "p", [1, 2, 3])
    results = call_procedure(
        conn, "pop_v1", [pop_request("fused"), pop_request("fused"), pop_request("fused", "p")]
    )
    # the named pop runs first (lock order, test_fused_pop_order.py) and inserts the row; the wildcard pops
    # meet it
    assert [values(r) for r in results] == [[2], [3], [1]]
    rows = conn.execute(
        "SELECT last_consumed_seq, total_messages_consumed FROM queen.partition_consumers "
        "WHERE consumer_group = %s",
        (GROUP,),
    ).fetchall()
    assert rows == [(3, 3)]


@pytest.mark.parametrize("bare_row", [False, True], ids=["inserted", "bare-row"])
def test_a_leasing_pop_stores_the_cursor_the_subscription_positioned(
    conn: psycopg.Connection[Any], bare_row: bool
) -> None:
    push(conn, "since", "p", [1, 2])
    if bare_row:
        conn.execute(
            "INSERT INTO queen.partition_consumers (partition_id, consumer_group) "
            "SELECT id, %s FROM queen.partitions WHERE name = 'p'",
            (GROUP,),
        )
    time.sleep(0.01)
    since = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    time.sleep(0.01)
    push(conn, "since", "p", [3, 4])
    first = call_procedure(
        conn, "pop_v1", [pop_request("since", auto_ack=False, subscriptionFrom=since.isoformat())]
    )[0]
    assert values(first) == [3]
    cursor = conn.execute(
        "SELECT last_consumed_seq, worker_id FROM queen.partition_consumers WHERE consumer_group = %s",
        (GROUP,),
    ).fetchone()
    assert cursor == (2, first["leaseId"])
    message = first["messages"][0]
    acked = call_procedure(
        conn,
        "ack_v1",
        [
            {
                "transactionId": message["transactionId"],
                "partitionId": message["partitionId"],
                "status": "completed",
                "consumerGroup": GROUP,
                "leaseId": message["leaseId"],
            }
        ],
    )[0]
    assert acked["success"] is True
    assert values(call_procedure(conn, "pop_v1", [pop_request("since", batch=10)])[0]) == [4]
