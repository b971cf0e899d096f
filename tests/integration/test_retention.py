"""Retention, completed retention, eviction, partition cleanup, history trimming and maxSize, run by the
services' jobs (queenpy.services.jobs) against real PostgreSQL. Messages are made old by moving their creation
time back (creation times grow with offsets, as the push makes them), so no test waits for a clock."""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any

import psycopg
import pytest

from queenpy.services.jobs import EvictionJob, Job, RetentionJob, RunResult, StatsJob
from queenpy.settings import ServiceSettings
from queenpy.store.database import Database

from helpers import call_procedure

QM = "__QUEUE_MODE__"


@pytest.fixture
def conn(db_url: str) -> Any:
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


def run_job(db_url: str, job: type[Job], **settings: Any) -> RunResult:
    async def go() -> RunResult:
        database = Database(db_url, 2)
        await database.open()
        try:
            return await job(ServiceSettings(**settings)).run(database)
        finally:
            await database.close()

    return asyncio.run(go())


def push(conn: psycopg.Connection[Any], queue: str, count: int, partition: str = "Default") -> None:
    results = call_procedure(
        conn, "push_items_v1", [{"queue": queue, "partition": partition, "payload": n} for n in range(count)]
    )
    assert all(r["status"] == "queued" for r in results)


def age(
    conn: psycopg.Connection[Any], queue: str, upto_seq: int, partition: str = "Default", seconds: int = 3600
) -> None:
    """Messages up to offset ``upto_seq`` were created ``seconds`` ago (older offsets a little earlier); when
    that takes in the partition's last offset, its ``last_message_at`` too, as the push wrote it with its
    message (retention reads it for the newest message's time: queen.retention_run_end_v2)."""
    conn.execute(
        """
        UPDATE queen.messages m SET created_at = now() - make_interval(secs => %s + (1000 - m.seq) * 0.001)
        FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
        WHERE m.partition_id = p.id AND q.name = %s AND p.name = %s AND m.seq <= %s""",
        (seconds, queue, partition, upto_seq),
    )
    conn.execute(
        """
        UPDATE queen.partitions p SET last_message_at = m.created_at
        FROM queen.queues q, queen.messages m
        WHERE q.id = p.queue_id AND q.name = %s AND p.name = %s AND p.last_seq <= %s
          AND m.partition_id = p.id AND m.seq = p.last_seq""",
        (queue, partition, upto_seq),
    )


def offsets(conn: psycopg.Connection[Any], queue: str, partition: str = "Default") -> list[int]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT m.seq FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id "
            "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = %s AND p.name = %s ORDER BY m.seq",
            (queue, partition),
        ).fetchall()
    ]


def history(conn: psycopg.Connection[Any], queue: str) -> dict[str, int]:
    return {
        r[0]: int(r[1])
        for r in conn.execute(
            "SELECT retention_type, sum(messages_deleted) FROM queen.retention_history WHERE queue_name = %s "
            "GROUP BY 1",
            (queue,),
        ).fetchall()
    }


def counters(conn: psycopg.Connection[Any], queue: str, partition: str = "Default") -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT c.messages_deleted, c.head_seq, c.completed_seq, c.evicted_seq "
        "FROM queen.partition_counters c "
        "JOIN queen.partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id "
        "WHERE q.name = %s AND p.name = %s",
        (queue, partition),
    ).fetchone()
    assert row is not None
    return tuple(row)


def configure(conn: psycopg.Connection[Any], queue: str, **options: Any) -> None:
    assert call_procedure(conn, "configure_queue_v1", {"queue": queue, "options": options})["configured"]


def pop(
    conn: psycopg.Connection[Any],
    queue: str,
    batch: int,
    group: str | None = None,
    auto_ack: bool = False,
    partition: str = "Default",
) -> list[dict[str, Any]]:
    request: dict[str, Any] = {"queue": queue, "partition": partition, "batch": batch, "autoAck": auto_ack}
    if group:
        request["consumerGroup"] = group
    messages: list[dict[str, Any]] = call_procedure(conn, "pop_v1", [request])[0]["messages"]
    return messages


def ack(
    conn: psycopg.Connection[Any],
    message: dict[str, Any],
    status: str = "completed",
    group: str | None = None,
) -> dict[str, Any]:
    item = {
        "transactionId": message["transactionId"],
        "partitionId": message["partitionId"],
        "leaseId": message["leaseId"],
        "status": status,
    }
    if group:
        item["consumerGroup"] = group
    result: dict[str, Any] = call_procedure(conn, "ack_v1", [item])[0]
    return result


def test_retention_deletes_old_messages_in_any_state_but_never_under_a_live_lease(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    configure(conn, "logs", retentionSeconds=60)  # retentionEnabled follows from the period
    push(conn, "logs", 10)
    age(conn, "logs", 6)
    leased = pop(conn, "logs", 3)  # offsets 1-3 leased by queue mode, not acked
    assert [m["offset"] for m in leased] == [1, 2, 3]
    assert run_job(db_url, RetentionJob).rows == 0  # all after the lease holder's cursor (0)
    assert offsets(conn, "logs") == list(range(1, 11))

    assert ack(conn, leased[0])["success"]  # cursor 1; the lease still holds 2-3
    done = run_job(db_url, RetentionJob)
    assert done.rows == 1 and offsets(conn, "logs") == list(range(2, 11))

    conn.execute("UPDATE queen.partition_consumers SET lease_expires_at = now() - interval '1 second'")
    done = run_job(db_url, RetentionJob)
    assert done.rows == 5  # 2..6, unconsumed or not; 7..10 are young
    assert offsets(conn, "logs") == list(range(7, 11))
    assert history(conn, "logs") == {"retention": 6}
    assert counters(conn, "logs") == (6, 6, 0, 0)
    assert done.details["retention"]["queues"] == 1


def test_retention_needs_retention_enabled_when_it_is_given_false(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    configure(conn, "kept", retentionSeconds=60, retentionEnabled=False)
    push(conn, "kept", 3)
    age(conn, "kept", 3)
    assert run_job(db_url, RetentionJob).rows == 0
    assert offsets(conn, "kept") == [1, 2, 3]


def test_completed_retention_waits_for_every_group_and_spares_dead_letters_and_replays(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    configure(conn, "jobs", completedRetentionSeconds=60, retryLimit=0)
    push(conn, "jobs", 10)
    push(conn, "jobs", 4, partition="other")
    age(conn, "jobs", 10)
    age(conn, "jobs", 4, partition="other")
    assert run_job(db_url, RetentionJob).rows == 0  # nobody consumed anything

    first = pop(conn, "jobs", 3, group="slow")
    for message in first[:2]:
        assert ack(conn, message, group="slow")["success"]
    assert ack(conn, first[2], status="failed", group="slow")["dlq"] is True  # offset 3 dead-lettered
    more = pop(conn, "jobs", 2, group="slow", auto_ack=True)
    assert [m["offset"] for m in more] == [4, 5]
    pop(conn, "jobs", 8, group="fast", auto_ack=True)
    # slow is at 5, fast at 8: offsets 1-5 are consumed by both; 3 is a dead letter and stays
    done = run_job(db_url, RetentionJob)
    assert done.rows == 4 and offsets(conn, "jobs") == [3, 6, 7, 8, 9, 10]
    assert counters(conn, "jobs") == (4, 0, 5, 0)
    # "other" has cursors of neither group: nothing consumed there by every group
    assert offsets(conn, "jobs", "other") == [1, 2, 3, 4]
    # the stats job finds the oldest message below the floor (the dead letter), not only from the floor on
    run_job(db_url, StatsJob)
    oldest = conn.execute(
        "SELECT s.oldest_seq, s.oldest_at = (SELECT min(m.created_at) FROM queen.messages m "
        "WHERE m.partition_id = s.partition_id) FROM queen.partition_stats s JOIN queen.partitions p "
        "ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'jobs' "
        "AND p.name = 'Default'"
    ).fetchone()
    assert oldest == (3, True)

    # the dead letter is replayed to "slow" (queen.replays): its offset is below the cursor, and it stays
    replay = conn.execute(
        "SELECT queen.dlq_replay_v1(m.partition_id, m.transaction_id, NULL) FROM queen.messages m "
        "JOIN queen.partitions p ON p.id = m.partition_id WHERE p.name = 'Default' AND m.seq = 3"
    ).fetchone()
    assert replay is not None and replay[0]["success"]
    assert counters(conn, "jobs")[2] == 2  # the floor goes back below it
    assert run_job(db_url, RetentionJob).rows == 0  # slow has not consumed the replay yet
    pop(conn, "jobs", 10, group="fast", auto_ack=True)
    assert [m["offset"] for m in pop(conn, "jobs", 10, group="slow", auto_ack=True)] == [3, 6, 7, 8, 9, 10]
    assert run_job(db_url, RetentionJob).rows == 6
    assert offsets(conn, "jobs") == []
    assert history(conn, "jobs") == {"completed_retention": 10}


def test_completed_retention_keeps_young_messages_and_a_queue_mode_cursor_counts(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    configure(conn, "young", completedRetentionSeconds=60)
    push(conn, "young", 6)
    age(conn, "young", 2)
    pop(conn, "young", 6, auto_ack=True)
    assert run_job(db_url, RetentionJob).rows == 2
    assert offsets(conn, "young") == [3, 4, 5, 6]


def test_eviction_deletes_what_no_group_took_in_time(conn: psycopg.Connection[Any], db_url: str) -> None:
    configure(conn, "stale", maxWaitTimeSeconds=60)
    push(conn, "stale", 10)
    push(conn, "stale", 3, partition="nobody")
    age(conn, "stale", 8)
    age(conn, "stale", 3, partition="nobody")
    pop(conn, "stale", 2, auto_ack=True)  # consumed in time: 1, 2
    leased = pop(conn, "stale", 2)  # 3, 4 taken, under a lease
    done = run_job(db_url, EvictionJob)
    assert done.rows == 3  # "nobody" has no cursor: everything old there goes
    assert offsets(conn, "stale") == list(range(1, 11))  # the lease holder keeps 3.. while it lives
    assert offsets(conn, "stale", "nobody") == []
    assert ack(conn, leased[0])["success"] and ack(conn, leased[1])["success"]
    done = run_job(db_url, EvictionJob)
    assert done.rows == 4  # 5..8: old and after the cursor; 9, 10 young; 1..4 consumed
    assert offsets(conn, "stale") == [1, 2, 3, 4, 9, 10]
    assert counters(conn, "stale") == (4, 0, 0, 8)
    assert history(conn, "stale") == {"max_wait_time_eviction": 7}
    # the consumer goes on after the gap
    assert [m["offset"] for m in pop(conn, "stale", 10, auto_ack=True)] == [9, 10]


def test_steps_are_bounded_and_together_delete_everything(conn: psycopg.Connection[Any], db_url: str) -> None:
    configure(conn, "bulk", retentionSeconds=60)
    for name in ("a", "b", "c"):
        push(conn, "bulk", 25, partition=name)
        age(conn, "bulk", 20, partition=name)
    done = run_job(db_url, RetentionJob, retention_batch_size=7)
    assert done.rows == 60
    assert done.details["retention"]["steps"] >= 60 // 7
    rows = conn.execute(
        "SELECT messages_deleted FROM queen.retention_history WHERE queue_name = 'bulk'"
    ).fetchall()
    assert all(r[0] <= 7 for r in rows) and sum(r[0] for r in rows) == 60
    for name in ("a", "b", "c"):
        assert offsets(conn, "bulk", name) == list(range(21, 26))


#: an operator's pause: every job (true), none (false), or the jobs named (a list)
PAUSE = (
    "INSERT INTO queen.system_state (key, value) "
    "VALUES ('services', jsonb_build_object('paused', %s::jsonb)) "
    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
)


def test_an_operator_pauses_every_job_or_the_jobs_named(conn: psycopg.Connection[Any]) -> None:
    def paused(job: str) -> bool:
        return bool(conn.execute("SELECT queen.services_paused_v2(%s)", (job,)).fetchone()[0])

    try:
        assert not paused("retention")  # no state: running
        for value, expected in [
            ("true", {"retention": True, "stats": True}),
            ("false", {"retention": False, "stats": False}),
            ('["retention", "eviction"]', {"retention": True, "eviction": True, "stats": False}),
            ("[]", {"retention": False}),
        ]:
            conn.execute(PAUSE, (value,))
            assert {job: paused(job) for job in expected} == expected, value
    finally:
        conn.execute(PAUSE, ("false",))


@pytest.mark.parametrize("pause", ["true", '["retention"]'])
def test_a_run_holds_between_steps_while_its_job_is_paused(
    conn: psycopg.Connection[Any], db_url: str, pause: str
) -> None:
    """An operator's pause (system_state 'services': every job, or the jobs named) stops a run under way
    before its next step, not at its end: paused before the run starts, it deletes nothing until resumed,
    then finishes (heldMs counted)."""
    configure(conn, "held", retentionSeconds=60)
    push(conn, "held", 25)
    age(conn, "held", 20)
    conn.execute(PAUSE, (pause,))
    done: list[RunResult] = []
    try:
        runner = threading.Thread(
            target=lambda: done.append(run_job(db_url, RetentionJob, retention_batch_size=7))
        )
        runner.start()
        runner.join(1.5)
        assert runner.is_alive() and offsets(conn, "held") == list(range(1, 26))  # held: nothing deleted
    finally:
        conn.execute(PAUSE, ("false",))
    runner.join(30)
    assert not runner.is_alive()
    assert done[0].rows == 20 and offsets(conn, "held") == list(range(21, 26))
    assert done[0].details["pace"]["heldMs"] >= 1000


def test_retention_vacuums_the_messages_table_after_enough_deletions(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    """Past ``RETENTION_VACUUM_ROWS`` deleted messages the job vacuums queen.messages itself (so the space is
    reused within seconds, whatever the server's autovacuum_naptime); under it, it leaves that to
    autovacuum."""

    def vacuumed() -> Any:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return conn.execute(
            "SELECT vacuum_count FROM pg_stat_user_tables WHERE schemaname = 'queen' AND relname = 'messages'"
        ).fetchone()[0]  # type: ignore[index]

    configure(conn, "vacuumed", retentionSeconds=60)
    push(conn, "vacuumed", 30)
    age(conn, "vacuumed", 30)
    before = vacuumed()
    done = run_job(db_url, RetentionJob, retention_vacuum_rows=31)
    assert done.rows == 30 and "vacuum" not in done.details
    push(conn, "vacuumed", 30)
    age(conn, "vacuumed", 60)
    done = run_job(db_url, RetentionJob, retention_vacuum_rows=30)
    assert done.rows == 30
    assert done.details["vacuum"]["messagesDeleted"] == 30
    assert vacuumed() == before + 1
    push(conn, "vacuumed", 5)
    age(conn, "vacuumed", 65)
    assert "vacuum" not in run_job(db_url, RetentionJob, retention_vacuum_rows=0).details  # 0: never


@pytest.mark.parametrize("old", [0, 1, 137, 499, 500])
def test_the_run_of_old_messages_ends_at_the_first_young_one_at_any_depth(
    conn: psycopg.Connection[Any], db_url: str, old: int
) -> None:
    """The step finds where the old run ends by a search over offsets (queen.retention_run_end_v2)."""
    queue = f"depth-{old}"
    configure(conn, queue, retentionSeconds=60)
    push(conn, queue, 500)
    if old:
        age(conn, queue, old)
    assert run_job(db_url, RetentionJob).rows == old
    assert offsets(conn, queue) == list(range(old + 1, 501))
    assert counters(conn, queue)[0] == old


def test_offsets_deleted_one_by_one_are_stepped_over(conn: psycopg.Connection[Any], db_url: str) -> None:
    configure(conn, "gaps", retentionSeconds=60)
    push(conn, "gaps", 100)
    age(conn, "gaps", 60)
    conn.execute(
        "DELETE FROM queen.messages m USING queen.partitions p, queen.queues q "
        "WHERE m.partition_id = p.id AND p.queue_id = q.id AND q.name = 'gaps' "
        "AND (m.seq BETWEEN 10 AND 40 OR m.seq BETWEEN 55 AND 70)"
    )
    assert run_job(db_url, RetentionJob).rows == 60 - 31 - 6
    assert offsets(conn, "gaps") == list(range(71, 101))
    # head_seq: past the last message deleted (54), never past the first young one (71); where in the gap it
    # stops is the search's business
    assert 54 <= counters(conn, "gaps")[1] <= 70


def test_a_young_message_before_old_ones_is_kept_and_stops_the_run(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    """Creation times out of offset order (the clock stepped back): the step never deletes a young message,
    and its floor stays below it, so it goes once it is old too."""
    configure(conn, "skew", retentionSeconds=60)
    push(conn, "skew", 50)
    age(conn, "skew", 50)
    conn.execute(
        "UPDATE queen.messages m SET created_at = now() FROM queen.partitions p, queen.queues q "
        "WHERE m.partition_id = p.id AND p.queue_id = q.id AND q.name = 'skew' AND m.seq = 20"
    )
    assert run_job(db_url, RetentionJob).rows == 49
    assert offsets(conn, "skew") == [20]
    assert counters(conn, "skew")[:2] == (49, 19)  # messages deleted, head_seq
    age(conn, "skew", 20)
    assert run_job(db_url, RetentionJob).rows == 1
    assert offsets(conn, "skew") == []
    assert counters(conn, "skew")[:2] == (50, 50)


def test_partition_cleanup_removes_empty_idle_partitions_with_their_cursors(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    push(conn, "tidy", 1, partition="busy")
    push(conn, "tidy", 1, partition="idle")
    pop(conn, "tidy", 1, group="g", auto_ack=True, partition="idle")
    conn.execute(
        "DELETE FROM queen.messages m USING queen.partitions p WHERE p.id = m.partition_id "
        "AND p.name = 'idle'"
    )
    conn.execute(
        "UPDATE queen.partitions SET created_at = now() - interval '2 days', "
        "last_activity = now() - interval '2 days', last_message_at = now() - interval '2 days'"
    )  # as pushes two days ago left them (a push sets both times)
    conn.execute(
        "UPDATE queen.partition_consumers SET created_at = now() - interval '2 days', "
        "last_consumed_at = now() - interval '2 days'"
    )
    kept = run_job(db_url, RetentionJob, partition_cleanup_days=3)
    assert kept.details["partitionCleanup"] == {"partitions": 0}
    done = run_job(db_url, RetentionJob, partition_cleanup_days=1)
    assert done.details["partitionCleanup"] == {"partitions": 1}
    names = [r[0] for r in conn.execute("SELECT p.name FROM queen.partitions p ORDER BY 1").fetchall()]
    assert names == ["Default", "busy"] or names == ["busy"]
    assert conn.execute("SELECT count(*) FROM queen.partition_consumers").fetchone() == (0,)
    assert history(conn, "tidy")["partition_cleanup"] == 0
    # a push to the removed partition creates it again, from offset 1
    push(conn, "tidy", 2, partition="idle")
    assert offsets(conn, "tidy", "idle") == [1, 2]


def test_partition_cleanup_records_the_deletions_the_stats_job_has_not_seen(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    """Completed retention empties a partition and partition cleanup removes it in the same run, before any
    stats run: the deletions still reach the queue's throughput minutes (they were lost with the partition's
    counters before)."""
    configure(conn, "swept", completedRetentionSeconds=60)
    push(conn, "swept", 7, partition="p")
    run_job(db_url, StatsJob)  # ingested recorded; the partition's stats row now knows offset 7
    for message in pop(conn, "swept", 7, partition="p"):
        assert ack(conn, message)["success"]
    run_job(db_url, StatsJob)  # processed recorded
    age(conn, "swept", 7, partition="p")
    conn.execute(
        "UPDATE queen.partitions SET created_at = now() - interval '2 days', "
        "last_activity = now() - interval '2 days', last_message_at = now() - interval '2 days' "
        "WHERE name = 'p'"
    )
    conn.execute(
        "UPDATE queen.partition_consumers SET created_at = now() - interval '2 days', "
        "last_consumed_at = now() - interval '2 days', lease_acquired_at = now() - interval '2 days'"
    )
    done = run_job(db_url, RetentionJob, partition_cleanup_days=1)
    assert done.details["completed_retention"]["deleted"] == 7
    assert done.details["partitionCleanup"] == {"partitions": 1}
    assert conn.execute(
        "SELECT count(*) FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
        "WHERE q.name = 'swept' AND p.name = 'p'"
    ).fetchone() == (0,)
    run_job(db_url, StatsJob)
    totals = conn.execute(
        "SELECT sum(t.ingested), sum(t.processed), sum(t.deleted) FROM queen.queue_throughput t "
        "JOIN queen.queues q ON q.id = t.queue_id WHERE q.name = 'swept'"
    ).fetchone()
    assert totals == (7, 7, 7)


def test_a_push_that_finds_its_partition_gone_at_the_lock_creates_it_again(db_url: str) -> None:
    """Partition cleanup deletes a partition between a push's lookup and its lock: the push waits for the
    deleting transaction, finds the row gone, looks up again, creates the partition and stores its message."""
    with psycopg.connect(db_url, autocommit=True) as setup:
        push(setup, "race", 1, partition="p")
        setup.execute("DELETE FROM queen.messages")
    cleaner = psycopg.connect(db_url)
    try:
        cleaner.execute("SELECT id FROM queen.partitions WHERE name = 'p' FOR UPDATE")  # cleanup's lock
        outcome: dict[str, Any] = {}

        def pusher() -> None:
            with psycopg.connect(db_url, autocommit=True) as conn:
                outcome["result"] = call_procedure(
                    conn, "push_items_v1", [{"queue": "race", "partition": "p", "payload": "after"}]
                )

        thread = threading.Thread(target=pusher)
        thread.start()
        with psycopg.connect(db_url, autocommit=True) as watcher:
            for _ in range(400):  # the push is waiting for the lock
                waiting = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE '%%push_items_v1%%'"
                ).fetchone()
                if waiting and waiting[0]:
                    break
                thread.join(0.02)
        cleaner.execute("DELETE FROM queen.partitions WHERE name = 'p'")
        cleaner.commit()
        thread.join(30)
    finally:
        cleaner.close()
    assert outcome["result"][0]["status"] == "queued"
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert offsets(conn, "race", "p") == [1]


def test_history_tables_are_trimmed_after_their_retention(conn: psycopg.Connection[Any], db_url: str) -> None:
    conn.execute("""
        INSERT INTO queen.retention_history (queue_name, messages_deleted, retention_type, executed_at)
        VALUES ('x', 1, 'retention', now() - interval '3 days'), ('x', 2, 'retention', now());
        INSERT INTO queen.system_metrics (sampled_at, hostname, worker_id, metrics)
        VALUES (now() - interval '3 days', 'h', '0', '{}'), (now(), 'h', '0', '{}');
        INSERT INTO queen.worker_metrics (sampled_at, hostname, worker_id, metrics)
        VALUES (now() - interval '3 days', 'h', '0', '{}');
        INSERT INTO queen.queue_lag_metrics (bucket_time, hostname, worker_id, queue_name)
        VALUES (now() - interval '3 days', 'h', '0', 'x');
        INSERT INTO queen.service_runs (job, holder, started_at, finished_at)
        VALUES ('stats', 'h', now() - interval '3 days', now() - interval '3 days');
        INSERT INTO queen.messages_consumed (partition_id, consumer_group, acked_at)
        VALUES (gen_random_uuid(), 'g', now() - interval '3 days');
    """)
    push(conn, "tp", 1)
    conn.execute(
        "INSERT INTO queen.queue_throughput (queue_id, bucket, ingested) "
        "SELECT id, now() - interval '2 days', 5 FROM queen.queues WHERE name = 'tp'"
    )
    done = run_job(db_url, RetentionJob, metrics_retention_days=2, stats_history_retention_days=1)
    assert done.details["trimmed"] == {
        "retention_history": 1,
        "system_metrics": 1,
        "worker_metrics": 1,
        "queue_lag_metrics": 1,
        "service_runs": 1,
        "messages_consumed": 1,
        "queue_throughput": 1,
    }
    assert conn.execute("SELECT sum(messages_deleted) FROM queen.retention_history").fetchone() == (2,)
    assert conn.execute("SELECT count(*) FROM queen.system_metrics").fetchone() == (1,)


def test_max_size_counts_from_the_maintained_count_and_frees_room_after_retention(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    configure(conn, "capped", maxSize=5, retentionSeconds=60)
    results = call_procedure(
        conn,
        "push_items_v1",
        [{"queue": "capped", "partition": f"p{n % 2}", "payload": n} for n in range(7)]
        + [{"queue": "free", "payload": 1}],
    )
    assert [r["status"] for r in results] == ["queued"] * 5 + ["failed", "failed", "queued"]
    assert results[5]["error"] == "queue full"
    assert conn.execute(
        "SELECT count(*) FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id "
        "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'capped'"
    ).fetchone() == (5,)
    age(conn, "capped", 2, partition="p0")
    assert run_job(db_url, RetentionJob).rows == 2
    results = call_procedure(conn, "push_items_v1", [{"queue": "capped", "payload": n} for n in range(3)])
    assert [r["status"] for r in results] == ["queued", "queued", "failed"]
    stored = conn.execute(
        "SELECT c.stored FROM queen.queue_capacity c JOIN queen.queues q ON q.id = c.queue_id "
        "WHERE q.name = 'capped'"
    ).fetchone()
    assert stored == (5,)
    # the reconcile recounts it from offsets and counters: same number
    conn.execute("UPDATE queen.queue_capacity SET stored = 0")
    run_job(db_url, StatsJob)
    assert conn.execute("SELECT stored FROM queen.queue_capacity").fetchone() == (5,)
    # lifting the cap drops the count; setting it again recounts
    configure(conn, "capped", maxSize=0)
    assert conn.execute("SELECT count(*) FROM queen.queue_capacity").fetchone() == (0,)
    configure(conn, "capped", maxSize=6)
    assert conn.execute("SELECT stored FROM queen.queue_capacity").fetchone() == (5,)


def test_concurrent_pushes_never_overfill_a_capped_queue(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        configure(conn, "tight", maxSize=300)
    queued: list[int] = []

    def pusher(worker: int) -> None:
        with psycopg.connect(db_url, autocommit=True) as conn:
            for n in range(20):
                results = call_procedure(
                    conn,
                    "push_items_v1",
                    [
                        {"queue": "tight", "partition": f"p{(worker + n + i) % 4}", "payload": i}
                        for i in range(5)
                    ],
                )
                queued.append(sum(r["status"] == "queued" for r in results))

    threads = [threading.Thread(target=pusher, args=(w,)) for w in range(6)]  # 600 offered, 300 fit
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with psycopg.connect(db_url, autocommit=True) as conn:
        stored = conn.execute("SELECT count(*) FROM queen.messages").fetchone()
    assert sum(queued) == 300 and stored == (300,)


def test_a_deleted_message_takes_its_dead_letters_traces_and_replays_along(
    conn: psycopg.Connection[Any],
) -> None:
    """The cascades of a message delete (now one set-based delete per statement, in the delete trigger): its
    dead-letter rows, its traces with their names, its replays, and the partition's DLQ count."""
    configure(conn, "gone", retryLimit=0)
    push(conn, "gone", 3)
    messages = pop(conn, "gone", 3)
    for message in messages:
        assert ack(conn, message, status="failed")["dlq"] is True
        assert call_procedure(
            conn,
            "trace_record_v1",
            {
                "transactionId": message["transactionId"],
                "partitionId": message["partitionId"],
                "data": {"n": 1},
                "traceNames": ["t"],
            },
        )["success"]
    conn.execute(
        "SELECT queen.dlq_replay_v1(m.partition_id, m.transaction_id, NULL) FROM queen.messages m "
        "WHERE m.seq = 3"
    )
    assert conn.execute(
        "SELECT (SELECT count(*) FROM queen.dead_letter_queue), (SELECT count(*) FROM "
        "queen.replays), (SELECT count(*) FROM queen.message_traces), (SELECT count(*) FROM "
        "queen.message_trace_names)"
    ).fetchone() == (2, 1, 3, 3)
    conn.execute("DELETE FROM queen.messages WHERE seq >= 2")
    assert conn.execute(
        "SELECT (SELECT count(*) FROM queen.dead_letter_queue), (SELECT count(*) FROM "
        "queen.replays), (SELECT count(*) FROM queen.message_traces), (SELECT count(*) FROM "
        "queen.message_trace_names)"
    ).fetchone() == (1, 0, 1, 1)
    assert conn.execute(
        "SELECT dlq_messages, dead_lettered, messages_deleted FROM queen.partition_counters c "
        "JOIN queen.partitions p ON p.id = c.partition_id WHERE p.name = 'Default'"
    ).fetchone() == (1, 3, 2)
    assert history(conn, "gone") == {"deleted": 2}


def test_a_retention_step_takes_no_lock_a_push_holds(db_url: str) -> None:
    """A push holds its partitions' rows locked for update until it commits. A retention step over two of them
    must not wait for it: a foreign key of partition_counters, checked again when the step's delete trigger
    updated a row the step had already updated, share-locked the partition rows, and a step and a push
    deadlocked in the soak benchmark. The step runs under a lock timeout here."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        configure(conn, "held", retentionSeconds=60)
        for name in ("a", "b"):
            push(conn, "held", 3, partition=name)
            age(conn, "held", 3, partition=name)
        queue_id = conn.execute("SELECT id FROM queen.queues WHERE name = 'held'").fetchone()[0]  # type: ignore[index]
        pushing = psycopg.connect(db_url)
        try:
            pushing.execute("SELECT 1 FROM queen.partitions FOR UPDATE")  # a push's locks, not committed
            conn.execute("SET lock_timeout = '2s'")
            step = conn.execute(
                "SELECT queen.retention_step_v1('retention', %s, '{}', '', true, 500, 100, now())",
                (queue_id,),
            ).fetchone()
            assert step is not None and step[0]["deleted"] == 6
        finally:
            pushing.close()
        conn.execute("SELECT queen.delete_queue_v1('held')")  # counters and stats rows go with the partitions
        for table in ("partition_counters", "partition_stats", "consumer_stats"):
            assert conn.execute(f"SELECT count(*) FROM queen.{table}").fetchone() == (0,), table


def test_a_stats_job_run_takes_its_sweep_in_paced_steps(db_url: str) -> None:
    """A run of the stats job calls queen.stats_refresh_v4 a step of STATS_RUN_PARTITIONS changed partitions
    at a time until the sweep ends, each step paced: 5 changed partitions at 2 a step are 3 steps, and every
    partition's numbers are then current."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        for n in range(5):
            push(conn, "steps", 1, partition=f"p{n}")
        run_job(db_url, StatsJob)
        for n in range(5):
            push(conn, "steps", 2, partition=f"p{n}")
        done = run_job(db_url, StatsJob, stats_run_partitions=2, stats_reconcile_chunk=1, duty_cycle=1.0)
        assert done.details["steps"] == 3, done.details
        assert done.details["sweepAfter"] is None
        depths = conn.execute(
            "SELECT s.depth FROM queen.partition_stats s JOIN queen.partitions p ON p.id = s.partition_id "
            "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'steps' ORDER BY p.name"
        ).fetchall()
        assert depths == [(3,)] * 5
        queue = conn.execute(
            "SELECT s.depth FROM queen.queue_stats s JOIN queen.queues q ON q.id = s.queue_id "
            "WHERE q.name = 'steps'"
        ).fetchone()
        assert queue == (15,)


@pytest.mark.parametrize("job_type", [RetentionJob, EvictionJob])
def test_a_deleting_job_runs_at_the_duty_its_last_run_set(
    conn: psycopg.Connection[Any], db_url: str, job_type: type[Job]
) -> None:
    """Each run is paced at the duty the run before it set (queenpy.services.jobs.keep_up_duty), the base
    first. With no rest between runs (an interval of 0) a run is all of its cycle, its paced steps a share of
    it near its duty, so each run sets a higher duty for the next (twice its busy share, at most 1): a job
    that cannot rest between runs is behind. A job with the default interval, minutes between runs, stays
    at the base."""
    for queue in ("paced-a", "paced-b", "paced-c"):  # eviction's steps: one a queue (retention always steps)
        configure(conn, queue, maxWaitTimeSeconds=600)

    async def go() -> list[dict[str, Any]]:
        database = Database(db_url, 2)
        await database.open()
        try:
            job = job_type(ServiceSettings(retention_interval_ms=0, eviction_interval_ms=0, duty_cycle=0.25))
            paces = [(await job.run(database)).details["pace"] for _ in range(4)]
            default = job_type(ServiceSettings(duty_cycle=0.25))
            paces.append((await default.run(database)).details["pace"])
            return paces
        finally:
            await database.close()

    paces = asyncio.run(go())
    assert paces[0]["duty"] == 0.25 and 0.25 < paces[0]["nextDuty"] <= 0.5
    assert paces[0]["busyMs"] > 0 and paces[0]["restedMs"] > 0
    for before, after in itertools.pairwise(paces[:4]):
        assert after["duty"] == pytest.approx(before["nextDuty"], abs=0.001)  # rounded in the record
        assert 0.25 < after["nextDuty"] <= min(1.0, 2 * after["duty"])
    assert (paces[4]["duty"], paces[4]["nextDuty"]) == (0.25, 0.25)  # one short run, minutes before the next
