"""Fused wildcard pops served set-based (``queen.pop_group_v1``, 022_group_commit.sql): one candidate scan per
(queue, group), one partition per pop, never one partition twice, each pop its own partition's messages, and
the same answers as ``queen.pop_v2`` for everything else."""

from __future__ import annotations

from typing import Any

import psycopg

from helpers import call_procedure

GROUP = "g"


def pop_request(queue: str, partition: str | None = None, batch: int = 10, **extra: Any) -> dict[str, Any]:
    return {
        "queue": queue,
        "partition": partition,
        "consumerGroup": GROUP,
        "batch": batch,
        "autoAck": False,
        **extra,
    }


def fill(conn: psycopg.Connection[Any], queue: str, partitions: int, per_partition: int) -> None:
    call_procedure(
        conn,
        "push_items_v1",
        [
            {"queue": queue, "partition": f"p{p}", "payload": {"p": p, "n": n}}
            for p in range(partitions)
            for n in range(per_partition)
        ],
    )


def test_fused_wildcard_pops_lease_distinct_partitions_each_with_its_own_messages(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        fill(conn, "fan", partitions=12, per_partition=3)
        # a first pass creates the group's consumer rows (first contact), a second pass finds them existing
        for _ in range(2):
            with conn.transaction():
                conn.execute("SET LOCAL track_functions = 'all'")
                results = call_procedure(
                    conn, "pop_group_v1", [pop_request("fan", batch=2) for _ in range(5)]
                )
                one_by_one = conn.execute(
                    "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions "
                    "WHERE funcname = 'pop_one_v2'"
                ).fetchone()
            assert one_by_one == (0,), "served pop by pop, not as a group"
            assert [r["success"] for r in results] == [True] * 5
            partitions = [r["partitionId"] for r in results]
            assert len(set(partitions)) == 5, "one partition leased twice"
            assert len({r["leaseId"] for r in results}) == 5
            for r in results:
                assert [m["partitionId"] for m in r["messages"]] == [r["partitionId"]] * 2
                assert {m["leaseId"] for m in r["messages"]} == {r["leaseId"]}
                assert r["partitionsClaimed"] == 1
            leased = conn.execute(
                "SELECT count(*) FROM queen.partition_consumers WHERE consumer_group = %s "
                "AND lease_expires_at > now()",
                (GROUP,),
            ).fetchone()
        assert leased == (10,)
        # 12 partitions, 10 leased: of 4 more pops two find one, two find nothing (as pop_v2 answers)
        results = call_procedure(conn, "pop_group_v1", [pop_request("fan") for _ in range(4)])
        assert [r["success"] for r in results] == [True, True, False, False]
        assert [r.get("error") for r in results[2:]] == ["no_available_partition"] * 2
        delivered = [m["data"] for r in results[:2] for m in r["messages"]]
        assert len(delivered) == 6 and len({d["p"] for d in delivered}) == 2


def test_fused_pops_skip_partitions_another_transaction_holds_without_waiting(db_url: str) -> None:
    """Partitions whose consumer rows an uncommitted pop holds are skipped, not waited for; committed leases
    are not offered again."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        fill(conn, "busy", partitions=4, per_partition=1)
        call_procedure(conn, "pop_group_v1", [pop_request("busy") for _ in range(4)])  # rows exist, leased
        conn.execute("UPDATE queen.partition_consumers SET lease_expires_at = now() - interval '1 second'")
        with psycopg.connect(db_url) as other:  # holds two of the four rows, uncommitted
            held = call_procedure(other, "pop_group_v1", [pop_request("busy") for _ in range(2)])
            assert [r["success"] for r in held] == [True, True]
            conn.execute("SET lock_timeout = '2s'")
            results = call_procedure(conn, "pop_group_v1", [pop_request("busy") for _ in range(3)])
            other.rollback()
        assert [r["success"] for r in results] == [True, True, False]
        assert not {r["partitionId"] for r in results[:2]} & {r["partitionId"] for r in held}


def test_mixed_requests_answer_as_pop_v2_in_request_order(db_url: str) -> None:
    """Named partitions, other groups, autoAck and missing queues in one call: results in request order, the
    group's wildcard pops never take a partition a named pop of the same call took."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        fill(conn, "mix", partitions=3, per_partition=2)
        requests = [
            pop_request("mix"),
            pop_request("mix", "p0"),
            pop_request("missing"),
            pop_request("mix", consumerGroup="other", autoAck=True),
            pop_request("mix"),
            pop_request("mix"),
            pop_request("mix", "p9"),
        ]
        results = call_procedure(conn, "pop_group_v1", requests)
        assert [r["index"] for r in results] == list(range(7))
        assert results[1]["partition"] == "p0" and len(results[1]["messages"]) == 2
        assert (results[2]["success"], results[2]["error"]) == (False, "no_available_partition")
        assert results[3]["success"] is True and results[3]["leaseId"] == ""
        wildcard = [results[0], results[4], results[5]]
        assert sorted(r["success"] for r in wildcard) == [False, True, True]
        assert {r["partition"] for r in wildcard if r["success"]} == {"p1", "p2"}
        assert (results[6]["success"], results[6]["error"]) == (False, "partition_not_found")


def test_a_pop_whose_locked_partition_had_nothing_ready_looks_further(db_url: str) -> None:
    """Two pops lock the group's first two free partitions; the first one's messages are not ready yet (the
    queue's delayed processing): the pop left over scans on its own and takes the third, as pop_v2 would."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        fill(conn, "late", partitions=3, per_partition=1)
        conn.execute(
            "INSERT INTO queen.partition_consumers (partition_id, consumer_group) SELECT p.id, %s "
            "FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'late'",
            (GROUP,),
        )
        conn.execute("UPDATE queen.queues SET delayed_processing = 60 WHERE name = 'late'")
        conn.execute(
            "UPDATE queen.messages m SET created_at = m.created_at - interval '2 minutes' "
            "FROM queen.partitions p WHERE p.id = m.partition_id AND p.name IN ('p1', 'p2')"
        )
        results = call_procedure(conn, "pop_group_v1", [pop_request("late"), pop_request("late")])
        assert [r["success"] for r in results] == [True, True]
        assert sorted(r["partition"] for r in results) == ["p1", "p2"]
