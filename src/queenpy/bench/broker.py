"""The broker under test: ``python -m queenpy serve`` as a subprocess on the run's PostgreSQL, started by the
process harness (:class:`queenpy.harness.BrokerProcess`).

Configuration passes through: ``workers`` becomes ``NUM_WORKERS``, and ``env`` (``QUEEN_*``, ``DB_POOL_SIZE``,
...) is added to the environment the broker inherits, so two configurations can be compared run by run.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from queenpy.bench.postgres import BenchError
from queenpy.harness import BrokerProcess, HarnessError

__all__ = ["Broker"]


class Broker(BrokerProcess):
    """A running ``queenpy serve`` (started here; :meth:`wait_ready` waits for it); :attr:`url` is its base
    URL, :attr:`pid` the supervisor's pid (the worker processes are its children), :attr:`env` the settings
    the run gave it (recorded in the run's document). Its log is ``workdir/broker.log``."""

    def __init__(
        self,
        database_url: str,
        workdir: Path,
        workers: int | None = None,
        env: dict[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        super().__init__(
            database_url, workdir / "broker.log", workers=workers or None, env=env, python=python
        )
        self.launch()

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Wait for ``GET /health`` to answer 200; raise :class:`BenchError` with the log's tail if the broker
        exits or does not answer in time."""
        try:
            super().wait_ready(timeout_s)
        except HarnessError as exc:
            raise BenchError(str(exc)) from exc

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0, *, group: bool = True) -> int | None:
        """SIGTERM to every process of the broker, SIGKILL after ``timeout_s``."""
        return super().stop(sig, timeout_s, group=group)
