"""The scale kind's probe of the host's speed (``queenpy.bench.procfs.cpu_probe_ms``) and how its report shows
it: a run whose windows at scale all cost about 40% more CPU a message than another run's, with the same code,
could not be told from a slower broker (journal, issue 44). The report is checked on a scale-1m result file
kept in benchmarks/results, with its probes replaced by set values, and with them removed (as in the runs
made before the probe existed)."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest

from queenpy.bench import procfs
from queenpy.bench.kinds import scale

RESULT = min((Path(__file__).parents[2] / "benchmarks/results").glob("*-scale-1m-*.json"))


def test_the_probe_is_the_fewest_cpu_milliseconds_of_its_runs_not_their_wall_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # stand-in work: each run sleeps 40 ms (wall time, no CPU) and burns 30, 10 and 20 ms of CPU in turn
    burns = iter([0.030, 0.010, 0.020])

    def work() -> int:
        time.sleep(0.040)
        until = time.thread_time() + next(burns)
        while time.thread_time() < until:
            pass
        return 0

    monkeypatch.setattr(procfs, "_probe_work", work)
    probe = procfs.cpu_probe_ms(repeats=3)
    assert 10.0 <= probe < 15.0, probe


def test_the_real_probe_runs() -> None:
    assert 0 < procfs.cpu_probe_ms(repeats=1) < 10_000


def _entry() -> dict[str, Any]:
    return json.loads(RESULT.read_text())["scenarios"][0]


def _again(figures: dict[str, Any]) -> str:
    """The base measured a second time: beside the windows at scale, or after them in runs before."""
    return "base_beside" if "base_beside" in figures else "base_again"


def test_a_run_without_probes_reports_as_before() -> None:
    entry = copy.deepcopy(_entry())
    figures = entry["runs"][0]["scale"]
    for size in ("base", "at_scale", _again(figures)):
        for name in ("push", "pop"):
            figures[size][name].pop("windows_probe_ms", None)
    lines = scale.report_lines(entry)
    assert len(lines) > 5 and not any("the host's speed" in line for line in lines)


def test_the_report_shows_each_windows_probe_and_the_ratio() -> None:
    entry = copy.deepcopy(_entry())
    figures = entry["runs"][0]["scale"]
    for size, probe in (("base", 70.0), ("at_scale", 98.0), (_again(figures), 71.0)):
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
