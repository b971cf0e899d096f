"""Guards of the background services' SQL (STYLE.md rule 4, as tests/integration/test_explain.py): each step
is bounded and served by indexes, whatever the size of the tables around it.

Each step is a procedure call; what it read is measured in the backend's own table statistics (sequential
scans started, per table) and in the shared buffers the call touched (EXPLAIN ANALYZE BUFFERS of the call,
everything it ran included), under custom and generic plans alike.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from helpers import call_procedure

TABLES = (
    "messages",
    "consumer_stats",
    "partitions",
    "partition_consumers",
    "partition_counters",
    "dead_letter_queue",
    "replays",
    "message_traces",
    "message_trace_names",
    "partition_counters",
    "retention_history",
)


@pytest.fixture
def conn(db_url: str) -> Any:
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


def table_reads(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, int]]:
    return {
        r[0]: (int(r[1]), int(r[2] or 0))
        for r in conn.execute(
            "SELECT relname, seq_scan, idx_tup_fetch FROM pg_stat_xact_user_tables "
            "WHERE schemaname = 'queen' AND relname = ANY (%s)",
            (list(TABLES),),
        ).fetchall()
    }


def measure(
    conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...]
) -> tuple[int, dict[str, int], dict[str, int]]:
    """(shared buffers touched, sequential scans started per table, rows fetched through indexes per table)
    of one call, run in a transaction of its own (a backend's statistics are read before and after it, in
    it)."""
    with conn.transaction():
        before = table_reads(conn)
        row = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params).fetchone()
        after = table_reads(conn)
    assert row is not None
    plan = (row[0] if not isinstance(row[0], str) else json.loads(row[0]))[0]["Plan"]
    buffers = int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])
    scans = {t: after.get(t, (0, 0))[0] - before.get(t, (0, 0))[0] for t in TABLES}
    fetched = {t: after.get(t, (0, 0))[1] - before.get(t, (0, 0))[1] for t in TABLES}
    return buffers, {t: n for t, n in scans.items() if n}, {t: n for t, n in fetched.items() if n}


def deep_partition(conn: psycopg.Connection[Any], queue: str, count: int, **options: Any) -> Any:
    """A queue whose Default partition holds ``count`` messages created an hour ago, each with a trace on one
    in ten, and a dead letter and a replay elsewhere in the table: the tables a message delete cascades to are
    not empty."""
    call_procedure(conn, "configure_queue_v1", {"queue": queue, "options": options})
    row = conn.execute(
        "SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = %s",
        (queue,),
    ).fetchone()
    assert row is not None
    partition = row[0]
    conn.execute(
        """
        INSERT INTO queen.messages (id, transaction_id, partition_id, seq, payload, created_at)
        SELECT gen_random_uuid(), 'bulk-' || s, %s, s, '{"n": 1}',
               now() - interval '1 hour' + s * interval '1 us'
        FROM generate_series(1, %s) s""",
        (partition, count),
    )
    conn.execute(
        "UPDATE queen.partitions SET last_seq = %s, last_message_at = now() WHERE id = %s", (count, partition)
    )
    conn.execute(
        """
        INSERT INTO queen.message_traces (message_id, partition_id, transaction_id, data)
        SELECT m.id, m.partition_id, m.transaction_id, '{}' FROM queen.messages m
        WHERE m.partition_id = %s AND m.seq %% 10 = 0""",
        (partition,),
    )
    conn.execute(
        "INSERT INTO queen.message_trace_names (trace_id, trace_name) "
        "SELECT id, 'name' FROM queen.message_traces"
    )
    conn.execute("ANALYZE")
    return partition


@pytest.mark.parametrize("generic", [False, True], ids=["custom-plan", "generic-plan"])
@pytest.mark.parametrize("kind", ["retention", "completed_retention", "max_wait_time_eviction"])
def test_a_retention_step_reads_and_deletes_a_bounded_batch_through_indexes(
    conn: psycopg.Connection[Any], kind: str, generic: bool
) -> None:
    options = {
        "retention": {"retentionSeconds": 60},
        "completed_retention": {"completedRetentionSeconds": 60},
        "max_wait_time_eviction": {"maxWaitTimeSeconds": 60},
    }[kind]
    partition = deep_partition(conn, "deep", 100_000, **options)
    if kind == "completed_retention":  # queue mode consumed most of it; eviction: everything after the cursor
        conn.execute(
            "INSERT INTO queen.partition_consumers (partition_id, last_consumed_seq) VALUES (%s, 90000)",
            (partition,),
        )
    elif kind == "max_wait_time_eviction":
        conn.execute(
            "INSERT INTO queen.partition_consumers (partition_id, last_consumed_seq) VALUES (%s, 10000)",
            (partition,),
        )
    queue_id = conn.execute("SELECT id FROM queen.queues WHERE name = 'deep'").fetchone()[0]  # type: ignore[index]
    groups = ["__QUEUE_MODE__"] if kind != "retention" else []
    conn.execute(f"SET plan_cache_mode = {'force_generic_plan' if generic else 'force_custom_plan'}")
    call = "SELECT queen.retention_step_v1(%s, %s, %s, '', true, 500, 100, now())"
    for _ in range(2):  # plans made, first entries walked once
        conn.execute(call, (kind, queue_id, groups))
    buffers, scans, fetched = measure(conn, call, (kind, queue_id, groups))
    assert scans == {}, scans
    # of the 100,000 messages the step reads the 100 it deletes once (the offset-ordered read; the delete goes
    # by row address) plus the probes that find where the old run ends (one here: the run is all old); the
    # deletes cascade by index to the 10 traces of those messages (and one probe: does the table hold any?)
    assert fetched.get("messages", 0) <= 100 + 20, fetched
    assert fetched.get("message_traces", 0) <= 10 + 1 and fetched.get("message_trace_names", 0) <= 10, fetched
    assert buffers < 30 * 100, (
        buffers
    )  # about 20 per deleted message: its page, its index entries, the cascades
    deleted = conn.execute(
        "SELECT messages_deleted FROM queen.partition_counters WHERE partition_id = %s", (partition,)
    ).fetchone()
    assert deleted == (300,)


def idle_partitions(conn: psycopg.Connection[Any], queue: str, n: int) -> None:
    """``n`` partitions ``p1`` ... of ``queue``, created and last active 40 days ago, never pushed to."""
    conn.execute(
        """INSERT INTO queen.partitions (queue_id, name, created_at, last_activity)
        SELECT q.id, 'p' || s, now() - interval '40 days', now() - interval '40 days'
        FROM queen.queues q, generate_series(1, %s) s WHERE q.name = %s""",
        (n, queue),
    )


def young_partitions(conn: psycopg.Connection[Any], queue: str, n: int) -> None:
    """``n`` partitions ``y1`` ... of ``queue`` whose one message arrived now."""
    conn.execute(
        """INSERT INTO queen.partitions (queue_id, name, last_seq, last_message_at)
        SELECT q.id, 'y' || s, 1, now() FROM queen.queues q, generate_series(1, %s) s WHERE q.name = %s""",
        (n, queue),
    )


def test_partition_cleanup_probes_each_candidate_through_indexes(conn: psycopg.Connection[Any]) -> None:
    """Cleanup reads its candidates through indexes: idle partitions that never held a message (20,000
    here) and those whose newest message is older than the cutoff (one more, still holding it, so it stays),
    never the partitions of the busy queue beside them (50,000 messages in one partition, plus 20,000 young
    partitions): version 1 walked every partition in each step, about 2 s a step at a million (journal,
    issue 44)."""
    call_procedure(conn, "configure_queue_v1", {"queue": "many"})
    idle_partitions(conn, "many", 20_000)
    conn.execute("""
        INSERT INTO queen.partition_consumers (partition_id, consumer_group, created_at, last_consumed_at)
        SELECT p.id, 'g', now() - interval '40 days', now() - interval '40 days' FROM queen.partitions p
        WHERE p.name LIKE 'p%'""")
    deep_partition(conn, "other", 50_000)
    conn.execute("""
        UPDATE queen.partitions SET created_at = now() - interval '40 days',
               last_activity = now() - interval '40 days', last_message_at = now() - interval '40 days'
        WHERE queue_id = (SELECT id FROM queen.queues WHERE name = 'other')""")  # old, holding its messages
    call_procedure(conn, "configure_queue_v1", {"queue": "young"})
    young_partitions(conn, "young", 20_000)
    conn.execute("ANALYZE queen.partitions")
    buffers, scans, fetched = measure(conn, "SELECT queen.partition_cleanup_v3(%s, %s)", (30 * 86400.0, 500))
    # no scan of the partitions: the candidates come from the two indexes, the 20,000 idle ones and the old
    # one still holding messages; the young queue's partitions are never read. Each deletion's cascades are
    # index probes (the tables they cascade to are empty here: the case in which a plan made once per session
    # would otherwise scan them for every deleted partition)
    assert "partitions" not in scans and set(scans) <= {"partition_consumers"}, scans
    assert all(n == 1 for n in scans.values()), scans
    assert fetched.get("partitions", 0) <= 2 * 20_001, fetched
    assert fetched.get("messages", 0) <= 2, fetched  # a row of the old non-empty partition ends its probe
    # per deleted partition: its row and its consumer row, each probe of the nine tables its delete cascades
    # to, about 40 buffers
    assert fetched.get("partition_consumers", 0) <= 2 * 500, fetched
    assert buffers < 60 * 500 + 3 * 20_001, (buffers, fetched)
    assert conn.execute("SELECT count(*) FROM queen.partitions WHERE name LIKE 'p%'").fetchone() == (19500,)
    assert conn.execute(
        "SELECT count(*) FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
        "WHERE q.name = 'other'"
    ).fetchone() == (1,)


def test_partition_cleanup_reads_its_candidates_first_when_the_statistics_are_stale(
    conn: psycopg.Connection[Any],
) -> None:
    """Idle partitions that appeared since the last ANALYZE (20,000 here, beside 5,000 young ones the
    statistics know): a step still walks its candidates and stops at its limit. Planned from statistics that
    knew no old partition, version 2 drove the step from partitions_activity_idx instead (every partition
    idle since the cutoff, each probed) and a step took 24 s at 100,000 idle partitions, past the statement
    timeout (journal, issue 44)."""
    call_procedure(conn, "configure_queue_v1", {"queue": "many"})
    young_partitions(conn, "many", 5_000)
    conn.execute("ANALYZE queen.partitions")
    idle_partitions(conn, "many", 20_000)
    buffers, scans, fetched = measure(conn, "SELECT queen.partition_cleanup_v3(%s, %s)", (30 * 86400.0, 500))
    assert "partitions" not in scans, scans
    # the 500 taken, each read a few times (candidate, lock, record, delete), never the 20,000 behind them
    assert fetched.get("partitions", 0) <= 10 * 500, fetched
    assert buffers < 60 * 500 + 5_000, (buffers, fetched)
    assert conn.execute("SELECT count(*) FROM queen.partitions WHERE name LIKE 'p%'").fetchone() == (19500,)


def test_trimming_reads_only_what_it_deletes(conn: psycopg.Connection[Any]) -> None:
    conn.execute("""
        INSERT INTO queen.retention_history (queue_name, messages_deleted, retention_type, executed_at)
        SELECT 'x', 1, 'retention', now() - s * interval '1 second' FROM generate_series(1, 100000) s""")
    conn.execute("ANALYZE queen.retention_history")
    conn.execute("SELECT queen.trim_history_v1('-infinity', '-infinity', 1)")  # plans made (catalog reads)
    buffers, scans, fetched = measure(
        conn, "SELECT queen.trim_history_v1(now() - interval '2 days', now() - interval '2 days', 100)", ()
    )
    assert scans == {}, scans
    assert buffers < 200 and sum(fetched.values()) <= 1, (
        buffers,
        fetched,
    )  # nothing that old: a probe per index
    buffers, scans, fetched = measure(
        conn,
        "SELECT queen.trim_history_v1(now() - interval '50000 seconds', now() - interval '1 day', 100)",
        (),
    )
    assert scans == {}, scans
    assert fetched == {"retention_history": 100}, fetched  # the 100 rows deleted, through the time index
    assert buffers < 1500, buffers  # their pages and index entries; the table spans over a thousand pages


def test_a_completed_retention_step_reads_the_old_run_not_the_young_messages_behind_it(
    conn: psycopg.Connection[Any],
) -> None:
    """The soak's case: everything is consumed, a short period, a run a second. The step finds where the old
    run ends by a search over offsets (queen.retention_run_end_v2) instead of reading every consumed
    message."""
    partition = deep_partition(conn, "young", 20_000, completedRetentionSeconds=60)
    conn.execute(
        "UPDATE queen.messages SET created_at = now() WHERE partition_id = %s AND seq > 100", (partition,)
    )
    conn.execute(
        "INSERT INTO queen.partition_consumers (partition_id, last_consumed_seq) VALUES (%s, 20000)",
        (partition,),
    )
    queue_id = conn.execute("SELECT id FROM queen.queues WHERE name = 'young'").fetchone()[0]  # type: ignore[index]
    call = (
        "SELECT queen.retention_step_v1('completed_retention', %s, '{__QUEUE_MODE__}', '', true, 500, "
        "1000, now())"
    )
    buffers, scans, fetched = measure(conn, call, (queue_id,))
    assert scans == {}, scans
    assert conn.execute(
        "SELECT min(seq) FROM queen.messages WHERE partition_id = %s", (partition,)
    ).fetchone() == (101,)
    # the 100 old messages, and about log2(20,000) = 15 probes; not the 19,900 young ones (nor 1,000 of them)
    assert fetched.get("messages", 0) <= 100 + 20, fetched
    assert buffers < 30 * 100, buffers


def test_a_retention_step_of_one_expired_message_a_partition_reads_two_and_updates_each_counter_once(
    conn: psycopg.Connection[Any],
) -> None:
    """The steady case of retention at many partitions: since the last run one message of each partition aged
    past the period. The newest message's time is the partition row's (no probe of it), the gallop reads the
    first two messages of each, the delete fetches the expired one again, and each partition_counters row
    takes one update: the step's, which moves the floor and counts the deletion (the delete trigger's second
    update of the row doubled the step's WAL records; journal, issue 44)."""
    partitions = 200
    call_procedure(conn, "configure_queue_v1", {"queue": "steady", "options": {"retentionSeconds": 60}})
    results = call_procedure(
        conn,
        "push_items_v1",
        [
            {"queue": "steady", "partition": f"p{n}", "payload": i}
            for n in range(partitions)
            for i in range(5)
        ],
    )
    assert all(r["status"] == "queued" for r in results)
    conn.execute(
        "UPDATE queen.messages m SET created_at = now() - interval '1 hour' FROM queen.partitions p, "
        "queen.queues q WHERE m.partition_id = p.id AND p.queue_id = q.id AND q.name = 'steady' AND m.seq = 1"
    )
    queue_id = conn.execute("SELECT id FROM queen.queues WHERE name = 'steady'").fetchone()[0]  # type: ignore[index]
    step = "SELECT queen.retention_step_v1('retention', %s, '{}', '', true, 500, 1000, now())"
    with conn.transaction():
        before = table_reads(conn)
        result = conn.execute(step, (queue_id,)).fetchone()[0]  # type: ignore[index]
        after = table_reads(conn)
        updates = conn.execute(
            "SELECT n_tup_upd FROM pg_stat_xact_user_tables "
            "WHERE relid = 'queen.partition_counters'::regclass"
        ).fetchone()[0]  # type: ignore[index]
    assert result["deleted"] == partitions, result
    assert updates == partitions  # one a partition: before, the trigger's and the step's (400 here)
    fetched = after["messages"][1] - before.get("messages", (0, 0))[1]
    assert fetched == 3 * partitions, fetched  # two probes, the delete's fetch; before, 800 (newest probed)
    deleted = conn.execute(
        "SELECT sum(c.messages_deleted)::int, min(c.head_seq), max(c.head_seq) "
        "FROM queen.partition_counters c JOIN queen.partitions p ON p.id = c.partition_id "
        "WHERE p.queue_id = %s AND p.name LIKE 'p%%'",
        (queue_id,),
    ).fetchone()
    assert deleted == (partitions, 1, 1)


def test_the_stats_probe_of_the_oldest_message_starts_at_the_retention_floor(
    conn: psycopg.Connection[Any],
) -> None:
    """After retention deleted 50,000 messages, their index entries stay until a vacuum; the oldest-message
    probe of the stats job starts at the floor, so it never walks them (it did, in the soak: 350 ms a run)."""
    partition = deep_partition(conn, "floor", 60_000, retentionSeconds=60)
    conn.execute(
        "UPDATE queen.messages SET created_at = now() WHERE partition_id = %s AND seq > 50000", (partition,)
    )
    queue_id = conn.execute("SELECT id FROM queen.queues WHERE name = 'floor'").fetchone()[0]  # type: ignore[index]
    conn.execute("SELECT queen.stats_refresh_v4(true)")
    conn.execute("SELECT queen.stats_refresh_v4(false)")  # an incremental run's statements met once (catalog)
    step = "SELECT queen.retention_step_v1('retention', %s, '{}', '', true, 500, 100000, now())"
    assert conn.execute(step, (queue_id,)).fetchone()[0]["deleted"] == 50_000  # type: ignore[index]
    buffers, scans, _ = measure(conn, "SELECT queen.stats_refresh_v4(false)", ())
    row = conn.execute("SELECT oldest_seq FROM queen.partition_stats WHERE partition_id = %s", (partition,))
    assert row.fetchone() == (50_001,)
    assert "messages" not in scans, scans
    # 50,000 dead index entries span about 150 leaf pages (and a heap page per entry on a first walk); the
    # run's own pages, the sweep's list (queen.stats_sweep) among them, were 160 when this was written, so a
    # walk would take it well past the bound
    assert buffers < 200, buffers


def test_a_stats_run_reads_the_consumer_rows_that_changed_not_every_one_of_the_queue(
    conn: psycopg.Connection[Any],
) -> None:
    """One cursor of one group moved among 20,000 consumer rows (2,000 partitions, 10 groups): version 1
    re-aggregated every consumer row of the queue (ten million at a million partitions, every run); version 2
    adds the changed row's deltas to its group and probes two indexes (journal, issue 44)."""
    call_procedure(conn, "configure_queue_v1", {"queue": "wide"})
    conn.execute("""
        INSERT INTO queen.partitions (queue_id, name, last_seq, last_message_at)
        SELECT q.id, 'p' || s, 10, now() FROM queen.queues q, generate_series(1, 2000) s
        WHERE q.name = 'wide'""")
    conn.execute("""
        INSERT INTO queen.partition_consumers (partition_id, consumer_group, last_consumed_seq)
        SELECT p.id, 'g' || g, 5 FROM queen.partitions p, generate_series(1, 10) g WHERE p.name LIKE 'p%'""")
    conn.execute("ANALYZE")
    conn.execute("SELECT queen.stats_refresh_v4(true, NULL)")
    move = (
        "UPDATE queen.partition_consumers SET last_consumed_seq = last_consumed_seq + 1, "
        "last_consumed_at = now() "
        "WHERE consumer_group = 'g3' AND partition_id = (SELECT id FROM queen.partitions WHERE name = 'p7')"
    )
    conn.execute(move)
    _, scans, fetched = measure(conn, "SELECT queen.stats_refresh_v4(false, 1000)", ())
    # the sweep finds the changed partition by range scans of the timestamps' indexes (migration 024), not by
    # scanning the tables: at a million partitions those scans took about 1.1 s a sweep, busy or idle
    # (messages is empty here, so its probes may be planned as scans)
    swept = ("partitions", "partition_counters", "partition_consumers", "consumer_stats")
    assert not [table for table in swept if table in scans], scans
    # the partition's 10 consumer rows (step 2), one index probe per changed group and per changed queue
    assert fetched.get("consumer_stats", 0) <= 40, fetched
    group = conn.execute(
        "SELECT offset_lag FROM queen.queue_group_stats WHERE consumer_group = 'g3'"
    ).fetchone()
    assert group == (2000 * 5 - 1,)
