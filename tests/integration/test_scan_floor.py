"""The wildcard scan floor (queen.advance_scan_floor_v1, 030_pop.sql).

- it moves past the partitions a group has consumed, so a wildcard pop does not walk over them again;
- it never passes the start of a write transaction in flight: a push that commits after the floor was
  computed is still found, even when every other partition was pushed and consumed after it began;
- a push that commits while the floor is computed (after the computation started, before it looked at the
  transactions in flight) is still found.
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


def pop(conn: psycopg.Connection[Any], queue: str, batch: int = 10) -> dict[str, Any]:
    time.sleep(0.06)  # the floor advances at most every 50 ms
    result: dict[str, Any] = call_procedure(
        conn, "pop_v1", [{"queue": queue, "consumerGroup": GROUP, "batch": batch, "autoAck": True}]
    )[0]
    return result


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
    definition = conn.execute("SELECT pg_get_functiondef('queen.advance_scan_floor_v1'::regproc)").fetchone()
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
