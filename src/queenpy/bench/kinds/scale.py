"""Scale: one queue with ``scenario.partitions`` partitions (1,000,000 for ``scale-1m``) of ``STORED``
messages each, and the hot path, the operators' routes, retention and storage measured there, each next to
the same figure on a queue of ``BASE_PARTITIONS`` partitions measured first in the same run (issue 44).

The partition count is the scenario's, or ``QUEENPY_SCALE_PARTITIONS`` when set (a smaller run: 100,000, or
20,000 with ``--quick`` to check a change to the kind in a few minutes).

Steps of a round:

1. **disk**: the run needs about ``BYTES_PER_PARTITION`` per partition (heap, indexes, WAL headroom); on the
   embedded PostgreSQL the free space of its directory is checked first and the scenario is skipped with
   what it needs when short. An external server's disk is not visible from here: its need is printed only.
2. **seed check**: a reference queue is made by real pushes, pops and acks through the broker; a twin of it
   is seeded by the bulk SQL below; the two are compared table by table (rows per partition in every table
   with a ``partition_id``, partition rows, message ids, cursors, consumer group metadata, the stats job's
   rows). A difference fails the round before anything is measured.
3. **base**: a queue of 100 partitions, seeded by the same SQL with a deep backlog (its groups must not run
   dry in a window), settled and checkpointed as the big queue is in 4 (:func:`settle` without the vacuum,
   :func:`_checkpoint`), with a VACUUM (ANALYZE) of the whole database before the checkpoint
   (:func:`_vacuum_before_base`, ``base_vacuum_s``), then push, wildcard pop + ack, cold partition pops, every
   operator route through HTTP, and the console's first render in headless Chromium (Playwright, the
   ``browser`` extra; recorded as skipped, with the reason, where either is missing), measured.
4. **seed**: the big queue, in statements of ``SEED_CHUNK`` partitions: partitions, ``STORED`` messages of
   ``PAYLOAD_BYTES`` each (the oldest of each partition two hours old, the rest 30 minutes old, a
   millisecond apart), the cursors of ``GROUPS`` consumer groups half-way; then ANALYZE, one full stats
   run, a VACUUM (ANALYZE) of the two tables that run filled (autovacuum would do it within a minute,
   during the measured windows; journal, issue 44), and a CHECKPOINT (:func:`_checkpoint`; ``checkpoint_s``).
   Partition n's messages are n microseconds later than partition 0's: pushes made over time leave every
   partition its own newest-message time, and the wildcard pop's scan floor (a time,
   queen.advance_scan_floor_v3) skips the partitions a group consumed only when their times differ. Seeded
   with one shared time, the floor stayed at it and every pop walked all the partitions the group had
   emptied (journal, issue 44).
5. **storage**: bytes on disk per message and per partition: heap, each index, TOAST, against the payload.
6. **at scale**: the same measurements as 3 on the big queue, its push and pop windows interleaved with
   windows on the base queue (``base_beside``; :func:`_windows`, ABBA order). The base measured first (3) is
   some 15 minutes away from the windows at scale, and the host's own speed drifted by up to 20% between
   the two in one run (``probe_ratio`` 1.198; journal, issue 44); windows taken in turn see the same host.
   ``push_ratio`` and ``pop_ratio`` stay the issue's, against the base measured first, in a database that
   holds only it; ``push_ratio_beside`` and ``pop_ratio_beside`` are against the windows beside, in the
   database that holds the big queue too, and ``probe_ratio_beside`` shows how alike the host was (runs
   before measured the base again after the windows at scale instead: ``base_again``). Each window of 3 and 6
   follows ``LEAD_S`` of the same load, unmeasured (``lead_s``; :func:`_probed_window`), so that it does
   not bear the stats job's work for the window before it, of the other queue.

   In 3 and 6 push and wildcard pop + ack are each measured over ``WINDOWS`` windows, and the
   figure is the median window's: one window varies about ±15% from the next on this machine (journal,
   issue 44). Each push window pushes to partitions of its own (a seed of its own, ``PUSH_SEED``): with one
   seed, every window after the first repeated the first's partitions, whose pages it found warm.
   Each pop window starts right after its lead, whose consumers stopped with pops in flight, so it runs
   beside partitions leased for the queue's lease time, as consumers restarted after a crash do (the second
   window is ``pop_after_stop``, and ``pop_after_stop_ratio`` at scale is it over the first). A scan floor
   held by such leases made every pop walk the partitions consumed since (journal, issue 44). The first
   windows are kept too (``pop_first``, ``pop_first_ratio``): at scale the first pop window follows the
   first pops after the seed's checkpoint (its lead's).
   Each window is taken between two probes of the host's speed (:func:`queenpy.bench.procfs.cpu_probe_ms`,
   ``probe_ms`` of each window, ``windows_probe_ms``) and reports the steal share of the machine;
   ``probe_ratio`` is the median probe at scale over the base's: 1.0 when the host ran as fast in both, above
   it when the host was slower at scale (one run's windows at scale all cost about 40% more CPU a message
   than another run's, with the same code; journal, issue 44).
7. **retention and cleanup**: retention deletes the oldest message of every partition (1/``STORED`` of the
   messages): its period is chosen when it starts, from the seed's two times, so that its cutoff falls half
   way between them however long the seed took; the count deleted is checked against the partitions. Then
   ``CLEANUP_PARTITIONS`` empty partitions idle for 40 days are removed by the partition cleanup; the idle
   partitions left are counted. Each is one run of the broker's own retention job
   (:class:`queenpy.services.jobs.RetentionJob`, its batch sizes and its pace, ``SERVICES_DUTY_CYCLE``),
   started here while wrk pushes to the big queue: time, WAL bytes, the job's busy and rested time, and the
   push rate during it (the median of up to ``WINDOWS`` windows the job outlasted) over the rate at scale.
   Between the two, the vacuum retention's deletions call for is measured on its own (:func:`_autovacuum`):
   autovacuum of ``queen.messages`` is held off while retention runs (``autovacuum_enabled`` off, reset
   after it), then autovacuum itself vacuums the table (retention deleted 10% of its rows; its threshold is
   5%, migration 016), with its own throttle (migration 030), and the push windows start when the vacuum
   appears in ``pg_stat_progress_vacuum`` and are counted while it is still there. Left to itself,
   autovacuum vacuumed the table somewhere in the retention run, in a window or between two, and
   the window after retention that bore its name measured no vacuum of it (journal, issue 44). Then
   autovacuum is waited for until it has caught up with every table (:func:`_vacuum_after`), unmeasured.
   The broker's own retention job is held off for the run (``RETENTION_INTERVAL`` of a day): it would run
   the same cleanup and retention concurrently.
   Four quiet push windows at scale, each after its lead and with no service's run beside it, bracket the
   three (``quiet``: before retention, after it, after its vacuum, after the cleanup), and
   ``retention_push_ratio_beside``, ``retention_vacuum_push_ratio_beside`` and ``cleanup_push_ratio_beside``
   are the push during each over the mean of the two quiet windows around it (:func:`quiet_reference`): the
   push at scale is minutes away, and the host's speed drifts (journal, issue 44). Closer still, the windows
   beside retention and the cleanup alternate between the job running and the job paused as an operator
   pauses it (``PAIRED_ORDER``, ABBA): ``retention_push_ratio_paired`` and ``cleanup_push_ratio_paired``
   are the push while it ran over the push while it was held, minutes apart at most (:func:`_while_pushing`).

The scenario's JSON entry carries ``push_ratio`` and ``pop_ratio`` (at scale over base) and ``route_max_ms``
(the slowest route's max at scale) in ``scale`` of each run and of the median.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import shutil
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import httpx

from queenpy.bench.catalog import Options, Scenario, payload
from queenpy.bench.core import Context, Kind, ScenarioSkipped, postgres_cpu
from queenpy.bench.load import Measured, measured_window
from queenpy.bench.postgres import Sql
from queenpy.bench.procfs import cpu_probe_ms
from queenpy.bench.report import number
from queenpy.bench.wrk import render_script, run_wrk
from queenpy.services.jobs import RetentionJob
from queenpy.settings import ServiceSettings
from queenpy.store.database import Database

__all__ = ["KIND", "report_lines", "run"]

T = TypeVar("T")

STORED = 10  # messages per partition
PAYLOAD_BYTES = 200
GROUPS = 10
GROUP_NAMES = [f"g{n}" for n in range(GROUPS)]  # the consumer groups: g0 ... g9
BASE_PARTITIONS = 100
BASE_STORED = 2000  # the base queue's backlog: 1,000 unconsumed per partition and group
SEED_CHUNK = 50_000
CLEANUP_PARTITIONS = 100_000
COLD_POPS = 100
#: messages a wildcard pop asks for: what a seeded partition holds after a group's cursor, so a pop at scale
#: carries a full batch as at 100 partitions (with 10, pops at scale carried about half of the base's and
#: the ratio measured that; ``messages_per_pop`` is recorded)
POP_BATCH = STORED - STORED // 2
ROUTE_REQUESTS = 5
#: measured windows of push and of wildcard pop + ack at each size; the ratios are of their medians. Five:
#: the median of three moved with one slow window (journal, issue 44)
WINDOWS = 5
#: seconds of unmeasured load before each window of the hot path (:func:`_probed_window`): the stats job's
#: interval (``STATS_INTERVAL_MS``, 10 s) and a little
LEAD_S = 12.0
#: the windows beside retention and the cleanup: the retention job running (True) or paused (False) in each,
#: in ABBA order, so that a drift of the host's speed over them weighs on both alike (:func:`_while_pushing`)
PAIRED_ORDER = (True, False, False, True, True, False)
#: seconds between pausing or resuming the job and the next window: the step in flight and its rest end
#: (a cleanup step takes about 0.15 s at 1M, 0.6 s with its rest at duty 0.25; journal, issue 44) and a held
#: run looks again (``queenpy.services.jobs.HOLD_POLL_S``)
SWITCH_S = 1.5
#: the push windows' seeds: the hot path's n-th window takes PUSH_SEED + n (its lead PUSH_SEED + 50 + n), the
#: windows beside retention, its vacuum and the cleanup the seeds from PUSH_SEED + 100, + 200 and + 300 on,
#: the quiet windows PUSH_SEED + 400 + n (their leads + 450 + n) (:func:`push_script_for`)
PUSH_SEED = 4242
#: heap, indexes and WAL headroom per partition of 10 messages of 200 B and 10 cursors; measured runs
#: write their figures under ``storage``
BYTES_PER_PARTITION = 12_000

# The bulk seed: partitions $3 .. $4 of queue $1 named $2 || n, each with $5 messages of payload $6, the
# first one created at $7, the others at $8 + seq milliseconds, each of partition n's n microseconds later
# than partition 0's (every partition its own newest-message time, see the module docstring; ids are UUIDv7
# of their creation time, so
# they grow with the offsets as the push procedure makes them; transaction ids are the ids' text, as a push
# without client transaction ids stores them); then cursors of groups $9 at offset $10. Rows go in as pushes
# and pops would have written them: messages in the order of their times, and the cursors in the order the
# groups' wildcard pops reached the partitions (oldest first), the groups side by side. Ordered by the
# partitions' random ids instead, as the seed first was, a table's pages had no order a consumer follows:
# each pop at a million partitions read and rewrote a page of its own (journal, issue 44).
_MESSAGE_AT = (
    "CASE WHEN s = 1 THEN $7::timestamptz ELSE $8::timestamptz + s * interval '1 ms' END"
    " + {n} * interval '1 microsecond'"
)
_MESSAGE_ID = (
    "(lpad(to_hex((extract(epoch FROM {at}) * 1000)::bigint), 12, '0') || '7' || substr(h, 1, 3) || '8'"
    " || substr(h, 4, 15))::uuid"
)
SEED = f"""
WITH parts AS (
    INSERT INTO queen.partitions (queue_id, name, created_at, last_activity, last_seq, last_message_id,
                                  last_message_at)
    SELECT $1::uuid, $2 || g, $7::timestamptz, x.at, $5::int, x.id, x.at
    FROM generate_series($3::int, $4::int) g
    CROSS JOIN LATERAL (
        SELECT {_MESSAGE_AT.format(n="g").replace("s = 1", "$5::int = 1").replace("s *", "$5::int *")} AS at,
               md5(g::text || '-' || $5::int) AS h) y
    CROSS JOIN LATERAL (SELECT y.at, {_MESSAGE_ID.format(at="y.at").replace("h, ", "y.h, ")} AS id) x
    RETURNING id, name
), messages AS (
    INSERT INTO queen.messages (id, transaction_id, partition_id, seq, payload, created_at)
    SELECT m.id, m.id::text, parts.id, s, $6::jsonb, m.at
    FROM parts CROSS JOIN generate_series(1, $5::int) s
    CROSS JOIN LATERAL (
        SELECT {_MESSAGE_AT.format(n="substr(parts.name, length($2) + 1)::int")} AS at,
               md5(substr(parts.name, length($2) + 1) || '-' || s) AS h) y
    CROSS JOIN LATERAL (SELECT y.at, {_MESSAGE_ID.format(at="y.at").replace("h, ", "y.h, ")} AS id) m
    ORDER BY m.at, m.id
    RETURNING partition_id, seq, id, created_at
)
INSERT INTO queen.partition_consumers (partition_id, consumer_group, last_consumed_seq, last_consumed_id,
    last_consumed_created_at, total_messages_consumed, total_batches_consumed, last_consumed_at, batch_size,
    acked_count, created_at)
SELECT m.partition_id, grp, m.seq, m.id, m.created_at, m.seq, 1, m.created_at, 0, 0, m.created_at
FROM messages m CROSS JOIN unnest($9::text[]) grp
WHERE m.seq = $10::int
ORDER BY m.created_at, grp
"""
# the queue as a first push creates it (queen.create_partitions_v1): no Default partition (configure makes
# one)
CREATE_QUEUE = """
INSERT INTO queen.queues (name, namespace, task)
VALUES ($1::text, queen.default_namespace($1::text), queen.default_task($1::text))
ON CONFLICT (name) DO NOTHING
"""
EMPTY_PARTITIONS = """
INSERT INTO queen.partitions (queue_id, name, created_at, last_activity)
SELECT $1::uuid, 'idle-' || g, now() - interval '40 days', now() - interval '40 days'
FROM generate_series(1, $2::int) g
"""
# tables with a partition_id column: rows per partition are compared between the pushed and seeded twins;
# but consumer_activity (migration 026): its rows are the stats job's to drain, on its own schedule, so
# either twin may have lost them by the time they are compared (:func:`settle` drains the seed's)
PARTITION_TABLES = """
SELECT c.table_name FROM information_schema.columns c JOIN information_schema.tables t
  ON t.table_schema = c.table_schema AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE'
WHERE c.table_schema = 'queen' AND c.column_name = 'partition_id' AND c.table_name <> 'consumer_activity'
ORDER BY 1
"""
ROUTES = [
    "/api/v1/status",
    "/api/v1/status/queues",
    "/api/v1/status/queues/{queue}",
    "/api/v1/resources/queues",
    "/api/v1/resources/queues/{queue}",
    "/api/v1/resources/overview",
    "/api/v1/messages?limit=50",
    "/api/v1/messages?limit=50&queue={queue}",
    "/api/v1/messages?limit=50&queue={queue}&status=pending",
    "/api/v1/messages?limit=50&queue={queue}&partition=p7",
    "/api/v1/status/analytics",
    "/api/v1/analytics/queue-lag",
    "/api/v1/analytics/queue-ops",
    "/api/v1/consumer-groups",
    "/api/v1/consumer-groups/g0",
    "/api/v1/consumer-groups/lagging?minLagSeconds=60",
    "/api/v1/dlq?limit=50",
    "/metrics/prometheus",
]


def partitions_of(scenario: Scenario) -> int:
    """The run's partition count: ``QUEENPY_SCALE_PARTITIONS`` when set, else the scenario's."""
    raw = os.environ.get("QUEENPY_SCALE_PARTITIONS", "")
    return int(raw) if raw.strip() else scenario.partitions


def queue_partitions(sql: Sql, queue: str) -> int:
    """The number of partitions queue ``queue`` has (0 when it has none or does not exist). Also used by
    ``benchmarks/pop_probe.py`` and ``benchmarks/vacuum_probe.py``."""
    return int(
        sql.fetchval(
            "SELECT count(*) FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id"
            " WHERE q.name = $1",
            queue,
        )
    )


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2) if ordered else 0.0


def _check_disk(context: Context, partitions: int) -> dict[str, Any]:
    need = partitions * BYTES_PER_PARTITION
    facts: dict[str, Any] = {"need_bytes": need}
    directory = getattr(context.pg, "data_dir", None) or context.workdir
    if context.pg.pid is None:
        context.log(
            f"  scale: needs about {need / 1e9:.1f} GB on the PostgreSQL server (not checked: external)"
        )
        facts["checked"] = False
        return facts
    free = shutil.disk_usage(directory).free
    facts.update(checked=True, free_bytes=free)
    context.log(f"  scale: needs about {need / 1e9:.1f} GB, {free / 1e9:.1f} GB free")
    if free < need:
        raise ScenarioSkipped(f"needs about {need / 1e9:.1f} GB of free disk, {free / 1e9:.1f} GB free")
    return facts


def _queue_id(context: Context, queue: str) -> str:
    context.sql.execute(CREATE_QUEUE, queue)
    return str(context.sql.fetchval("SELECT id FROM queen.queues WHERE name = $1", queue))


class Seeded(NamedTuple):
    """A seed's duration (s) and its two times: the first message of every partition at ``old`` (plus the
    partition's microseconds), the others from ``recent`` on."""

    seconds: float
    old: datetime.datetime
    recent: datetime.datetime


def _seed(context: Context, queue: str, partitions: int, stored: int, prefix: str = "p") -> Seeded:
    """Seed ``queue`` by SQL (see SEED)."""
    started = time.monotonic()
    queue_id = _queue_id(context, queue)
    body = payload(PAYLOAD_BYTES)
    old = context.sql.fetchval("SELECT now() - interval '2 hours'")
    recent = context.sql.fetchval("SELECT now() - interval '30 minutes'")
    for lo in range(0, partitions, SEED_CHUNK):
        hi = min(partitions, lo + SEED_CHUNK) - 1
        context.sql.execute(
            SEED, queue_id, prefix, lo, hi, stored, body, old, recent, GROUP_NAMES, stored // 2
        )
        if partitions > SEED_CHUNK:
            context.log(
                f"  seeded {hi + 1:,} of {partitions:,} partitions ({time.monotonic() - started:.0f} s)"
            )
    return Seeded(time.monotonic() - started, old, recent)


def settle(sql: Sql, vacuum_stats: bool) -> None:
    """What the server would have done by itself after pushes: ANALYZE, one full stats pass and, with
    ``vacuum_stats``, a VACUUM (ANALYZE) of the two tables that pass filled (at 1M partitions about 11 million
    rows, which autovacuum would vacuum and analyze within a minute, in the measured windows; journal, issue
    44). After the stats pass, the seed's rows of queen.consumer_activity (one per consumer row it created,
    migration 026) are drained as the stats job would drain them, and with ``vacuum_stats`` that table is
    vacuumed too. Also used by ``benchmarks/pop_probe.py``."""
    sql.execute("ANALYZE")
    sql.fetchval("SELECT queen.stats_refresh_v4(true)::text")
    sql.fetchval("SELECT queen.consumer_activity_drain_v1(NULL)")
    if vacuum_stats:
        sql.execute("VACUUM (ANALYZE) queen.consumer_stats, queen.partition_stats, queen.consumer_activity")


def _vacuum_before_base(sql: Sql) -> float:
    """A VACUUM (ANALYZE) of the whole database before the base windows; its time (s). The limit measured
    before the kind (pgbench's rows), the seed check's queues and the base queue's bulk seed leave inserted
    and dead rows that autovacuum (every minute on a server with the default ``autovacuum_naptime``) vacuumed
    beside the base windows: on the tuned server an autovacuum worker took 0.4 to 1.0 s of CPU in base windows
    of each of the three tuned runs before this vacuum, whose three pop windows at 100 spread from 4,989 to
    7,814 msg/s in one (journal, issue 44). Tables the role may not vacuum are skipped, with PostgreSQL's
    warning."""
    started = time.monotonic()
    sql.execute("VACUUM (ANALYZE)")
    return time.monotonic() - started


def _checkpoint(context: Context) -> float:
    """The suite's CHECKPOINT (:meth:`Context.checkpoint`: skipped, with a note, without the privilege or
    with ``--no-checkpoint``) after a seed has settled; its time (s). The seed writes in minutes what pushes
    would have written over hours, and the first reads of its rows dirty their pages again (hint bits);
    without it, their write-back can fall into the measured windows (at 1M partitions a checkpoint fell into
    the first push window, whose rate was two thirds of the third's; journal, issue 44)."""
    started = time.monotonic()
    context.checkpoint()
    return time.monotonic() - started


def retention_seconds(seeded: Seeded, run_at: datetime.datetime) -> int:
    """The retention period (s) whose cutoff, for a pass that starts at ``run_at``, falls half way between the
    seed's two times: the first message of every partition (at ``old`` plus at most one second of
    per-partition microseconds) is past it, the others (from ``recent`` on) are not, however long the seed
    and what came after it took. Raises ValueError when ``run_at`` is before the seed's midpoint."""
    middle = seeded.old + (seeded.recent - seeded.old) / 2
    seconds = round((run_at - middle).total_seconds())
    if seconds <= 0:
        raise ValueError(f"retention at {run_at} is before the seed's midpoint {middle}")
    return seconds


def _fingerprint(context: Context, queue: str) -> dict[str, Any]:
    """What pushes, pops and acks leave in the tables for ``queue``, without names, ids and times."""
    tables = [row[0] for row in context.sql.fetch(PARTITION_TABLES)]
    per_table = {}
    for table in tables:
        per_table[table] = [
            int(row[0])
            for row in context.sql.fetch(
                "SELECT count(t.partition_id) FROM queen.partitions p "
                "JOIN queen.queues q ON q.id = p.queue_id "
                f"LEFT JOIN queen.{table} t ON t.partition_id = p.id "
                "WHERE q.name = $1 GROUP BY p.id ORDER BY 1",
                queue,
            )
        ]
    partitions = [
        dict(row)
        for row in context.sql.fetch(
            """
        SELECT p.last_seq, p.last_message_id = (array_agg(m.id ORDER BY m.seq DESC))[1] AS last_id_ok,
               p.last_message_at = max(m.created_at) AS last_at_ok, count(m.id) AS messages,
               min(m.seq) AS first_seq,
               bool_and(m.transaction_id = m.id::text) AS transaction_ids_are_ids,
               bool_and(m.trace_id IS NULL AND m.producer_sub IS NULL AND NOT m.is_encrypted) AS plain,
               bool_and(substr(m.id::text, 15, 1) = '7') AS uuid_v7,
               bool_and(left(replace(m.id::text, '-', ''), 12)
                        = lpad(to_hex((extract(epoch FROM m.created_at) * 1000)::bigint), 12, '0'))
                   AS ids_timed,
               p.created_at <= min(m.created_at) AS created_first
        FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
        LEFT JOIN queen.messages m ON m.partition_id = p.id
        WHERE q.name = $1 GROUP BY p.id ORDER BY p.name""",
            queue,
        )
    ]
    cursors = [
        dict(row)
        for row in context.sql.fetch(
            """
        SELECT c.consumer_group, c.last_consumed_seq, c.last_consumed_id = m.id AS id_ok,
               c.last_consumed_created_at = m.created_at AS at_ok, c.total_messages_consumed,
               c.lease_expires_at IS NULL AS no_lease, c.acked_count, c.batch_retry_count,
               c.retry_available_at IS NULL AS no_retry, c.worker_id IS NULL AS no_worker,
               c.message_batch IS NULL AS no_batch, c.last_consumed_at IS NOT NULL AS consumed_at_set
        FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id
        JOIN queen.queues q ON q.id = p.queue_id
        LEFT JOIN queen.messages m ON m.partition_id = p.id AND m.seq = c.last_consumed_seq
        WHERE q.name = $1 ORDER BY p.name, c.consumer_group""",
            queue,
        )
    ]
    metadata = [
        dict(row)
        for row in context.sql.fetch(
            "SELECT consumer_group, partition_name, namespace, task, subscription_mode FROM "
            "queen.consumer_groups_metadata WHERE queue_name = $1 ORDER BY 1, 2",
            queue,
        )
    ]
    stats = [
        dict(row)
        for row in context.sql.fetch(
            """
        SELECT s.last_seq, s.depth, s.unconsumed, s.pending, s.completed, s.consumer_groups, s.min_cursor_seq
        FROM queen.partition_stats s JOIN queen.partitions p ON p.id = s.partition_id
        JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 ORDER BY p.name""",
            queue,
        )
    ]
    return {
        "rows_per_partition": per_table,
        "partitions": partitions,
        "cursors": cursors,
        "groups": metadata,
        "stats": stats,
    }


def _check_seed(context: Context, http: httpx.Client, prefix: str) -> dict[str, Any]:
    """Pushed and seeded twins of 3 partitions compared (see the module docstring); returns the differences
    (empty: the seed makes what pushes make)."""
    pushed, seeded = f"{prefix}ref-pushed", f"{prefix}ref-seeded"
    for n in range(3):
        for _ in range(STORED):  # one push per message, as producers do
            items = [{"queue": pushed, "partition": f"p{n}", "payload": {"pad": "x" * (PAYLOAD_BYTES - 12)}}]
            answer = http.post("/api/v1/push", json={"items": items}).json()
            assert answer[0]["status"] == "queued", answer
        for group in GROUP_NAMES:
            popped = http.get(
                f"/api/v1/pop/queue/{pushed}/partition/p{n}",
                params={"batch": STORED // 2, "wait": "false", "consumerGroup": group},
            ).json()
            acks = [
                {
                    "transactionId": m["transactionId"],
                    "partitionId": m["partitionId"],
                    "leaseId": m["leaseId"],
                    "status": "completed",
                }
                for m in popped["messages"]
            ]
            http.post("/api/v1/ack/batch", json={"acknowledgments": acks, "consumerGroup": group})
    _seed(context, seeded, 3, STORED)
    context.sql.fetchval("SELECT queen.stats_refresh_v4(true)::text")
    mine, theirs = _fingerprint(context, seeded), _fingerprint(context, pushed)
    return {key: {"seeded": mine[key], "pushed": theirs[key]} for key in mine if mine[key] != theirs[key]}


def _route_timings(url: str, queue: str) -> dict[str, Any]:
    timings: dict[str, Any] = {}
    with httpx.Client(base_url=url, timeout=120) as client:
        for template in ROUTES:
            route = template.format(queue=queue)
            seconds, statuses, size = [], set(), 0
            for _ in range(ROUTE_REQUESTS):
                started = time.perf_counter()
                response = client.get(route)
                seconds.append(time.perf_counter() - started)
                statuses.add(response.status_code)
                size = len(response.content)
            timings[template] = {
                "p50_ms": _ms(seconds, 0.5),
                "max_ms": _ms(seconds, 1.0),
                "bytes": size,
                "status": sorted(statuses),
            }
    return timings


#: the console's overview has drawn its figures and at least one row of the deepest queues
CONSOLE_RENDERED = """() => {
    const rows = document.querySelectorAll('[data-test=overview-queues] tbody tr');
    const count = document.querySelector('[data-test=message-count]');
    return rows.length > 0 && count && count.textContent.trim() !== '' && count.textContent !== '\u2014'
        ? performance.now() : false;
}"""
CONSOLE_LOADS = 3
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
]


def _console_render(url: str) -> dict[str, Any]:
    """The console's first render at ``/`` in headless Chromium (Playwright, the ``browser`` extra; Debian's
    Chromium at ``QUEENPY_CHROMIUM`` or /usr/bin/chromium), ``CONSOLE_LOADS`` loads in one browser context
    (the first with an empty cache): ms from navigation to the overview's figures and first queue row
    drawn, per load, and their max. Without Playwright or Chromium: ``{"skipped": reason}``."""
    chromium = os.environ.get("QUEENPY_CHROMIUM", "/usr/bin/chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {"skipped": "Playwright is not installed (pip install -e '.[browser]')"}
    if not os.path.exists(chromium):
        return {"skipped": f"no Chromium at {chromium} (apt-get install chromium, or set QUEENPY_CHROMIUM)"}
    loads: list[float] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            page = context.new_page()
            for _ in range(CONSOLE_LOADS):
                page.goto(url + "/", wait_until="commit")
                rendered = page.wait_for_function(CONSOLE_RENDERED, polling="raf", timeout=60_000)
                loads.append(round(float(rendered.json_value()), 1))
            context.close()
        finally:
            browser.close()
    return {"first_render_ms": loads, "max_ms": max(loads)}


def _cold_pops(url: str, queue: str, partitions: int) -> dict[str, Any]:
    """Partition-specific pops (batch 1, no wait) of a new group on ``COLD_POPS`` partitions spread over the
    queue: none of them was read by this group, and at scale almost none is in PostgreSQL's cache."""
    step = max(1, partitions // COLD_POPS)
    seconds = []
    empty = 0
    with httpx.Client(base_url=url, timeout=60) as client:
        for n in range(0, min(partitions, step * COLD_POPS), step):
            started = time.perf_counter()
            answer = client.get(
                f"/api/v1/pop/queue/{queue}/partition/p{n}",
                params={"batch": 1, "wait": "false", "consumerGroup": "cold", "autoAck": "true"},
            )
            seconds.append(time.perf_counter() - started)
            empty += not (answer.content and answer.json().get("messages"))
    return {"pops": len(seconds), "empty": empty, "p50_ms": _ms(seconds, 0.5), "p99_ms": _ms(seconds, 0.99)}


def _cpu_split(window: Any, messages: int) -> dict[str, Any]:
    """Where the CPU went in a measured window of ``messages`` messages: PostgreSQL's µs a message (the
    harness's backends left out), its seconds by process kind (``backend:queenpy`` the broker's requests,
    ``backend:queenpy-jobs`` its background jobs, autovacuum, checkpointer, ...) and the broker's share of the
    machine. Empty when the window did not close or PostgreSQL's processes are not on this machine."""
    if window.end is None or window.start.postgres_ticks is None:
        return {}
    postgres_s, _, by_kind = postgres_cpu(window.start, window.end)
    machine_s = max(1e-9, window.end.machine.total_s - window.start.machine.total_s)
    return {
        "postgres_us_per_msg": round(postgres_s / messages * 1e6, 1) if messages else None,
        "postgres_cpu_s_by_kind": {kind: round(seconds, 2) for kind, seconds in by_kind.items()},
        "cpu_share_of_machine": {
            "broker": round((window.end.broker_s - window.start.broker_s) / machine_s, 3),
            "postgres": round(postgres_s / machine_s, 3),
            "steal": round((window.end.machine.steal_s - window.start.machine.steal_s) / machine_s, 3),
        },
    }


def _wal_split(window: Any, messages: int) -> dict[str, Any]:
    """The WAL of a measured window of ``messages`` messages: bytes and full-page images a message, and the
    checkpoints PostgreSQL made inside it (after each, the first change to a page logs the whole page: at a
    million partitions most pages a window touches are such first changes). Empty when the window did not
    close."""
    if window.end is None or messages <= 0:
        return {}
    wal = window.end.wal.per_message(window.start.wal, messages)
    return {
        "wal_bytes_per_msg": round(wal["bytes"], 1),
        "fpi_per_msg": round(wal["fpi"], 4),
        "checkpoints": window.checkpoints,
    }


def _io_split(window: Any) -> dict[str, Any]:
    """The machine's block I/O in a measured window (:class:`queenpy.bench.procfs.MachineIo`): MB read and
    written (the page cache's misses and write-back: PostgreSQL's when it runs on this machine, with the
    WAL) and the share of the machine's CPU time idle with I/O outstanding (the iowait of
    :class:`queenpy.bench.procfs.MachineCpu`). What tells a window whose push
    waited on the disk (beside a vacuum reading back pages the page cache no longer held, journal, issue 44)
    from one that waited on the CPU. Empty when the window did not close."""
    start, end = window.start.io, window.end.io if window.end is not None else None
    if start is None or end is None:
        return {}
    machine_s = max(1e-9, window.end.machine.total_s - window.start.machine.total_s)
    return {
        "host_read_mb": round(end.read_mb - start.read_mb, 1),
        "host_written_mb": round(end.written_mb - start.written_mb, 1),
        "iowait_share": round((window.end.machine.iowait_s - window.start.machine.iowait_s) / machine_s, 3),
    }


def push_script_for(queue: str, partitions: int, workdir: Path, seed: int = PUSH_SEED) -> Path:
    """The wrk script of the push window: 10 x 1 KB a request to random partitions of ``queue`` (partition
    names ``p0`` .. ``p<partitions - 1>``), with transaction ids. ``seed`` seeds each wrk thread's random
    partitions: a window with the seed of another pushes to the same partitions in the same order, so each
    window takes a seed of its own (:func:`_windows`, :func:`_while_pushing`): at a million partitions a
    window repeating its predecessor's partitions finds their pages in shared buffers and already logged
    since the checkpoint (journal, issue 44). Also used by ``benchmarks/pop_probe.py``."""
    return render_script(
        "push",
        {
            "queue": queue,
            "partitions": partitions,
            "per_request": 10,
            "payload": payload(1024),
            "seed": seed,
            "rate_per_thread": 0,
            "transaction_ids": True,
        },
        workdir,
    )


def pop_script_for(queue: str, workdir: Path) -> Path:
    """The wrk script of the pop window: wildcard pops of ``POP_BATCH`` by the ``GROUPS`` groups round robin,
    each pop acked. Also used by ``benchmarks/pop_probe.py``."""
    return render_script(
        "consume",
        {
            "queue": queue,
            "groups": GROUP_NAMES,
            "batch": POP_BATCH,
            "mode": "ack",
            "timeout_ms": 0,
            "target": "",
            "payload": payload(40),
        },
        workdir,
    )


def _median(windows: list[dict[str, Any]]) -> int:
    """The index of the window of the median rate among ``windows`` (window figures, each with
    ``msg_per_s``; of an even number, the lower of the two middle ones). One window on this two-core machine
    varies about ±15% from the next (journal, issue 44): a ratio of two single windows could not tell 0.8
    from 1.0."""
    return sorted(range(len(windows)), key=lambda n: windows[n]["msg_per_s"])[(len(windows) - 1) // 2]


def _median_window(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of the :func:`_median` window, with every window's rate in measured order under
    ``windows_msg_per_s``."""
    return {
        **windows[_median(windows)],
        "windows_msg_per_s": [w["msg_per_s"] for w in windows],
        "windows_probe_ms": [w["probe_ms"] for w in windows],
    }


class Probed(NamedTuple):
    """A measured window with the host's speed (:func:`queenpy.bench.procfs.cpu_probe_ms`, ms) taken just
    before it and just after, and the seconds of its lead (:func:`_probed_window`; None: none)."""

    measured: Measured[int]
    probe_ms: tuple[float, float]
    lead_s: float | None = None


def _probed_window(
    context: Context, run: dict[str, Any], script: Path, read: Any, label: str, lead: Path | None = None
) -> Probed:
    """:func:`queenpy.bench.load.measured_window` of ``script`` (50 connections, 2 threads) between two
    probes of the host's speed; with ``lead`` (the same load: a push with a seed of its own, the pop's own
    script), after ``LEAD_S`` of it, unmeasured (its wrk counts checked under ``<label> lead``).

    The lead: the stats job runs every ``STATS_INTERVAL_MS`` (10 s) and works on what changed since its last
    run, so most of its work for a window is done in the window after. Of windows on two queues taken in
    turn, each bore the other's (a base window after one at scale bore 0.59 s of the job's CPU in 3 s), and
    a wait for the job before each window left each bearing only its own first seconds' (at scale about
    0.25 s of the job's CPU a window against 1.3 s; journal, issue 44). After a lead one interval long the
    other queue's share falls in the lead. The job's run for the lead itself may fall in the ground-truth
    read before the window (seconds long at 1M), so a window at 1M still bears less of the job than a steady
    stream would (journal, issue 44).

    The probes tell a slower host from a slower broker: the windows of a run that started after its base
    windows all cost about 40% more CPU a message than the same windows of another run of the same code
    (journal, issue 44)."""
    if lead is not None:
        context.check_wrk(run, run_wrk(context.broker_url, lead, 50, LEAD_S, 2), f"{label} lead")
    before = cpu_probe_ms()
    measured = measured_window(context, run, script, 50, read, 2, label=label)
    return Probed(measured, (before, cpu_probe_ms()), LEAD_S if lead is not None else None)


def _push_after_lead(
    context: Context, run: dict[str, Any], queue: str, partitions: int, label: str, seed: int
) -> Probed:
    """:func:`_probed_window` of the push to ``queue`` (:func:`push_script_for`, push seed ``seed``), counted
    by :func:`_pushed`, after a lead with the seed ``seed + 50``: the lead pushes to partitions of its own
    too, since a window repeating them would find them warm."""
    return _probed_window(
        context,
        run,
        push_script_for(queue, partitions, context.workdir, seed=seed),
        lambda: _pushed(context.sql, queue),
        label,
        lead=push_script_for(queue, partitions, context.workdir, seed=seed + 50),
    )


def _window_figures(probed: Probed) -> dict[str, Any]:
    """What every push or pop window reports: msg/s (the ground truth's growth over the window), its length,
    wrk's p99, where the CPU and the WAL went a message, and the host's speed around it (``probe_ms``: the
    mean of the probes before and after, ms; lower is faster)."""
    measured = probed.measured
    messages = measured.after - measured.before
    return {
        "msg_per_s": round(messages / max(1e-9, measured.window.seconds), 1),
        "window_s": round(measured.window.seconds, 2),
        "p99_ms": round(measured.wrk.result.latency_us.get(99.0, 0) / 1000, 2),
        "probe_ms": round(statistics.fmean(probed.probe_ms), 1),
        "lead_s": probed.lead_s,
        **_cpu_split(measured.window, messages),
        **_wal_split(measured.window, messages),
        **_io_split(measured.window),
    }


class Sized(NamedTuple):
    """A queue whose hot path :func:`_windows` measures: its name, its partition count and its label in the
    log."""

    queue: str
    partitions: int
    label: str


def _operators(context: Context, sized: Sized) -> dict[str, Any]:
    """Cold partition pops, the operator routes and the console's first render."""
    return {
        "cold_pop": _cold_pops(context.broker_url, sized.queue, sized.partitions),
        "routes": _route_timings(context.broker_url, sized.queue),
        "console": _console_render(context.broker_url),
    }


def _windows(
    context: Context, run: dict[str, Any], sizes: Sequence[Sized], fill: bool = False
) -> list[dict[str, Any]]:
    """Push 10 x 1 KB to random partitions (50 connections), then wildcard pop + ack (``POP_BATCH`` a pop)
    with the 10 groups, each over ``WINDOWS`` windows a queue of ``sizes``: one dict a queue, in order, with
    ``push`` and ``pop`` the median window's figures (:func:`_median_window`), ``pop_first`` and
    ``pop_after_stop``. With two queues their windows alternate in counterbalanced (ABBA) order: window n of
    each in the order given for even n, reversed for odd n, so that a drift of the host's speed over the
    minutes falls on both queues alike, and neither always runs right after the other (the order effect that
    a plain alternation would leave; the ABBA design of within-subject experiments). ``fill``: the run's
    shared figures are the first queue's median push window."""
    rounds = [list(sizes) if n % 2 == 0 else list(reversed(sizes)) for n in range(WINDOWS)]

    def in_turn(window: Callable[[Sized, int], T]) -> dict[Sized, list[T]]:
        """``window(sized, n)`` for the n-th window of every queue, the queues in the order of ``rounds``."""
        taken: dict[Sized, list[T]] = {sized: [] for sized in sizes}
        for n, order in enumerate(rounds):
            for sized in order:
                taken[sized].append(window(sized, n))
        return taken

    def push_window(sized: Sized, n: int) -> Probed:
        return _push_after_lead(
            context, run, sized.queue, sized.partitions, f"{sized.label} push {n + 1}", PUSH_SEED + n
        )

    def pop_window(sized: Sized, n: int) -> dict[str, Any]:
        script = pop_script_for(sized.queue, context.workdir)
        popped = _probed_window(
            context,
            run,
            script,
            lambda: consumed(context.sql, sized.queue),
            f"{sized.label} " + ("pop" if n == 0 else f"pop after a stop {n}"),
            lead=script,
        )
        counters = popped.measured.wrk.result.counters
        pops = counters.get("pops", 0)
        return {
            **_window_figures(popped),
            "empty_pop_share": round(counters.get("empty_pops", 0) / pops, 4) if pops else None,
            "messages_per_pop": round(counters.get("delivered", 0) / pops, 2) if pops else None,
            "unacked_pops_left": round((counters.get("delivered", 0) - counters.get("acked", 0)) / POP_BATCH),
        }

    pushed = in_turn(push_window)
    pushes = {sized: [_window_figures(m) for m in probed] for sized, probed in pushed.items()}
    # each pop window of a queue after its first starts after its predecessor's consumers stopped with pops
    # in flight: those partitions stay leased for the queue's lease time (300 s), and it runs beside them, as
    # consumers restarted after a crash do; the second is also reported on its own as ``pop_after_stop``
    popped = in_turn(pop_window)
    if fill:  # the figures every kind shares (msg/s, latency, CPU per message) are the median push window's
        median = pushed[sizes[0]][_median(pushes[sizes[0]])].measured
        context.fill_window(run, median.after - median.before, median.window, [median.wrk], median.wrk)
    return [
        {
            "push": _median_window(pushes[sized]),
            "pop": _median_window(popped[sized]),
            "pop_first": popped[sized][0],
            "pop_after_stop": popped[sized][1],
        }
        for sized in sizes
    ]


def _storage(context: Context, queue: str, partitions: int) -> dict[str, Any]:
    """Bytes on disk of the tables a partition's messages and cursors live in: heap, each index, TOAST."""
    messages = int(context.sql.fetchval("SELECT count(*) FROM queen.messages"))
    total_partitions = int(context.sql.fetchval("SELECT count(*) FROM queen.partitions"))
    relations: dict[str, Any] = {}
    for table in ("messages", "partitions", "partition_consumers", "partition_stats", "partition_counters"):
        row = context.sql.fetchrow(
            "SELECT pg_relation_size(c.oid) AS heap, "
            "coalesce(pg_total_relation_size(c.reltoastrelid), 0) AS toast "
            "FROM pg_class c WHERE c.oid = ('queen.' || $1)::regclass",
            table,
        )
        indexes = {
            r[0]: int(r[1])
            for r in context.sql.fetch(
                "SELECT i.indexrelid::regclass::text, pg_relation_size(i.indexrelid) FROM pg_index i "
                "WHERE i.indrelid = ('queen.' || $1)::regclass ORDER BY 1",
                table,
            )
        }
        relations[table] = {"heap": int(row["heap"]), "toast": int(row["toast"]), "indexes": indexes}
    per_message = {
        "heap": relations["messages"]["heap"] / max(1, messages),
        "toast": relations["messages"]["toast"] / max(1, messages),
        **{name: size / max(1, messages) for name, size in relations["messages"]["indexes"].items()},
    }
    per_partition = {
        f"{table}.{part}": size / max(1, total_partitions)
        for table in ("partitions", "partition_consumers", "partition_stats", "partition_counters")
        for part, size in [("heap", relations[table]["heap"]), *relations[table]["indexes"].items()]
    }
    index_bytes = sum(relations["messages"]["indexes"].values())
    return {
        "messages": messages,
        "partitions": total_partitions,
        "payload_bytes": PAYLOAD_BYTES,
        "relations": relations,
        "per_message_bytes": {k: round(v, 1) for k, v in per_message.items()},
        "per_partition_bytes": {k: round(v, 1) for k, v in per_partition.items()},
        "messages_index_to_heap": round(index_bytes / max(1, relations["messages"]["heap"]), 3),
    }


def _pushed(sql: Sql, queue: str) -> int:
    """Messages ever pushed to ``queue``: the sum of its partitions' offsets."""
    return int(
        sql.fetchval(
            "SELECT coalesce(sum(p.last_seq), 0)::bigint FROM queen.partitions p JOIN queen.queues q "
            "ON q.id = p.queue_id WHERE q.name = $1",
            queue,
        )
    )


def consumed(sql: Sql, queue: str) -> int:
    """Messages the ``GROUP_NAMES`` groups have consumed from ``queue``: the sum of their cursors. Also used
    by ``benchmarks/pop_probe.py``."""
    return int(
        sql.fetchval(
            "SELECT coalesce(sum(c.last_consumed_seq), 0)::bigint FROM queen.partition_consumers c "
            "JOIN queen.partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id "
            "WHERE q.name = $1 AND c.consumer_group = ANY ($2::text[])",
            queue,
            GROUP_NAMES,
        )
    )


def _while_pushing(
    context: Context,
    run: dict[str, Any],
    queue: str,
    partitions: int,
    label: str,
    work: Any,
    push_wal_per_msg: float | None,
    seed: int,
    pause: str | None = None,
    ready: threading.Event | None = None,
    state: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """``work(sql)`` in a thread on a connection of its own while wrk pushes to ``queue``: the work's time,
    the push rate meanwhile, and the server's WAL bytes during the work.

    The push is measured over up to ``WINDOWS`` consecutive windows, the n-th with push seed ``seed + n``
    (fresh partitions, :func:`push_script_for`), as long as the work runs: ``push_msg_per_s`` is the median
    of the windows the work outlasted (``during_work``; the first window alone when the work finished inside
    it), every window's rate in ``push_windows_msg_per_s``, as the hot path's push is compared (journal,
    issue 44: one window after the retention job started measured the first seconds of a run of ten
    minutes). The WAL bytes during the work include the WAL of the pushes made meanwhile (the server's WAL
    position is one for all backends): ``wal_bytes_work`` estimates the work's own as the rest, after the
    pushes counted during the work at ``push_wal_per_msg`` (the WAL bytes per message of the push window at
    scale).

    With ``pause`` (the work is a run of that broker job), the windows follow :data:`PAIRED_ORDER`: before
    each the job is paused or resumed as an operator does (``Sql.pause_services``; a run holds before its
    next step), ``SWITCH_S`` ahead. ``push_msg_per_s`` is then the median of the windows the job ran through,
    and ``paired`` compares them with the windows it was paused in, interleaved with them: ``ratio`` is the
    mean of the first over the mean of the second (``running_msg_per_s``, ``paused_msg_per_s``). A run's
    cost is about a tenth of the push, and the host's speed drifted by more than that over the minutes
    between the push at scale and the job (journal, issue 44).

    With ``ready``, the first window starts when the work sets it (or ends): the work waits for something
    to begin, and the windows measure the push beside that, not beside the wait (:func:`_autovacuum`).
    With ``state``, each window records what it returns right before and right after the window (its host
    probes apart), in ``push_windows_state``: where the work was, e.g. the vacuum's phase."""
    result: dict[str, Any] = {}

    def drive() -> None:
        sql = Sql(context.pg.url)

        def wal() -> int:
            return int(sql.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint"))

        try:
            before, pushed_before, started = wal(), _pushed(sql, queue), time.monotonic()
            result["detail"] = work(sql)
            result["seconds"] = round(time.monotonic() - started, 2)
            result["wal_bytes"] = wal() - before
            result["pushed_during"] = _pushed(sql, queue) - pushed_before
            if push_wal_per_msg is not None:
                result["wal_bytes_work"] = round(
                    result["wal_bytes"] - result["pushed_during"] * push_wal_per_msg
                )
        except Exception as exc:  # noqa: BLE001 (reported in the run, not raised from a thread)
            result["error"] = repr(exc)
        finally:
            sql.close()

    rows = lambda: _pushed(context.sql, queue)
    thread = threading.Thread(target=drive, name=f"scale-{label}")
    order = PAIRED_ORDER if pause is not None else (True,) * WINDOWS
    thread.start()
    if ready is not None:
        while not ready.wait(0.05) and thread.is_alive():
            pass
    windows: list[dict[str, Any]] = []
    try:
        for running in order:
            if windows and not thread.is_alive():
                break
            if pause is not None:
                context.sql.pause_services([] if running else [pause])
                time.sleep(SWITCH_S)
            at_start = state() if state is not None else None
            pushed = _probed_window(
                context,
                run,
                push_script_for(queue, partitions, context.workdir, seed=seed + len(windows)),
                rows,
                f"{label} push {len(windows) + 1}" + ("" if running else " (paused)"),
            )
            windows.append({**_window_figures(pushed), "during_work": thread.is_alive(), "running": running})
            if state is not None:
                windows[-1]["state"] = [at_start, state()]
    finally:
        if pause is not None:
            context.sql.pause_services([])
    thread.join()
    during = [w for w in windows if w["during_work"] and w["running"]] or windows[:1]
    median = during[_median(during)]
    if pause is not None:
        paused = [w["msg_per_s"] for w in windows if not w["running"]]
        result["paired"] = {
            "running_msg_per_s": [w["msg_per_s"] for w in during],
            "paused_msg_per_s": paused,
            "ratio": _ratio(statistics.fmean(w["msg_per_s"] for w in during), statistics.fmean(paused))
            if paused
            else None,
        }
        result["push_windows_running"] = [w["running"] for w in windows]
    result["push_msg_per_s"] = median["msg_per_s"]
    result["push_windows_msg_per_s"] = [w["msg_per_s"] for w in windows]
    # what tells a slow window from the work's own cost: a checkpoint in it makes the push write full-page
    # images of the pages it touches again (journal, issue 44)
    result["push_windows_fpi_per_msg"] = [w.get("fpi_per_msg") for w in windows]
    result["push_windows_checkpoints"] = [w.get("checkpoints") for w in windows]
    result["push_windows_probe_ms"] = [w["probe_ms"] for w in windows]
    result["push_windows_host_io"] = [
        {key: w.get(key) for key in ("host_read_mb", "host_written_mb", "iowait_share")} for w in windows
    ]
    result["push_windows_during_work"] = len([w for w in windows if w["during_work"]])
    if state is not None:
        result["push_windows_state"] = [w["state"] for w in windows]
    # where PostgreSQL's CPU went in the median window (the job's backend apart)
    cpu_keys = ("postgres_us_per_msg", "postgres_cpu_s_by_kind", "cpu_share_of_machine")
    result.update({key: median[key] for key in cpu_keys if key in median})
    result["finished_inside_window"] = not windows[0]["during_work"]
    if "error" in result:
        run["problems"].append(f"{label}: {result['error']}")
    return result


def _quiet_window(
    context: Context, run: dict[str, Any], queue: str, partitions: int, label: str, n: int
) -> dict[str, Any]:
    """A push window on ``queue`` with no service's run beside it, after its lead (:func:`_push_after_lead`),
    the n-th of the run (push seed ``PUSH_SEED + 400 + n``): the reference the windows beside retention, its
    vacuum and the cleanup are compared with, taken right before and right after them
    (:func:`quiet_reference`); ``where`` is ``label``."""
    probed = _push_after_lead(context, run, queue, partitions, f"quiet {label}", PUSH_SEED + 400 + n)
    return {"where": label, **_window_figures(probed)}


#: the quiet windows (their place in ``quiet``) right before and right after each part: before retention,
#: after it, after its vacuum, after the cleanup
QUIET_AROUND = {"retention": (0, 1), "retention_vacuum": (1, 2), "cleanup": (2, 3)}
#: the three quiet windows of runs before the vacuum had windows of its own, which carry no ``where``
OLD_QUIET = ("before retention", "before the cleanup", "after it")


def quiet_reference(quiet: Sequence[dict[str, Any]], part: str) -> float | None:
    """The push rate (msg/s) ``part`` (retention, retention_vacuum or cleanup) is compared with beside: the
    mean of the quiet windows taken right before and right after it (:data:`QUIET_AROUND`). ``quiet`` holds
    the four quiet windows in measured order: before retention, after it, after its vacuum, after the
    cleanup. None when either is missing.

    Why beside: the push at scale, the reference of ``retention_push_ratio`` and the others, is measured
    minutes earlier, and the host's own speed moved by more than the target's margin over such a stretch
    (the probes around the windows; journal, issue 44), as it did between the base and the windows at scale
    (:func:`_windows`)."""
    pair = QUIET_AROUND[part]
    if len(quiet) <= max(pair):
        return None
    return statistics.fmean(quiet[n]["msg_per_s"] for n in pair)


def _retention_job(url: str) -> dict[str, Any]:
    """One run of the broker's own retention job (:class:`queenpy.services.jobs.RetentionJob`: retention,
    partition cleanup, trimming; its batch sizes and its pace, ``SERVICES_DUTY_CYCLE`` as the broker would
    read it) on a pool of its own (``application_name`` queenpy-retention-job, so its backend's CPU is told
    apart from the broker's): the run's details."""

    async def once() -> dict[str, Any]:
        database = Database(url, pool_size=1, application_name="queenpy-retention-job")
        await database.open()
        try:
            return (await RetentionJob(ServiceSettings.from_env(os.environ)).run(database)).details
        finally:
            await database.close()

    return asyncio.run(once())


def _retention(sql: Sql, url: str) -> dict[str, Any]:
    """A run of the retention job while the big queue has its retention period set: the messages it
    deleted, its steps, and its pace."""
    details = _retention_job(url)
    return {**details["retention"], "pace": details["pace"]}


#: queen's tables whose dead rows are above their autovacuum threshold (per-table settings first, as
#: autovacuum reads them), or a vacuum of this database in progress: 0 once autovacuum has caught up
VACUUM_DUE = """
SELECT (SELECT count(*) FROM pg_stat_progress_vacuum v WHERE v.datname = current_database())
     + (SELECT count(*) FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
        WHERE s.schemaname = 'queen' AND s.n_dead_tup >
          coalesce((SELECT split_part(o, '=', 2)::float8 FROM unnest(c.reloptions) o
                    WHERE o LIKE 'autovacuum_vacuum_threshold=%'),
                   current_setting('autovacuum_vacuum_threshold')::float8)
          + coalesce((SELECT split_part(o, '=', 2)::float8 FROM unnest(c.reloptions) o
                      WHERE o LIKE 'autovacuum_vacuum_scale_factor=%'),
                     current_setting('autovacuum_vacuum_scale_factor')::float8) * greatest(c.reltuples, 0))
"""
VACUUM_COUNTS = """
SELECT relname, autovacuum_count FROM pg_stat_user_tables WHERE schemaname = 'queen'
"""
#: how long :func:`_vacuum_after` waits for autovacuum at most (s)
VACUUM_WAIT_S = 900.0


def _vacuum_after(sql: Sql) -> dict[str, Any]:
    """Wait until autovacuum has caught up with what the previous step left (:data:`VACUUM_DUE` is 0 at three
    polls a second apart), at most :data:`VACUUM_WAIT_S`: the tables autovacuum vacuumed meanwhile, and
    whether it caught up. Retention's deletions and the counters it updated leave dead rows in several
    tables besides queen.messages (whose vacuum :func:`_autovacuum` measures): waited for here, with no
    window beside it, their vacuum does not fall into the cleanup's windows (journal, issue 44)."""
    before = {row[0]: int(row[1]) for row in sql.fetch(VACUUM_COUNTS)}
    started, calm = time.monotonic(), 0
    while calm < 3 and time.monotonic() - started < VACUUM_WAIT_S:
        calm = calm + 1 if int(sql.fetchval(VACUUM_DUE)) == 0 else 0
        time.sleep(1.0)
    after = {row[0]: int(row[1]) for row in sql.fetch(VACUUM_COUNTS)}
    return {
        "caught_up": calm >= 3,
        "vacuumed": sorted(name for name, count in after.items() if count > before.get(name, 0)),
    }


#: the table retention's deletions leave dead rows in by the million, and autovacuum's switch for it
VACUUMED = "queen.messages"
HOLD_AUTOVACUUM = f"ALTER TABLE {VACUUMED} SET (autovacuum_enabled = off)"
RELEASE_AUTOVACUUM = f"ALTER TABLE {VACUUMED} RESET (autovacuum_enabled)"
#: a vacuum of :data:`VACUUMED` under way, as ``pg_stat_progress_vacuum`` shows it (no row: none)
VACUUM_PROGRESS = f"""
SELECT phase, heap_blks_total, heap_blks_scanned, index_vacuum_count, num_dead_tuples
FROM pg_stat_progress_vacuum WHERE relid = '{VACUUMED}'::regclass
"""
#: how often :func:`_autovacuum` reads the progress (s)
VACUUM_POLL_S = 0.1
#: what autovacuum counts of :data:`VACUUMED`: rows inserted and dead since its last vacuum (its insert and
#: dead-row thresholds compare these), its vacuums so far, and the seconds since the last
VACUUM_DEBT = f"""
SELECT n_ins_since_vacuum, n_dead_tup, autovacuum_count, vacuum_count,
       round(extract(epoch FROM now() - greatest(last_autovacuum, last_vacuum))::numeric, 1)::float8
           AS since_vacuum_s
FROM pg_stat_user_tables WHERE relid = '{VACUUMED}'::regclass
"""


def _autovacuum(sql: Sql, started: threading.Event, progress: dict[str, Any] | None = None) -> dict[str, Any]:
    """Let autovacuum vacuum :data:`VACUUMED` again (:data:`RELEASE_AUTOVACUUM`; held off while retention ran,
    :data:`HOLD_AUTOVACUUM`) and follow its vacuum in ``pg_stat_progress_vacuum``, read every
    :data:`VACUUM_POLL_S`: ``started`` is set when it appears there, and this returns when it has gone, or
    when none began within two ``autovacuum_naptime`` and 30 s (``vacuumed`` False). Returns the wait for it
    (``waited_s``), its time (``vacuum_s``, to within a poll), the phases seen in order and the second each
    was first seen at (``phase_s``, from the vacuum's start), the table's heap blocks and the most dead rows
    it held (``num_dead_tuples``), the index vacuum passes, and what autovacuum owed the table when it was
    let go (``debt``, :data:`VACUUM_DEBT`).

    ``progress``, when given, holds the last poll's ``phase`` and ``heap_blks_scanned`` while the vacuum
    runs (``phase`` None once it has gone), for the push windows beside it to record where the vacuum was
    (:func:`_while_pushing`'s ``state``): which of its passes the push loses to (journal, issue 44).

    Why not a VACUUM of our own: an autovacuum worker runs with the table's own throttle (migration 030) and
    is what a broker's server does after retention; a manual VACUUM runs unthrottled."""
    debt = dict(sql.fetchrow(VACUUM_DEBT))
    sql.execute(RELEASE_AUTOVACUUM)
    naptime = float(sql.fetchval("SELECT setting::float8 FROM pg_settings WHERE name = 'autovacuum_naptime'"))
    asked = time.monotonic()
    row = sql.fetchrow(VACUUM_PROGRESS)
    while row is None and time.monotonic() - asked < 2 * naptime + 30:
        time.sleep(VACUUM_POLL_S)
        row = sql.fetchrow(VACUUM_PROGRESS)
    if row is None:
        return {"vacuumed": False, "waited_s": round(time.monotonic() - asked, 1), "debt": debt}
    began = time.monotonic()
    phases: list[list[Any]] = []  # [phase, second first seen]
    last, dead = row, 0
    while row is not None:
        last, dead = row, max(dead, int(row["num_dead_tuples"]))
        if not phases or phases[-1][0] != row["phase"]:
            phases.append([row["phase"], round(time.monotonic() - began, 1)])
        if progress is not None:
            progress.update(phase=row["phase"], heap_blks_scanned=int(row["heap_blks_scanned"]))
        started.set()  # after the first progress: a window that starts now finds a phase
        time.sleep(VACUUM_POLL_S)
        row = sql.fetchrow(VACUUM_PROGRESS)
    if progress is not None:
        progress.update(phase=None, heap_blks_scanned=None)
    return {
        "vacuumed": True,
        "relation": VACUUMED,
        "waited_s": round(began - asked, 1),
        "vacuum_s": round(time.monotonic() - began, 2),
        "phases": [phase for phase, _ in phases],
        "phase_s": phases,
        "heap_blks_total": int(last["heap_blks_total"]),
        "dead_tuples": dead,
        "index_vacuum_count": int(last["index_vacuum_count"]),
        "debt": debt,
    }


IDLE_LEFT = """
SELECT count(*) FROM queen.partitions WHERE queue_id = $1::uuid AND name LIKE 'idle-%' AND last_seq = 0
"""


def _cleanup(sql: Sql, queue_id: str, url: str) -> dict[str, Any]:
    """A run of the retention job (its partition cleanup: 30 days idle by default) with the queue's retention
    off: the partitions it removed, its pace, and the idle partitions of the queue before and after."""
    before = int(sql.fetchval(IDLE_LEFT, queue_id))
    details = _retention_job(url)
    return {
        "partitions": details["partitionCleanup"]["partitions"],
        "pace": details["pace"],
        "idle_before": before,
        "idle_left": int(sql.fetchval(IDLE_LEFT, queue_id)),
    }


def _json(text: str) -> Any:
    import json

    return json.loads(text)


def _ratio(at_scale: float | None, base: float | None) -> float | None:
    return round(at_scale / base, 3) if at_scale is not None and base else None


def run(context: Context, scenario: Scenario, round_no: int) -> dict[str, Any]:
    """See the module docstring."""
    result = context.new_run(scenario, round_no)
    partitions = partitions_of(scenario)
    prefix = f"{context.queue_prefix}{scenario.name}-r{round_no}-"
    figures: dict[str, Any] = {"partitions": partitions, "stored_per_partition": STORED, "groups": GROUPS}
    result["scale"] = figures
    figures["disk"] = _check_disk(context, partitions)
    with httpx.Client(base_url=context.broker_url, timeout=60) as http:
        differences = _check_seed(context, http, prefix)
        figures["seed_check"] = "equal" if not differences else differences
        if differences:
            result["problems"].append(f"the bulk seed differs from what pushes make: {sorted(differences)}")
            result["valid"] = False
            return result
        base_queue, big_queue = f"{prefix}base", f"{prefix}big"
        context.created_queues.update({base_queue, big_queue, f"{prefix}ref-pushed", f"{prefix}ref-seeded"})
        _seed(context, base_queue, BASE_PARTITIONS, BASE_STORED)
        settle(context.sql, vacuum_stats=False)
        figures["base_vacuum_s"] = round(_vacuum_before_base(context.sql), 1)
        _checkpoint(context)
        base = Sized(base_queue, BASE_PARTITIONS, "base")
        (figures["base"],) = _windows(context, result, [base])
        figures["base"].update(_operators(context, base))
        context.log(f"  seeding {partitions:,} partitions x {STORED} messages")
        seeded = _seed(context, big_queue, partitions, STORED)
        figures["seed_s"] = round(seeded.seconds, 1)
        started = time.monotonic()
        settle(context.sql, vacuum_stats=True)
        figures["analyze_and_stats_s"] = round(time.monotonic() - started, 1)
        figures["checkpoint_s"] = round(_checkpoint(context), 1)
        figures["storage"] = _storage(context, big_queue, partitions)
        big = Sized(big_queue, partitions, "at scale")
        figures["at_scale"], figures["base_beside"] = _windows(
            context, result, [big, base._replace(label="base beside")], fill=True
        )
        figures["at_scale"].update(_operators(context, big))
        queue_id = _queue_id(context, big_queue)
        run_at = context.sql.fetchval("SELECT now()")
        keep = retention_seconds(seeded, run_at)
        quiet = figures["quiet"] = [
            _quiet_window(context, result, big_queue, partitions, "before retention", 0)
        ]
        http.post(
            "/api/v1/configure",
            json={"queue": big_queue, "options": {"retentionEnabled": True, "retentionSeconds": keep}},
        ).raise_for_status()
        context.sql.execute(HOLD_AUTOVACUUM)  # its vacuum is measured on its own below (_autovacuum)
        try:
            figures["retention"] = _while_pushing(
                context,
                result,
                big_queue,
                partitions,
                "retention",
                lambda sql: _retention(sql, context.pg.url),
                figures["at_scale"]["push"].get("wal_bytes_per_msg"),
                seed=PUSH_SEED + 100,
                pause=RetentionJob.name,
            )
            deleted = figures["retention"].get("detail", {}).get("deleted")
            figures["retention"].update(retention_seconds=keep, expected_deleted=partitions)
            if deleted != partitions:
                result["problems"].append(
                    f"retention deleted {deleted} messages, not {partitions} (one a partition)"
                )
            http.post(
                "/api/v1/configure",
                json={"queue": big_queue, "options": {"retentionEnabled": False, "retentionSeconds": 0}},
            ).raise_for_status()
            quiet.append(_quiet_window(context, result, big_queue, partitions, "after retention", 1))
            vacuum_began, progress = threading.Event(), dict[str, Any]()
            figures["retention_vacuum"] = _while_pushing(
                context,
                result,
                big_queue,
                partitions,
                "retention's vacuum",
                lambda sql: _autovacuum(sql, vacuum_began, progress),
                figures["at_scale"]["push"].get("wal_bytes_per_msg"),
                seed=PUSH_SEED + 200,
                ready=vacuum_began,
                state=lambda: dict(progress) or None,
            )
        except BaseException:  # _autovacuum lets autovacuum go again; a step that raised never reached it
            context.sql.execute(RELEASE_AUTOVACUUM)
            raise
        if not figures["retention_vacuum"].get("detail", {}).get("vacuumed"):
            result["problems"].append(f"autovacuum did not vacuum {VACUUMED} after retention")
        figures["retention_vacuum"]["others"] = _vacuum_after(context.sql)  # unmeasured: the cleanup's start
        if not figures["retention_vacuum"]["others"]["caught_up"]:
            result["problems"].append(f"autovacuum had not caught up {VACUUM_WAIT_S:.0f} s after retention")
        quiet.append(_quiet_window(context, result, big_queue, partitions, "after its vacuum", 2))
        context.sql.execute(EMPTY_PARTITIONS, queue_id, min(CLEANUP_PARTITIONS, partitions))
        figures["cleanup"] = _while_pushing(
            context,
            result,
            big_queue,
            partitions,
            "cleanup",
            lambda sql: _cleanup(sql, queue_id, context.pg.url),
            figures["at_scale"]["push"].get("wal_bytes_per_msg"),
            seed=PUSH_SEED + 300,
            pause=RetentionJob.name,
        )
        quiet.append(_quiet_window(context, result, big_queue, partitions, "after the cleanup", 3))
        left = figures["cleanup"].get("detail", {}).get("idle_left")
        if left != 0:
            result["problems"].append(f"partition cleanup left {left} idle partitions")
    base, at_scale = figures["base"], figures["at_scale"]
    figures["push_ratio"] = _ratio(at_scale["push"]["msg_per_s"], base["push"]["msg_per_s"])
    figures["pop_ratio"] = _ratio(at_scale["pop"]["msg_per_s"], base["pop"]["msg_per_s"])
    beside = figures["base_beside"]
    figures["push_ratio_beside"] = _ratio(at_scale["push"]["msg_per_s"], beside["push"]["msg_per_s"])
    figures["pop_ratio_beside"] = _ratio(at_scale["pop"]["msg_per_s"], beside["pop"]["msg_per_s"])
    # the host's speed in the windows at scale over the base's: 1.0 the same, 1.4 a host 40% slower (the
    # ratios above then measure the host as well as the broker); over the windows beside, near 1.0 by design
    figures["probe_ratio"] = _ratio(_probes_median(at_scale), _probes_median(base))
    figures["probe_ratio_beside"] = _ratio(_probes_median(at_scale), _probes_median(beside))
    # the first windows alone: at scale the first pop window follows the first pops after the seed's
    # checkpoint (its lead's), where nearly every page a pop changes is a full-page image in the WAL
    # (journal, issue 44)
    figures["pop_first_ratio"] = _ratio(at_scale["pop_first"]["msg_per_s"], base["pop_first"]["msg_per_s"])
    figures["pop_after_stop_ratio"] = _ratio(
        at_scale["pop_after_stop"]["msg_per_s"], at_scale["pop_first"]["msg_per_s"]
    )
    figures["route_max_ms"] = max(t["max_ms"] for t in at_scale["routes"].values())
    figures["console_render_max_ms"] = at_scale["console"].get("max_ms")
    figures["retention_push_ratio"] = _ratio(
        figures["retention"].get("push_msg_per_s"), at_scale["push"]["msg_per_s"]
    )
    figures["cleanup_push_ratio"] = _ratio(
        figures["cleanup"].get("push_msg_per_s"), at_scale["push"]["msg_per_s"]
    )
    figures["retention_vacuum_push_ratio"] = _ratio(
        figures["retention_vacuum"].get("push_msg_per_s"), at_scale["push"]["msg_per_s"]
    )
    # the same, against the quiet windows right before and after each (quiet_reference)
    for part in ("retention", "retention_vacuum", "cleanup"):
        figures[f"{part}_push_ratio_beside"] = _ratio(
            figures[part].get("push_msg_per_s"), quiet_reference(figures.get("quiet", []), part)
        )
    # the same, against the windows the job was paused in, interleaved with those it ran in (_while_pushing)
    for part in ("retention", "cleanup"):
        figures[f"{part}_push_ratio_paired"] = (figures[part].get("paired") or {}).get("ratio")
    for name, timing in at_scale["routes"].items():
        if timing["status"] != [200]:
            result["problems"].append(f"{name} answered {timing['status']}")
    return result


def _probes_median(measured: dict[str, Any]) -> float:
    """The median host probe (ms) of the push and pop windows of one size (``base``, ``at_scale``)."""
    probes: list[float] = measured["push"]["windows_probe_ms"] + measured["pop"]["windows_probe_ms"]
    return statistics.median(probes)


def summarize(measured: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds of the ratios and maxima below."""
    keys = (
        "push_ratio",
        "pop_ratio",
        "push_ratio_beside",
        "pop_ratio_beside",
        "probe_ratio",
        "probe_ratio_beside",
        "pop_first_ratio",
        "pop_after_stop_ratio",
        "route_max_ms",
        "console_render_max_ms",
        "retention_push_ratio",
        "retention_vacuum_push_ratio",
        "cleanup_push_ratio",
        "retention_push_ratio_beside",
        "retention_vacuum_push_ratio_beside",
        "cleanup_push_ratio_beside",
        "retention_push_ratio_paired",
        "cleanup_push_ratio_paired",
    )
    out: dict[str, Any] = {}
    for key in keys:
        values = [r["scale"][key] for r in measured if r.get("scale", {}).get(key) is not None]
        out[key] = statistics.median(values) if values else None
    return {"scale": out}


def report_lines(entry: dict[str, Any]) -> list[str]:
    lines = []
    for run_ in entry["runs"]:
        figures = run_.get("scale") or {}
        if "at_scale" not in figures:
            continue
        base, big = figures["base"], figures["at_scale"]
        lines.append(
            f"{entry['scenario']} round {run_['round']} at {figures['partitions']:,} partitions: push "
            f"{number(big['push']['msg_per_s'])} msg/s vs {number(base['push']['msg_per_s'])} at "
            f"{BASE_PARTITIONS} ({figures['push_ratio']}); pop {number(big['pop']['msg_per_s'])} vs "
            f"{number(base['pop']['msg_per_s'])} ({figures['pop_ratio']}); slowest route max "
            f"{figures['route_max_ms']} ms"
            + (  # runs before the console was timed have no such figure
                f"; console first render max {figures['console_render_max_ms']} ms"
                if "console_render_max_ms" in figures
                else ""
            )
        )
        if "windows_msg_per_s" in big["push"]:  # runs before took one window a figure
            lines.append(
                f"- each window, msg/s in order, at {BASE_PARTITIONS} / at scale (the figures above are the "
                "medians): "
                + "; ".join(
                    f"{name} "
                    + " / ".join(
                        ", ".join(number(v) for v in w[name]["windows_msg_per_s"]) for w in (base, big)
                    )
                    for name in ("push", "pop")
                )
                + f"; the first pop windows alone {figures['pop_first_ratio']}"
            )
        # the base measured again: beside the windows at scale, or (runs before) after them
        beside = "base_beside" in figures
        again = figures.get("base_beside") or figures.get("base_again")
        suffix = "beside" if beside else "base_again"
        if again:  # runs before either was measured have no such figure
            lines.append(
                f"- at {BASE_PARTITIONS} "
                + (
                    "beside the windows at scale (interleaved, ABBA)"
                    if beside
                    else "again, after the windows at scale (the drift between the two)"
                )
                + ", msg/s a window: push "
                + ", ".join(number(v) for v in again["push"]["windows_msg_per_s"])
                + "; pop "
                + ", ".join(number(v) for v in again["pop"]["windows_msg_per_s"])
                + f"; at scale over it: push {figures[f'push_ratio_{suffix}']}, pop "
                f"{figures[f'pop_ratio_{suffix}']}"
                + (f"; the host's probe at scale over it {figures['probe_ratio_beside']}" if beside else "")
            )
        if "windows_probe_ms" in big["push"]:  # runs before did not probe the host
            lines.append(
                "- the host's speed around each window (a fixed piece of work, ms of CPU; lower is faster), "
                f"at {BASE_PARTITIONS} / at scale"
                + ((" / beside" if beside else " / at the base again") if again else "")
                + ": "
                + "; ".join(
                    f"{name} "
                    + " / ".join(
                        ", ".join(number(v, 1) for v in w[name]["windows_probe_ms"])
                        for w in (base, big, *([again] if again else []))
                    )
                    for name in ("push", "pop")
                )
                + f"; at scale over the base {figures['probe_ratio']}; steal, share of the machine in the "
                f"median windows at scale: push {big['push']['cpu_share_of_machine'].get('steal')}, pop "
                f"{big['pop']['cpu_share_of_machine'].get('steal')}"
            )
        # the first pop window (runs before three windows a figure had one, ``pop``)
        first = big.get("pop_first", big["pop"])
        if "pop_after_stop" in big:  # runs before it was measured have no such window
            lines.append(
                f"- pop again after the consumers stopped ({first['unacked_pops_left']} pops left "
                f"unacked, their partitions leased): {number(big['pop_after_stop']['msg_per_s'])} msg/s "
                f"at scale ({figures['pop_after_stop_ratio']} x the first window), "
                f"{number(base['pop_after_stop']['msg_per_s'])} at {BASE_PARTITIONS}"
            )
        if "fpi_per_msg" in big["pop"]:  # runs before it was measured have no such figure
            lines.append(
                "- WAL a message, bytes (full-page images; checkpoints in the window), at "
                f"{BASE_PARTITIONS} / at scale: "
                + "; ".join(
                    f"{name.replace('_', ' ')} "
                    + " / ".join(
                        f"{number(w[name]['wal_bytes_per_msg'])} ({w[name]['fpi_per_msg']}; "
                        f"{w[name]['checkpoints']})"
                        for w in (base, big)
                    )
                    for name in ("push", "pop_first" if "pop_first" in big else "pop", "pop_after_stop")
                    if "fpi_per_msg" in base[name] and "fpi_per_msg" in big[name]
                )
            )
        lines.append(
            "- operator routes at scale, max (p50) ms: "
            + "; ".join(
                f"`{route}` {number(timing['max_ms'], 1)} ({number(timing['p50_ms'], 1)})"
                for route, timing in big["routes"].items()
            )
        )
        for part in ("retention", "retention_vacuum", "cleanup"):
            done = figures.get(part) or {}
            if "seconds" not in done:
                continue
            pace = (done.get("detail") or {}).get("pace") or {}
            own = done.get("wal_bytes_work")
            lines.append(
                f"- {part.replace('_', ' ')}"
                + (" (the retention job's run)" if part != "retention_vacuum" else " (autovacuum after it)")
                + f": {done['seconds']} s"
                + (  # runs before waited for autovacuum to catch up with every table instead
                    f" (a wait of {vacuum['waited_s']} s, then {vacuum['relation']} vacuumed in "
                    f"{vacuum['vacuum_s']} s: {number(vacuum['dead_tuples'])} dead rows, "
                    f"{number(vacuum['heap_blks_total'])} heap blocks, {' > '.join(vacuum['phases'])})"
                    if (vacuum := done.get("detail") or {}).get("vacuumed")
                    else ""
                )
                + (f" (busy {pace['busyMs'] / 1000:.1f} s at duty {pace['duty']})" if pace else "")
                + f"; push during it {figures.get(f'{part}_push_ratio')} x the rate at scale"
                + (  # runs before had no quiet windows
                    f", {figures[f'{part}_push_ratio_beside']} x the quiet windows beside it"
                    if figures.get(f"{part}_push_ratio_beside") is not None
                    else ""
                )
                + (  # runs before did not pause the job
                    f", {done['paired']['ratio']} x the windows it was paused in (running / paused, msg/s: "
                    + ", ".join(number(v) for v in done["paired"]["running_msg_per_s"])
                    + " / "
                    + ", ".join(number(v) for v in done["paired"]["paused_msg_per_s"])
                    + f"; held {pace.get('heldMs', 0) / 1000:.1f} s)"
                    if done.get("paired")
                    else ""
                )
                + (  # runs before took one window beside it
                    f" (windows, msg/s: {', '.join(number(v) for v in done['push_windows_msg_per_s'])}; "
                    f"{done['push_windows_during_work']} ended before it did)"
                    if "push_windows_msg_per_s" in done
                    else ""
                )
                + (  # runs before did not record them
                    "; full-page images a message (checkpoints) a window: "
                    + ", ".join(
                        f"{fpi} ({checkpoints})"
                        for fpi, checkpoints in zip(
                            done["push_windows_fpi_per_msg"], done["push_windows_checkpoints"], strict=True
                        )
                    )
                    if "push_windows_fpi_per_msg" in done
                    else ""
                )
                + (  # runs before did not record them
                    "; the machine's reads / writes, MB (I/O wait, share of the machine) a window: "
                    + ", ".join(
                        f"{number(io['host_read_mb'])} / {number(io['host_written_mb'])} "
                        f"({io['iowait_share']})"
                        for io in done["push_windows_host_io"]
                        if io.get("host_read_mb") is not None
                    )
                    if "push_windows_host_io" in done
                    else ""
                )
                + (  # runs before did not record them
                    "; the vacuum's phase at each window's start > end: "
                    + ", ".join(
                        " > ".join((state or {}).get("phase") or "over" for state in window)
                        for window in done["push_windows_state"]
                    )
                    if "push_windows_state" in done
                    else ""
                )
                + "; WAL "
                f"{done['wal_bytes'] / 1e9:.2f} GB"
                + (f", of which its own about {own / 1e9:.2f} GB" if own is not None else "")
            )
        if figures.get("quiet"):  # runs before had none
            lines.append(
                "- quiet push windows at scale (no service's run beside them), msg/s (the host's probe, ms): "
                + "; ".join(
                    f"{w.get('where') or OLD_QUIET[n]} {number(w['msg_per_s'])} ({number(w['probe_ms'], 1)})"
                    for n, w in enumerate(figures["quiet"])
                )
                + (  # runs before did not record them
                    "; the machine's reads, MB: "
                    + ", ".join(number(w["host_read_mb"]) for w in figures["quiet"])
                    if all("host_read_mb" in w for w in figures["quiet"])
                    else ""
                )
                + "; the probe beside retention, its vacuum, the cleanup: "
                + "; ".join(
                    ", ".join(number(v, 1) for v in figures.get(part, {}).get("push_windows_probe_ms", []))
                    for part in ("retention", "retention_vacuum", "cleanup")
                )
            )
    return lines


def _planned(scenario: Scenario, options: Options) -> tuple[float, float]:
    # the hot path's push and pop at each size and at the base beside, each after its lead, WINDOWS beside
    # retention's vacuum and PAIRED_ORDER's beside retention and the cleanup (each after its switch), and
    # the four quiet windows after their leads
    paired, quiet = 2 * len(PAIRED_ORDER), len(QUIET_AROUND) + 1  # each part between two quiet windows
    windows = (6 * WINDOWS + WINDOWS + paired + quiet) * (options.warmup + options.seconds + 3) + (
        (6 * WINDOWS + quiet) * LEAD_S + paired * SWITCH_S
    )
    return windows + partitions_of(scenario) / 1500, partitions_of(scenario) / 1000


KIND = Kind(
    "scale",
    run,
    summarize=summarize,
    report_lines=report_lines,
    planned_s=_planned,
    # the broker's retention job would run retention and partition cleanup beside the kind's own passes
    broker_env={"RETENTION_INTERVAL": str(86_400_000)},
)
