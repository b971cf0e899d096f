"""The measured window of a wrk run (``queenpy.bench.load.measured_window``) is the run: the ground truth read
after it is not timed in it. The scale kind's count of its groups' cursors took about 20 s at one million
partitions; read inside the window, it cut the wildcard pop's msg/s to a third (journal, issue 44). Without
wrk, a broker or PostgreSQL: wrk's run and the reads are stand-ins whose times the test sets."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from queenpy.bench import load, procfs
from queenpy.bench.core import CpuMark, Window
from queenpy.bench.kinds import scale

WRK_S = 0.2
READ_S = 0.6


def _mark() -> CpuMark:
    return CpuMark(time.monotonic(), 0.0, None, 0.0, None, None)  # type: ignore[arg-type]


def test_the_window_is_the_wrk_run_not_the_read_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[float] = []

    def read() -> int:
        reads.append(time.monotonic())
        time.sleep(READ_S)  # a slow count, as the cursors of 10 million rows
        return len(reads)

    def run_wrk(*args: Any) -> Any:
        time.sleep(WRK_S)
        return SimpleNamespace(result=SimpleNamespace(counters={}))

    def close_window(window: Window) -> Window:
        window.end = _mark()
        return window

    context: Any = SimpleNamespace(
        broker_url="http://127.0.0.1:1",
        options=SimpleNamespace(seconds=WRK_S),
        settled=lambda read_: read_(),
        open_window=lambda: Window(_mark(), 0),
        close_window=close_window,
        check_wrk=lambda run, wrk, label: None,
    )
    monkeypatch.setattr(load, "run_wrk", run_wrk)
    measured = load.measured_window(context, {}, Path("script.lua"), 50, read)
    assert (measured.before, measured.after) == (1, 2)
    assert WRK_S <= measured.window.seconds < WRK_S + READ_S / 2, measured.window.seconds


def test_a_window_reports_the_machine_block_io_between_its_marks(tmp_path: Path) -> None:
    """The scale kind's per-window I/O (``scale._io_split``) from the machine's own counters: 32 MiB written
    and synced between the marks show up as at least that many MB written, the reads and the I/O wait as
    counts that do not go back."""

    def mark() -> CpuMark:
        machine, io = procfs.machine_cpu(), procfs.machine_io()
        return CpuMark(time.monotonic(), 0.0, machine, 0.0, None, None, io)  # type: ignore[arg-type]

    window = Window(mark(), 0)
    with (tmp_path / "blocks").open("wb") as out:
        out.write(bytes(32 << 20))
        out.flush()
        os.fsync(out.fileno())
    window.end = mark()
    io = scale._io_split(window)
    assert io["host_written_mb"] >= 32, io
    assert io["host_read_mb"] >= 0 and 0 <= io["iowait_share"] <= 1, io
    # no counters (a window of runs before, or marks made without them): nothing to report
    bare = CpuMark(0.0, 0.0, procfs.MachineCpu(0, 1), 0.0, None, None)  # type: ignore[arg-type]
    assert scale._io_split(Window(bare, 0)) == {}
