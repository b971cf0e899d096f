"""The private PostgreSQL of a benchmark run, a small synchronous SQL helper, and pgbench.

The server comes from ``pgserver`` (the same binaries as ``queenpy serve``'s embedded default), with its
default durability (fsync on, synchronous_commit on), listening on a Unix socket in the work directory.
"""

from __future__ import annotations

import asyncio
import collections
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from queenpy.bench.parsing import PgbenchResult, parse_pgbench, pgbench_log_latencies_us
from queenpy.bench.procfs import SamplerThread

__all__ = ["BenchError", "PgbenchRun", "PrivatePostgres", "Sql", "postgres_process_kind", "run_pgbench"]

# PostgreSQL's auxiliary processes, by the title they set (``postgres: <title>``); anything else is a backend
_AUXILIARY = ("autovacuum worker", "autovacuum launcher", "walwriter", "checkpointer", "background writer",
              "logical replication launcher", "archiver", "walsender")


def postgres_process_kind(pid: int) -> str:
    """What a process of a PostgreSQL tree is, from its title: ``postmaster``, one of the auxiliary kinds
    (``autovacuum worker``, ``walwriter``, ``checkpointer``, ...) or ``backend`` (client connections and
    anything unrecognised); ``gone`` when the process ended before we looked."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return "gone"
    if not title.startswith("postgres: "):
        return "postmaster"
    rest = title[len("postgres: "):]
    return next((kind for kind in _AUXILIARY if rest.startswith(kind)), "backend")


class BenchError(RuntimeError):
    """A benchmark could not run (missing tool, server that did not start, ...); the message says why."""


class PrivatePostgres:
    """A PostgreSQL server in ``workdir/pgdata`` for this run only; removed by :meth:`stop`."""

    def __init__(self, workdir: Path) -> None:
        os.environ.setdefault("XDG_RUNTIME_DIR", str(workdir))  # before pgserver (platformdirs) loads
        try:
            import pgserver
        except ImportError as exc:  # pragma: no cover - pgserver is a queenpy dependency
            raise BenchError("the pgserver package is missing (it comes with queenpy)") from exc
        self.bin_dir = Path(pgserver.__file__).parent / "pginstall" / "bin"
        self.pgbench = self.bin_dir / "pgbench"
        if not self.pgbench.exists():
            found = shutil.which("pgbench")
            if not found:
                raise BenchError(f"pgbench not found in {self.bin_dir} nor on PATH")
            self.pgbench = Path(found)
        self.data_dir = workdir / "pgdata"
        module: Any = pgserver
        self._server: Any = module.get_server(self.data_dir, cleanup_mode="delete")
        self.url: str = self._server.get_uri()
        match = re.search(r"host=([^&]+)", self.url)
        if not match:
            raise BenchError(f"cannot find the socket directory in {self.url}")
        self.socket_dir = match.group(1)
        self.pid: int = int(self._server.get_pid())

    def stop(self) -> None:
        self._server.cleanup()


class WaitSampler(SamplerThread):
    """What PostgreSQL's client backends are doing, sampled from ``pg_stat_activity`` every ``interval_s``
    in a thread (own connection): per active backend either ``CPU`` (no wait event) or
    ``<wait_event_type>:<wait_event>`` (``IO:WALSync`` is fsync of the WAL, ``Lock:transactionid`` a row
    lock held by another transaction, ``LWLock:WALWrite`` waiting for another backend's WAL flush, ...).

    ``mark()`` starts a window; ``shares()`` gives each state's share of the active-backend samples since,
    plus ``active_backends``, the mean number of active backends per sample.
    """

    QUERY = ("SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity "
             "WHERE backend_type = 'client backend' AND state = 'active' AND pid <> pg_backend_pid()")

    def __init__(self, url: str, interval_s: float = 0.05) -> None:
        super().__init__("queenbench-waits", interval_s)
        self.url = url
        self._counts: collections.Counter[str] = collections.Counter()
        self._samples = 0

    def mark(self) -> None:
        with self._lock:
            self._counts.clear()
            self._samples = 0

    def shares(self) -> dict[str, float]:
        with self._lock:
            total = sum(self._counts.values())
            found = {state: n / total for state, n in self._counts.most_common()} if total else {}
            found["active_backends"] = total / self._samples if self._samples else 0.0
            return found

    def run(self) -> None:
        asyncio.run(self._loop())

    async def _loop(self) -> None:
        conn = await asyncpg.connect(self.url, server_settings={"application_name": "queenbench-waits"})
        try:
            statement = await conn.prepare(self.QUERY)
            while not self._stop.is_set():
                rows = await statement.fetch()
                with self._lock:
                    self._samples += 1
                    self._counts.update(row[0] for row in rows)
                await asyncio.sleep(self.interval_s)
        finally:
            await conn.close()


class Sql:
    """Synchronous access to the database for the harness (snapshots, set-up), over one asyncpg connection
    driven by a private event loop."""

    def __init__(self, url: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._conn: asyncpg.Connection = self._loop.run_until_complete(
            asyncpg.connect(url, server_settings={"application_name": "queenbench"}))

    def execute(self, query: str, *args: Any) -> None:
        self._loop.run_until_complete(self._conn.execute(query, *args))

    def fetchval(self, query: str, *args: Any) -> Any:
        return self._loop.run_until_complete(self._conn.fetchval(query, *args))

    def fetchrow(self, query: str, *args: Any) -> Any:
        return self._loop.run_until_complete(self._conn.fetchrow(query, *args))

    def fetch(self, query: str, *args: Any) -> list[Any]:
        return list(self._loop.run_until_complete(self._conn.fetch(query, *args)))

    def close(self) -> None:
        self._loop.run_until_complete(self._conn.close())
        self._loop.close()


@dataclass
class PgbenchRun:
    """One pgbench run: its summary, per-transaction latencies (µs, with ``log``), and the CPU seconds
    (user+system) of the pgbench process itself."""

    result: PgbenchResult
    latencies_us: list[float]
    client_cpu_s: float
    output: str


def run_pgbench(pg: PrivatePostgres, script: Path, clients: int, seconds: float, log_dir: Path | None = None,
                threads: int = 2, protocol: str = "prepared") -> PgbenchRun:
    """Run ``pgbench -f script`` against ``pg`` for ``seconds``; raise :class:`BenchError` on failure."""
    args = [str(pg.pgbench), "-h", pg.socket_dir, "-U", "postgres", "-n", "-M", protocol,
            "-c", str(clients), "-j", str(min(threads, clients)), "-T", str(max(1, round(seconds))),
            "-f", str(script)]
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        for old in log_dir.glob("pgbench_log*"):
            old.unlink()
        args += ["-l", "--log-prefix", str(log_dir / "pgbench_log")]
    out_path = script.with_suffix(".out")
    with open(out_path, "w") as out:
        process = subprocess.Popen(args + ["postgres"], stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    output = out_path.read_text()
    if process.returncode != 0:
        raise BenchError(f"pgbench failed ({process.returncode}):\n{output[-2000:]}")
    latencies: list[float] = []
    if log_dir is not None:
        for path in sorted(log_dir.glob("pgbench_log*")):
            with open(path) as lines:
                latencies.extend(pgbench_log_latencies_us(lines))
    return PgbenchRun(parse_pgbench(output), latencies, usage.ru_utime + usage.ru_stime, output)
