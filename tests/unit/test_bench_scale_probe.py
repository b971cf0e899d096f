"""The scale kind's probe of the host's speed (``queenpy.bench.procfs.cpu_probe_ms``) and how its report shows
it: a run whose windows at scale all cost about 40% more CPU a message than another run's, with the same code,
could not be told from a slower broker (journal, issue 44). The report is checked on a result file kept in
benchmarks/results (the oldest scale-1m run there, made before the probe existed) and on the same file with
probes added."""

from __future__ import annotations

import copy
import json
import threading
import time
from pathlib import Path
from typing import Any

from queenpy.bench import procfs
from queenpy.bench.kinds import scale

RESULT = min((Path(__file__).parents[2] / "benchmarks/results").glob("*-scale-1m-*.json"))


def test_the_probe_measures_this_threads_cpu_not_the_wall_clock() -> None:
    assert procfs.cpu_probe_ms(repeats=1) > 0
    # another thread busy beside it takes wall time from the probe, not CPU time of the probe's own thread
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(10_000))

    alone = procfs.cpu_probe_ms()
    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        started = time.monotonic()
        beside = procfs.cpu_probe_ms()
        wall_ms = (time.monotonic() - started) * 1000
    finally:
        stop.set()
        spinner.join()
    # the GIL shares one core between the two threads: the wall time of three runs is well above the CPU
    # time of the fastest one, and that CPU time stays near the time taken alone
    assert wall_ms > 2 * beside
    assert beside < 2 * alone


def _entry() -> dict[str, Any]:
    return json.loads(RESULT.read_text())["scenarios"][0]


def test_a_run_without_probes_reports_as_before() -> None:
    lines = scale.report_lines(_entry())
    assert lines and not any("the host's speed" in line for line in lines)


def test_the_report_shows_each_windows_probe_and_the_ratio() -> None:
    entry = copy.deepcopy(_entry())
    figures = entry["runs"][0]["scale"]
    for size, probe in (("base", 70.0), ("at_scale", 98.0), ("base_again", 71.0)):
        for name in ("push", "pop"):
            figures[size][name]["windows_probe_ms"] = [probe, probe + 1, probe + 2]
            figures[size][name]["cpu_share_of_machine"]["steal"] = 0.01
    figures["probe_ratio"] = scale._ratio(
        scale._probes_median(figures["at_scale"]), scale._probes_median(figures["base"])
    )
    assert figures["probe_ratio"] == round(99.0 / 71.0, 3)
    line = next(line for line in scale.report_lines(entry) if "the host's speed" in line)
    assert "push 70.0, 71.0, 72.0 / 98.0, 99.0, 100.0 / 71.0, 72.0, 73.0" in line
    assert f"at scale over the base {figures['probe_ratio']}" in line
    assert "steal, share of the machine in the median windows at scale: push 0.01, pop 0.01" in line
