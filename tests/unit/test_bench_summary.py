"""The results page and the history: the page's current figures are what ``queenpy bench --summary
benchmarks/results`` writes from the files kept there (and only those files are kept), every table row has its
header's columns, and a run's history row is one compact line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from queenpy.bench import summary
from queenpy.bench.runner import kind_lines

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
PAGE = BENCHMARKS / "RESULTS.md"
RESULTS = BENCHMARKS / "results"


def _block(text: str) -> str:
    return text[text.index(summary.BEGIN) + len(summary.BEGIN) : text.index(summary.END)].strip()


def test_the_page_holds_what_the_summary_command_writes_from_the_kept_results() -> None:
    documents = summary.load_documents([RESULTS])
    written = summary.current_figures(documents, lambda path: f"results/{path.name}", kind_lines)
    assert _block(PAGE.read_text()) == written.strip(), "run: queenpy bench --summary benchmarks/results"


def test_the_page_is_short_and_its_tables_rows_have_their_headers_columns() -> None:
    lines = PAGE.read_text().splitlines()
    assert len(lines) <= 300
    header: int | None = None
    for number, line in enumerate(lines, 1):
        if not line.startswith("|"):
            header = None
            continue
        cells = line.count("|") - line.count("\\|") - 1
        if header is None:
            header = cells
        assert cells == header, f"RESULTS.md line {number}: {cells} cells under a header of {header}"


def test_the_results_directory_keeps_only_what_the_page_cites() -> None:
    page = PAGE.read_text()
    files = sorted(p for p in RESULTS.iterdir() if p.is_file())
    assert sum(p.stat().st_size for p in files) <= 2 * 2**20
    cited = {p.stem for p in files if p.suffix == ".json" and f"(results/{p.name})" in page}
    for path in files:
        assert any(path.stem == stem or path.stem.startswith(stem + "-") for stem in cited), path.name


def _document(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "started_at": "2026-12-01T10:00:00+00:00",
        "git": {"commit": "abc1234", "dirty": False},
        "settings": {"quick": False, "runs": 3, "seconds": 10.0},
        "machine": {"cores": 2},
        "postgres": {
            "version": "PostgreSQL 16.2",
            "server": "private (pgserver, the embedded default's settings)",
        },
        "broker": {"workers": 2, "env": {}},
        "scenarios": [],
    }
    for key, value in changes.items():
        section, _, name = key.partition("__")
        document[section] = {**document[section], name: value} if name else value
    return document


def test_only_full_runs_of_a_clean_commit_on_the_private_server_stand_on_the_page() -> None:
    assert summary.is_reference(_document())
    assert summary.is_reference(_document(postgres={"version": "16"}))  # written before the origin was kept
    assert not summary.is_reference(_document(settings__quick=True))
    assert not summary.is_reference(_document(git__dirty=True))
    assert not summary.is_reference(_document(git={}))
    assert not summary.is_reference(_document(postgres__server="external (127.0.0.1:5439/queenbench)"))


def test_the_block_is_rewritten_between_its_markers_only(tmp_path: Path) -> None:
    page = tmp_path / "RESULTS.md"
    page.write_text(f"# title\n\n{summary.BEGIN}\nold\n{summary.END}\n\nthe rest\n")
    summary.rewrite_page(page, "new\nfigures")
    summary.rewrite_page(page, "new\nfigures")
    assert page.read_text() == f"# title\n\n{summary.BEGIN}\nnew\nfigures\n{summary.END}\n\nthe rest\n"
    page.write_text("no markers\n")
    with pytest.raises(ValueError, match="has no block"):
        summary.rewrite_page(page, "x")


def test_a_run_appends_one_compact_line_to_the_history(tmp_path: Path) -> None:
    document = json.loads((RESULTS / "2026-11-25-spark.json").read_text())
    history = tmp_path / "history.ndjson"
    summary.append_history(history, summary.history_row(document, "benchmarks/results/2026-11-25-spark.json"))
    summary.append_history(history, summary.history_row(document, "again"))
    rows = [json.loads(line) for line in history.read_text().splitlines()]
    assert len(rows) == 2 and rows[1]["source"] == "again"
    row = rows[0]
    assert (row["commit"], row["quick"], row["runs"], row["postgres"]["server"]) == (
        "224dc9a",
        False,
        1,
        "private",
    )
    assert set(row["scenarios"]) == {"push-100-1KB", "handoff-tx", "spark-handoff", "spark-handoff-pipelined"}
    spark = row["scenarios"]["spark-handoff"]
    assert (
        spark["msg_per_s"] == round(document["scenarios"][2]["median"]["msg_per_s"])
        and spark["valid"] is True
    )
    committed = [json.loads(line) for line in (BENCHMARKS / "history.ndjson").read_text().splitlines()]
    assert all({"date", "commit", "machine", "scenarios"} <= set(r) for r in committed)
