"""The bench's kinds: every scenario of the catalogue has its kind module, the runner knows no kind by name,
and a kind registered in ``KINDS`` flows through the runner's dispatch, the JSON entry, the terminal report
and the results page without wrk, a broker or PostgreSQL (its ``run`` returns what a measured run holds)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

import pytest

from queenpy.bench import catalog, report, runner, summary
from queenpy.bench.catalog import SCENARIOS, Options, Scenario
from queenpy.bench.core import Context, Kind, ScenarioSkipped
from queenpy.bench.kinds import KINDS
from queenpy.bench.parsing import median

NO_CONTEXT = cast(Context, None)  # the fake kind below measures nothing, so it needs no server


def test_every_scenario_has_a_registered_kind_and_every_kind_a_scenario() -> None:
    assert {s.kind for s in SCENARIOS} == set(KINDS)
    assert all(name == kind.name for name, kind in KINDS.items())


def test_the_runner_and_the_report_know_no_kind_or_scenario_by_name() -> None:
    for module in (runner, report, summary):
        source = Path(cast(str, module.__file__)).read_text()
        assert not re.search(r"kind\s*==|\.kind\s*in\s*\(|scenario\.name\s*==", source), module.__name__
        for name in KINDS:
            assert f'"{name}"' not in source, (module.__name__, name)


def _measured(scenario: Scenario, round_no: int, rate: float) -> dict[str, Any]:
    """What a kind's run returns once it has measured (the keys Context.fill_window writes)."""
    return {
        "scenario": scenario.name,
        "round": round_no,
        "problems": [],
        "notes": [],
        "ground_truth": {},
        "limit": scenario.limit,
        "messages": int(rate * 3),
        "window_s": 3.0,
        "msg_per_s": rate,
        "cpu_us_per_msg": {"broker": 50.0, "postgres": 40.0, "wrk": 5.0},
        "cpu_share_of_machine": {"broker": 0.3, "postgres": 0.4, "wrk": 0.05, "other": 0.01, "idle": 0.24},
        "broker_rss_mb_peak": 150.0 + round_no,
        "broker_pss_mb_peak": 100.0,
        "pg_waits": {"CPU": 1.0},
        "latency_ms": {"50": 2.0 * round_no, "90": 3.0, "99": 9.0, "99.9": 12.0},
        "requests_per_s": rate / 2,
        "broker_us_per_request": 100.0 + round_no,
        "echoes": {"answered": 7 * round_no},
    }


def _fake_run(context: Context, scenario: Scenario, round_no: int) -> dict[str, Any]:
    if scenario.mode == "skip":
        raise ScenarioSkipped("needs something this machine lacks")
    if scenario.mode == "crash":
        raise RuntimeError("the kind broke")
    run = _measured(scenario, round_no, 1000.0 * round_no)
    if round_no == 3:
        run["problems"].append("lost: 1 message")
    return run


def _fake_summarize(measured: list[dict[str, Any]]) -> dict[str, Any]:
    return {"echoes": {"answered": median(r["echoes"]["answered"] for r in measured)}}


def _fake_lines(entry: dict[str, Any]) -> list[str]:
    echoes = (entry.get("median") or {}).get("echoes")
    return [f"{entry['scenario']}: {echoes['answered']:g} echoes answered"] if echoes else []


FAKE = Kind("echo", _fake_run, _fake_summarize, _fake_lines)
ECHO = Scenario("echo-1", "echo", "insert-1-40B", "a kind added by a test")
LIMIT_ROUNDS = {n: {"msg_per_s": 4000.0, "cpu_us_per_msg": {"postgres": 20.0}} for n in (1, 2, 3)}


def _document(
    entries: list[dict[str, Any]],
    commit: str = "abc1234",
    started: str = "2026-12-01T10:00:00+00:00",
    quick: bool = False,
) -> dict[str, Any]:
    return {
        "started_at": started,
        "git": {"commit": commit, "dirty": False},
        "command": "queenpy bench",
        "settings": {"quick": quick, "runs": 3, "seconds": 10.0, "warmup": 3.0},
        "machine": {"cores": 2, "other_cpu_share_median": 0.02, "other_cpu_share_max": 0.05},
        "postgres": {"version": "PostgreSQL 16.2", "server": "private (pgserver)"},
        "broker": {"workers": 2, "processes": 3, "env": {}},
        "limits": {},
        "scenarios": entries,
    }


def test_a_registered_kind_runs_through_dispatch_entry_report_and_page(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(KINDS, FAKE.name, FAKE)
    rounds = [runner.dispatch(KINDS[ECHO.kind], NO_CONTEXT, ECHO, n) for n in (1, 2, 3)]
    assert [r["valid"] for r in rounds] == [True, True, False]
    entry = runner.scenario_entry(ECHO, FAKE, rounds, Options(), LIMIT_ROUNDS, {"msg_per_s": 4000.0})
    assert entry["valid"] is False and entry["problems"] == ["lost: 1 message"]
    median_ = entry["median"]
    assert median_["msg_per_s"] == 2000.0 and median_["ratio"] == 0.5  # 1000, 2000, 3000 over 4000
    assert median_["postgres_cost_ratio"] == 2.0 and median_["broker_rss_mb_peak"] == 153.0
    assert median_["echoes"] == {"answered": 14.0}  # the kind's own summary, merged in
    assert median_["broker_us_per_request"] == 102.0
    assert median_["broker_us_per_request_range"] == [101.0, 103.0]
    assert entry["parameters"]["kind"] == "echo" and entry["parameters"]["connections"] == 50

    document = _document([entry])
    table = report.table(document, runner.kind_lines)
    assert "| echo-1 | 2,000 | 4,000 | 0.50 |" in table
    assert "echo-1: 14 echoes answered" in table and "- echo-1: INVALID: lost: 1 message" in table
    assert "| 50.0 | 102.0 | 40.0 |" in table  # broker µs/msg, broker µs/req, PG µs/msg side by side
    assert "- echo-1: broker 102.0 µs/request [101.0-103.0], 2.0 msg/request; PG 40.0 µs/msg" in table

    rows = summary.history_row(document, "results/x.json")["scenarios"]
    assert rows == {
        "echo-1": {
            "msg_per_s": 2000.0,
            "ratio": 0.5,
            "p50_ms": 4.0,
            "p99_ms": 9.0,
            "broker_us_per_msg": 50.0,
            "broker_us_per_request": 102.0,
            "postgres_us_per_msg": 40.0,
            "broker_rss_mb": 153.0,
            "rounds": 3,
            "valid": False,
        }
    }
    entry_valid = runner.scenario_entry(ECHO, FAKE, rounds[:2], Options(), LIMIT_ROUNDS, {})
    block = summary.current_figures(
        [(tmp_path / "r.json", _document([entry_valid]))], lambda p: p.name, runner.kind_lines
    )
    assert "| echo-1 | 1,500 | 0.38 |" in block and "echo-1: 10.5 echoes answered" in block


def test_a_skipped_or_crashed_kind_leaves_the_other_scenarios_running() -> None:
    skipped = runner.dispatch(FAKE, NO_CONTEXT, Scenario("echo-skip", "echo", "select1", "", mode="skip"), 1)
    assert skipped["valid"] is True and skipped["skipped"] == "needs something this machine lacks"
    crashed = runner.dispatch(
        FAKE, NO_CONTEXT, Scenario("echo-crash", "echo", "select1", "", mode="crash"), 1
    )
    assert crashed["valid"] is False and crashed["problems"] == ["crashed: RuntimeError: the kind broke"]
    entry = runner.scenario_entry(ECHO, FAKE, [skipped], Options(), {}, {})
    assert entry["skipped"] == "needs something this machine lacks" and "median" not in entry


def test_a_scenario_of_an_unregistered_kind_is_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner, "SCENARIOS", [*catalog.SCENARIOS, ECHO])
    with pytest.raises(runner.BenchError, match="no kind module for echo"):
        runner._select(runner.Config(only="echo-1"))
    monkeypatch.setitem(KINDS, FAKE.name, FAKE)
    assert [s.name for s in runner._select(runner.Config(only="echo-1"))] == ["echo-1"]


def test_each_kind_summarizes_its_own_figures() -> None:
    keepup = {
        "target_producer_msg_per_s": 10.0,
        "producer_msg_per_s": 9.0,
        "producer_share_of_push": 0.5,
        "consumer_msg_per_s": 9.0,
        "backlog_growth_per_s": 1.0,
        "keeps_up": True,
    }
    assert (
        KINDS["keepup"].summarize([{"keepup": keepup}, {"keepup": {**keepup, "keeps_up": False}}])["keepup"][
            "keeps_up_runs"
        ]
        == 1
    )
    streams = {"cycles_per_s": 10.0, "windows_emitted_per_s": 5.0, "messages_per_cycle": 100.0}
    assert KINDS["streams"].summarize([{"streams": streams}]) == {"streams": streams}
    spark = KINDS["spark"].summarize(
        [
            {
                "spark": {
                    "first_batch_s": 4.0,
                    "batches": 3,
                    "max_per_trigger": 20_000,
                    "session_start_s": 9.0,
                    "whole_query_msg_per_s": 800.0,
                }
            }
        ]
    )
    assert spark["spark"]["max_per_trigger"] == 20_000 and spark["spark"]["whole_query_msg_per_s"] == 800.0
    assert KINDS["push"].summarize([{}]) == {} and KINDS["soak"].broker_env == {"RETENTION_INTERVAL": "1000"}


def test_every_row_of_the_terminal_tables_has_its_headers_columns() -> None:
    skipped = runner.dispatch(FAKE, NO_CONTEXT, Scenario("echo-skip", "echo", "select1", "", mode="skip"), 1)
    crashed = runner.dispatch(
        FAKE, NO_CONTEXT, Scenario("echo-crash", "echo", "select1", "", mode="crash"), 1
    )
    measured = [runner.dispatch(FAKE, NO_CONTEXT, ECHO, n) for n in (1, 2)]
    entries = [
        runner.scenario_entry(ECHO, FAKE, runs, Options(), LIMIT_ROUNDS, {})
        for runs in ([skipped], [crashed], measured)
    ]
    table = report.table(_document(entries), runner.kind_lines)
    rows = [line for line in table.splitlines() if line.startswith("| echo")]
    assert len(rows) == 3 and "skipped" in rows[0] and "INVALID" in rows[1]
    header = next(line for line in table.splitlines() if line.startswith("| scenario"))
    assert {row.count("|") for row in rows} == {header.count("|")}
