"""The real processes a chaos scenario breaks, from the process harness (:mod:`queenpy.harness`): the run's
private PostgreSQL (:class:`queenpy.harness.PrivatePostgres`, the embedded default's settings and durability,
fsync on), which a scenario stops like a crash and starts again on the same socket, and ``queenpy serve``
subprocesses (:class:`BrokerProcess`) that a scenario kills (one worker, or the whole broker) and restarts on
the same port.
"""

from __future__ import annotations

import signal
from pathlib import Path

from queenpy import harness

__all__ = ["BrokerProcess", "ChaosError"]


class ChaosError(RuntimeError):
    """A scenario could not run (a process that did not start, a missing tool); the message says why."""


class BrokerProcess(harness.BrokerProcess):
    """A scenario's ``queenpy serve``: its log is ``workdir/broker-<name>.log``, its failover buffer
    ``workdir/buffers-<name>`` (:attr:`buffer_dir`), it logs at ``info``; a stop signals every process of it.

    Args:
        database_url: the database it serves.
        workdir: where its log and its failover buffer directory live.
        name: a label for the log file.
        workers: ``NUM_WORKERS``.
        env: more settings for its environment (``FILE_BUFFER_DIR`` defaults to ``workdir/buffers-<name>``).
        file_size_limit_bytes: ``RLIMIT_FSIZE`` of the broker's processes (a write past it fails with
            ``EFBIG``, as on a full disk); None: no limit.
    """

    def __init__(
        self,
        database_url: str,
        workdir: Path,
        name: str,
        workers: int = 2,
        env: dict[str, str] | None = None,
        file_size_limit_bytes: int | None = None,
    ) -> None:
        self.name = name
        self.buffer_dir = workdir / f"buffers-{name}"
        super().__init__(
            database_url,
            workdir / f"broker-{name}.log",
            workers=workers,
            env={"FILE_BUFFER_DIR": str(self.buffer_dir), "LOG_LEVEL": "info", **(env or {})},
            file_size_limit_bytes=file_size_limit_bytes,
        )

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Wait until ``/health`` answers and all workers are up; raise :class:`ChaosError` otherwise."""
        try:
            super().wait_ready(timeout_s)
        except harness.HarnessError as exc:
            raise ChaosError(f"broker {self.name}: {exc}") from exc

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20.0, *, group: bool = True) -> int | None:
        """SIGTERM to every process of the broker, SIGKILL after ``timeout_s``."""
        return super().stop(sig, timeout_s, group=group)
