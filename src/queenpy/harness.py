"""The process harness: what the tests, ``queenpy bench``, ``queenpy chaos`` and the scripts run around a
broker, written once (STYLE.md item 25; psycopg's test fixtures are the model).

- :func:`free_port` / :func:`bound_socket`: a TCP port on loopback that nobody listens on.
- :class:`PrivatePostgres`: a PostgreSQL server of the caller's own, on ``pgserver``'s binaries (those
  ``queenpy serve`` embeds, :mod:`queenpy.store.embedded`), in a data directory of the caller's, on a Unix
  socket only; it can be stopped like a crash (``pg_ctl stop -m immediate``) and started again on the same
  socket, and it removes its data directory when stopped.
- :class:`StandbyPostgres`: a streaming-replication standby of a :class:`PrivatePostgres` that listens on a
  loopback TCP port (``pg_basebackup -R``), synchronous or not, which can be promoted (``pg_ctl promote``);
  with :meth:`PrivatePostgres.kill_postmaster` (``kill -9`` of the primary's postmaster) it is the primary
  failover of ``queenpy chaos``.
- :class:`BrokerProcess`: ``python -m queenpy serve`` as a subprocess in its own session (supervisor and
  workers form one process group) on a fixed port, started with a deadline on ``GET /health``, stopped with
  a signal and a deadline, killed as a whole or one worker at a time, restarted on the same port.

It drives processes and speaks HTTP and SQL to them; it imports no broker code but the embedded PostgreSQL it
starts (the import-linter contracts in ``pyproject.toml`` hold it to that, and keep the product from
importing it). Errors: :class:`HarnessError`
when a process cannot start, exits or misses its deadline; the message carries the tail of its log.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx
import psutil

from queenpy.store.embedded import EMBEDDED_SETTINGS, EmbeddedPostgres, pg_ctl, postgres_program

__all__ = ["BrokerProcess", "HarnessError", "PrivatePostgres", "StandbyPostgres", "bound_socket", "free_port"]

LOOPBACK = "127.0.0.1"


class HarnessError(RuntimeError):
    """A process of the harness could not start, exited, or missed its deadline; the message says which and
    ends with the tail of its log."""


def bound_socket(host: str = LOOPBACK) -> socket.socket:
    """A TCP socket bound to a port the kernel picked on ``host``, not listening yet. Hand it to a server that
    accepts sockets (``uvicorn.Server.serve(sockets=[...])``): the port is then never free for anyone else.
    The caller closes it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
    except OSError:
        sock.close()
        raise
    return sock


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on ``host`` that was free a moment ago (bound by the kernel's choice, then released).
    Another process may take it before the caller binds it; where a socket can be handed over, use
    :func:`bound_socket`. Nothing listens on it, so ``http://127.0.0.1:<port>`` is also a refused address."""
    with bound_socket(host) as sock:
        return int(sock.getsockname()[1])


class _PostgresServer:
    """What a primary and a standby share: the postmaster's pid, psql, pg_ctl as pgserver's system user, and
    the crash-like kill. Subclasses set ``data_dir``, ``url``, ``system_user`` and ``running``."""

    data_dir: Path
    url: str
    system_user: str | None
    running: bool
    _orphans: list[int]

    @property
    def pid(self) -> int | None:
        """The postmaster's pid (first line of ``postmaster.pid``; a new one after :meth:`start`), None when
        the server is not running."""
        if not self.running:
            return None
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def database_url(self, name: str) -> str:
        """URL of database ``name`` on this server."""
        return self.url.replace("/postgres?", f"/{name}?", 1)

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run ``sql`` with ``psql`` on ``database`` (stops at the first error); returns psql's unaligned,
        tuples-only output. Raises :class:`HarnessError` on failure."""
        program = postgres_program("psql")
        if program is None:
            raise HarnessError("psql not found in the pgserver wheel nor on PATH")
        done = subprocess.run(
            [
                str(program),
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                self.database_url(database),
                "-c",
                sql,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if done.returncode != 0:
            raise HarnessError(f"psql failed ({done.returncode}) on {sql!r}: {done.stderr.strip()}")
        return done.stdout

    def _pg_ctl(self, args: list[str], timeout_s: float = 60) -> None:
        pg_ctl(self.data_dir, self.system_user, args, timeout_s)

    def _stop_fast(self) -> None:
        """``pg_ctl stop -m fast``; when pg_ctl cannot (its user lost access to the directory, say), SIGKILL
        of the postmaster and its children, so that no server outlives its owner."""
        try:
            self._pg_ctl(["-w", "-m", "fast", "stop"])
        except subprocess.CalledProcessError:
            if self.pid is not None:
                with contextlib.suppress(ProcessLookupError, psutil.NoSuchProcess):
                    self.kill_postmaster()
        self.running = False

    def kill_postmaster(self) -> int:
        """``kill -9`` of the postmaster alone, as when its machine dies: no shutdown, no checkpoint, no last
        WAL sent; its backends notice and exit by themselves (:meth:`stop` ends any left). Returns its pid.
        Raises :class:`HarnessError` when it does not run."""
        pid = self.pid
        if pid is None:
            raise HarnessError(f"no postmaster runs in {self.data_dir}")
        try:
            self._orphans = [child.pid for child in psutil.Process(pid).children()]
        except psutil.NoSuchProcess:
            self._orphans = []
        os.kill(pid, signal.SIGKILL)
        self.running = False
        return pid

    def _end_orphans(self) -> None:
        for pid in self._orphans:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._orphans = []


class PrivatePostgres(_PostgresServer):
    """A PostgreSQL server owned by the caller: ``pgserver``'s binaries, data in ``data_dir`` (created by
    initdb when empty), listening on a Unix socket only (no TCP port), removed with its data by :meth:`stop`.

    Args:
        data_dir: its data directory (created if missing).
        settings: server settings applied with ``ALTER SYSTEM`` and a reload once it runs (names and values
            are the caller's, never a user's). The default is the embedded broker's
            (:data:`queenpy.store.embedded.EMBEDDED_SETTINGS`, durability on); the tests turn fsync off.
        port: also listen on this TCP port of 127.0.0.1 (a primary that a :class:`StandbyPostgres` streams
            from, and that brokers reach by a multi-host URL); the server is restarted once to listen there.
            None: the Unix socket only.

    Attributes:
        url: URL of its ``postgres`` database, ``postgresql://postgres:@/postgres?host=<socket dir>``, or
            ``postgresql://postgres@127.0.0.1:<port>/postgres?sslmode=disable`` with a ``port``.
        socket_dir: the directory of its Unix socket (the URL's ``host``).
        running: False between :meth:`stop_immediate` and :meth:`start`, and after :meth:`stop`.

    Raises:
        subprocess.CalledProcessError: initdb or the start failed (from pgserver).
    """

    def __init__(
        self, data_dir: Path, settings: Mapping[str, str] = EMBEDDED_SETTINGS, port: int | None = None
    ) -> None:
        self.data_dir = data_dir
        self._embedded = EmbeddedPostgres(data_dir, cleanup_mode="delete", settings=settings)
        self._server: Any = self._embedded.server
        self.system_user: str | None = self._server.system_user
        self.url: str = self._embedded.url
        self.socket_dir: str = self._embedded.socket_dir
        self.port = port
        self.running = True
        self._orphans: list[int] = []  # backends of a killed postmaster, ended by stop()
        if port is not None:
            self._pg_ctl(["-w", "-m", "fast", "stop"])
            self.running = False
            self.start()
            self.url = f"postgresql://postgres@{LOOPBACK}:{port}/postgres?sslmode=disable"

    def create_database(self, name: str | None = None, template: str | None = None) -> str:
        """``CREATE DATABASE name [TEMPLATE template]`` (an empty database unless ``template``; the broker
        migrates an empty one on start); ``name`` defaults to ``db_<16 hex digits>``. Returns the name.

        Run with PostgreSQL's own ``psql``, so it may be called from any thread, also one that runs an event
        loop. Names are the caller's, never a user's. Raises :class:`HarnessError` with psql's message."""
        name = name or f"db_{uuid.uuid4().hex[:16]}"
        statement = f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")
        self.psql(statement)
        return name

    def stop_immediate(self) -> None:
        """``pg_ctl stop -m immediate``: every PostgreSQL process ends at once, without a checkpoint (the
        crash-like stop); the next :meth:`start` runs crash recovery from the WAL."""
        self._pg_ctl(["-w", "-m", "immediate", "stop"])
        self.running = False

    def _listen_options(self) -> list[str]:
        host = LOOPBACK if self.port is not None else ""
        options = ["-o", f'-h "{host}"', "-o", f"-k {self.socket_dir}"]
        return options + (["-o", f"-p {self.port}"] if self.port is not None else [])

    def start(self) -> None:
        """Start the server again on the same socket directory (the URLs stay valid); returns once it accepts
        connections. Raises ``subprocess.CalledProcessError`` when pg_ctl fails (its log:
        ``data_dir/log``)."""
        self._pg_ctl(
            ["-w", *self._listen_options(), "-l", str(self.data_dir / "log"), "start"], timeout_s=120
        )
        self.running = True

    def stop(self) -> None:
        """Stop the server (``pg_ctl stop -m fast``) and remove its data directory. Idempotent."""
        if self.running:
            self._stop_fast()
        self._end_orphans()
        # stopped here (perhaps after a restart pgserver does not know of): pgserver only removes the data
        self._server._postmaster_info = None
        self._server.cleanup()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()


class StandbyPostgres(_PostgresServer):
    """A streaming-replication standby of ``primary`` on 127.0.0.1:``port``: ``pg_basebackup -R`` copies the
    primary's data directory and writes ``primary_conninfo`` and ``standby.signal``; it reports itself to the
    primary as ``name`` (``cluster_name``, the ``application_name`` of its WAL receiver), the name that
    ``synchronous_standby_names`` lists. Same binaries and system user as the primary (pgserver's).

    Args:
        primary: a running :class:`PrivatePostgres` with a TCP ``port`` (replication connections are trusted
            on loopback by pgserver's initdb).
        data_dir: its data directory (must not exist yet; removed by :meth:`stop`).
        port: its TCP port on 127.0.0.1.
        name: its ``cluster_name``.
        synchronous: list it in the primary's ``synchronous_standby_names`` (``synchronous_commit`` stays
            ``on``: a commit returns once this standby has flushed its WAL); False: asynchronous.

    Attributes:
        url: ``postgresql://postgres@127.0.0.1:<port>/postgres?sslmode=disable``.

    Raises:
        HarnessError: the copy failed, or it did not start streaming within two minutes.
    """

    def __init__(
        self,
        primary: PrivatePostgres,
        data_dir: Path,
        port: int,
        name: str = "standby1",
        synchronous: bool = True,
    ) -> None:
        if primary.port is None:
            raise HarnessError("a standby streams over TCP: start the primary with a port")
        from pgserver import _commands, utils

        self.primary = primary
        self.data_dir = data_dir
        self.port = port
        self.name = name
        self.system_user = primary.system_user
        self.url = f"postgresql://postgres@{LOOPBACK}:{port}/postgres?sslmode=disable"
        self.running = False
        self._orphans: list[int] = []
        data_dir.mkdir(parents=True, mode=0o700)
        utils.ensure_prefix_permissions(data_dir)
        if self.system_user is not None:
            import pwd

            entry = pwd.getpwnam(self.system_user)
            os.chown(data_dir, entry.pw_uid, entry.pw_gid)
        try:
            _commands.pg_basebackup(  # type: ignore[attr-defined]
                [
                    "-D",
                    str(data_dir),
                    "-R",
                    "-X",
                    "stream",
                    "-c",
                    "fast",
                    "-h",
                    LOOPBACK,
                    "-p",
                    str(primary.port),
                    "-U",
                    "postgres",
                ],
                user=self.system_user,
                timeout=300,
            )
        except subprocess.CalledProcessError as exc:
            raise HarnessError(f"pg_basebackup failed: {exc}") from exc
        with open(data_dir / "postgresql.auto.conf", "a") as conf:
            conf.write(f"cluster_name = '{name}'\nhot_standby = on\n")
        self.start()
        try:
            primary.psql(f"ALTER SYSTEM SET synchronous_standby_names = '{name if synchronous else ''}'")
            primary.psql("SELECT pg_reload_conf()")
            wanted = "sync" if synchronous else "async"
            deadline = time.monotonic() + 120
            while (
                primary.psql(
                    f"SELECT sync_state FROM pg_stat_replication WHERE application_name = '{name}'"
                ).strip()
                != wanted
            ):
                if time.monotonic() > deadline:
                    raise HarnessError(
                        f"standby {name} is not streaming ({wanted}) after 120 s; {data_dir / 'log'}"
                    )
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise

    def start(self) -> None:
        """Start it (a standby until promoted); returns once it accepts connections."""
        self._pg_ctl(
            [
                "-w",
                "-o",
                f'-h "{LOOPBACK}"',
                "-o",
                f"-p {self.port}",
                "-o",
                f"-k {self.data_dir}",
                "-l",
                str(self.data_dir / "log"),
                "start",
            ],
            timeout_s=120,
        )
        self.running = True

    def promote(self) -> None:
        """``pg_ctl promote``: it ends recovery and accepts writes; returns once it does. Raises
        ``subprocess.CalledProcessError`` when pg_ctl fails."""
        self._pg_ctl(["-w", "promote"], timeout_s=120)

    def stop(self) -> None:
        """Stop it (``pg_ctl stop -m fast``) and remove its data directory. Idempotent."""
        if self.running:
            self._stop_fast()
        self._end_orphans()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()


class BrokerProcess:
    """``python -m queenpy serve`` as a subprocess on 127.0.0.1, in its own session: the supervisor and its
    worker processes are one process group. Created stopped; :meth:`start` runs it (again after a stop or a
    kill, on the same port) and waits until it is healthy.

    Args:
        database_url: the database it serves (``DATABASE_URL``); None: the broker's embedded PostgreSQL
            (``DATABASE_URL`` and ``PG_*`` are removed from the inherited environment; name its data
            directory with ``QUEENPY_DATA_DIR`` in ``env``).
        log_path: its stdout and stderr, appended to on every start.
        workers: ``NUM_WORKERS``; None: the broker's default (one per core), and the health wait does not
            count workers.
        env: more settings (Queen's variable names: ``FILE_BUFFER_DIR``, ``JWT_ENABLED``, ...), over the
            environment this process inherited; they win over everything else.
        port: its TCP port; None: :func:`free_port`.
        file_size_limit_bytes: ``RLIMIT_FSIZE`` of its processes (a write past it fails with ``EFBIG``, as on
            a full disk); None: no limit.
        python: the interpreter that runs it.

    Attributes:
        url: ``http://127.0.0.1:<port>``.
        env: the settings given in ``env`` (what this broker's configuration adds; no inherited variable).
        environment: the whole environment it runs with.
        process: the supervisor's ``Popen``, None before the first start.
        starts: how many times it was started.
    """

    def __init__(
        self,
        database_url: str | None,
        log_path: Path,
        *,
        workers: int | None = 2,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        file_size_limit_bytes: int | None = None,
        python: str = sys.executable,
    ) -> None:
        self.database_url = database_url
        self.log_path = log_path
        self.workers = workers
        self.port = port or free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.env = dict(env or {})
        inherited = {
            key: value
            for key, value in os.environ.items()
            if database_url is not None or not (key == "DATABASE_URL" or key.startswith("PG_"))
        }
        self.environment = {**inherited, "HOST": LOOPBACK, "PORT": str(self.port)}
        if database_url is not None:
            self.environment["DATABASE_URL"] = database_url
        if workers is not None:
            self.environment["NUM_WORKERS"] = str(workers)
        self.environment.update(self.env)
        self.file_size_limit_bytes = file_size_limit_bytes
        self.python = python
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def _command(self) -> list[str]:
        serve = [self.python, "-m", "queenpy", "serve"]
        if self.file_size_limit_bytes is None:
            return serve
        # the new process sets the limit itself before it becomes the broker (no preexec_fn: brokers are
        # started from threads)
        limit = self.file_size_limit_bytes
        return [
            self.python,
            "-c",
            (
                "import os, resource, sys; "
                f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
                f"os.execv(sys.executable, {serve!r})"
            ),
        ]

    def launch(self) -> None:
        """Start the process and return at once (:meth:`wait_ready` waits for it)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                self._command(),
                env=self.environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1

    def start(self, timeout_s: float = 90.0) -> Self:
        """:meth:`launch`, then :meth:`wait_ready`; returns self. Raises :class:`HarnessError`."""
        self.launch()
        self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Poll every 0.1 s until all ``workers`` worker processes run and ``GET /health`` answers 200 (the
        database is reachable). Raises :class:`HarnessError` with the log's tail when the broker exits or
        ``timeout_s`` seconds pass first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise HarnessError(
                    f"the broker on {self.url} exited ({code}); {self.log_path}:\n{self.log_tail()}"
                )
            if self.workers is None or len(self.worker_pids()) == self.workers:
                try:
                    if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        raise HarnessError(
            f"the broker on {self.url} did not become healthy in {timeout_s:.0f} s; "
            f"{self.log_path}:\n{self.log_tail()}"
        )

    @property
    def pid(self) -> int:
        """The supervisor's pid (the process group's id). Raises :class:`HarnessError` before a start."""
        if self.process is None:
            raise HarnessError(f"the broker on {self.url} was never started")
        return self.process.pid

    def running(self) -> bool:
        """Whether the supervisor runs."""
        return self.process is not None and self.process.poll() is None

    def worker_pids(self) -> list[int]:
        """Pids of the worker processes (the supervisor's children), sorted; [] when it does not run."""
        if self.process is None:
            return []
        try:
            return sorted(child.pid for child in psutil.Process(self.process.pid).children())
        except psutil.NoSuchProcess:
            return []

    def kill_worker(self) -> int:
        """SIGKILL the worker with the lowest pid (the supervisor starts another); returns its pid. Raises
        :class:`HarnessError` when there is none."""
        pids = self.worker_pids()
        if not pids:
            raise HarnessError(f"the broker on {self.url} has no worker to kill")
        os.kill(pids[0], signal.SIGKILL)
        return pids[0]

    def kill(self) -> None:
        """SIGKILL the supervisor and every worker at once (the whole process group), and reap it."""
        if self.running():
            assert self.process is not None
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20.0, *, group: bool = False) -> int | None:
        """Send ``sig`` to the supervisor (it stops its workers, and its embedded PostgreSQL, as on a user's
        ``kill``) or, with ``group``, to every process of the broker at once; SIGKILL the group if it has not
        exited after ``timeout_s`` seconds. Returns the supervisor's exit status (negative: killed by that
        signal), None if it never ran."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            try:
                if group:
                    os.killpg(self.process.pid, sig)
                else:
                    self.process.send_signal(sig)
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
            except ProcessLookupError:
                self.process.wait(timeout=30)
        return self.process.returncode

    def log_text(self) -> str:
        """Everything the broker wrote so far ("" before it did)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of its log."""
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __enter__(self) -> Self:
        return self if self.running() else self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
