"""The scale kind's quiet push windows around retention, its vacuum and the cleanup
(``scale.quiet_reference``): the push beside each is compared with the quiet windows right before and after
it, as well as with the push at scale measured minutes earlier, since the host's speed drifts by up to 25%
over such a stretch (journal, issue 44); and, beside retention and the cleanup, with windows in which the job
was paused, interleaved with those it ran in. The report is checked on a scale-1m result file kept in
benchmarks/results, with quiet or paused windows added, and as it is (the runs made before they existed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from queenpy.bench.kinds import scale

RESULT = min((Path(__file__).parents[2] / "benchmarks/results").glob("*-scale-1m-*.json"))

QUIET = [
    {"where": "before retention", "msg_per_s": 40_000.0, "probe_ms": 50.0},
    {"where": "after retention", "msg_per_s": 30_000.0, "probe_ms": 60.0},
    {"where": "after its vacuum", "msg_per_s": 20_000.0, "probe_ms": 70.0},
]
AFTER_CLEANUP = {"where": "after the cleanup", "msg_per_s": 10_000.0, "probe_ms": 80.0}


def test_each_part_is_compared_with_the_windows_right_before_and_after_it() -> None:
    quiet = [*QUIET, AFTER_CLEANUP]
    assert scale.quiet_reference(quiet, "retention") == 35_000.0
    assert scale.quiet_reference(quiet, "retention_vacuum") == 25_000.0
    assert scale.quiet_reference(quiet, "cleanup") == 15_000.0


def test_without_the_window_after_it_a_part_has_no_reference() -> None:
    assert scale.quiet_reference(QUIET, "cleanup") is None
    assert scale.quiet_reference(QUIET[:1], "retention") is None
    assert scale.quiet_reference(QUIET[:2], "retention_vacuum") is None


def _entry() -> tuple[dict[str, Any], dict[str, Any]]:
    """The kept result's scenario entry, a copy to change, and its first run's ``scale`` figures."""
    entry = json.loads(RESULT.read_text())["scenarios"][0]
    return entry, entry["runs"][0]["scale"]


def test_a_run_without_quiet_windows_reports_as_before() -> None:
    entry, figures = _entry()
    figures.pop("quiet", None)
    for part in ("retention", "retention_vacuum", "cleanup"):
        figures.pop(f"{part}_push_ratio_beside", None)
    lines = scale.report_lines(entry)
    assert not any("quiet" in line for line in lines)


def test_the_report_shows_the_quiet_windows_and_the_ratios_against_them() -> None:
    entry, figures = _entry()
    figures["quiet"] = [*QUIET, AFTER_CLEANUP]
    for part in ("retention", "retention_vacuum", "cleanup"):
        figures[part]["push_msg_per_s"] = 28_000.0
        figures[f"{part}_push_ratio_beside"] = scale._ratio(
            figures[part]["push_msg_per_s"], scale.quiet_reference(figures["quiet"], part)
        )
    assert figures["retention_push_ratio_beside"] == 0.8
    assert figures["cleanup_push_ratio_beside"] == 1.867
    lines = scale.report_lines(entry)
    retention = next(line for line in lines if line.startswith("- retention (the retention job's run)"))
    assert "0.8 x the quiet windows beside it" in retention
    cleanup = next(line for line in lines if line.startswith("- cleanup"))
    assert "1.867 x the quiet windows beside it" in cleanup
    quiet = next(line for line in lines if line.startswith("- quiet push windows"))
    assert (
        "before retention 40,000 (50.0); after retention 30,000 (60.0); after its vacuum 20,000 (70.0); "
        "after the cleanup 10,000 (80.0)"
    ) in quiet


def test_the_quiet_windows_of_runs_before_are_named_by_their_place() -> None:
    entry, figures = _entry()
    figures["quiet"] = [{k: v for k, v in w.items() if k != "where"} for w in QUIET]
    quiet = next(line for line in scale.report_lines(entry) if line.startswith("- quiet push windows"))
    assert "before retention 40,000 (50.0); before the cleanup 30,000 (60.0); after it 20,000 (70.0)" in quiet


def test_the_report_shows_the_autovacuum_the_windows_beside_it_measured() -> None:
    entry, figures = _entry()
    figures["retention_vacuum"]["detail"] = {
        "vacuumed": True,
        "relation": "queen.messages",
        "waited_s": 4.2,
        "vacuum_s": 31.5,
        "phases": ["scanning heap", "vacuuming indexes", "vacuuming heap"],
        "heap_blks_total": 400_000,
        "dead_tuples": 1_000_000,
        "index_vacuum_count": 1,
    }
    line = next(line for line in scale.report_lines(entry) if line.startswith("- retention vacuum"))
    assert (
        "(a wait of 4.2 s, then queen.messages vacuumed in 31.5 s: 1,000,000 dead rows, 400,000 heap blocks, "
        "scanning heap > vacuuming indexes > vacuuming heap)"
    ) in line
    assert "the vacuum's phase" not in line  # runs before recorded none


def test_the_report_shows_the_vacuum_phase_at_each_window_s_start_and_end() -> None:
    entry, figures = _entry()
    scanning = {"phase": "scanning heap", "heap_blks_scanned": 10}
    indexes = {"phase": "vacuuming indexes", "heap_blks_scanned": 400_000}
    gone = {"phase": None, "heap_blks_scanned": None}
    figures["retention_vacuum"]["push_windows_state"] = [[scanning, indexes], [indexes, gone]]
    line = next(line for line in scale.report_lines(entry) if line.startswith("- retention vacuum"))
    assert (
        "; the vacuum's phase at each window's start > end: scanning heap > vacuuming indexes, "
        "vacuuming indexes > over; WAL "
    ) in line


def test_the_report_shows_the_windows_the_job_was_paused_in_and_the_paired_ratio() -> None:
    entry, figures = _entry()
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
