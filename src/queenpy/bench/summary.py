"""The results page and the history: one compact row per run appended to an NDJSON file, and the "current
figures" block of ``benchmarks/RESULTS.md`` rewritten from the runs' JSON files.

The history keeps, per run, each scenario's medians with the commit, the date, the machine and the server,
so a trend can be read without the raw per-sample files (pgqueuer's ``tools/append_benchmarks.py`` habit).
The page's block takes, for each scenario, the newest run that counts as a reference (:func:`is_reference`)
among the files it is given, so its rows can come from runs of different dates; each row names its run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from queenpy.bench.catalog import SCENARIOS
from queenpy.bench.report import number

__all__ = [
    "BEGIN",
    "END",
    "append_history",
    "current_figures",
    "history_row",
    "is_reference",
    "load_documents",
    "rewrite_page",
    "write_summary",
]

BEGIN = "<!-- current-figures: begin (queenpy bench --summary benchmarks/results; do not edit by hand) -->"
END = "<!-- current-figures: end -->"
HEADER = (
    "| scenario | msg/s | ratio | p50 ms | p99 ms | broker µs/msg | broker µs/req | PG µs/msg "
    "| broker RSS MB | rounds | run (UTC) | commit |"
)


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(float(value), digits)


def _server(document: dict[str, Any]) -> str:
    """``private`` (the suite's own PostgreSQL, the default) or ``external`` (``--database-url``); documents
    written before the origin was recorded ran on the private one."""
    return (
        "external" if str(document["postgres"].get("server", "private")).startswith("external") else "private"
    )


def history_row(document: dict[str, Any], source: str) -> dict[str, Any]:
    """One run as a compact row: when, which commit, how (quick or full, rounds, window), on what (cores, the
    other processes' share of them, PostgreSQL's version and origin, the broker's workers and settings), and
    per scenario its medians (msg/s, ratio, p50/p99 ms, CPU µs per message and the broker's per request, RSS
    MB), rounds and validity.
    ``source``: where the run's JSON was written."""
    git, settings, machine = document.get("git") or {}, document["settings"], document["machine"]
    scenarios: dict[str, Any] = {}
    for entry in document["scenarios"]:
        m = entry.get("median")
        if not m:
            scenarios[entry["scenario"]] = {"valid": entry["valid"], "skipped": entry.get("skipped")}
            continue
        cpu, latency = m["cpu_us_per_msg"], m["latency_ms"]
        scenarios[entry["scenario"]] = {
            "msg_per_s": _rounded(m["msg_per_s"], 0),
            "ratio": _rounded(m.get("ratio"), 3),
            "p50_ms": _rounded(latency.get("50"), 2),
            "p99_ms": _rounded(latency.get("99"), 2),
            "broker_us_per_msg": _rounded(cpu.get("broker"), 1),
            "broker_us_per_request": _rounded(m.get("broker_us_per_request"), 1),
            "postgres_us_per_msg": _rounded(cpu.get("postgres"), 1),
            "broker_rss_mb": _rounded(m.get("broker_rss_mb_peak"), 0),
            "rounds": sum(1 for r in entry["runs"] if "msg_per_s" in r),
            "valid": entry["valid"],
        }
    return {
        "date": document["started_at"],
        "commit": git.get("commit"),
        "dirty": git.get("dirty"),
        "command": document.get("command"),
        "source": source,
        "quick": settings.get("quick", False),
        "runs": settings.get("runs"),
        "seconds": settings.get("seconds"),
        "machine": {
            "cores": machine.get("cores"),
            "other_cpu_share_median": _rounded(machine.get("other_cpu_share_median"), 3),
        },
        "postgres": {"server": _server(document), "version": document["postgres"].get("version")},
        "broker": {"workers": document["broker"].get("workers"), "env": document["broker"].get("env") or {}},
        "scenarios": scenarios,
    }


def append_history(path: Path, row: dict[str, Any]) -> None:
    """Append ``row`` to the NDJSON file ``path`` as one line."""
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(row, separators=(",", ":"), sort_keys=True) + "\n")


def is_reference(document: dict[str, Any]) -> bool:
    """Whether a run may stand on the page: a full run (not ``--quick``) of a known, clean commit on the
    suite's own PostgreSQL (the default configuration; a tuned server's figures are not comparable)."""
    git = document.get("git") or {}
    return (
        not document["settings"].get("quick")
        and bool(git.get("commit"))
        and not git.get("dirty")
        and _server(document) == "private"
    )


def load_documents(paths: Iterable[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """The run documents in ``paths`` (JSON files, or directories of them), oldest first."""
    files: list[Path] = []
    for path in paths:
        files += sorted(path.glob("*.json")) if path.is_dir() else [path]
    documents = [(file, json.loads(file.read_text())) for file in files]
    return sorted(documents, key=lambda item: item[1]["started_at"])


def current_figures(
    documents: list[tuple[Path, dict[str, Any]]],
    link: Callable[[Path], str],
    kind_lines: Callable[[dict[str, Any]], list[str]],
) -> str:
    """The page's block: for each scenario (catalogue order), the newest reference run (:func:`is_reference`)
    that measured it validly, as one table row naming its run; then each scenario's own lines (its kind's
    ``report_lines``), and the runs cited. ``link(path)``: the Markdown target of a run's JSON file."""
    newest: dict[str, tuple[Path, dict[str, Any], dict[str, Any]]] = {}
    for path, document in documents:  # oldest first: a newer run replaces an older one
        if not is_reference(document):
            continue
        for entry in document["scenarios"]:
            if entry.get("median") and entry["valid"]:
                newest[entry["scenario"]] = (path, document, entry)
    order = [s.name for s in SCENARIOS] + sorted(set(newest) - {s.name for s in SCENARIOS})
    lines = [HEADER, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    cited: dict[Path, dict[str, Any]] = {}
    for name in order:
        if name not in newest:
            lines.append(f"| {name} | not measured yet | | | | | | | | | | |")
            continue
        path, document, entry = newest[name]
        cited[path] = document
        m = entry["median"]
        cpu, latency = m["cpu_us_per_msg"], m["latency_ms"]
        rounds = sum(1 for r in entry["runs"] if "msg_per_s" in r)
        when = document["started_at"][:16].replace("T", " ")
        cells = [
            name,
            number(m["msg_per_s"]),
            number(m.get("ratio"), 2),
            number(latency.get("50"), 1),
            number(latency.get("99"), 1),
            number(cpu.get("broker"), 1),
            number(m.get("broker_us_per_request"), 1),
            number(cpu.get("postgres"), 1),
            number(m.get("broker_rss_mb_peak")),
            str(rounds),
            f"[{when}]({link(path)})",
            document["git"]["commit"],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    for name in order:
        own = kind_lines(newest[name][2]) if name in newest else []
        lines += [""] + own if own else []
    lines += ["", "The runs cited (other processes' share of the cores during the windows, median):", ""]
    for path, document in sorted(cited.items(), key=lambda item: item[1]["started_at"]):
        other = document["machine"].get("other_cpu_share_median")
        lines.append(
            f"- [{path.name}]({link(path)}): {document['started_at'][:16].replace('T', ' ')} UTC, commit "
            f"{document['git']['commit']}, {document['settings']['runs']} round(s) of "
            f"{document['settings']['seconds']:g} s, other processes {number((other or 0) * 100)}%; "
            f"`{document.get('command', '')}`"
        )
    return "\n".join(lines)


def rewrite_page(page: Path, block: str) -> None:
    """Replace what lies between :data:`BEGIN` and :data:`END` in ``page`` with ``block``. Raises ValueError
    when the page lacks the markers."""
    text = page.read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{page} has no block between {BEGIN!r} and {END!r}")
    page.write_text(text[: start + len(BEGIN)] + "\n" + block + "\n" + text[end:])


def write_summary(
    paths: Iterable[Path], page: Path, kind_lines: Callable[[dict[str, Any]], list[str]]
) -> int:
    """Rewrite ``page``'s current-figures block from the run documents in ``paths`` (files or directories),
    links relative to the page; returns how many documents were read."""
    documents = load_documents(paths)

    def link(path: Path) -> str:
        return Path(os.path.relpath(path.resolve(), page.resolve().parent)).as_posix()

    rewrite_page(page, current_figures(documents, link, kind_lines))
    return len(documents)
