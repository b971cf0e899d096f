"""Fused acknowledgments: a run of one (partition, consumer group) acknowledged in one pass
(queen.ack_run_v2, 040_ack.sql) ends exactly where acknowledging its items one by one (queen.ack_one_v1, the
reference) ends: the same per-item results, the same consumer rows (cursor, lease, counters), the same scan
floors and dead letters.

Each case builds a state, then inside one transaction runs ``ack_v2`` on the items, expands its compact answer
as the broker does (``ack_results``) and as SQL does (``queen.ack_results_v1``, which ``ack_v1`` returns) and
checks the two agree, records the outcome, rolls back to a savepoint and runs ``ack_one_v1`` item by item in
``ack_v2``'s order (partition, group, offset, index). ``now()`` is the same for both, so even the timestamps
must match.
"""

from __future__ import annotations

from typing import Any

import orjson
import psycopg
import pytest

from queenpy.engine.engine import ack_results

from helpers import call_procedure

QUEUE_MODE = "__QUEUE_MODE__"
STATE = {
    "consumers": "SELECT coalesce(jsonb_agg(to_jsonb(c) - 'id' - 'created_at' ORDER BY c.partition_id, "
    "c.consumer_group), '[]') FROM queen.partition_consumers c",
    "floors": "SELECT coalesce(jsonb_agg(to_jsonb(w) ORDER BY w.queue_name, w.consumer_group), '[]') "
    "FROM queen.consumer_watermarks w",
    "dead_letters": "SELECT count(*) FROM queen.dead_letter_queue",
}


@pytest.fixture
def conn(db_url: str) -> Any:
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


def push(conn: psycopg.Connection[Any], partition: str, count: int) -> None:
    call_procedure(
        conn, "push_items_v1", [{"queue": "runs", "partition": partition, "payload": n} for n in range(count)]
    )


def pop(
    conn: psycopg.Connection[Any], partition: str, batch: int, group: str = QUEUE_MODE, auto_ack: bool = False
) -> list[dict[str, Any]]:
    result = call_procedure(
        conn,
        "pop_v1",
        [
            {
                "queue": "runs",
                "partition": partition,
                "consumerGroup": group,
                "batch": batch,
                "autoAck": auto_ack,
            }
        ],
    )[0]
    messages: list[dict[str, Any]] = result["messages"]
    return messages


def item(message: dict[str, Any], group: str = QUEUE_MODE, **extra: Any) -> dict[str, Any]:
    return {
        "transactionId": message["transactionId"],
        "partitionId": message["partitionId"],
        "consumerGroup": group,
        "leaseId": message["leaseId"],
        "status": "completed",
        **extra,
    }


def state(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    return {name: conn.execute(query).fetchone()[0] for name, query in STATE.items()}  # type: ignore[index]


def reference_order(conn: psycopg.Connection[Any], items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def key(entry: dict[str, Any]) -> tuple[Any, ...]:
        row = conn.execute(
            "SELECT seq FROM queen.messages WHERE partition_id = %s AND transaction_id = %s",
            (entry["partitionId"], entry["transactionId"]),
        ).fetchone()
        seq = row[0] if row else float("inf")
        return entry["partitionId"], entry.get("consumerGroup") or QUEUE_MODE, seq, entry["index"]

    return sorted(items, key=key)


def item_by_item_calls(conn: psycopg.Connection[Any]) -> int:
    """Calls of ack_one_v1 counted by this backend and not yet sent to the statistics (track_functions
    counts PL/pgSQL calls): compare two readings."""
    row = conn.execute(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions "
        "WHERE schemaname = 'queen' AND funcname = 'ack_one_v1'"
    ).fetchone()
    assert row is not None
    return int(row[0])


def assert_same_as_item_by_item(
    conn: psycopg.Connection[Any], items: list[dict[str, Any]], one_pass: bool
) -> list[dict[str, Any]]:
    """Run both ways in one transaction; return the fused results after checking they match and that
    ``ack_v2`` took the one-pass path (``one_pass``) or went item by item."""
    numbered = [{**entry, "index": i} for i, entry in enumerate(items)]
    payload = orjson.dumps(numbered).decode()
    with conn.transaction():
        conn.execute("SET LOCAL track_functions = 'pl'")
        conn.execute("SAVEPOINT before_ack")
        calls_before = item_by_item_calls(conn)
        row = conn.execute("SELECT queen.ack_v2(%s::jsonb)::text", (payload,)).fetchone()
        assert row is not None
        fused = ack_results(numbered, row[0])
        in_sql = conn.execute(
            "SELECT queen.ack_results_v1(%s::jsonb, %s::json)::text", (payload, row[0])
        ).fetchone()
        assert in_sql is not None and orjson.loads(in_sql[0]) == fused
        fused_state = state(conn)
        assert (item_by_item_calls(conn) == calls_before) is one_pass
        conn.execute("ROLLBACK TO SAVEPOINT before_ack")
        one_by_one = []
        for entry in reference_order(conn, numbered):
            one = conn.execute(
                "SELECT queen.ack_one_v1(%s::jsonb, 'ack')::text", (orjson.dumps(entry).decode(),)
            ).fetchone()
            assert one is not None
            one_by_one.append(orjson.loads(one[0]))
        reference_state = state(conn)
        conn.execute("ROLLBACK TO SAVEPOINT before_ack")
    assert fused == sorted(one_by_one, key=lambda r: r["index"])
    assert fused_state == reference_state
    return list(fused)


def test_a_whole_leased_batch_releases_the_lease_at_its_last_item(conn: psycopg.Connection[Any]) -> None:
    push(conn, "p", 10)
    batch = pop(conn, "p", 10)
    results = assert_same_as_item_by_item(conn, [item(m) for m in reversed(batch)], one_pass=True)
    assert [r["leaseReleased"] for r in sorted(results, key=lambda r: r["index"])] == [True] + [False] * 9


def test_part_of_a_leased_batch_keeps_the_lease(conn: psycopg.Connection[Any]) -> None:
    push(conn, "p", 10)
    batch = pop(conn, "p", 10)
    results = assert_same_as_item_by_item(conn, [item(m) for m in batch[:4]], one_pass=True)
    assert all(r["success"] and not r["leaseReleased"] for r in results)


def test_a_wrong_lease_fails_every_item(conn: psycopg.Connection[Any]) -> None:
    push(conn, "p", 3)
    batch = pop(conn, "p", 3)
    results = assert_same_as_item_by_item(
        conn, [item(m, leaseId="not-the-lease") for m in batch], one_pass=True
    )
    assert {r["error"] for r in results} == {"Invalid or expired lease"}


def test_more_items_than_the_lease_has_left(conn: psycopg.Connection[Any]) -> None:
    push(conn, "p", 6)
    first = pop(conn, "p", 3)
    call_procedure(conn, "ack_v1", [item(m) for m in first])
    second = pop(conn, "p", 3)
    # the three old ones again, under the new lease: three items more than it has left
    results = assert_same_as_item_by_item(
        conn, [item({**m, "leaseId": second[0]["leaseId"]}) for m in first + second], one_pass=False
    )
    assert [r["success"] for r in results].count(False) == 3


def test_acks_without_a_lease_id_while_a_lease_is_held(conn: psycopg.Connection[Any]) -> None:
    push(conn, "p", 5)
    batch = pop(conn, "p", 5)
    assert_same_as_item_by_item(conn, [item(m, leaseId="") for m in batch[:3]], one_pass=True)
    assert_same_as_item_by_item(conn, [item(m, leaseId="") for m in batch], one_pass=True)


def test_acks_of_consumed_messages_move_the_cursor_back_and_drop_the_scan_floor(
    conn: psycopg.Connection[Any],
) -> None:
    push(conn, "p", 8)
    delivered = pop(conn, "p", 8, auto_ack=True)
    call_procedure(
        conn, "pop_v1", [{"queue": "runs", "consumerGroup": QUEUE_MODE, "batch": 1}]
    )  # sets a floor
    assert state(conn)["floors"] != []
    results = assert_same_as_item_by_item(conn, [item(m, leaseId="") for m in delivered[2:5]], one_pass=True)
    assert all(r["leaseReleased"] for r in results)


def test_runs_the_fast_path_does_not_take(conn: psycopg.Connection[Any]) -> None:
    push(conn, "p", 6)
    batch = pop(conn, "p", 6)
    mixed = [item(m) for m in batch[:3]] + [
        item(batch[3], status="failed", error="boom"),
        item(batch[4], status="retry"),
    ]
    assert_same_as_item_by_item(conn, mixed, one_pass=False)
    missing = [item(m) for m in batch[:3]] + [item({**batch[3], "transactionId": "no-such-message"})]
    assert_same_as_item_by_item(conn, missing, one_pass=False)
    assert_same_as_item_by_item(
        conn, [item(m) for m in batch[:3]] + [item(batch[1])], one_pass=True
    )  # a duplicate


def test_several_runs_each_in_offset_order(conn: psycopg.Connection[Any]) -> None:
    """What consumers send: each run's items in offset order; the other run's results must be there too."""
    push(conn, "a", 3)
    push(conn, "b", 3)
    items = [item(m) for partition in ("a", "b") for m in pop(conn, partition, 3)]
    results = assert_same_as_item_by_item(conn, items, one_pass=True)
    assert [r["index"] for r in results] == list(range(6))
    assert sum(r["leaseReleased"] for r in results) == 2


def test_several_partitions_and_groups_in_one_call(conn: psycopg.Connection[Any]) -> None:
    push(conn, "a", 4)
    push(conn, "b", 4)
    items = []
    for group in (QUEUE_MODE, "audit"):
        for partition in ("a", "b"):
            items += [item(m, group) for m in pop(conn, partition, 4, group)]
    items.reverse()
    results = assert_same_as_item_by_item(conn, items, one_pass=True)
    assert sum(r["leaseReleased"] for r in results) == 4
