"""One-off: the push beside a throttled VACUUM of queen.messages, in 5-s windows by its phase (issue 44).

    .venv/bin/python benchmarks/vacuum_probe.py URL QUEUE LIMIT:START [LIMIT:START ...]

Against a database the scale kind left (``QUEUE`` its big queue, ``PREFIXscale-1m-r1-big``, of 1,000,000
partitions), with ``queenpy serve`` started here as the bench does. Each trial holds autovacuum of
queen.messages off, deletes the rows of 5% of the table's heap blocks from ``START`` (a fraction of them) on
(rows deleted by time in production sit together, as the oldest do at the table's front), pushes four
windows, then runs ``VACUUM queen.messages`` on a connection of its own with ``vacuum_cost_delay = 2`` and
``vacuum_cost_limit = LIMIT`` (migration 030's throttle is 2 and 1,000; autovacuum's own worker is not
waited for, so the vacuum starts at once) and pushes windows back to back until it ends, then four more.
Pushes are the scale kind's push script (10 x 1 KB to random partitions, 50 connections), a seed per window.

Per window it prints msg/s (wrk's requests answered 2xx, times 10), wrk's p99, the vacuum's phase and
``heap_blks_scanned`` at the window's start and end, the WAL written, PostgreSQL's CPU by process kind
(the server must run on this machine) and the wait events of the broker's busy backends
(``application_name`` queenpy), sampled every 0.1 s. The windows go to ``--out`` (JSON) too.

The deletions bypass the broker (partitions' counts are not moved): use a database made for the probe.
One window moves by ±15% from the next on this machine: read trials against the windows right after them.
"""

from __future__ import annotations

import argparse
import collections
import json
import threading
import time
from pathlib import Path
from typing import Any

from queenpy.bench import procfs
from queenpy.bench.broker import Broker
from queenpy.bench.kinds import scale
from queenpy.bench.postgres import Sql, local_postmaster_of, postgres_process_kind
from queenpy.bench.wrk import run_wrk

WINDOW_S = 5
PROGRESS = (
    "SELECT phase, heap_blks_scanned FROM pg_stat_progress_vacuum WHERE relid = 'queen.messages'::regclass"
)
WAITS = (
    "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), count(*) FROM pg_stat_activity"
    " WHERE application_name = 'queenpy' AND state = 'active' GROUP BY 1"
)
DELETE = (
    "WITH d AS (DELETE FROM queen.messages WHERE ctid >= $1::text::tid AND ctid < $2::text::tid RETURNING 1)"
    " SELECT count(*) FROM d"
)


class Probe:
    def __init__(self, url: str, queue: str, workdir: Path) -> None:
        self.url, self.queue, self.workdir = url, queue, workdir
        self.sql = Sql(url)
        postmaster = local_postmaster_of(self.sql)
        if postmaster is None:
            raise SystemExit(f"the server of {url} does not run on this machine: its CPU cannot be read")
        self.postmaster = postmaster
        self.partitions = scale.queue_partitions(self.sql, queue)
        self.waits: collections.Counter[str] = collections.Counter()
        self.windows: list[dict[str, Any]] = []
        self.seed = scale.PUSH_SEED + 1000
        self.broker = Broker(url, workdir)
        self.broker.wait_ready()
        threading.Thread(target=self._sample_waits, daemon=True).start()

    def _sample_waits(self) -> None:
        sql = Sql(self.url)
        while True:
            for event, count in sql.fetch(WAITS):
                self.waits[event] += int(count)
            time.sleep(0.1)

    def window(self, tag: str) -> None:
        self.seed += 1
        script = scale.push_script_for(self.queue, self.partitions, self.workdir, seed=self.seed)
        self.waits.clear()
        at_start = self.sql.fetchrow(PROGRESS)
        ticks = procfs.tree_ticks(self.postmaster, postgres_process_kind)
        lsn = int(self.sql.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"))
        run = run_wrk(self.broker.url, script, 50, WINDOW_S).result
        cpu = procfs.cpu_by_kind_s(ticks, procfs.tree_ticks(self.postmaster, postgres_process_kind))
        wal = int(self.sql.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")) - lsn
        at_end = self.sql.fetchrow(PROGRESS)
        row = {
            "tag": tag,
            "msg_per_s": round((run.requests - run.non_2xx) * 10 / run.duration_s),
            "p99_ms": round(run.latency_us.get(99.0, 0) / 1000, 1),
            "phase": [at_start and at_start[0], at_end and at_end[0]],
            "heap_blks_scanned": [at_start and int(at_start[1]), at_end and int(at_end[1])],
            "wal_mb": round(wal / 1e6, 1),
            "waits": dict(self.waits.most_common(6)),
            "postgres_cpu_s": {kind: round(s, 2) for kind, s in cpu.items() if s >= 0.05},
        }
        print(json.dumps(row), flush=True)
        self.windows.append(row)

    def trial(self, limit: int, start: float) -> None:
        blocks = int(self.sql.fetchval("SELECT pg_relation_size('queen.messages') / 8192"))
        first, last = int(blocks * start), int(blocks * (start + 0.05))
        self.sql.execute(scale.HOLD_AUTOVACUUM)
        deleted = self.sql.fetchval(DELETE, f"({first},0)", f"({last},0)")
        print(f"== limit {limit}: {deleted} rows of heap blocks {first}..{last} deleted", flush=True)
        for _ in range(4):
            self.window(f"L{limit} before")
        done, took = threading.Event(), []

        def vacuum() -> None:
            sql = Sql(self.url)
            try:
                sql.execute("SET vacuum_cost_delay = 2")
                sql.execute(f"SET vacuum_cost_limit = {int(limit)}")
                started = time.monotonic()
                sql.execute("VACUUM queen.messages")
                took.append(time.monotonic() - started)
            finally:
                sql.close()
                done.set()

        threading.Thread(target=vacuum, daemon=True).start()
        time.sleep(0.5)
        while not done.is_set():
            self.window(f"L{limit} during")
        print(f"   vacuum took {took[0]:.1f} s" if took else "   vacuum failed", flush=True)
        for _ in range(4):
            self.window(f"L{limit} after")
        self.sql.execute(scale.RELEASE_AUTOVACUUM)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("url")
    parser.add_argument("queue")
    parser.add_argument("trials", nargs="+", metavar="LIMIT:START")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/vacuum-probe"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/vacuum-probe.json"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    probe = Probe(args.url, args.queue, args.workdir)
    try:
        for trial in args.trials:
            limit, start = trial.split(":")
            probe.trial(int(limit), float(start))
    finally:
        probe.broker.stop()
        probe.sql.execute(scale.RELEASE_AUTOVACUUM)
        args.out.write_text(json.dumps(probe.windows, indent=1))


if __name__ == "__main__":
    main()
