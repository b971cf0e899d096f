"""The consumer row's leases and change times in ``queen.consumer_activity`` (migration 026): a pop's and an
ack's rewrite of the consumer row is a HOT update, the lookups by lease id alone find the row through the
table, and the stats job's drain keeps what a lease or a sweep still needs and deletes the rest."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from helpers import call_procedure

GROUP = "g"


@pytest.fixture
def conn(db_url: str) -> Any:
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


def pop(conn: psycopg.Connection[Any], queue: str, batch: int = 1) -> dict[str, Any]:
    result = call_procedure(
        conn,
        "pop_v1",
        [{"queue": queue, "partition": "p", "consumerGroup": GROUP, "batch": batch, "autoAck": False}],
    )[0]
    assert result["success"] and result["messages"], result
    return dict(result)


def ack(conn: psycopg.Connection[Any], popped: dict[str, Any]) -> None:
    results = call_procedure(
        conn,
        "ack_v1",
        [
            {
                "transactionId": m["transactionId"],
                "partitionId": popped["partitionId"],
                "leaseId": popped["leaseId"],
                "consumerGroup": GROUP,
                "status": "completed",
            }
            for m in popped["messages"]
        ],
    )
    assert all(r["success"] for r in results), results


def activity(conn: psycopg.Connection[Any], queue: str) -> list[tuple[Any, ...]]:
    """The queue's consumer_activity rows: (worker_id, lease_expires_at is set)."""
    return conn.execute(
        "SELECT a.worker_id, a.lease_expires_at IS NOT NULL FROM queen.consumer_activity a "
        "JOIN queen.partitions p ON p.id = a.partition_id JOIN queen.queues q ON q.id = p.queue_id "
        "WHERE q.name = %s ORDER BY a.consumer_id",
        (queue,),
    ).fetchall()


def renew(conn: psycopg.Connection[Any], lease: str) -> dict[str, Any]:
    return dict(call_procedure(conn, "renew_lease_v1", [{"leaseId": lease, "seconds": 120}])[0])


def test_a_pop_s_and_an_ack_s_rewrite_of_the_consumer_row_is_a_hot_update(
    conn: psycopg.Connection[Any],
) -> None:
    """With no index on a column a pop or an ack changes, both rewrites of the (partition, group) row are
    HOT: no index entry. Before migration 026 none was (the lease holder's, the lease end's and the change
    time's indexes)."""
    call_procedure(
        conn, "push_items_v1", [{"queue": "hot", "partition": "p", "payload": n} for n in range(4)]
    )
    ack(conn, pop(conn, "hot"))  # the consumer row exists from here on
    counts = (
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables "
        "WHERE relid = 'queen.partition_consumers'::regclass"
    )
    with conn.transaction():  # the backend's table statistics of this transaction
        before = conn.execute(counts).fetchone()
        ack(conn, pop(conn, "hot", batch=2))
        after = conn.execute(counts).fetchone()
    assert before is not None and after is not None
    updated, hot = after[0] - before[0], after[1] - before[1]
    assert updated >= 2, "the pop and the ack each rewrite the row"
    assert hot == updated


def test_a_lease_is_found_by_its_id_until_acked_and_its_row_drained_once_a_sweep_took_the_change(
    conn: psycopg.Connection[Any],
) -> None:
    call_procedure(conn, "push_items_v1", [{"queue": "lk", "partition": "p", "payload": n} for n in range(3)])
    popped = pop(conn, "lk")
    lease = popped["leaseId"]
    assert activity(conn, "lk") == [(lease, True)]

    conn.execute("SELECT queen.stats_refresh_v4(false)")  # a sweep takes the pop
    conn.execute("SELECT queen.consumer_activity_drain_v1(NULL)")
    assert activity(conn, "lk") == [(lease, True)], "a held lease's row must stay"
    renewed = renew(conn, lease)
    assert renewed["success"] and renewed["expiresAt"], renewed

    ack(conn, popped)
    assert activity(conn, "lk") == [(None, False)], "the ack's change is kept for the next sweep"
    conn.execute("SELECT queen.consumer_activity_drain_v1(NULL)")
    assert activity(conn, "lk") == [(None, False)], "drained before a sweep took the ack"
    conn.execute("SELECT queen.stats_refresh_v4(false)")
    assert conn.execute("SELECT queen.consumer_activity_drain_v1(NULL)").fetchone() == (1,)
    assert activity(conn, "lk") == []
    assert renew(conn, lease)["error"] == "Lease not found"

    # the next pop writes the row again: its lease is found by id
    again = pop(conn, "lk")
    assert activity(conn, "lk") == [(again["leaseId"], True)]
    assert renew(conn, again["leaseId"])["success"]


def test_an_expired_unreleased_lease_keeps_its_row_and_says_so(conn: psycopg.Connection[Any]) -> None:
    call_procedure(conn, "push_items_v1", [{"queue": "ex", "partition": "p", "payload": 1}])
    lease = pop(conn, "ex")["leaseId"]
    conn.execute("UPDATE queen.partition_consumers SET lease_expires_at = now() - interval '1 second'")
    conn.execute("SELECT queen.stats_refresh_v4(false)")
    conn.execute("SELECT queen.consumer_activity_drain_v1(NULL)")
    assert activity(conn, "ex") == [(lease, True)]
    assert renew(conn, lease)["error"] == "Lease already expired"


def test_deleting_a_consumer_group_removes_its_rows(conn: psycopg.Connection[Any]) -> None:
    call_procedure(conn, "push_items_v1", [{"queue": "del", "partition": "p", "payload": 1}])
    pop(conn, "del")
    conn.execute("DELETE FROM queen.partition_consumers WHERE consumer_group = %s", (GROUP,))
    assert activity(conn, "del") == []
