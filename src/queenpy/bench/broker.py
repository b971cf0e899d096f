"""The broker under test: ``python -m queenpy serve`` as a subprocess on the private PostgreSQL.

Configuration passes through: ``workers`` becomes ``NUM_WORKERS``, and ``env`` (``QUEEN_*``, ``DB_POOL_SIZE``,
...) is added to the environment the broker inherits, so two configurations can be compared run by run.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from queenpy.bench.postgres import BenchError

__all__ = ["Broker"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Broker:
    """A running ``queenpy serve``; :attr:`url` is its base URL, :attr:`pid` the supervisor's pid (the
    worker processes are its children)."""

    def __init__(self, database_url: str, workdir: Path, workers: int | None = None,
                 env: dict[str, str] | None = None, python: str = sys.executable) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "broker.log"
        self.env = dict(env or {})
        full_env = {**os.environ, **self.env, "DATABASE_URL": database_url, "HOST": "127.0.0.1",
                    "PORT": str(self.port)}
        if workers:
            full_env["NUM_WORKERS"] = str(workers)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (open while the broker runs; closed in stop())
        self.process = subprocess.Popen([python, "-m", "queenpy", "serve"], env=full_env, stdout=self._log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.process.pid

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Wait for ``GET /health`` to answer 200; raise :class:`BenchError` with the log's tail if the broker
        exits or does not answer in time."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchError(f"the broker exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise BenchError(f"the broker did not answer /health within {timeout_s:.0f}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGTERM)
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
            except ProcessLookupError:
                pass
        self._log.close()
