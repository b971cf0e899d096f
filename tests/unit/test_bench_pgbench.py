"""The suite's pgbench runner (src/queenpy/bench/postgres.py), with a stand-in pgbench: a script that prints
what pgbench prints. No database is involved."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from queenpy.bench.postgres import BenchError, PgbenchProcess

SUMMARY = """\
number of transactions actually processed: 10312
number of failed transactions: 0 (0.000%)
latency average = 14.551 ms
tps = 3436.155877 (without initial connection time)
"""


class StandIn:
    """A BenchServer whose pgbench is a shell script."""

    url = "postgresql://nowhere/db"
    pid = None
    origin = "test"

    def __init__(self, tmp_path: Path, body: str) -> None:
        self.pgbench = tmp_path / "pgbench"
        self.pgbench.write_text("#!/bin/sh\n" + body)
        self.pgbench.chmod(0o755)
        self.pgbench_connection = ["db"]

    def stop(self) -> None:
        pass


def test_a_run_that_ends_while_polled_is_reaped_once_and_still_read(tmp_path: Path) -> None:
    server = StandIn(tmp_path, f"sleep 0.3\ncat <<'X'\n{SUMMARY}X\n")
    process = PgbenchProcess(server, tmp_path / "limit.sql", clients=2, seconds=1)
    assert process.running()
    deadline = time.monotonic() + 10
    while process.running():  # reaps pgbench when it ends; finish() must not wait for it again
        assert time.monotonic() < deadline
        time.sleep(0.05)
    run = process.finish()
    assert (run.result.tps, run.result.transactions) == (pytest.approx(3436.155877), 10312)


def test_a_failed_run_raises_with_its_output(tmp_path: Path) -> None:
    server = StandIn(tmp_path, "echo 'pgbench: error: connection refused'\nexit 1\n")
    process = PgbenchProcess(server, tmp_path / "limit.sql", clients=2, seconds=1)
    with pytest.raises(BenchError, match="connection refused"):
        process.finish()


def test_stop_ends_a_run_and_reaps_it(tmp_path: Path) -> None:
    server = StandIn(tmp_path, "exec sleep 30\n")
    process = PgbenchProcess(server, tmp_path / "limit.sql", clients=2, seconds=30)
    started = time.monotonic()
    process.stop()
    assert not process.running() and time.monotonic() - started < 10
