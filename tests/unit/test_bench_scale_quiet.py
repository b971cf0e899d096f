"""The scale kind's quiet push windows around retention, its vacuum and the cleanup
(``scale.quiet_reference``): the push beside each is compared with the quiet windows right before and after
it, as well as with the push at scale measured minutes earlier, since the host's speed drifts by up to 25%
over such a stretch (journal, issue 44); and, beside retention and the cleanup, with windows in which the job
was paused, interleaved with those it ran in. The report is checked on a scale-1m result file kept in
benchmarks/results, with quiet or paused windows added, and as it is (the runs made before they existed)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from queenpy.bench.kinds import scale

RESULT = min((Path(__file__).parents[2] / "benchmarks/results").glob("*-scale-1m-*.json"))

QUIET = [{"msg_per_s": 40_000.0, "probe_ms": 50.0}, {"msg_per_s": 30_000.0, "probe_ms": 60.0}]


def test_retention_and_its_vacuum_are_compared_with_the_windows_before_and_after_them() -> None:
    quiet = [*QUIET, {"msg_per_s": 20_000.0, "probe_ms": 70.0}]
    assert scale.quiet_reference(quiet, "retention") == 35_000.0
    assert scale.quiet_reference(quiet, "retention_vacuum") == 35_000.0
    assert scale.quiet_reference(quiet, "cleanup") == 25_000.0


def test_without_the_window_after_it_a_part_has_no_reference() -> None:
    assert scale.quiet_reference(QUIET, "cleanup") is None
    assert scale.quiet_reference(QUIET[:1], "retention") is None
    assert scale.quiet_reference([], "retention_vacuum") is None


def _entry() -> dict[str, Any]:
    return json.loads(RESULT.read_text())["scenarios"][0]


def test_a_run_without_quiet_windows_reports_as_before() -> None:
    entry = copy.deepcopy(_entry())
    figures = entry["runs"][0]["scale"]
    figures.pop("quiet", None)
    for part in ("retention", "retention_vacuum", "cleanup"):
        figures.pop(f"{part}_push_ratio_beside", None)
    lines = scale.report_lines(entry)
    assert not any("quiet" in line for line in lines)


def test_the_report_shows_the_quiet_windows_and_the_ratios_against_them() -> None:
    entry = copy.deepcopy(_entry())
    figures = entry["runs"][0]["scale"]
    figures["quiet"] = [*QUIET, {"msg_per_s": 20_000.0, "probe_ms": 70.0}]
    for part in ("retention", "retention_vacuum", "cleanup"):
        figures[part]["push_msg_per_s"] = 28_000.0
        figures[f"{part}_push_ratio_beside"] = scale._ratio(
            figures[part]["push_msg_per_s"], scale.quiet_reference(figures["quiet"], part)
        )
    assert figures["retention_push_ratio_beside"] == 0.8
    assert figures["cleanup_push_ratio_beside"] == 1.12
    lines = scale.report_lines(entry)
    retention = next(line for line in lines if line.startswith("- retention (the retention job's run)"))
    assert "0.8 x the quiet windows beside it" in retention
    cleanup = next(line for line in lines if line.startswith("- cleanup"))
    assert "1.12 x the quiet windows beside it" in cleanup
    quiet = next(line for line in lines if line.startswith("- quiet push windows"))
    assert "before retention 40,000 (50.0); before the cleanup 30,000 (60.0); after it 20,000 (70.0)" in quiet


def test_the_report_shows_the_windows_the_job_was_paused_in_and_the_paired_ratio() -> None:
    entry = copy.deepcopy(_entry())
    figures = entry["runs"][0]["scale"]
    figures["retention"]["paired"] = {
        "running_msg_per_s": [30_000.0, 28_000.0, 29_000.0],
        "paused_msg_per_s": [31_000.0, 30_000.0, 32_000.0],
        "ratio": scale._ratio(29_000.0, 31_000.0),
    }
    figures["retention"]["detail"]["pace"]["heldMs"] = 36_500.0
    lines = scale.report_lines(entry)
    retention = next(line for line in lines if line.startswith("- retention (the retention job's run)"))
    assert (
        "0.935 x the windows it was paused in (running / paused, msg/s: 30,000, 28,000, 29,000 / "
        "31,000, 30,000, 32,000; held 36.5 s)"
    ) in retention
    cleanup = next(line for line in lines if line.startswith("- cleanup"))
    assert "paused in" not in cleanup  # a run without the paired windows reports as before
