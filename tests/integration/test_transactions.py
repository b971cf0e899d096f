"""Group commit of client transactions (``queen.transaction_v2``, 040_ack.sql, and ``queen.transaction_v3``,
022_group_commit.sql, its set-based fast path), driven directly: several client transactions in one call, one
PostgreSQL transaction, each all-or-nothing on its own. Every test runs against both procedures."""

from __future__ import annotations

import threading
from typing import Any

import orjson
import psycopg
import pytest

from queenpy.engine.engine import transaction_result

from helpers import call_procedure

QUEUE_MODE = "__QUEUE_MODE__"
PROCEDURE = "transaction_v2"


@pytest.fixture(autouse=True, params=["transaction_v2", "transaction_v3"])
def procedure(request: pytest.FixtureRequest) -> str:
    """The group-commit procedure under test (module-wide, read by :func:`group`)."""
    global PROCEDURE
    PROCEDURE = request.param
    return PROCEDURE


def connect(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def push(
    conn: psycopg.Connection[Any], queue: str, payloads: list[Any], partition: str = "Default", **extra: Any
) -> list[dict[str, Any]]:
    return call_procedure(
        conn,
        "push_items_v1",
        [{"queue": queue, "partition": partition, "payload": p, **extra} for p in payloads],
    )


def pop(conn: psycopg.Connection[Any], queue: str, partition: str, batch: int = 1) -> list[dict[str, Any]]:
    request = {
        "queue": queue,
        "partition": partition,
        "consumerGroup": QUEUE_MODE,
        "batch": batch,
        "autoAck": False,
    }
    messages: list[dict[str, Any]] = call_procedure(conn, "pop_v1", [request])[0]["messages"]
    return messages


def ack_op(message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "type": "ack",
        "transactionId": message["transactionId"],
        "partitionId": message["partitionId"],
        "status": "completed",
        "leaseId": message["leaseId"],
        **extra,
    }


def push_op(queue: str, *transaction_ids: str, partition: str = "Default") -> dict[str, Any]:
    return {
        "type": "push",
        "items": [
            {"queue": queue, "partition": partition, "payload": {"t": t}, "transactionId": t}
            for t in transaction_ids
        ],
    }


def group(conn: psycopg.Connection[Any], members: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One fused call; the answers expanded as the broker does (and as transaction_results_v1 does)."""
    row = conn.execute(
        f"SELECT queen.{PROCEDURE}(%s::jsonb)::text", (orjson.dumps(members).decode(),)
    ).fetchone()
    assert row is not None
    answers = orjson.loads(row[0])
    assert len(answers) == len(members)
    expanded = [transaction_result(member, answer) for member, answer in zip(members, answers)]
    for member, answer, result in zip(members, answers, expanded):
        in_sql = conn.execute(
            "SELECT queen.transaction_results_v1(%s::jsonb, %s::json)::text",
            (orjson.dumps(member).decode(), orjson.dumps(answer).decode()),
        ).fetchone()
        assert in_sql is not None and orjson.loads(in_sql[0]) == result
    return expanded


def stored(conn: psycopg.Connection[Any], queue: str) -> list[str]:
    """The transactionIds stored in ``queue``, in (partition, offset) order."""
    rows = conn.execute(
        "SELECT m.transaction_id FROM queen.messages m JOIN queen.partitions p ON p.id = "
        "m.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = %s "
        "ORDER BY p.name, m.seq",
        (queue,),
    ).fetchall()
    return [r[0] for r in rows]


def cursor(conn: psycopg.Connection[Any], partition_id: str) -> tuple[int, str | None]:
    row = conn.execute(
        "SELECT last_consumed_seq, worker_id FROM queen.partition_consumers "
        "WHERE partition_id = %s AND consumer_group = %s",
        (partition_id, QUEUE_MODE),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_one_bad_member_among_good_ones_fails_alone(db_url: str) -> None:
    with connect(db_url) as conn:
        for p in range(4):
            push(conn, "src", [{"p": p}], partition=f"p{p}")
        push(conn, "dst", [{"t": "dup"}], transactionId="dup")
        m = [pop(conn, "src", f"p{p}")[0] for p in range(4)]
        missing = {**ack_op(m[1]), "transactionId": "no-such-message"}
        members = [
            {"operations": [ack_op(m[0]), push_op("dst", "ok-0")], "requiredLeases": [m[0]["leaseId"]]},
            {"operations": [missing, push_op("dst", "bad-1")]},
            {"operations": [ack_op(m[2]), push_op("dst", "ok-2a", "ok-2b")]},
            {"operations": [ack_op(m[3]), push_op("dst", "bad-3"), push_op("dst", "dup")]},
            {"operations": [push_op("dst", "bad-4")], "requiredLeases": ["no-such-lease"]},
            {"operations": [push_op("dst", "ok-5"), ack_op(m[1])], "requiredLeases": [m[1]["leaseId"]]},
            {"operations": [ack_op(m[0])]},  # acked by the first member, which released the lease
        ]
        results = group(conn, members)
        assert [r["success"] for r in results] == [True, False, True, False, False, True, False]
        assert [r.get("error") for r in results] == [
            None,
            "ACK operation failed: Message not found",
            None,
            "duplicate transactionId dup in push",
            "Required lease no-such-lease is expired or released",
            None,
            "ACK operation failed: Invalid or expired lease",
        ]
        # the failed ones' results stop at their failing operation (bad-3 was pushed, then rolled back)
        assert [r["type"] for r in results[3]["results"]] == ["ack", "push"]
        assert results[1]["results"] == [] and results[4]["results"] == []
        assert [(r["index"], r["type"], r["transactionId"]) for r in results[2]["results"]] == [
            (0, "ack", m[2]["transactionId"]),
            (1, "push", "ok-2a"),
            (2, "push", "ok-2b"),
        ]
        assert stored(conn, "dst") == ["dup", "ok-0", "ok-2a", "ok-2b", "ok-5"]
        assert {r["messageId"] for r in results[2]["results"][1:]} <= {
            row[0] for row in conn.execute("SELECT id::text FROM queen.messages").fetchall()
        }
        # the committed members moved their cursors; the failed member's ack was rolled back
        assert cursor(conn, m[0]["partitionId"]) == (1, None)
        assert cursor(conn, m[1]["partitionId"]) == (1, None)
        assert cursor(conn, m[2]["partitionId"]) == (1, None)
        assert cursor(conn, m[3]["partitionId"]) == (0, m[3]["leaseId"])


def test_fused_group_with_two_members_on_the_same_partition(db_url: str) -> None:
    """Two members ack messages of one partition under one lease and push to one partition: both commit,
    the pushes take consecutive offsets in arrival order, the lease ends with the second ack; a third member
    on the same partitions that fails leaves both untouched."""
    with connect(db_url) as conn:
        push(conn, "src", [{"n": 1}, {"n": 2}, {"n": 3}], partition="p")
        first, second, third = pop(conn, "src", "p", batch=3)
        lease = first["leaseId"]
        results = group(
            conn,
            [
                {
                    "operations": [ack_op(first), push_op("dst", "a", partition="q")],
                    "requiredLeases": [lease],
                },
                {
                    "operations": [
                        ack_op(third),
                        push_op("dst", "bad", "c", partition="q"),
                        push_op("dst", "a", partition="q"),
                    ],
                    "requiredLeases": [lease],
                },
                {
                    "operations": [ack_op(second), push_op("dst", "b", partition="q")],
                    "requiredLeases": [lease],
                },
            ],
        )
        assert [r["success"] for r in results] == [True, False, True]
        assert results[1]["error"] == "duplicate transactionId a in push"
        offsets = conn.execute(
            "SELECT m.transaction_id, m.seq FROM queen.messages m JOIN queen.partitions p "
            "ON p.id = m.partition_id WHERE p.name = 'q' ORDER BY m.seq"
        ).fetchall()
        assert offsets == [("a", 1), ("b", 2)]
        # two of the three leased messages acked: the cursor is on the second, the lease still held
        seq, holder = cursor(conn, first["partitionId"])
        assert (seq, holder) == (2, lease)
        last = group(conn, [{"operations": [ack_op(third)], "requiredLeases": [lease]}])
        assert last[0]["success"] is True
        assert cursor(conn, first["partitionId"]) == (3, None)
        assert pop(conn, "src", "p") == []


def test_required_leases_are_checked_in_a_transaction_of_its_own(db_url: str) -> None:
    """transaction_v1 (the SQL API) runs the same checks: an expired required lease fails the transaction
    and nothing of it is applied."""
    with connect(db_url) as conn:
        push(conn, "src", [{"n": 1}])
        message = pop(conn, "src", "Default")[0]
        ack_without_lease = {k: v for k, v in ack_op(message).items() if k != "leaseId"}
        conn.execute("UPDATE queen.partition_consumers SET lease_expires_at = now() - interval '1 second'")
        request = {
            "operations": [ack_without_lease, push_op("dst", "x")],
            "requiredLeases": [message["leaseId"]],
        }
        failed = call_procedure(conn, "transaction_v1", request)
        assert failed == {
            "transactionId": failed["transactionId"],
            "success": False,
            "results": [],
            "error": f"Required lease {message['leaseId']} is expired or released",
        }
        assert stored(conn, "dst") == []
        conn.execute("UPDATE queen.partition_consumers SET lease_expires_at = now() + interval '1 minute'")
        ok = call_procedure(conn, "transaction_v1", request)
        assert ok["success"] is True
        assert [r["type"] for r in ok["results"]] == ["ack", "push"]
        assert stored(conn, "dst") == ["x"]


def test_groups_pushing_to_the_same_partitions_in_opposite_orders_do_not_deadlock(db_url: str) -> None:
    """Two connections commit groups whose members push to partitions a and b, one group a-then-b, the other
    b-then-a: each group locks its partitions in id order before its first member, so they wait for each
    other instead of deadlocking (a deadlock would fail a member: 'deadlock detected')."""
    with connect(db_url) as conn:
        push(conn, "dst", [0], partition="a")
        push(conn, "dst", [0], partition="b")
    failures: list[Any] = []

    def run(order: list[str], name: str) -> None:
        with connect(db_url) as conn:
            for n in range(25):
                answers = call_procedure(
                    conn,
                    PROCEDURE,
                    [{"operations": [push_op("dst", f"{name}-{n}-{p}", partition=p)]} for p in order],
                )
                failures.extend(a for a in answers if not a["success"])

    threads = [
        threading.Thread(target=run, args=(["a", "b"], "x")),
        threading.Thread(target=run, args=(["b", "a"], "y")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    with connect(db_url) as conn:
        assert len(stored(conn, "dst")) == 2 + 2 * 25 * 2


def _writers(conn: psycopg.Connection[Any], queue: str) -> dict[str, str]:
    """transactionId -> the (sub)transaction id that inserted it: one per member on transaction_v2's path,
    one for the whole group on transaction_v3's set-based path."""
    rows = conn.execute(
        "SELECT m.transaction_id, m.xmin::text FROM queen.messages m JOIN queen.partitions p "
        "ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = %s",
        (queue,),
    ).fetchall()
    return {r[0]: r[1] for r in rows}


@pytest.mark.parametrize("procedure", ["transaction_v3"], indirect=True)
def test_v3_runs_a_good_group_set_based_and_a_group_with_a_bad_member_member_by_member(
    db_url: str, procedure: str
) -> None:
    """The recipe's hand-off, 1 ack + 1 push per member: a group of good members is applied by one set of
    statements (every message written by the same transaction, no subtransaction per member) with the same
    answers and state as member by member; one bad member sends the group member by member (one writer
    each)."""
    with connect(db_url) as conn:
        for p in range(6):
            push(conn, "src", [{"p": p}, {"p": p, "n": 2}], partition=f"p{p}")
        m = [pop(conn, "src", f"p{p}", batch=2) for p in range(6)]
        good = group(
            conn,
            [
                {
                    "operations": [
                        ack_op(m[p][0]),
                        ack_op(m[p][1]),
                        push_op("dst", f"g{p}", f"g{p}b", partition=f"q{p % 2}"),
                    ],
                    "requiredLeases": [m[p][0]["leaseId"]],
                }
                for p in range(3)
            ],
        )
        assert [r["success"] for r in good] == [True, True, True]
        assert [[(r["index"], r["type"], r["transactionId"]) for r in g["results"]] for g in good] == [
            [
                (0, "ack", m[p][0]["transactionId"]),
                (1, "ack", m[p][1]["transactionId"]),
                (2, "push", f"g{p}"),
                (3, "push", f"g{p}b"),
            ]
            for p in range(3)
        ]
        ids = {row[0] for row in conn.execute("SELECT id::text FROM queen.messages").fetchall()}
        assert all(r["messageId"] in ids for g in good for r in g["results"][2:])
        writers = _writers(conn, "dst")
        assert len(set(writers.values())) == 1  # one transaction, no subtransaction per member
        assert [cursor(conn, m[p][0]["partitionId"]) for p in range(3)] == [(2, None)] * 3
        # arrival order inside a partition: q0 got g0, g0b, g2, g2b at consecutive offsets
        assert conn.execute(
            "SELECT string_agg(m.transaction_id, ',' ORDER BY m.seq) FROM queen.messages m "
            "JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q "
            "ON q.id = p.queue_id WHERE q.name = 'dst' AND p.name = 'q0'"
        ).fetchone() == ("g0,g0b,g2,g2b",)

        mixed = group(
            conn,
            [
                {"operations": [ack_op(m[3][0]), push_op("dst", "h3")]},
                {"operations": [ack_op(m[4][0]), push_op("dst", "g0", partition="q0")]},  # a duplicate
                {"operations": [ack_op(m[5][0]), push_op("dst", "h5")]},
            ],
        )
        assert [r["success"] for r in mixed] == [True, False, True]
        assert mixed[1]["error"] == "duplicate transactionId g0 in push"
        writers = _writers(conn, "dst")
        assert writers["h3"] != writers["h5"]  # member by member: a subtransaction each
        assert cursor(conn, m[4][0]["partitionId"]) == (0, m[4][0]["leaseId"])
        assert cursor(conn, m[3][0]["partitionId"]) == (1, m[3][0]["leaseId"])  # 1 of 2 acked: lease kept


@pytest.mark.parametrize("procedure", ["transaction_v3"], indirect=True)
def test_v3_declines_acks_it_cannot_apply_in_one_pass(db_url: str, procedure: str) -> None:
    """A dead-lettering ack, an ack past the lease's batch and a required lease that is not live each send the
    group member by member, with transaction_v2's answers."""
    with connect(db_url) as conn:
        for p in range(3):
            push(conn, "src", [{"p": p}], partition=f"p{p}")
        m = [pop(conn, "src", f"p{p}")[0] for p in range(3)]
        results = group(
            conn,
            [
                {"operations": [ack_op(m[0], status="dlq"), push_op("dst", "x0")]},
                {"operations": [ack_op(m[1]), push_op("dst", "x1")], "requiredLeases": ["gone"]},
                {"operations": [ack_op(m[2]), push_op("dst", "x2")]},
            ],
        )
        assert [r["success"] for r in results] == [True, False, True]
        assert results[0]["results"][0]["dlq"] is True
        assert conn.execute("SELECT count(*) FROM queen.dead_letter_queue").fetchone() == (1,)
        writers = _writers(conn, "dst")
        assert set(writers) == {"x0", "x2"} and writers["x0"] != writers["x2"]
