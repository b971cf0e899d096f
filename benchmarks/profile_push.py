"""A py-spy flame graph of one broker worker under push load, with the broker's CPU per request beside it.

What it runs is what ``queenpy bench`` runs for ``push-N-40B``: a private PostgreSQL (the embedded default's
settings), ``queenpy serve`` (``--workers``, default 2), a queue of 100 partitions, wrk with the bench's push
script (``--per-request`` messages per request, 50 connections). After a warm-up, ``py-spy record`` samples
one worker (without ``--idle``: only the stacks that run on the CPU, so the widths are CPU shares) while wrk
loads the broker; the broker's CPU time (from /proc, its whole process tree) over wrk's requests is printed
too. Needs wrk and py-spy (``pip install py-spy``); run from the repository's root:

    python benchmarks/profile_push.py --out benchmarks/profiles/push-1-after.svg

``--server`` sets ``QUEENPY_HTTP_SERVER`` for the broker (to profile another HTTP server); ``-e NAME=VALUE``
passes any other setting. Profiles are proportions: on a shared machine the CPU per request moves less than
throughput does, but both are read beside the other processes' share of the cores, printed at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from queenpy.bench import procfs
from queenpy.bench.broker import Broker
from queenpy.bench.catalog import payload
from queenpy.bench.postgres import PrivatePostgres, Sql
from queenpy.bench.wrk import render_script, run_wrk


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="the SVG to write (none: no profile, only the CPU)"
    )
    parser.add_argument("--per-request", type=int, default=1, help="messages per push request")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds sampled")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument(
        "--requests-per-s",
        type=int,
        default=0,
        help="pace wrk to this many requests per second (0: as fast as the broker answers)",
    )
    parser.add_argument("--native", action="store_true", help="py-spy --native (C frames too)")
    parser.add_argument("--server", default=None, help="QUEENPY_HTTP_SERVER of the broker")
    parser.add_argument("-e", "--env", action="append", default=[], help="NAME=VALUE for the broker")
    args = parser.parse_args()
    py_spy = shutil.which("py-spy")
    if py_spy is None and args.out is not None:
        raise SystemExit("py-spy is not installed: pip install py-spy")
    env = dict(item.split("=", 1) for item in args.env)
    if args.server:
        env["QUEENPY_HTTP_SERVER"] = args.server
    workdir = Path(tempfile.mkdtemp(prefix="queenpy-profile-"))
    pg = PrivatePostgres(workdir)
    broker = None
    try:
        broker = Broker(pg.url, workdir, args.workers, env)
        broker.wait_ready()
        sql = Sql(pg.url)
        queue = "profile-push"
        items = [{"queue": queue, "partition": f"p{i}", "payload": {"precreate": i}} for i in range(100)]
        sql.fetchval("SELECT queen.push_messages_v3($1::jsonb)::text", json.dumps(items))
        sql.close()
        script = render_script(
            "push",
            {
                "queue": queue,
                "partitions": 100,
                "per_request": args.per_request,
                "payload": payload(40),
                "seed": 17,
                "rate_per_thread": args.requests_per_s / 2,
            },
            workdir,
        )
        run_wrk(broker.url, script, args.connections, args.warmup)
        worker = psutil.Process(broker.pid).children()[0].pid
        profiler = (
            None
            if args.out is None
            else subprocess.Popen(
                [
                    str(py_spy),
                    "record",
                    "--pid",
                    str(worker),
                    "--rate",
                    str(args.rate),
                    "--duration",
                    str(round(args.seconds)),
                    "--gil",
                    "--format",
                    "flamegraph",
                    "--output",
                    str(args.out),
                    *(["--native"] if args.native else ["--nonblocking"]),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )
        )
        tree = [psutil.Process(broker.pid), *psutil.Process(broker.pid).children(recursive=True)]
        times0 = [process.cpu_times() for process in tree]
        machine0, broker0 = procfs.machine_cpu(), procfs.tree_cpu_s([broker.pid])
        started = time.monotonic()
        wrk = run_wrk(broker.url, script, args.connections, args.seconds + 1)
        wall = time.monotonic() - started
        broker_s = procfs.tree_cpu_s([broker.pid]) - broker0
        times1 = [process.cpu_times() for process in tree]
        system_s = sum(b.system - a.system for a, b in zip(times0, times1, strict=True))
        machine1 = procfs.machine_cpu()
        if profiler is not None:
            profiler.wait(timeout=args.seconds + 30)
        requests = wrk.result.requests
        total = machine1.total_s - machine0.total_s
        other = (machine1.busy_s - machine0.busy_s - broker_s - wrk.cpu_s) / total if total else 0.0
        if args.out is not None:
            print(f"{args.out}: worker {worker}, {args.seconds:g} s sampled at {args.rate}/s")
        print(
            f"requests {requests:,} in {wall:.1f} s ({requests / wall:,.0f}/s), p99 "
            f"{wrk.result.latency_us.get(99.0, 0) / 1000:.1f} ms; broker CPU {broker_s:.2f} s = "
            f"{broker_s / requests * 1e6:.1f} µs/request ({system_s / broker_s * 100:.0f}% in the kernel); "
            f"others (PostgreSQL included) used {other * 100:.0f}% of the cores"
        )
    finally:
        if broker is not None:
            broker.stop()
        pg.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
