"""Pure helpers: read the text that wrk, pgbench and /proc produce, and summarise numbers.

Nothing here touches a process, a socket or a file: every function takes text (or numbers) and returns
values, so ``tests/unit/test_bench_parsing.py`` can check them without a database.

Units: durations in microseconds (``_us``) or seconds (``_s``), CPU in clock ticks where /proc gives ticks.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "PgbenchResult",
    "ProcStat",
    "WrkResult",
    "median",
    "parse_cpu_line",
    "parse_duration_us",
    "parse_env_assignments",
    "parse_pgbench",
    "parse_proc_stat",
    "parse_wrk",
    "percentile",
    "pgbench_log_latencies_us",
    "select_names",
]

_UNITS_US = {"us": 1.0, "ms": 1_000.0, "s": 1_000_000.0, "m": 60_000_000.0, "h": 3_600_000_000.0}


def parse_duration_us(text: str) -> float:
    """A wrk duration such as ``850.00us``, ``14.20ms``, ``1.02s`` or ``2.00m`` in microseconds.

    Raises ``ValueError`` for anything else.
    """
    match = re.fullmatch(r"\s*([\d.]+)\s*(us|ms|s|m|h)\s*", text)
    if not match:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(match.group(1)) * _UNITS_US[match.group(2)]


@dataclass
class WrkResult:
    """What one wrk run reported.

    ``requests``: completed requests; ``non_2xx``: responses outside 2xx/3xx; ``socket_errors``: connect,
    read, write and timeout errors; ``latency_us``: percentile (50, 75, 90, 99, ...) -> microseconds;
    ``counters``: the ``QUEENBENCH`` line our Lua scripts print in ``done()`` (per-script counters such as
    ``queued``, ``delivered``, ``ack_failed``), summed over wrk's threads; ``sample``: the first unexpected
    response a script kept (``"<status> <body>"``, body cut at 500 characters), or None.
    """

    requests: int = 0
    duration_s: float = 0.0
    non_2xx: int = 0
    socket_errors: dict[str, int] = field(default_factory=dict)
    latency_us: dict[float, float] = field(default_factory=dict)
    latency_mean_us: float | None = None
    latency_max_us: float | None = None
    over_10ms: int | None = None
    sample: str | None = None
    counters: dict[str, float] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        """Non-2xx responses plus socket errors (timeouts included)."""
        return self.non_2xx + sum(self.socket_errors.values())


def parse_wrk(output: str) -> WrkResult:
    """Parse wrk 4.x output (run with ``--latency``), plus our scripts' ``QUEENBENCH {json}`` line.

    The JSON line, when present, is authoritative (exact microseconds and counters from ``done()``); the
    human-readable text fills in whatever it lacks. Raises ``ValueError`` when neither gives a request count.
    """
    result = WrkResult()
    found_requests = False
    match = re.search(r"^\s*(\d+) requests in ([\d.]+\w+)", output, re.MULTILINE)
    if match:
        result.requests = int(match.group(1))
        result.duration_s = parse_duration_us(match.group(2)) / 1e6
        found_requests = True
    match = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if match:
        result.non_2xx = int(match.group(1))
    match = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    if match:
        result.socket_errors = dict(zip(("connect", "read", "write", "timeout"), map(int, match.groups())))
    for pct, value in re.findall(r"^\s+([\d.]+)%\s+([\d.]+(?:us|ms|s|m|h))\s*$", output, re.MULTILINE):
        result.latency_us[float(pct)] = parse_duration_us(value)
    match = re.search(r"^\s+Latency\s+([\d.]+\w+)\s+[\d.]+\w+\s+([\d.]+\w+)", output, re.MULTILINE)
    if match:
        result.latency_mean_us = parse_duration_us(match.group(1))
        result.latency_max_us = parse_duration_us(match.group(2))

    for line in output.splitlines():
        if not line.startswith("QUEENBENCH "):
            continue
        data: dict[str, Any] = json.loads(line[len("QUEENBENCH ") :])
        result.requests = int(data.pop("requests", result.requests))
        found_requests = True
        if "duration_us" in data:
            result.duration_s = float(data.pop("duration_us")) / 1e6
        result.non_2xx = int(data.pop("status_errors", result.non_2xx))
        errors: dict[str, int] = {
            k: int(data.pop(k)) for k in ("connect", "read", "write", "timeout") if k in data
        }
        if errors:
            result.socket_errors = errors
        for key in list(data):
            pct = re.fullmatch(r"p(\d+(?:_\d+)?)", key)
            if pct:
                result.latency_us[float(pct.group(1).replace("_", "."))] = float(data.pop(key))
        if "latency_mean_us" in data:
            result.latency_mean_us = float(data.pop("latency_mean_us"))
        if "latency_max_us" in data:
            result.latency_max_us = float(data.pop("latency_max_us"))
        if "over_10ms" in data:
            result.over_10ms = int(data.pop("over_10ms"))
        sample = data.pop("sample", None)
        result.sample = sample if isinstance(sample, str) else None
        result.counters = {k: float(v) for k, v in data.items()}
    if not found_requests:
        raise ValueError("wrk output has no request count:\n" + output[-2000:])
    return result


@dataclass
class PgbenchResult:
    """``tps``: transactions per second (without initial connection time); ``failed``: failed transactions;
    ``transactions``: processed transactions; ``latency_avg_ms`` as pgbench reports it."""

    tps: float
    transactions: int
    failed: int
    latency_avg_ms: float | None


def parse_pgbench(output: str) -> PgbenchResult:
    """Parse pgbench (PostgreSQL 14+) summary output. Raises ``ValueError`` without a ``tps =`` line."""
    tps = re.search(r"^tps = ([\d.]+)", output, re.MULTILINE)
    if not tps:
        raise ValueError("pgbench output has no tps line:\n" + output[-2000:])
    processed = re.search(r"number of transactions actually processed: (\d+)", output)
    failed = re.search(r"number of failed transactions: (\d+)", output)
    latency = re.search(r"latency average = ([\d.]+) ms", output)
    return PgbenchResult(
        tps=float(tps.group(1)),
        transactions=int(processed.group(1)) if processed else 0,
        failed=int(failed.group(1)) if failed else 0,
        latency_avg_ms=float(latency.group(1)) if latency else None,
    )


def pgbench_log_latencies_us(lines: Iterable[str], window: tuple[float, float] | None = None) -> list[float]:
    """Per-transaction latencies (µs) from pgbench ``-l`` log lines.

    Line format: ``client_id transaction_no time script_no time_epoch time_us [schedule_lag]``, ``time``
    being the elapsed microseconds and ``time_epoch.time_us`` when the transaction ended; a failed or
    skipped transaction has a word there and is left out. ``window``: (start, end) in seconds since the
    epoch; only transactions that ended inside it count.
    """
    latencies = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[2].isdigit():
            if window is not None:
                ended = int(fields[4]) + int(fields[5]) / 1e6
                if not window[0] <= ended <= window[1]:
                    continue
            latencies.append(float(fields[2]))
    return latencies


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` we use; times in clock ticks, ``rss_pages`` in pages."""

    pid: int
    comm: str
    state: str
    ppid: int
    utime: int
    stime: int
    cutime: int
    cstime: int
    rss_pages: int
    start_ticks: int = 0  # when the process started, in clock ticks after boot

    @property
    def own_ticks(self) -> int:
        """User plus system time of the process itself (all its threads)."""
        return self.utime + self.stime

    @property
    def reaped_children_ticks(self) -> int:
        """User plus system time of children that exited and were waited for."""
        return self.cutime + self.cstime


def parse_proc_stat(text: str) -> ProcStat:
    """Parse one ``/proc/<pid>/stat`` line. The command name may hold spaces and parentheses, so fields are
    counted from the last ``)``. Raises ``ValueError`` on a malformed line."""
    open_paren, close_paren = text.find("("), text.rfind(")")
    if open_paren < 0 or close_paren < open_paren:
        raise ValueError(f"not a /proc stat line: {text[:80]!r}")
    pid = int(text[:open_paren])
    comm = text[open_paren + 1 : close_paren]
    rest = text[close_paren + 2 :].split()
    # rest[0] is field 3 (state); field n is rest[n - 3]
    return ProcStat(
        pid=pid,
        comm=comm,
        state=rest[0],
        ppid=int(rest[1]),
        utime=int(rest[11]),
        stime=int(rest[12]),
        cutime=int(rest[13]),
        cstime=int(rest[14]),
        rss_pages=int(rest[21]),
        start_ticks=int(rest[19]),
    )


def parse_cpu_line(text: str) -> tuple[int, int, int]:
    """(busy ticks, total ticks, steal ticks) from the first ``cpu`` line of ``/proc/stat``.

    Busy is everything but idle and iowait (steal included); guest time is already inside user time and is not
    counted twice. Steal: the time the hypervisor ran something else while a virtual CPU wanted to run (0 on
    bare metal and on kernels that do not report it).
    """
    values = _aggregate_cpu_values(text)
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return total - idle, total, (values[7] if len(values) > 7 else 0)


def parse_cpu_iowait(text: str) -> int:
    """The iowait ticks (idle with I/O outstanding) of the first ``cpu`` line of ``/proc/stat``; 0 on kernels
    that do not report it."""
    values = _aggregate_cpu_values(text)
    return values[4] if len(values) > 4 else 0


def _aggregate_cpu_values(text: str) -> list[int]:
    """The tick counts of the aggregate ``cpu`` line of ``/proc/stat``, in the kernel's order."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            return [int(v) for v in line.split()[1:]]
    raise ValueError("no aggregate cpu line in /proc/stat")


def percentile(values: Sequence[float], pct: float) -> float | None:
    """The ``pct`` percentile (0-100) by linear interpolation between closest ranks; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * pct / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def median(values: Iterable[float | None]) -> float | None:
    """Median of the values that are not None; None when there are none."""
    present = [float(v) for v in values if v is not None]
    return statistics.median(present) if present else None


def parse_env_assignments(pairs: Iterable[str]) -> dict[str, str]:
    """``["QUEEN_PUSH_MAX_BATCH_SIZE=100", ...]`` as a dict. Raises ``ValueError`` for an item without
    ``=`` or with an empty name."""
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"expected NAME=VALUE, got {pair!r}")
        env[name.strip()] = value
    return env


def select_names(names: Sequence[str], patterns: str | None) -> list[str]:
    """The names matching any of the comma-separated shell patterns (``push-*,consume-auto``), in the
    order of ``names``; all of them when ``patterns`` is empty. Raises ``ValueError`` for a pattern that
    matches nothing."""
    import fnmatch

    if not patterns:
        return list(names)
    wanted = [p.strip() for p in patterns.split(",") if p.strip()]
    for pattern in wanted:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            raise ValueError(f"no scenario matches {pattern!r}; known: {', '.join(names)}")
    return [name for name in names if any(fnmatch.fnmatchcase(name, p) for p in wanted)]
