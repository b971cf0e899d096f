"""Load generation with ``wrk`` (Debian package ``wrk``) and the Lua scripts in ``lua/``.

A script is ``P = {...}`` (the scenario's parameters, written here) + ``lua/common.lua`` + the scenario's
script; see ``lua/common.lua`` for the counter line every script prints. The CPU time of wrk is taken from
the kernel's accounting of the child (``wait4``), so it is exact for the run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from queenpy.bench.parsing import WrkResult, parse_wrk
from queenpy.bench.postgres import BenchError

__all__ = ["WrkRun", "find_wrk", "finish_all", "lua_literal", "render_script", "run_wrk", "stop_all"]

LUA_DIR = Path(__file__).parent / "lua"

# the wrk processes running now, from any thread: a bench stopped early kills them (stop_all), or those run by
# threads (the soak's and keep-up's producer and consumers) would load the broker until their duration ends; a
# soak whose waits were shorter than their limits ends them early (finish_all)
_LIVE: set[subprocess.Popen[bytes]] = set()
_LIVE_LOCK = threading.Lock()

MISSING_WRK = (
    "wrk is not installed, and queenpy bench drives all of its load through wrk.\n"
    "Install it with:  apt-get install wrk   (Debian/Ubuntu; 'brew install wrk' on macOS)"
)


def find_wrk() -> str:
    """The path of ``wrk``; raise :class:`BenchError` saying how to install it when it is missing."""
    found = shutil.which("wrk")
    if not found:
        raise BenchError(MISSING_WRK)
    return found


def lua_literal(value: Any) -> str:
    """A Lua literal for a str/int/float/bool/list/dict (strings as long brackets: no escaping needed)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        level = 0
        while f"]{'=' * level}]" in value:
            level += 1
        return f"[{'=' * level}[{value}]{'=' * level}]"
    if isinstance(value, (list, tuple)):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {lua_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no Lua literal for {type(value).__name__}")


def render_script(name: str, params: dict[str, Any], workdir: Path) -> Path:
    """Write ``P = params`` + common.lua + ``lua/<name>.lua`` into ``workdir`` and return its path."""
    text = (
        f"P = {lua_literal(params)}\n"
        + (LUA_DIR / "common.lua").read_text()
        + (LUA_DIR / f"{name}.lua").read_text()
    )
    path = workdir / f"{name}-{abs(hash(text)) % 10**8}.lua"
    path.write_text(text)
    return path


@dataclass
class WrkRun:
    """One wrk run: parsed result, wall seconds, CPU seconds of wrk (user+system), raw output."""

    result: WrkResult
    wall_s: float
    cpu_s: float
    output: str


def run_wrk(
    url: str, script: Path, connections: int, duration_s: float, threads: int = 2, timeout_s: float = 10.0
) -> WrkRun:
    """Run wrk for ``duration_s`` with ``--latency`` and parse its output; raise :class:`BenchError` if it
    fails or prints nothing we can read."""
    wrk = find_wrk()
    args = [
        wrk,
        f"-t{max(1, min(threads, connections))}",
        f"-c{connections}",
        f"-d{max(1, round(duration_s))}s",
        f"--timeout={timeout_s:g}s",
        "--latency",
        "-s",
        str(script),
        url,
    ]
    out_path = script.with_suffix(".out")
    started = time.monotonic()
    with open(out_path, "w") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        with _LIVE_LOCK:
            _LIVE.add(process)
        try:
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
        except BaseException:  # interrupted (a signal, Ctrl-C): wrk must not outlive the bench
            process.kill()
            process.wait()
            raise
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(process)
    wall = time.monotonic() - started
    output = out_path.read_text(errors="replace")
    if process.returncode != 0:
        raise BenchError(f"wrk failed ({process.returncode}): {' '.join(args)}\n{output[-2000:]}")
    try:
        result = parse_wrk(output)
    except ValueError as exc:
        raise BenchError(str(exc)) from exc
    return WrkRun(result, wall, usage.ru_utime + usage.ru_stime, output)


def stop_all() -> int:
    """Kill (SIGKILL) every wrk that :func:`run_wrk` started and that still runs, from whichever thread; their
    :func:`run_wrk` calls then raise :class:`BenchError`. Returns how many were killed."""
    return _signal_live(signal.SIGKILL)


def finish_all() -> int:
    """Ask (SIGINT) every wrk that :func:`run_wrk` started and that still runs to stop now. wrk then ends as
    at the end of its ``-d`` duration: it prints its summary and runs the script's ``done()``, exits 0, and
    its :func:`run_wrk` call returns normally. Returns how many were asked."""
    return _signal_live(signal.SIGINT)


def _signal_live(sig: signal.Signals) -> int:
    with _LIVE_LOCK:
        live = [p for p in _LIVE if p.returncode is None]
    for process in live:
        try:
            process.send_signal(sig)
        except ProcessLookupError:  # it ended (and was reaped by its thread's wait4) meanwhile
            pass
    return len(live)
