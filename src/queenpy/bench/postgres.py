"""The PostgreSQL of a benchmark run (private or the user's), a small synchronous SQL helper, and pgbench.

By default the server comes from ``pgserver`` (the same binaries as ``queenpy serve``'s embedded default),
with the embedded default's settings (fsync on, synchronous_commit on, shared_buffers 128MB), listening on a
Unix socket in the work directory (:class:`PrivatePostgres`, the process harness's
:class:`queenpy.harness.PrivatePostgres`). With ``--database-url`` the suite runs on a server the user
started and tuned (:class:`ExternalPostgres`); its CPU is read from /proc when it runs on this machine.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import asyncpg

from queenpy.bench.parsing import PgbenchResult, parse_pgbench, pgbench_log_latencies_us
from queenpy.bench.procfs import SamplerThread, local_postmaster
from queenpy.harness import PrivatePostgres as HarnessPostgres
from queenpy.store.embedded import postgres_program

__all__ = [
    "BenchError",
    "BenchServer",
    "ExternalPostgres",
    "PgbenchProcess",
    "PgbenchRun",
    "PrivatePostgres",
    "Sql",
    "local_postmaster_of",
    "postgres_process_kind",
    "wait_for_clients",
]

# PostgreSQL's auxiliary processes, by the title they set (``postgres: <title>``); anything else is a backend
_AUXILIARY = (
    "autovacuum worker",
    "autovacuum launcher",
    "walwriter",
    "checkpointer",
    "background writer",
    "logical replication launcher",
    "archiver",
    "walsender",
)


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
    rest = title[len("postgres: ") :]
    return next((kind for kind in _AUXILIARY if rest.startswith(kind)), "backend")


class BenchError(RuntimeError):
    """A benchmark could not run (missing tool, server that did not start, ...); the message says why."""


class BenchServer(Protocol):
    """What the suite needs of a PostgreSQL server: its URL; the pid of its postmaster on this machine
    (None when its processes cannot be seen here: then its CPU is not measured); the pgbench binary and the
    arguments that connect pgbench to the same database as the broker; where it comes from."""

    url: str
    pid: int | None
    pgbench: Path
    pgbench_connection: list[str]  # pgbench options, then the database name or URL last
    origin: str

    def stop(self) -> None: ...


class PrivatePostgres:
    """A PostgreSQL server in ``workdir/pgdata`` for this run only; removed by :meth:`stop`."""

    origin = "private (pgserver, the embedded default's settings)"

    def __init__(self, workdir: Path) -> None:
        found = postgres_program("pgbench")
        if found is None:
            raise BenchError("pgbench not found in the pgserver wheel nor on PATH")
        self.pgbench = found
        self.data_dir = workdir / "pgdata"
        self._server = HarnessPostgres(self.data_dir)
        self.url: str = self._server.url
        self.socket_dir = self._server.socket_dir
        self.pid: int | None = self._server.pid
        self.pgbench_connection = ["-h", self.socket_dir, "-U", "postgres", "postgres"]

    def stop(self) -> None:
        self._server.stop()


class ExternalPostgres:
    """A server the user runs and tuned, reached by ``url`` (``--database-url``). The suite writes into that
    database (the broker migrates it; the suite adds queues and a ``bench`` schema), so give it a scratch
    database. :meth:`stop` leaves the server alone.

    Its CPU is measured when its processes are on this machine (:func:`procfs.local_postmaster`); otherwise
    :attr:`pid` is None. pgbench is the one on PATH (the user's installation), else pgserver's.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        found = postgres_program("pgbench", path_first=True)
        if found is None:
            raise BenchError("pgbench not found on PATH nor in the pgserver wheel")
        self.pgbench = found
        self.pgbench_connection = [url]
        try:
            sql = Sql(url)
        except (OSError, asyncpg.PostgresError) as exc:
            raise BenchError(f"cannot connect to {_redacted(url)}: {exc}") from exc
        try:
            self.pid = local_postmaster_of(sql)
            row = sql.fetchrow("SELECT host(inet_server_addr()), current_setting('port'), current_database()")
        finally:
            sql.close()
        self.origin = f"external ({row[0] or 'Unix socket'}:{row[1]}/{row[2]}; " + (
            "its processes are on this machine)"
            if self.pid
            else "its processes are not visible here, so its CPU is not measured)"
        )

    def stop(self) -> None:
        """Nothing to stop: the server is the user's."""


def local_postmaster_of(sql: Sql) -> int | None:
    """The pid of the postmaster serving ``sql``'s connection when its processes are on this machine, else
    None (:func:`procfs.local_postmaster`, asked while that connection's backend is alive)."""
    row = sql.fetchrow("SELECT pg_backend_pid(), extract(epoch FROM pg_postmaster_start_time())::float8")
    return local_postmaster(int(row[0]), float(row[1]))


def _redacted(url: str) -> str:
    """``url`` without its password."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


class WaitSampler(SamplerThread):
    """What PostgreSQL's client backends are doing, sampled from ``pg_stat_activity`` every ``interval_s``
    in a thread (own connection): per active backend either ``CPU`` (no wait event) or
    ``<wait_event_type>:<wait_event>`` (``IO:WALSync`` is fsync of the WAL, ``Lock:transactionid`` a row
    lock held by another transaction, ``LWLock:WALWrite`` waiting for another backend's WAL flush, ...).

    ``mark()`` starts a window; ``shares()`` gives each state's share of the active-backend samples since,
    plus ``active_backends``, the mean number of active backends per sample.
    """

    QUERY = (
        "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity "
        "WHERE backend_type = 'client backend' AND state = 'active' AND pid <> pg_backend_pid()"
    )

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


#: an operator's pause of the broker's jobs (``queen.services_paused_v2``): every job (true), none (false), or
#: the jobs named (a list)
PAUSE_SERVICES = (
    "INSERT INTO queen.system_state (key, value) "
    "VALUES ('services', jsonb_build_object('paused', $1::jsonb)) "
    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()"
)


class Sql:
    """Synchronous access to the database for the harness (snapshots, set-up), over one asyncpg connection
    driven by a private event loop."""

    def __init__(self, url: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._conn: asyncpg.Connection = self._loop.run_until_complete(
            asyncpg.connect(url, server_settings={"application_name": "queenbench"})
        )

    def execute(self, query: str, *args: Any) -> None:
        self._loop.run_until_complete(self._conn.execute(query, *args))

    def fetchval(self, query: str, *args: Any) -> Any:
        return self._loop.run_until_complete(self._conn.fetchval(query, *args))

    def fetchrow(self, query: str, *args: Any) -> Any:
        return self._loop.run_until_complete(self._conn.fetchrow(query, *args))

    def fetch(self, query: str, *args: Any) -> list[Any]:
        return list(self._loop.run_until_complete(self._conn.fetch(query, *args)))

    def pause_services(self, paused: bool | list[str]) -> None:
        """Pause the broker's jobs everywhere (True), none (False) or the jobs named, as an operator does
        (:data:`PAUSE_SERVICES`): a run under way holds before its next step."""
        self.execute(PAUSE_SERVICES, json.dumps(paused))

    def close(self) -> None:
        self._loop.run_until_complete(self._conn.close())
        self._loop.close()


@dataclass
class PgbenchRun:
    """One pgbench run: its summary, per-transaction latencies (µs, with ``log``; only those that ended in
    the measured window), and the CPU seconds (user+system) of the pgbench process itself."""

    result: PgbenchResult
    latencies_us: list[float]
    client_cpu_s: float
    output: str


class PgbenchProcess:
    """pgbench ``-f script`` against ``server`` for ``seconds``, started now and running in the background,
    so the caller can measure a window inside the run (after the connections are made and a warm-up), as it
    does for the broker. :meth:`finish` waits for it and raises :class:`BenchError` on failure."""

    def __init__(
        self,
        server: BenchServer,
        script: Path,
        clients: int,
        seconds: int,
        log_dir: Path | None = None,
        threads: int = 2,
        protocol: str = "prepared",
    ) -> None:
        args = [
            str(server.pgbench),
            "-n",
            "-M",
            protocol,
            "-c",
            str(clients),
            "-j",
            str(min(threads, clients)),
            "-T",
            str(max(1, seconds)),
            "-f",
            str(script),
        ]
        self.log_dir = log_dir
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            for old in log_dir.glob("pgbench_log*"):
                old.unlink()
            args += ["-l", "--log-prefix", str(log_dir / "pgbench_log")]
        self.out_path = script.with_suffix(".out")
        self._ended: tuple[int, Any] | None = None  # (wait status, rusage) once reaped
        with open(self.out_path, "w") as out:
            self.process = subprocess.Popen(
                args + server.pgbench_connection, stdout=out, stderr=subprocess.STDOUT
            )

    def running(self) -> bool:
        """Whether pgbench still runs (reaped here when it has ended, its status and CPU kept)."""
        if self._ended is None:
            pid, status, usage = os.wait4(self.process.pid, os.WNOHANG)
            if pid:
                self._ended = (status, usage)
                self.process.returncode = os.waitstatus_to_exitcode(status)
        return self._ended is None

    def stop(self) -> None:
        """End pgbench now (the harness failed) and reap it."""
        if self.running():
            self.process.kill()
            self._reap()

    def _reap(self) -> tuple[int, Any]:
        if self._ended is None:
            _, status, usage = os.wait4(self.process.pid, 0)
            self._ended = (status, usage)
        self.process.returncode = os.waitstatus_to_exitcode(self._ended[0])
        return self._ended

    def finish(self, window: tuple[float, float] | None = None) -> PgbenchRun:
        """Wait for pgbench to end; ``window`` (epoch seconds) selects the logged latencies."""
        _, usage = self._reap()
        output = self.out_path.read_text()
        if self.process.returncode != 0:
            raise BenchError(f"pgbench failed ({self.process.returncode}):\n{output[-2000:]}")
        latencies: list[float] = []
        if self.log_dir is not None:
            for path in sorted(self.log_dir.glob("pgbench_log*")):
                with open(path) as lines:
                    latencies.extend(pgbench_log_latencies_us(lines, window))
        return PgbenchRun(parse_pgbench(output), latencies, usage.ru_utime + usage.ru_stime, output)


Q_PGBENCH_CLIENTS = (
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench' "
    "AND datname = current_database()"
)


def wait_for_clients(sql: Sql, clients: int, timeout_s: float = 30.0) -> None:
    """Wait until ``clients`` pgbench connections are open (pgbench connects them all before it starts)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if int(sql.fetchval(Q_PGBENCH_CLIENTS)) >= clients:
            return
        time.sleep(0.05)
