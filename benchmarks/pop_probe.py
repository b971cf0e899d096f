"""One-off: the wildcard pop + ack of the scale kind, one 10 s window at a time, by statement (issue 44).

    .venv/bin/python benchmarks/pop_probe.py seed URL [--partitions 1000000]
    .venv/bin/python benchmarks/pop_probe.py probe URL TAG [--push S] [--warm] [--profile] \\
        [--wal-by-relation] [--queues BASE BIG] [K=V ...]

``seed`` makes, with the scale kind's own bulk SQL (``queenpy.bench.kinds.scale._seed``), a queue ``base`` of
100 partitions of 2,000 messages and a queue ``big`` of ``--partitions`` partitions of 10, ten consumer groups
half-way in both, then ``scale.settle`` (ANALYZE, the full stats pass, a VACUUM (ANALYZE) of the stats
tables), as the kind does. Copy the server's data directory aside after it (with the server stopped) and back
before each probe, so that every probe starts from the same seed.

``probe`` starts ``queenpy serve`` on URL as the bench does (``K=V`` pairs go to its environment, e.g.
``STATS_INTERVAL_MS=3600000`` to hold the stats job off) and runs the kind's consume script (50 connections,
the ten groups round robin, batch 5, each pop acked) for 10 s on ``base``, then on ``big``. ``--push S`` first
runs the kind's push script (10 x 1 KB to random partitions, 50 connections) for S seconds, as the kind's
push window does before its pop window (13 s there). ``--warm`` runs a 3 s window before each: its
consumers stop with pops in flight, whose partitions stay leased for the queue's lease time (300 s), as after
a crash. Per window it prints msg/s (cursor growth, counted by PostgreSQL),
wrk's counters, WAL bytes a message, ``pg_stat_bgwriter``'s buffer counts and, when the server runs on this
machine, PostgreSQL's CPU by process kind. ``--profile`` adds a
``perf record`` of the machine (``TAG-QUEUE.perf``) and, where the server preloads it
(``shared_preload_libraries``; the embedded server's build has none), ``pg_stat_statements`` with
``track = all``; both slow the windows down. The statement table and
the per-table I/O go to ``TAG.json`` in the work directory (``--workdir``, default a temporary one).
``--wal-by-relation`` reads the window's WAL back with ``pg_walinspect`` (PostgreSQL 15 or later; the
extension is created) and counts, per relation, the blocks its records changed and how many of them were
full-page images: which table or index a pop's WAL comes from.

One window a figure: windows of the same code and state differed by up to 15% here (journal, 2026-11-29
11:43).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from queenpy.bench import procfs
from queenpy.bench.broker import Broker
from queenpy.bench.kinds import scale
from queenpy.bench.postgres import Sql, local_postmaster_of, postgres_process_kind
from queenpy.bench.wrk import run_wrk
from queenpy.server.process import migrate

WINDOW_S = 10
BUFFERS = (
    "SELECT buffers_backend, buffers_clean, buffers_alloc, buffers_checkpoint,"
    " pg_current_wal_lsn() - '0/0'::pg_lsn FROM pg_stat_bgwriter"
)
STATEMENTS = (
    "SELECT calls, round(total_exec_time::numeric, 1) AS ms, shared_blks_hit AS hit,"
    " shared_blks_read AS read,"
    " left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS query"
    " FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 25"
)
# the window's WAL records by the relation of each block they reference (PostgreSQL 15's block_ref text:
# "blkref #0: rel 1663/16384/16401 blk 123 FPW", "fork fsm" before "blk" for other forks)
WAL_BY_RELATION = r"""
WITH blocks AS (
    SELECT m[1]::oid AS spc, m[3]::oid AS node, m[4] IS NOT NULL AS image
    FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn) w,
         regexp_matches(w.block_ref, 'rel (\d+)/(\d+)/(\d+)(?: fork \w+)? blk \d+( \(?FPW)?', 'g') AS m
)
SELECT coalesce(pg_filenode_relation(CASE WHEN spc = 1663 THEN 0 ELSE spc END, node)::regclass::text,
                node::text) AS relation,
       count(*) AS blocks, count(*) FILTER (WHERE image) AS full_page_images
FROM blocks GROUP BY 1 ORDER BY 3 DESC, 2 DESC LIMIT 15
"""
TABLE_IO = (
    "SELECT relname, heap_blks_read, heap_blks_hit, idx_blks_read, idx_blks_hit FROM pg_statio_user_tables"
    " WHERE schemaname = 'queen' ORDER BY heap_blks_read + idx_blks_read DESC LIMIT 6"
)


def seed(url: str, partitions: int) -> None:
    migrate(url)
    sql = Sql(url)
    context: Any = SimpleNamespace(sql=sql, log=print)
    started = time.monotonic()
    scale._seed(context, "base", scale.BASE_PARTITIONS, scale.BASE_STORED)
    scale._seed(context, "big", partitions, scale.STORED)
    scale.settle(sql, vacuum_stats=True)
    print(f"seeded and analyzed in {time.monotonic() - started:.0f} s")
    sql.close()


def window(
    sql: Sql, url: str, script: Path, queue: str, postmaster: int | None, wal_by_relation: bool = False
) -> dict[str, Any]:
    before = scale.consumed(sql, queue)
    buffers = sql.fetchrow(BUFFERS)
    start_lsn = sql.fetchval("SELECT pg_current_wal_lsn()::text")
    ticks = procfs.tree_ticks(postmaster, postgres_process_kind) if postmaster is not None else None
    wrk = run_wrk(url, script, 50, WINDOW_S)
    cpu: dict[str, float] = {}
    if postmaster is not None and ticks is not None:
        cpu = procfs.cpu_by_kind_s(ticks, procfs.tree_ticks(postmaster, postgres_process_kind))
    buffers_after = sql.fetchrow(BUFFERS)
    end_lsn = sql.fetchval("SELECT pg_current_wal_lsn()::text")
    messages = scale.consumed(sql, queue) - before
    by_relation = (
        [
            {**dict(r), "per_msg": round(r["full_page_images"] / max(messages, 1), 3)}
            for r in sql.fetch(WAL_BY_RELATION, start_lsn, end_lsn)
        ]
        if wal_by_relation
        else []
    )
    return {
        "msg_per_s": round(messages / WINDOW_S, 1),
        "wrk": {k: v for k, v in wrk.result.counters.items() if v},
        "wal_bytes_per_msg": round(int(buffers_after[4] - buffers[4]) / max(messages, 1)),
        "buffers": dict(
            zip(
                ("backend", "clean", "alloc", "checkpoint"),
                (int(b - a) for a, b in zip(buffers, buffers_after)),
            )
        ),
        "postgres_cpu_s": {kind: round(s, 2) for kind, s in cpu.items() if s >= 0.05},
        **({"wal_by_relation": by_relation} if wal_by_relation else {}),
    }


def probe(
    url: str,
    tag: str,
    warm: bool,
    push_s: int,
    profile: bool,
    wal_by_relation: bool,
    env: dict[str, str],
    workdir: Path,
    queues: tuple[str, str] = ("base", "big"),
) -> None:
    sql = Sql(url)
    # pg_stat_statements only where it is preloaded (the embedded server's build has none: perf alone)
    track_statements = profile and "pg_stat_statements" in str(
        sql.fetchval("SELECT current_setting('shared_preload_libraries')")
    )
    if track_statements:
        sql.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        sql.execute("ALTER SYSTEM SET pg_stat_statements.track = 'all'")
        sql.execute("SELECT pg_reload_conf()")
    if wal_by_relation:
        sql.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    postmaster = local_postmaster_of(sql)
    broker = Broker(url, workdir, env=env)
    report: dict[str, Any] = {}
    try:
        broker.wait_ready()
        for queue in queues:
            script = scale.pop_script_for(queue, workdir)
            if push_s:
                partitions = scale.queue_partitions(sql, queue)
                pushed = run_wrk(broker.url, scale.push_script_for(queue, partitions, workdir), 50, push_s)
                print(queue, "push", json.dumps({k: v for k, v in pushed.result.counters.items() if v}))
            if warm:
                run_wrk(broker.url, script, 50, 3)
            if track_statements:
                sql.execute("SELECT pg_stat_statements_reset()")
            if profile:
                sql.execute("SELECT pg_stat_reset()")
                perf = subprocess.Popen(
                    [
                        "perf",
                        "record",
                        "-F",
                        "499",
                        "-a",
                        "-o",
                        str(workdir / f"{tag}-{queue}.perf"),
                        "--",
                        "sleep",
                        str(WINDOW_S - 1),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            report[queue] = window(sql, broker.url, script, queue, postmaster, wal_by_relation)
            if profile:
                perf.wait()
                if track_statements:
                    report[queue]["statements"] = [dict(r) for r in sql.fetch(STATEMENTS)]
                report[queue]["table_io"] = [dict(r) for r in sql.fetch(TABLE_IO)]
            print(
                queue,
                json.dumps({k: v for k, v in report[queue].items() if k not in ("statements", "table_io")}),
            )
    finally:
        broker.stop()
        if track_statements:
            sql.execute("ALTER SYSTEM RESET pg_stat_statements.track")
            sql.execute("SELECT pg_reload_conf()")
        sql.close()
        (workdir / f"{tag}.json").write_text(json.dumps(report, default=str, indent=1))
        print(f"written: {workdir / f'{tag}.json'}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    seeding = commands.add_parser("seed")
    seeding.add_argument("url")
    seeding.add_argument("--partitions", type=int, default=1_000_000)
    probing = commands.add_parser("probe")
    probing.add_argument("url")
    probing.add_argument("tag")
    probing.add_argument("env", nargs="*", metavar="ENV=VALUE")
    probing.add_argument("--warm", action="store_true")
    probing.add_argument("--push", type=int, default=0, metavar="SECONDS")
    probing.add_argument("--profile", action="store_true")
    probing.add_argument("--wal-by-relation", action="store_true")
    probing.add_argument("--workdir", type=Path)
    probing.add_argument(
        "--queues",
        nargs=2,
        default=("base", "big"),
        metavar=("BASE", "BIG"),
        help="the two queues (a database the scale kind left: PREFIXscale-1m-r1-base and ...-big)",
    )
    # K=V pairs may follow the options too, as the docstring shows them (argparse leaves those unparsed)
    args, extra = parser.parse_known_args()
    if any("=" not in item or item.startswith("-") for item in extra) or (extra and args.command == "seed"):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "seed":
        seed(args.url, args.partitions)
        return
    env = dict(pair.split("=", 1) for pair in [*args.env, *extra])
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pop-probe-"))
    probe(
        args.url,
        args.tag,
        args.warm,
        args.push,
        args.profile,
        args.wal_by_relation,
        env,
        workdir,
        tuple(args.queues),
    )


if __name__ == "__main__":
    main()
