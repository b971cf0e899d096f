"""Queen's own SQL procedures, called from SQL as Queen's users and tools do (issue 16):
``queen.pop_specific_batch``, ``queen.pop_discover_batch``, ``queen.ack_messages_v2`` and
``queen.push_messages_v2`` (with an empty ``producerSub`` stored as NULL)."""

from __future__ import annotations

from typing import Any

import orjson
import psycopg
import pytest

from helpers import call_procedure

LEASE = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"


def sql(conn: psycopg.Connection[Any], procedure: str, payload: Any) -> Any:
    """``SELECT queen.<procedure>(payload::jsonb)``, the payload passed as it is (no index added)."""
    row = conn.execute(
        f"SELECT queen.{procedure}(%s::jsonb)::text", (orjson.dumps(payload).decode(),)
    ).fetchone()
    assert row is not None
    return orjson.loads(row[0])


def push(conn: psycopg.Connection[Any], queue: str, partition: str, n: int, **extra: Any) -> list[Any]:
    return sql(
        conn,
        "push_messages_v2",
        [
            {
                "queue": queue,
                "partition": partition,
                "payload": {"n": i},
                "transactionId": f"{partition}-{i}",
                **extra,
            }
            for i in range(n)
        ],
    )


def test_push_messages_v2_stores_an_empty_producer_sub_as_null(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        push(conn, "subs", "p", 1, producerSub="")
        sql(
            conn,
            "push_messages_v2",
            [{"queue": "subs", "partition": "p", "payload": 1, "transactionId": "x", "producerSub": "alice"}],
        )
        rows = conn.execute("SELECT transaction_id, producer_sub FROM queen.messages ORDER BY seq").fetchall()
        assert rows == [("p-0", None), ("x", "alice")]


def test_pop_specific_batch_leases_with_the_given_worker_id_and_lease_seconds(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        push(conn, "orders", "eu", 3, producerSub="svc")
        results = sql(
            conn,
            "pop_specific_batch",
            [
                {
                    "idx": 7,
                    "queue_name": "orders",
                    "partition_name": "eu",
                    "consumer_group": "billing",
                    "lease_seconds": 120,
                    "worker_id": LEASE,
                    "batch_size": 2,
                    "sub_mode": "",
                    "sub_from": "",
                    "auto_ack": False,
                },
                {
                    "idx": 8,
                    "queue_name": "orders",
                    "partition_name": "eu",
                    "consumer_group": "billing",
                    "batch_size": 2,
                },
                {"idx": 9, "queue_name": "orders", "partition_name": "nowhere", "consumer_group": "billing"},
            ],
        )
        assert [r["idx"] for r in results] == [7, 8, 9]
        first = results[0]["result"]
        assert first["success"] is True and first["leaseId"] == LEASE and first["partition"] == "eu"
        assert [m["transactionId"] for m in first["messages"]] == ["eu-0", "eu-1"]
        assert all(m["producerSub"] == "svc" and m["leaseId"] == LEASE for m in first["messages"])
        assert results[1]["result"] == {"success": False, "error": "lease_held", "messages": []}
        assert results[2]["result"]["error"] == "partition_not_found"
        seconds = conn.execute(
            "SELECT extract(epoch FROM lease_expires_at - lease_acquired_at) FROM queen.partition_consumers "
            "WHERE worker_id = %s",
            (LEASE,),
        ).fetchone()
        assert seconds is not None and float(seconds[0]) == pytest.approx(120)


def test_pop_discover_batch_finds_partitions_with_work_and_auto_ack_moves_the_cursor(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        push(conn, "events", "a", 2)
        push(conn, "events", "b", 1)
        seen: list[str] = []
        for _ in range(3):
            [answer] = sql(
                conn,
                "pop_discover_batch",
                [
                    {
                        "idx": 0,
                        "queue_name": "events",
                        "consumer_group": "g",
                        "batch_size": 10,
                        "auto_ack": True,
                    }
                ],
            )
            result = answer["result"]
            if result["success"]:
                assert result["leaseId"] == ""
                seen += [m["transactionId"] for m in result["messages"]]
        assert sorted(seen) == ["a-0", "a-1", "b-0"]
        [answer] = sql(
            conn, "pop_discover_batch", [{"idx": 0, "queue_name": "events", "consumer_group": "g"}]
        )
        assert answer["result"]["error"] == "no_available_partition"


def test_ack_messages_v2_completes_retries_and_dead_letters_like_the_http_ack(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        push(conn, "jobs", "p", 2)
        conn.execute("UPDATE queen.queues SET retry_limit = 1, retry_delay = 0 WHERE name = 'jobs'")

        def pop_one() -> dict[str, Any]:
            [answer] = sql(
                conn,
                "pop_specific_batch",
                [
                    {
                        "idx": 0,
                        "queue_name": "jobs",
                        "partition_name": "p",
                        "consumer_group": "w",
                        "batch_size": 1,
                    }
                ],
            )
            result: dict[str, Any] = answer["result"]
            return result

        def ack(result: dict[str, Any], status: str) -> dict[str, Any]:
            message = result["messages"][0]
            [outcome] = sql(
                conn,
                "ack_messages_v2",
                [
                    {
                        "transaction_id": message["transactionId"],
                        "partition_id": message["partitionId"],
                        "lease_id": result["leaseId"],
                        "consumer_group": "w",
                        "status": status,
                        "error": "boom",
                    }
                ],
            )
            return dict(outcome)

        first = pop_one()
        assert ack(first, "failed") | {"index": 0} == {
            "index": 0,
            "transactionId": "p-0",
            "success": True,
            "error": None,
            "queueName": "jobs",
            "partitionName": "p",
            "leaseReleased": True,
            "dlq": False,
        }
        again = pop_one()  # the whole batch comes back after a failure with retries left
        assert again["messages"][0]["transactionId"] == "p-0"
        assert ack(again, "failed")["dlq"] is True  # retryLimit 1: the second failure dead-letters it
        dead = conn.execute("SELECT error_message, retry_count FROM queen.dead_letter_queue").fetchall()
        assert dead == [("boom", 1)]
        last = pop_one()
        assert last["messages"][0]["transactionId"] == "p-1"
        assert ack(last, "completed")["success"] is True
        cursor = conn.execute(
            "SELECT last_consumed_seq, worker_id FROM queen.partition_consumers WHERE consumer_group = 'w'"
        ).fetchone()
        assert cursor == (2, None)


@pytest.mark.parametrize(
    ("procedure", "payload", "words"),
    [
        ("ack_messages_v2", {"transactionId": "t"}, "array"),
        (
            "ack_messages_v2",
            [{"transactionId": "t", "partitionId": "not-a-uuid"}],
            "acknowledgment 0: partitionId",
        ),
        ("ack_messages_v2", [{"partitionId": LEASE}], "acknowledgment 0: transactionId"),
        ("ack_messages_v2", [{"transactionId": "t", "partitionId": LEASE, "status": "maybe"}], "status"),
        ("pop_specific_batch", [{"idx": 0, "queue_name": "q"}], "request 0: partition_name"),
        ("pop_discover_batch", [{"idx": 0, "partition_name": "p"}], "request 0: queue_name"),
        ("pop_discover_batch", [{"queue_name": "q", "batch_size": "ten"}], "batch_size"),
        ("pop_discover_batch", [{"queue_name": "q", "worker_id": "w" * 256}], "worker_id"),
    ],
)
def test_bad_input_raises_a_clear_error_and_changes_nothing(
    db_url: str, procedure: str, payload: Any, words: str
) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        call_procedure(conn, "push_items_v1", [{"queue": "q", "partition": "p", "payload": 1}])
        before = conn.execute("SELECT count(*) FROM queen.partition_consumers").fetchone()
        with pytest.raises(psycopg.Error) as raised:
            sql(conn, procedure, payload)
        assert raised.value.sqlstate == "QN400"
        assert words in str(raised.value)
        assert conn.execute("SELECT count(*) FROM queen.partition_consumers").fetchone() == before
