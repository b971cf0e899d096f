"""First numbers: push and pop+ack through the broker, next to PostgreSQL's own insert rate, same run.

    python benchmarks/first_numbers.py [--seconds 10] [--warmup 3] [--workers 2]

What it does, all on this machine:
1. starts a private PostgreSQL (pgserver's binaries, default durability: fsync on, synchronous_commit on)
   and ``queenpy serve`` on it (``--workers`` processes);
2. push: ``wrk`` (50 connections, 2 threads) posts 1, 10 and 100 messages of ~40 bytes per request over
   100 partitions; the rate is counted from PostgreSQL (rows in ``queen.messages`` during the measured
   window), not from the load generator;
3. the limit: ``pgbench`` (50 clients) inserts the same rows into a table shaped like ``queen.messages``
   (same columns and indexes), 1, 10 and 100 rows per INSERT statement;
4. pop + ack: 10 asyncio consumers pop batches of 100 (wildcard, long poll) and ack them with one batch
   ack each, until the backlog left by the push runs is drained.
Needs ``wrk`` (Debian package ``wrk``). Prints a table; never part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx
import psycopg

PAYLOAD = '{"kind":"bench","n":12345,"ok":true,"v":"abcdef"}'  # ~40 bytes
PARTITIONS = 100


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def count_messages(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM queen.messages").fetchone()
        return int(row[0]) if row else 0


def settled_count(url: str) -> int:
    """The row count once pushes still in flight after the load generator stopped have committed."""
    previous = -1
    while True:
        current = count_messages(url)
        if current == previous:
            return current
        previous = current
        time.sleep(0.5)


def wrk_push(base_url: str, per_request: int, seconds: int, connections: int, workdir: Path) -> str:
    script = workdir / f"push{per_request}.lua"
    script.write_text(textwrap.dedent(f"""
        wrk.method = "POST"
        wrk.headers["Content-Type"] = "application/json"
        local payload = '{PAYLOAD}'
        request = function()
          local parts = {{}}
          local partition = math.random(0, {PARTITIONS - 1})
          for i = 1, {per_request} do
            parts[i] = '{{"queue":"bench","partition":"p' .. partition .. '","payload":' .. payload .. '}}'
          end
          return wrk.format(nil, "/api/v1/push", nil, '{{"items":[' .. table.concat(parts, ",") .. ']}}')
        end
        """))
    result = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "--latency",
                             "-s", str(script),
                             base_url], capture_output=True, text=True, check=True)
    return result.stdout


def latency_of(wrk_output: str) -> str:
    found = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", wrk_output, re.M))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", wrk_output)
    text = f"p50 {found.get('50', '?')} p99 {found.get('99', '?')}"
    return text + (f" NON-2XX {errors.group(1)}" if errors else "")


def pgbench_limit(pg_bin: Path, socket_dir: str, rows: int, seconds: int, clients: int, workdir: Path) -> float:
    script = workdir / f"insert{rows}.sql"
    script.write_text(
        "\\set p random(0, %d)\n" % (PARTITIONS - 1)
        + "INSERT INTO bench.messages (id, transaction_id, partition_id, seq, payload, created_at) "
        f"SELECT gen_random_uuid(), gen_random_uuid()::text, bench.partition_uuid(:p), "
        f"nextval('bench.seq'), '{PAYLOAD}'::jsonb, clock_timestamp() FROM generate_series(1, {rows});\n")
    result = subprocess.run([str(pg_bin / "pgbench"), "-h", socket_dir, "-U", "postgres", "-n", "-c", str(clients),
                             "-j", "2", "-T", str(seconds), "-f", str(script), "postgres"],
                            capture_output=True, text=True, check=True)
    tps = float(re.search(r"tps = ([\d.]+)", result.stdout).group(1))  # type: ignore[union-attr]
    return tps * rows


async def pop_and_ack(base_url: str, consumers: int, expected: int, timeout_s: float) -> tuple[int, float]:
    done = 0
    started = time.monotonic()
    deadline = started + timeout_s

    async def consumer() -> None:
        nonlocal done
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
            while done < expected and time.monotonic() < deadline:
                response = await client.get("/api/v1/pop/queue/bench", params={
                    "batch": 100, "wait": "true", "timeout": 1000})
                body = response.json() if response.content else {}
                messages = body.get("messages") or []
                if not messages:
                    continue
                acks = [{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                         "leaseId": m["leaseId"], "status": "completed"} for m in messages]
                result = (await client.post("/api/v1/ack/batch", json={"acknowledgments": acks})).json()
                assert all(r["success"] for r in result), result[:2]
                done += len(messages)

    await asyncio.gather(*(consumer() for _ in range(consumers)))
    return done, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--connections", type=int, default=50)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is required: apt-get install wrk")

    import pgserver

    workdir = Path(tempfile.mkdtemp(prefix="queenpy-bench-"))
    os.environ.setdefault("XDG_RUNTIME_DIR", str(workdir))
    server = pgserver.get_server(workdir / "pgdata", cleanup_mode="delete")
    url = server.get_uri()
    socket_dir = re.search(r"host=([^&]+)", url).group(1)  # type: ignore[union-attr]
    pg_bin = Path(pgserver.__file__).parent / "pginstall" / "bin"
    port = free_port()
    env = {**os.environ, "DATABASE_URL": url, "PORT": str(port), "HOST": "127.0.0.1",
           "NUM_WORKERS": str(args.workers)}
    broker = subprocess.Popen([sys.executable, "-m", "queenpy", "serve"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(base_url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE SCHEMA bench")
            conn.execute("CREATE TABLE bench.messages (LIKE queen.messages INCLUDING ALL)")
            conn.execute("CREATE SEQUENCE bench.seq")
            conn.execute("CREATE FUNCTION bench.partition_uuid(p int) RETURNS uuid LANGUAGE sql IMMUTABLE AS "
                         "$$ SELECT ('00000000-0000-4000-8000-' || lpad(p::text, 12, '0'))::uuid $$")
            settings = conn.execute("SELECT current_setting('fsync'), current_setting('synchronous_commit'), "
                                    "version()").fetchone()
        print(f"PostgreSQL: {settings[2].split(',')[0]}, fsync={settings[0]}, synchronous_commit={settings[1]}")  # type: ignore[index]
        print(f"broker: {args.workers} worker processes; load: wrk -t2 -c{args.connections}; "
              f"{args.seconds}s measured after {args.warmup}s warm-up; payload {len(PAYLOAD)} B; "
              f"{PARTITIONS} partitions\n")
        print(f"{'scenario':<28}{'broker msg/s':>14}{'PG limit msg/s':>16}{'ratio':>8}   latency (wrk)")
        pushed_total = 0
        for per_request in (1, 10, 100):
            wrk_push(base_url, per_request, args.warmup, args.connections, workdir)
            before = settled_count(url)
            started = time.monotonic()
            output = wrk_push(base_url, per_request, args.seconds, args.connections, workdir)
            elapsed = time.monotonic() - started
            after = settled_count(url)
            broker_rate = (after - before) / elapsed
            limit = pgbench_limit(pg_bin, socket_dir, per_request, args.seconds, args.connections, workdir)
            print(f"{'push ' + str(per_request) + ' msg/request':<28}{broker_rate:>14,.0f}{limit:>16,.0f}"
                  f"{broker_rate / limit:>8.2f}   {latency_of(output)}")
            pushed_total = after
        backlog = pushed_total
        done, elapsed = asyncio.run(pop_and_ack(base_url, 10, backlog, timeout_s=600))
        print(f"{'pop 100 + batch ack, 10 conn':<28}{done / elapsed:>14,.0f}{'':>16}{'':>8}   "
              f"{done:,} of {backlog:,} messages in {elapsed:.1f}s")
        with psycopg.connect(url) as conn:
            left = conn.execute("SELECT coalesce(sum(p.last_seq - coalesce(pc.last_consumed_seq, 0)), 0) "
                                "FROM queen.partitions p LEFT JOIN queen.partition_consumers pc ON "
                                "pc.partition_id = p.id AND pc.consumer_group = '__QUEUE_MODE__'").fetchone()
        print(f"\nbacklog left after pop+ack (from PostgreSQL): {left[0]}")  # type: ignore[index]
    finally:
        os.killpg(broker.pid, signal.SIGTERM)
        broker.wait(timeout=30)
        server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
