"""CPU time and memory of process trees, and of the whole machine, read from /proc (Linux only).

CPU of a tree = utime+stime of every live process in it, plus the cutime+cstime of each (children that
exited and were waited for: PostgreSQL backends that ended, reaped by the postmaster). Every process is
then counted exactly once, alive or gone, so the difference of two snapshots is the CPU the tree used in
between. Memory = sum of the resident set sizes of the tree's processes (shared pages counted in each,
as ``ps`` would), and the proportional set size (PSS, shared pages split) next to it.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from queenpy.bench.parsing import ProcStat, parse_cpu_iowait, parse_cpu_line, parse_proc_stat

__all__ = [
    "PAGE_SIZE",
    "TICKS_PER_SECOND",
    "MachineCpu",
    "MachineIo",
    "MemorySampler",
    "SamplerThread",
    "TreeTicks",
    "TreeTracker",
    "cpu_by_kind_s",
    "cpu_probe_ms",
    "local_postmaster",
    "machine_cpu",
    "machine_io",
    "tree_cpu_s",
    "tree_of",
    "tree_ticks",
]

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def _all_stats() -> dict[int, ProcStat]:
    stats = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stats[int(entry.name)] = parse_proc_stat(Path(entry.path, "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue  # the process ended while we looked
    return stats


def tree_of(root: int, stats: dict[int, ProcStat] | None = None) -> list[ProcStat]:
    """The process ``root`` and all its live descendants (empty when ``root`` is gone)."""
    stats = _all_stats() if stats is None else stats
    if root not in stats:
        return []
    children: dict[int, list[int]] = {}
    for stat in stats.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(stats[pid])
        todo.extend(children.get(pid, ()))
    return found


def tree_cpu_s(roots: list[int], stats: dict[int, ProcStat] | None = None) -> float:
    """CPU seconds used so far by the trees under ``roots`` (live processes and reaped children)."""
    stats = _all_stats() if stats is None else stats
    ticks = sum(p.own_ticks + p.reaped_children_ticks for root in roots for p in tree_of(root, stats))
    return ticks / TICKS_PER_SECOND


@dataclass(frozen=True)
class TreeTicks:
    """A snapshot of a process tree's CPU: ``live`` maps each live pid to (kind, own ticks); ``reaped`` is
    the ticks of children that exited and were waited for."""

    live: dict[int, tuple[str, int]]
    reaped: int

    @property
    def cpu_s(self) -> float:
        """CPU seconds used so far by the tree, as :func:`tree_cpu_s` counts them."""
        return (sum(ticks for _, ticks in self.live.values()) + self.reaped) / TICKS_PER_SECOND


def tree_ticks(root: int, kind_of: Callable[[int], str]) -> TreeTicks:
    """The CPU ticks of the tree under ``root`` per live process, each labelled by ``kind_of(pid)``."""
    tree = tree_of(root)
    return TreeTicks(
        {p.pid: (kind_of(p.pid), p.own_ticks) for p in tree}, sum(p.reaped_children_ticks for p in tree)
    )


def cpu_by_kind_s(start: TreeTicks, end: TreeTicks) -> dict[str, float]:
    """CPU seconds per kind between two snapshots of one tree. Processes that ended in between are
    counted under ``exited`` (the part of their time not yet seen in ``start``); the kinds sum to the
    tree's CPU (:func:`tree_cpu_s`) over the same interval."""
    out: dict[str, int] = {}
    for pid, (kind, ticks) in end.live.items():
        out[kind] = out.get(kind, 0) + ticks - start.live.get(pid, (kind, 0))[1]
    seen_of_gone = sum(ticks for pid, (_, ticks) in start.live.items() if pid not in end.live)
    out["exited"] = end.reaped - start.reaped - seen_of_gone
    return {kind: ticks / TICKS_PER_SECOND for kind, ticks in out.items()}


def _boot_time_s() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise OSError("no btime line in /proc/stat")


def local_postmaster(backend_pid: int, postmaster_started_s: float, tolerance_s: float = 2.0) -> int | None:
    """The pid of the postmaster that serves a connection, when it runs on this machine, else None.

    ``backend_pid`` is the connection's ``pg_backend_pid()`` and ``postmaster_started_s`` the server's
    ``pg_postmaster_start_time()`` in seconds since the epoch. The process ``backend_pid`` of this machine
    must be a ``postgres`` process whose parent started at that time (within ``tolerance_s``): a server on
    another host, or in a container with its own pid namespace, has pids that mean nothing here.
    """
    stats = _all_stats()
    backend = stats.get(backend_pid)
    if backend is None or backend.comm != "postgres":
        return None
    parent = stats.get(backend.ppid)
    if parent is None or parent.comm != "postgres":
        return None
    try:
        started = _boot_time_s() + parent.start_ticks / TICKS_PER_SECOND
    except (OSError, ValueError):
        return None
    return parent.pid if abs(started - postmaster_started_s) <= tolerance_s else None


@dataclass(frozen=True)
class MachineCpu:
    """Aggregate /proc/stat counters: busy, total and stolen CPU seconds summed over all cores, and the
    seconds idle with I/O outstanding (iowait, part of neither busy nor steal)."""

    busy_s: float
    total_s: float
    steal_s: float = 0.0
    iowait_s: float = 0.0


def machine_cpu() -> MachineCpu:
    """The machine's busy, total, stolen and iowait CPU seconds since boot, over all cores."""
    text = Path("/proc/stat").read_text()
    busy, total, steal = parse_cpu_line(text)
    ticks = (busy, total, steal, parse_cpu_iowait(text))
    return MachineCpu(*(count / TICKS_PER_SECOND for count in ticks))


@dataclass(frozen=True)
class MachineIo:
    """The machine's block I/O since boot: MB paged in from and out to block devices (``/proc/vmstat``
    ``pgpgin``, ``pgpgout``: KiB, reads and writes of every process, the page cache's write-back included)."""

    read_mb: float
    written_mb: float


def machine_io() -> MachineIo:
    """The machine's :class:`MachineIo` counters now."""
    counters = dict(line.split(maxsplit=1) for line in Path("/proc/vmstat").read_text().splitlines())
    return MachineIo(int(counters.get("pgpgin", 0)) / 1024, int(counters.get("pgpgout", 0)) / 1024)


def _probe_work() -> int:
    """The fixed work of :func:`cpu_probe_ms`: sort 200,000 seeded random floats, write them into a dict of
    4,096 keys, hash 8 MiB (interpreter, memory and a C loop, as the broker and PostgreSQL mix them)."""
    rng = random.Random(44)
    values = sorted(rng.random() for _ in range(200_000))
    table: dict[int, float] = {}
    for n, value in enumerate(values):
        table[n & 4095] = value
    return len(table) + len(hashlib.sha256(bytes(8 << 20)).digest())


def cpu_probe_ms(repeats: int = 5) -> float:
    """The host's speed now: the fewest milliseconds of this thread's CPU time that one of ``repeats`` runs of
    a fixed piece of work (:func:`_probe_work`) took; about 75 ms on the reference machine, about 0.4 s
    of wall time in all. Lower is faster. Thread CPU time leaves out the time other processes and the
    hypervisor took (steal): what it measures is how fast a CPU runs this work, which a virtual machine's
    neighbours and its host's clock change (benchmarks/journal/2026-11.md: a run whose windows all cost
    about 40% more CPU a message than the same windows in another run)."""
    best = math.inf
    for _ in range(repeats):
        started = time.thread_time()
        _probe_work()
        best = min(best, time.thread_time() - started)
    return round(best * 1000, 1)


def _pss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


class SamplerThread:
    """A daemon thread that runs :meth:`run` (a subclass's sampling loop) until :meth:`stop`. The loop
    checks ``_stop`` and keeps its window's figures under ``_lock``, which the reading methods take too."""

    def __init__(self, name: str, interval_s: float) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.run, name=name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def sample(self) -> None:
        """One sample, a subclass's: :meth:`run` calls it every ``interval_s``."""
        raise NotImplementedError

    def run(self) -> None:
        """:meth:`sample` every ``interval_s`` until :meth:`stop`; a sample that meets a process ending while
        it reads /proc (OSError) is skipped."""
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except OSError:
                pass


class MemorySampler(SamplerThread):
    """Samples the resident memory of the tree under ``root`` every ``interval_s`` in a thread.

    ``mark()`` starts a new window; ``peak()`` gives the highest (RSS sum, PSS sum, process count) seen in
    the current window, in bytes.
    """

    def __init__(self, root: int, interval_s: float = 0.2) -> None:
        super().__init__("queenbench-memory", interval_s)
        self.root = root
        self._peak = (0, 0, 0)

    def mark(self) -> None:
        with self._lock:
            self._peak = (0, 0, 0)
        self.sample()

    def peak(self) -> tuple[int, int, int]:
        self.sample()
        with self._lock:
            return self._peak

    def sample(self) -> None:
        tree = tree_of(self.root)
        rss = sum(p.rss_pages for p in tree) * PAGE_SIZE
        pss = sum(_pss_bytes(p.pid) for p in tree)
        with self._lock:
            if rss > self._peak[0]:
                self._peak = (rss, max(pss, self._peak[1]), len(tree))
            elif pss > self._peak[1]:
                self._peak = (self._peak[0], pss, self._peak[2])


class TreeTracker(SamplerThread):
    """The CPU of a tree whose parents may not wait for their children, polled every ``interval_s`` in a
    thread between :meth:`start` and :meth:`split`.

    PySpark's worker daemon ignores SIGCHLD, so the kernel discards the CPU of a Python worker that exits
    instead of adding it to the daemon's cutime: a difference of two snapshots (:func:`cpu_by_kind_s`) then
    loses the worker's time and even subtracts what the first snapshot saw of it. Here each process's last
    polled ticks are kept; a process gone by the end counts, under ``exited``, what it used from the start (or
    from its birth) to its last poll, or what the reaped ticks say when they say more (children that were
    waited for). A process that ends between two polls loses at most its last interval.
    """

    def __init__(self, root: int, kind_of: Callable[[int], str], interval_s: float = 0.05) -> None:
        super().__init__("queenbench-cpu", interval_s)
        self.root, self.kind_of = root, kind_of
        self.first = tree_ticks(root, kind_of)
        self._last: dict[int, tuple[str, int]] = dict(self.first.live)

    def poll(self) -> TreeTicks:
        """One snapshot of the tree, its live processes' ticks kept."""
        snapshot = tree_ticks(self.root, self.kind_of)
        with self._lock:
            self._last.update(snapshot.live)
        return snapshot

    def sample(self) -> None:
        self.poll()

    def split(self) -> dict[str, float]:
        """Stops the polling; CPU seconds per kind since the tracker was made (see the class docstring)."""
        self.stop()
        end = self.poll()
        out = cpu_by_kind_s(self.first, end)
        with self._lock:
            tracked = sum(
                ticks - self.first.live.get(pid, (kind, 0))[1]
                for pid, (kind, ticks) in self._last.items()
                if pid not in end.live
            )
        out["exited"] = max(out["exited"], tracked / TICKS_PER_SECOND)
        return out


def sleep_until(deadline: float) -> None:
    """Sleep until ``time.monotonic()`` reaches ``deadline``."""
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.5))
