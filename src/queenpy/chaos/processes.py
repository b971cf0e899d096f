"""The real processes a chaos scenario breaks: a private PostgreSQL that can be stopped and started again,
and ``queenpy serve`` subprocesses that can be killed (one worker, or the whole broker) and restarted on
the same port.

PostgreSQL comes from ``pgserver`` (the binaries ``queenpy serve`` embeds), with its default durability
(fsync on), on a Unix socket in the work directory; ``stop_immediate`` is ``pg_ctl stop -m immediate``
(every backend killed at once, no checkpoint: the crash-like stop), ``start`` brings it back on the same
socket, so the brokers' database URL stays valid.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from queenpy.store.embedded import EmbeddedPostgres

__all__ = ["BrokerProcess", "ChaosError", "ChaosPostgres", "free_port"]


class ChaosError(RuntimeError):
    """A scenario could not run (a process that did not start, a missing tool); the message says why."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ChaosPostgres:
    """A PostgreSQL server in ``workdir/pgdata`` for this run only.

    Attributes:
        url: URL of the ``postgres`` database (``postgresql://postgres:@/postgres?host=<socket dir>``).
    """

    def __init__(self, workdir: Path) -> None:
        from pgserver import _commands  # a queenpy dependency, as EmbeddedPostgres

        self._pg_ctl: Callable[..., str] = _commands.pg_ctl  # type: ignore[attr-defined]
        self.data_dir = workdir / "pgdata"
        self._embedded = EmbeddedPostgres(self.data_dir, cleanup_mode="delete")
        self._server: Any = self._embedded.server
        self.url: str = self._embedded.url
        self.socket_dir = self._embedded.socket_dir
        self.running = True

    def database_url(self, name: str) -> str:
        """URL of database ``name`` on this server."""
        return self.url.replace("/postgres?", f"/{name}?", 1)

    async def create_database(self, name: str) -> str:
        """Create an empty database (the broker migrates it on start); returns its URL."""
        connection = await asyncpg.connect(self.url)
        try:
            await connection.execute(f'CREATE DATABASE "{name}"')  # name is ours, never a user's
        finally:
            await connection.close()
        return self.database_url(name)

    def _ctl(self, args: list[str], timeout_s: float = 60) -> None:
        self._pg_ctl(args, pgdata=self.data_dir, user=self._server.system_user, timeout=timeout_s)

    def stop_immediate(self) -> None:
        """``pg_ctl stop -m immediate``: every PostgreSQL process ends at once, without a checkpoint; the
        next start runs crash recovery from the WAL."""
        self._ctl(["-w", "-m", "immediate", "stop"])
        self.running = False

    def start(self) -> None:
        """Start the server again on the same socket directory; returns once it accepts connections."""
        self._ctl(["-w", "-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", str(self.data_dir / "log"),
                   "start"], timeout_s=120)
        self.running = True

    def stop(self) -> None:
        """Stop the server and remove its data directory."""
        if self.running:
            try:
                self._ctl(["-w", "-m", "fast", "stop"])
            except subprocess.CalledProcessError:
                pass
            self.running = False
        self._server._postmaster_info = None  # stopped here: pgserver must not stop it again
        self._server.cleanup()


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(part) for part in text.split()]


class BrokerProcess:
    """A ``queenpy serve`` subprocess (its own session, so the supervisor and its workers form one process
    group) on a fixed port.

    Args:
        database_url: the database it serves.
        workdir: where its log and its failover buffer directory live.
        name: a label for the log file.
        workers: ``NUM_WORKERS``.
        env: more settings for its environment (``FILE_BUFFER_DIR`` defaults to ``workdir/buffers-<name>``).
        file_size_limit_bytes: ``RLIMIT_FSIZE`` of the broker's processes (a write past it fails with
            ``EFBIG``, as on a full disk); None: no limit.
    """

    def __init__(self, database_url: str, workdir: Path, name: str, workers: int = 2,
                 env: dict[str, str] | None = None, file_size_limit_bytes: int | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.name = name
        self.log_path = workdir / f"broker-{name}.log"
        self.buffer_dir = workdir / f"buffers-{name}"
        self.env = {**os.environ, "DATABASE_URL": database_url, "HOST": "127.0.0.1", "PORT": str(self.port),
                    "NUM_WORKERS": str(workers), "FILE_BUFFER_DIR": str(self.buffer_dir), "LOG_LEVEL": "info",
                    **(env or {})}
        self.workers = workers
        self.file_size_limit_bytes = file_size_limit_bytes
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def _command(self) -> list[str]:
        serve = [sys.executable, "-m", "queenpy", "serve"]
        if self.file_size_limit_bytes is None:
            return serve
        # the limit is set by the new process itself before it becomes the broker (no preexec_fn: the
        # scenarios start brokers from threads)
        limit = self.file_size_limit_bytes
        return [sys.executable, "-c", ("import os, resource, sys; "
                f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
                "os.execv(sys.executable, [sys.executable, '-m', 'queenpy', 'serve'])")]

    def start(self, timeout_s: float = 90) -> None:
        """Start (or restart) the broker and wait until every worker answers ``/health``."""
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self._command(), env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        self.starts += 1
        self.wait_ready(timeout_s)

    def wait_ready(self, timeout_s: float = 90) -> None:
        """Wait until ``/health`` answers and all workers are up; raise :class:`ChaosError` otherwise."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise ChaosError(f"broker {self.name} exited:\n{self.log_tail()}")
            if len(self.worker_pids()) == self.workers:
                try:
                    if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        raise ChaosError(f"broker {self.name} did not become healthy in {timeout_s:.0f} s:\n{self.log_tail()}")

    @property
    def pid(self) -> int:
        if self.process is None:
            raise ChaosError(f"broker {self.name} is not running")
        return self.process.pid

    def worker_pids(self) -> list[int]:
        """Pids of the worker processes (children of the supervisor), sorted."""
        return sorted(_children(self.pid)) if self.process is not None else []

    def kill_worker(self) -> int:
        """SIGKILL one worker process (the supervisor restarts it); returns its pid."""
        pids = self.worker_pids()
        if not pids:
            raise ChaosError(f"broker {self.name} has no worker to kill")
        os.kill(pids[0], signal.SIGKILL)
        return pids[0]

    def kill(self) -> None:
        """SIGKILL the supervisor and every worker at once (the whole process group)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s."""
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        except ProcessLookupError:
            pass

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])
