"""What one deleted message costs the retention step (``queen.retention_step_v1``), on a PostgreSQL you name.

The soak's shape: a queue of ``--partitions`` partitions, each holding ``--rounds`` x ``--per-round`` messages
created an hour ago (offsets in creation order), everything consumed in queue mode,
``completedRetentionSeconds`` 1. Then ``--rounds`` retention runs, each advancing the cutoff by
``--per-round`` messages of every partition, as the retention job calls the step (``RETENTION_BATCH_SIZE``
``--batch`` messages a step, autocommit: a commit per step). Printed: messages deleted, wall time,
microseconds per deleted message (commits included).

The database must be migrated (a broker started on it once: ``queenpy serve --database-url URL``); the queue
``retention-micro`` is created (and first deleted, with its messages). Use a scratch database and an idle
machine; run it a few times and compare runs of the same session with each other.

    python benchmarks/retention_step.py postgresql://postgres@127.0.0.1:5439/queenbench --repeat 4
"""

from __future__ import annotations

import argparse
import time
from typing import Any, cast

import psycopg
from psycopg.types.json import Jsonb

QUEUE = "retention-micro"


def prepare(
    conn: psycopg.Connection[tuple[object, ...]], partitions: int, messages: int
) -> tuple[object, object]:
    """The queue, its partitions and ``messages`` messages in each, all consumed; message ``s`` of a partition
    was created ``s`` ms after the returned base time (an hour ago). Returns (queue id, base time)."""
    conn.execute("DELETE FROM queen.queues WHERE name = %s", (QUEUE,))
    conn.execute(
        "SELECT queen.configure_queue_v1(%s)",
        (Jsonb({"queue": QUEUE, "options": {"completedRetentionSeconds": 1}}),),
    )
    row = conn.execute("SELECT id FROM queen.queues WHERE name = %s", (QUEUE,)).fetchone()
    assert row is not None
    queue_id = row[0]
    base = conn.execute("SELECT now() - interval '1 hour'").fetchone()[0]  # type: ignore[index]
    conn.execute(
        "INSERT INTO queen.partitions (queue_id, name) SELECT %s, 'p' || lpad(i::text, 5, '0') "
        "FROM generate_series(1, %s) i ON CONFLICT DO NOTHING",
        (queue_id, partitions),
    )
    conn.execute(
        """
        INSERT INTO queen.messages (id, transaction_id, partition_id, seq, payload, created_at)
        SELECT gen_random_uuid(), gen_random_uuid()::text, p.id, s, '{"n": 1}',
               %s::timestamptz + s * interval '1 ms'
        FROM queen.partitions p, generate_series(1, %s) s WHERE p.queue_id = %s AND p.name LIKE 'p%%'""",
        (base, messages, queue_id),
    )
    conn.execute(
        "UPDATE queen.partitions SET last_seq = %s WHERE queue_id = %s AND name LIKE 'p%%'",
        (messages, queue_id),
    )
    conn.execute(
        "INSERT INTO queen.partition_consumers (partition_id, last_consumed_seq) "
        "SELECT id, %s FROM queen.partitions WHERE queue_id = %s AND name LIKE 'p%%'",
        (messages, queue_id),
    )
    conn.execute("VACUUM ANALYZE queen.messages")
    return queue_id, base


def run(
    conn: psycopg.Connection[tuple[object, ...]],
    queue_id: object,
    base: object,
    rounds: int,
    per_round: int,
    batch: int,
) -> tuple[int, float]:
    """``rounds`` retention runs; (messages deleted, seconds)."""
    deleted = 0
    started = time.perf_counter()
    for round_no in range(rounds):
        # run time: the cutoff (run time - completedRetentionSeconds) falls just after this round's messages
        run_at_ms = (round_no + 1) * per_round + 0.5 + 1000
        after, inclusive = "", True
        while True:
            row = conn.execute(
                "SELECT queen.retention_step_v1('completed_retention', %s, '{__QUEUE_MODE__}', %s, %s, 500, "
                "%s, %s::timestamptz + %s * interval '1 ms')",
                (queue_id, after, inclusive, batch, base, run_at_ms),
            ).fetchone()
            assert row is not None
            step = cast(dict[str, Any], row[0])
            deleted += int(step["deleted"])
            if step["next"] is None:
                break
            after, inclusive = step["next"], step["inclusive"]
    return deleted, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="libpq URL of a migrated scratch database")
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=210, help="messages per partition per run")
    parser.add_argument("--batch", type=int, default=1000, help="RETENTION_BATCH_SIZE")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    with psycopg.connect(args.url, autocommit=True) as conn:
        for _ in range(args.repeat):
            queue_id, base = prepare(conn, args.partitions, args.rounds * args.per_round)
            deleted, seconds = run(conn, queue_id, base, args.rounds, args.per_round, args.batch)
            print(
                f"{deleted:,} deleted in {seconds * 1000:,.0f} ms: "
                f"{seconds / max(deleted, 1) * 1e6:.2f} µs per deleted message"
            )
        conn.execute("DELETE FROM queen.queues WHERE name = %s", (QUEUE,))


if __name__ == "__main__":
    main()
