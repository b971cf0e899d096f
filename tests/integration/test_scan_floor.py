"""The wildcard scan floor (queen.advance_scan_floor_v3, 030_pop.sql).

- it moves past the partitions a group has consumed, so a wildcard pop does not walk over them again;
- it moves past a partition under a live lease too and lists it as parked: a lease that is never acked
  does not hold the floor, and the partition is found again the moment its lease ends or a failed ack
  frees it;
- it never passes the start of a write transaction in flight: a push that commits after the floor was
  computed is still found, even when every other partition was pushed and consumed after it began;
- a push that commits while the floor is computed (after the computation started, before it looked at the
  transactions in flight) is still found;
- a partition left below the floor with work (what a push the floor could not see leaves) is found by the
  sweep below the floor, which examines ``SWEEP_STEP`` partitions a step, every ``SWEEP_EVERY``, and goes on
  where its last step stopped.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from helpers import call_procedure

GROUP = "floor-group"


@pytest.fixture
def conn(db_url: str) -> Any:
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


def floor_of(conn: psycopg.Connection[Any], queue: str) -> Any:
    row = conn.execute(
        "SELECT last_empty_scan_at FROM queen.consumer_watermarks "
        "WHERE queue_name = %s AND consumer_group = %s",
        (queue, GROUP),
    ).fetchone()
    return None if row is None else row[0]


def pop(conn: psycopg.Connection[Any], queue: str, batch: int = 10, auto_ack: bool = True) -> dict[str, Any]:
    time.sleep(0.06)  # the floor advances at most every 50 ms
    result: dict[str, Any] = call_procedure(
        conn, "pop_v1", [{"queue": queue, "consumerGroup": GROUP, "batch": batch, "autoAck": auto_ack}]
    )[0]
    return result


def parked_of(conn: psycopg.Connection[Any], queue: str) -> list[str]:
    row = conn.execute(
        "SELECT parked::text[] FROM queen.consumer_watermarks WHERE queue_name = %s AND consumer_group = %s",
        (queue, GROUP),
    ).fetchone()
    assert row is not None
    return list(row[0])


def ack_first(conn: psycopg.Connection[Any], popped: dict[str, Any], status: str) -> bool:
    """Ack the first message of a pop under its lease with ``status``; whether the ack succeeded."""
    message = popped["messages"][0]
    ack = {
        "transactionId": message["transactionId"],
        "partitionId": popped["partitionId"],
        "consumerGroup": GROUP,
        "leaseId": popped["leaseId"],
        "status": status,
    }
    return bool(call_procedure(conn, "ack_v1", [ack])[0]["success"])


def hold_the_oldest_and_consume_the_rest(conn: psycopg.Connection[Any], queue: str, partitions: int) -> Any:
    """Push one message to each of ``partitions`` partitions (p0 oldest), lease p0 without acking it, consume
    the others; the floor then stands above every partition. Returns p0's pop."""
    for n in range(partitions):
        call_procedure(conn, "push_items_v1", [{"queue": queue, "partition": f"p{n}", "payload": {"n": n}}])
    held = pop(conn, queue, auto_ack=False)
    assert held["partition"] == "p0"
    delivered = []
    for _ in range(partitions - 1):
        delivered.extend(m["data"]["n"] for m in pop(conn, queue)["messages"])
    assert sorted(delivered) == list(range(1, partitions))
    assert pop(conn, queue)["error"] == "no_available_partition"  # this pop advances the floor
    newest = conn.execute(
        "SELECT max(p.last_message_at) FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
        "WHERE q.name = %s",
        (queue,),
    ).fetchone()
    assert newest is not None and floor_of(conn, queue) > newest[0]
    assert parked_of(conn, queue) == [held["partitionId"]]
    return held


def test_a_held_lease_does_not_hold_the_floor_and_a_failed_ack_frees_it_at_once(
    conn: psycopg.Connection[Any],
) -> None:
    held = hold_the_oldest_and_consume_the_rest(conn, "parked", 20)
    assert ack_first(conn, held, "failed")
    # no wait for the floor: the candidate scan reads the parked partition by id
    again = call_procedure(conn, "pop_v1", [{"queue": "parked", "consumerGroup": GROUP, "batch": 10}])[0]
    assert again["partition"] == "p0" and [m["data"] for m in again["messages"]] == [{"n": 0}]
    assert ack_first(conn, again, "completed")
    assert pop(conn, "parked")["error"] == "no_available_partition"
    assert parked_of(conn, "parked") == []  # consumed: no longer parked


def test_a_lease_that_ends_below_the_floor_is_delivered_again(conn: psycopg.Connection[Any]) -> None:
    call_procedure(conn, "configure_queue_v1", {"queue": "expiring", "options": {"leaseTime": 1}})
    hold_the_oldest_and_consume_the_rest(conn, "expiring", 12)
    time.sleep(1.1)
    again = pop(conn, "expiring")
    assert again["partition"] == "p0" and [m["data"] for m in again["messages"]] == [{"n": 0}]


def test_floor_moves_past_consumed_partitions(conn: psycopg.Connection[Any]) -> None:
    for n in range(30):
        call_procedure(conn, "push_items_v1", [{"queue": "wide", "partition": f"p{n}", "payload": {"n": n}}])
    delivered = []
    for _ in range(30):
        delivered.extend(m["data"]["n"] for m in pop(conn, "wide")["messages"])
    assert sorted(delivered) == list(range(30))
    assert pop(conn, "wide")["error"] == "no_available_partition"  # this pop advances the floor
    newest = conn.execute("SELECT max(last_message_at) FROM queen.partitions").fetchone()
    assert newest is not None and floor_of(conn, "wide") > newest[0]

    call_procedure(conn, "push_items_v1", [{"queue": "wide", "partition": "p7", "payload": {"n": "again"}}])
    assert [m["data"] for m in pop(conn, "wide")["messages"]] == [{"n": "again"}]


def test_floor_waits_for_a_push_in_flight(conn: psycopg.Connection[Any], db_url: str) -> None:
    call_procedure(conn, "push_items_v1", [{"queue": "wide", "partition": "p0", "payload": {"n": 0}}])
    with psycopg.connect(db_url) as late:  # not autocommit: its push stays uncommitted
        call_procedure(
            late, "push_items_v1", [{"queue": "wide", "partition": "late", "payload": {"n": "late"}}]
        )
        row = late.execute("SELECT last_message_at FROM queen.partitions WHERE name = 'late'").fetchone()
        assert row is not None
        pushed_at = row[0]

        # everything else is pushed after the late push took its time, and consumed
        for n in range(1, 5):
            call_procedure(
                conn, "push_items_v1", [{"queue": "wide", "partition": f"p{n}", "payload": {"n": n}}]
            )
        delivered = []
        for _ in range(5):
            delivered.extend(m["data"]["n"] for m in pop(conn, "wide")["messages"])
        assert sorted(delivered) == list(range(5))
        assert pop(conn, "wide")["error"] == "no_available_partition"
        floor = floor_of(conn, "wide")
        # the floor stops at the start of the transaction in flight (without it, it would pass pushed_at)
        assert floor is not None and floor <= pushed_at
        late.commit()

    assert [m["data"] for m in pop(conn, "wide")["messages"]] == [{"n": "late"}]


def test_floor_sees_a_push_that_commits_while_it_is_computed(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    """A push in flight when the floor computation starts and committed before pg_stat_activity is read is
    neither in flight at that read nor (had the partitions been scanned in the same statement's snapshot)
    in the scan. A sleep injected just before the read makes the commit land there every time."""
    definition = conn.execute("SELECT pg_get_functiondef('queen.advance_scan_floor_v3'::regproc)").fetchone()
    assert definition is not None and definition[0].count("FROM pg_stat_activity a") == 1
    conn.execute(
        definition[0].replace(
            "FROM pg_stat_activity a",
            "FROM (SELECT pg_sleep(0.5)) AS pause CROSS JOIN LATERAL "
            "(SELECT * FROM pg_stat_activity WHERE pause IS NOT NULL OFFSET 0) a",
        )
    )

    call_procedure(conn, "push_items_v1", [{"queue": "wide", "partition": "p0", "payload": "p0"}])
    assert [m["data"] for m in pop(conn, "wide")["messages"]] == ["p0"]
    with psycopg.connect(db_url) as late:  # not autocommit: its push stays uncommitted until told
        call_procedure(late, "push_items_v1", [{"queue": "wide", "partition": "late", "payload": "late"}])
        popped: list[dict[str, Any]] = []
        first = threading.Thread(target=lambda: popped.append(pop(conn, "wide")))
        first.start()  # its floor computation sleeps 0.5 s before it reads pg_stat_activity
        time.sleep(0.25)
        late.commit()
        first.join()

    delivered = [m["data"] for m in popped[0]["messages"]]
    for _ in range(5):
        delivered.extend(m["data"] for m in pop(conn, "wide")["messages"])
    assert delivered == ["late"]


def test_a_released_lease_with_messages_left_leaves_the_list(conn: psycopg.Connection[Any]) -> None:
    """A queue whose partitions keep a backlog: a partition parked while leased, then acked with messages
    left, leaves the list at the floor's next step (the floor comes down to it), so the list holds only what
    is leased now, not every partition ever leased."""
    for n in range(5):
        call_procedure(
            conn,
            "push_items_v1",
            [{"queue": "deep", "partition": f"p{n}", "payload": {"n": n, "i": i}} for i in range(3)],
        )
    first = pop(conn, "deep", batch=1, auto_ack=False)
    second = pop(conn, "deep", batch=1, auto_ack=False)  # its floor step parks p0
    assert (first["partition"], second["partition"]) == ("p0", "p1")
    assert parked_of(conn, "deep") == [first["partitionId"]]
    for held in (first, second):
        assert ack_first(conn, held, "completed")
    third = pop(conn, "deep", batch=1)  # autoAck: leases nothing; its floor step frees p0 (and p1)
    assert third["partition"] == "p0" and [m["data"] for m in third["messages"]] == [{"n": 0, "i": 1}]
    assert parked_of(conn, "deep") == []


SWEEP_STEP = 5000  # partitions a sweep step examines (advance_scan_floor_v3)


def sweep_due(conn: psycopg.Connection[Any], queue: str) -> None:
    """Make the group's next floor step take a sweep step (due every SWEEP_EVERY = 60 s)."""
    conn.execute(
        "UPDATE queen.consumer_watermarks SET full_scan_at = now() - interval '61 seconds' "
        "WHERE queue_name = %s AND consumer_group = %s",
        (queue, GROUP),
    )


def sweep_at(conn: psycopg.Connection[Any], queue: str) -> Any:
    row = conn.execute(
        "SELECT sweep_at FROM queen.consumer_watermarks WHERE queue_name = %s AND consumer_group = %s",
        (queue, GROUP),
    ).fetchone()
    assert row is not None
    return row[0]


def hide_work_below_the_floor(conn: psycopg.Connection[Any], queue: str, partition: str) -> None:
    """Move the group's cursor of ``partition`` back to 0 without dropping the floor, as a push the floor
    computation could not see leaves a partition: work below the floor."""
    conn.execute(
        "UPDATE queen.partition_consumers c SET last_consumed_seq = 0 "
        "FROM queen.partitions p, queen.queues q WHERE c.partition_id = p.id AND p.queue_id = q.id "
        "AND q.name = %s AND p.name = %s AND c.consumer_group = %s",
        (queue, partition, GROUP),
    )


def test_the_sweep_finds_work_left_below_the_floor(conn: psycopg.Connection[Any]) -> None:
    for n in range(30):
        call_procedure(conn, "push_items_v1", [{"queue": "swept", "partition": f"p{n}", "payload": {"n": n}}])
    for _ in range(30):
        assert pop(conn, "swept")["messages"]
    assert pop(conn, "swept")["error"] == "no_available_partition"  # the floor passes every partition
    hide_work_below_the_floor(conn, "swept", "p7")
    # no sweep step due: the floor stays above p7, and the candidate scan does not see it
    assert pop(conn, "swept")["error"] == "no_available_partition"
    sweep_due(conn, "swept")
    assert [m["data"] for m in pop(conn, "swept")["messages"]] == [{"n": 7}]
    assert sweep_at(conn, "swept") is None  # the step reached the floor: the sweep ended


def test_a_sweep_step_examines_a_bounded_number_of_partitions_and_the_next_goes_on(
    conn: psycopg.Connection[Any],
) -> None:
    """SWEEP_STEP + 100 partitions consumed by the group (cursors set in bulk), the floor above them all, and
    work hidden in the newest but one: the first step stops at the SWEEP_STEP-th partition without finding
    it, the second goes on from there and finds it."""
    total = SWEEP_STEP + 100
    # pushed 30 partitions a call: a call's partitions share its time, and the SWEEP_STEP-th falls inside
    # such a group, which the step examines whole
    for first in range(0, total, 30):
        call_procedure(
            conn,
            "push_items_v1",
            [
                {"queue": "swept-wide", "partition": f"p{n:05}", "payload": n}
                for n in range(first, first + 30)
            ],
        )
    conn.execute(
        "INSERT INTO queen.partition_consumers (partition_id, consumer_group, last_consumed_seq) "
        "SELECT p.id, %s, p.last_seq FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
        "WHERE q.name = 'swept-wide'",
        (GROUP,),
    )
    assert pop(conn, "swept-wide")["error"] == "no_available_partition"  # the floor passes every partition
    order = [
        row[0]
        for row in conn.execute(
            "SELECT p.last_message_at FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
            "WHERE q.name = 'swept-wide' ORDER BY p.last_message_at"
        ).fetchall()
    ]
    hidden = conn.execute(
        "SELECT p.name FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
        "WHERE q.name = 'swept-wide' ORDER BY p.last_message_at DESC OFFSET 1 LIMIT 1"
    ).fetchone()
    assert hidden is not None
    hide_work_below_the_floor(conn, "swept-wide", hidden[0])

    sweep_due(conn, "swept-wide")
    assert pop(conn, "swept-wide")["error"] == "no_available_partition"
    # it stopped at the SWEEP_STEP-th partition and the others of its time, short of the hidden one
    stopped = sweep_at(conn, "swept-wide")
    assert stopped == order[SWEEP_STEP - 1] and stopped < order[-2]
    assert order[SWEEP_STEP - 1] == order[SWEEP_STEP]  # the tie the step finished

    sweep_due(conn, "swept-wide")
    assert pop(conn, "swept-wide")["messages"][0]["partition"] == hidden[0]
    assert sweep_at(conn, "swept-wide") is None
