"""How the kinds drive their load with wrk: a warm-up, one measured window, or wrk runs in threads for a whole
scenario. Each kind renders its Lua script (:func:`queenpy.bench.wrk.render_script`) and hands it here, so the
order of the measurement (settle, open the window, run wrk, close the window, read the ground truth, check
wrk's counts) is written once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from queenpy.bench.core import Context, Window
from queenpy.bench.wrk import WrkRun, run_wrk

__all__ = ["BackgroundLoad", "Measured", "measured_window", "warm_up"]

T = TypeVar("T")


def warm_up(
    context: Context,
    run: dict[str, Any],
    script: Path,
    connections: int,
    threads: int = 2,
    timeout_s: float = 10.0,
) -> WrkRun | None:
    """wrk with ``script`` for the warm-up (``options.warmup`` seconds; none when 0), its counts checked
    under the label ``warm-up``."""
    if context.options.warmup <= 0:
        return None
    warm = run_wrk(context.broker_url, script, connections, context.options.warmup, threads, timeout_s)
    context.check_wrk(run, warm, "warm-up")
    return warm


@dataclass
class Measured(Generic[T]):
    """One measured wrk window: wrk's run, the ground truth read before and after it, and the window."""

    wrk: WrkRun
    before: T
    after: T
    window: Window


def measured_window(
    context: Context,
    run: dict[str, Any],
    script: Path,
    connections: int,
    read: Callable[[], T],
    threads: int = 2,
    timeout_s: float = 10.0,
    label: str = "measured",
) -> Measured[T]:
    """The measured window of one wrk run of ``options.seconds``: ``read()`` (the ground truth, from
    PostgreSQL) once it has settled, then the window opened, wrk run, the window closed and ``read()`` again;
    wrk's counts are checked under ``label``. The caller fills the run's figures with
    :meth:`Context.fill_window` and checks the ground truth against wrk's counters.

    The window closes before the second read: a read's own time and CPU are not the load's. Read inside the
    window, the scale kind's count of its groups' cursors (10 million rows at one million partitions) took
    about 20 s after a 10 s wrk run and cut the wildcard pop's msg/s to a third (journal, issue 44)."""
    before = context.settled(read)
    window = context.open_window()
    wrk = run_wrk(context.broker_url, script, connections, context.options.seconds, threads, timeout_s)
    context.close_window(window)
    after = read()
    context.check_wrk(run, wrk, label)
    return Measured(wrk, before, after, window)


class BackgroundLoad:
    """wrk runs in threads for the length of a whole scenario (a paced producer and acking consumers
    together), each under a name: :meth:`start` them, measure windows meanwhile, then :meth:`join`.
    A run still going when the scenario is done is ended early by :func:`queenpy.bench.wrk.finish_all`."""

    def __init__(self, context: Context, duration_s: float, timeout_s: float) -> None:
        self.context = context
        self.duration_s = duration_s
        self.timeout_s = timeout_s
        self.results: dict[str, WrkRun] = {}
        self._threads: list[threading.Thread] = []

    def start(self, name: str, script: Path, connections: int, threads: int = 2) -> None:
        def drive() -> None:
            self.results[name] = run_wrk(
                self.context.broker_url, script, connections, self.duration_s, threads, self.timeout_s
            )

        thread = threading.Thread(target=drive, name=f"wrk-{name}")
        thread.start()
        self._threads.append(thread)

    def join(self) -> None:
        for thread in self._threads:
            thread.join()

    def check(self, run: dict[str, Any]) -> None:
        """wrk's counts of every finished run, checked under its name."""
        for name, wrk in self.results.items():
            self.context.check_wrk(run, wrk, name)

    def counter(self, name: str, counter: str) -> int:
        """A counter of the Lua script of run ``name`` (``queued``, ``acked``, ...)."""
        return int(self.results[name].result.counters.get(counter, 0))

    def scaled_to(self, window_s: float) -> list[WrkRun]:
        """The runs with their CPU scaled to a window of ``window_s`` seconds inside them (wrk's CPU is known
        for its whole run only)."""
        return [
            WrkRun(
                w.result, w.wall_s, w.cpu_s * min(1.0, window_s / w.wall_s) if w.wall_s > 0 else 0.0, w.output
            )
            for w in self.results.values()
        ]
