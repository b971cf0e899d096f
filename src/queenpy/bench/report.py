"""Outputs of a run: the terminal table (plain text, pasteable into Markdown) and the PNG chart; a kind's own
lines and charts come from its module (``report_lines``, ``charts``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from queenpy.bench.postgres import PrivatePostgres

__all__ = ["CHART_MISSING", "bound", "chart", "number", "pyplot", "request_lines", "settings_line", "table"]

CHART_MISSING = "matplotlib is not installed: pip install 'queenpy[bench]'"


def number(value: float | None, digits: int = 0) -> str:
    """``value`` with thousands separators and ``digits`` decimals; ``-`` for None."""
    return "-" if value is None else f"{value:,.{digits}f}"


_SETTINGS = (
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_sync_method",
    "shared_buffers",
    "max_connections",
    "work_mem",
    "wal_buffers",
    "max_wal_size",
    "checkpoint_timeout",
    "commit_delay",
    "wal_compression",
    "jit",
)


def settings_line(facts: dict[str, Any]) -> str:
    """PostgreSQL's version and the settings that decide its speed, on one line."""
    return f"{facts['version']}; " + " ".join(f"{name}={facts[name]}" for name in _SETTINGS if name in facts)


def table(document: dict[str, Any], kind_lines: Callable[[dict[str, Any]], list[str]]) -> str:
    """The results as Markdown tables: scenarios (medians), then limits, what limited each, each scenario's
    own lines (``kind_lines(entry)``: its kind's ``report_lines``), then problems and notes."""
    settings, pg, broker = document["settings"], document["postgres"], document["broker"]
    machine = document["machine"]
    git = document["git"]
    title = (
        f"queenbench {document['started_at'][:19]}Z  git {git.get('commit', '?')}"
        f"{' (dirty)' if git.get('dirty') else ''}  command: {document['command']}"
    )
    origin = pg.get("server", PrivatePostgres.origin)  # documents written before "server" was recorded
    server = (
        f"PostgreSQL: {origin}; {settings_line(pg)}\n"
        f"broker workers: {broker['workers']} ({broker['processes']} processes), env {broker['env'] or '{}'}"
    )
    load = (
        f"{settings['runs']} run(s), medians; {settings['seconds']:g}s window after {settings['warmup']:g}s "
        f"warm-up; CPU used by other processes on this {machine['cores']}-core machine during the windows: "
        f"median {number((machine['other_cpu_share_median'] or 0) * 100)}%, max "
        f"{number((machine['other_cpu_share_max'] or 0) * 100)}% of all cores"
    )
    lines = [
        title,
        server,
        load,
        "",
        (
            "| scenario | msg/s | limit msg/s | ratio | p50 ms | p99 ms | broker µs/msg | broker µs/req "
            "| PG µs/msg | limit PG µs/row | PG cost ratio | wrk µs/msg | broker RSS (PSS) MB | other CPU "
            "| valid |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for entry in document["scenarios"]:
        m = entry.get("median")
        if entry.get("skipped") and not m:
            lines.append(f"| {entry['scenario']} |" + " - |" * 13 + " skipped |")
            continue
        if not m:
            lines.append(f"| {entry['scenario']} |" + " - |" * 13 + " INVALID |")
            continue
        cpu, latency = m["cpu_us_per_msg"], m["latency_ms"]
        lines.append(
            f"| {entry['scenario']} | {number(m['msg_per_s'])} | {number(m['limit_msg_per_s'])} | "
            f"{number(m['ratio'], 2)} | {number(latency['50'], 1)} | {number(latency['99'], 1)} | "
            f"{number(cpu['broker'], 1)} | {number(m.get('broker_us_per_request'), 1)} | "
            f"{number(cpu['postgres'], 1)} | "
            f"{number(m.get('limit_postgres_us_per_row'), 1)} | "
            f"{number(m.get('postgres_cost_ratio'), 2)} | {number(cpu['wrk'], 1)} | "
            f"{number(m['broker_rss_mb_peak'])} ({number(m['broker_pss_mb_peak'])}) | "
            f"{number(m['cpu_share_of_machine']['other'] * 100)}% | "
            f"{'yes' if entry['valid'] else 'INVALID'} |"
        )
    lines += [
        "",
        "| limit (pgbench, same server, same run) | rows/s | PG µs/row | pgbench µs/row | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, entry in document["limits"].items():
        m = entry["median"]
        lines.append(
            f"| {key}: {entry['description']} | {number(m['msg_per_s'])} | "
            f"{number(m['cpu_us_per_msg']['postgres'], 1)} | {number(m['cpu_us_per_msg']['pgbench'], 1)} | "
            f"{number(m['latency_ms']['50'], 2)} | {number(m['latency_ms']['99'], 2)} |"
            + ("" if m["valid"] else " INVALID")
        )
    lines += [
        "",
        (
            "What limited each (share of all cores during the window; what PostgreSQL's active backends "
            "were doing, sampled every 50 ms: CPU = running, IO:WALSync = WAL fsync, Lock:* = "
            "row/transaction locks, LWLock:WALWrite = waiting for another backend's WAL flush):"
        ),
    ]
    for entry in document["scenarios"]:
        m = entry.get("median")
        if m:
            lines.append(f"- {entry['scenario']}: {bound(m['cpu_share_of_machine'], m['pg_waits'])}")
    for key, entry in document["limits"].items():
        lines.append(f"- limit {key}: {bound(None, entry['median']['pg_waits'])}")
    per_request = request_lines(document)
    if per_request:
        lines += [""] + per_request
    for entry in document["scenarios"]:
        own = kind_lines(entry)
        if own:
            lines += [""] + own
    ledger = document.get("inserts_ledger")
    if ledger:
        lines.append("")
        lines.append(
            f"queen.messages over the whole run: n_tup_ins +{ledger['n_tup_ins_delta']:,}, rows stored "
            f"+{ledger['rows_delta']:,}: {ledger['verdict']}"
        )
    remarks = [(e["scenario"], "INVALID: " + p) for e in document["scenarios"] for p in e["problems"]]
    remarks += [(e["scenario"], n) for e in document["scenarios"] for n in e["notes"]]
    remarks += [
        (e["scenario"], "skipped: " + e["skipped"]) for e in document["scenarios"] if e.get("skipped")
    ]
    if remarks:
        lines.append("")
        lines += [f"- {name}: {text}" for name, text in remarks]
    return "\n".join(lines)


def request_lines(document: dict[str, Any]) -> list[str]:
    """Where a request's CPU goes: per scenario whose kind counted its requests, the broker's CPU per request
    (median, and the rounds' range) next to PostgreSQL's per message, with the messages a request carries."""
    lines = []
    for entry in document["scenarios"]:
        m = entry.get("median") or {}
        us = m.get("broker_us_per_request")
        if us is None:
            continue
        spread = m.get("broker_us_per_request_range")
        rounds = (
            f" [{number(spread[0], 1)}-{number(spread[1], 1)}]" if spread and spread[0] != spread[1] else ""
        )
        carried = m["msg_per_s"] / m["requests_per_s"] if m.get("requests_per_s") else None
        lines.append(
            f"- {entry['scenario']}: broker {number(us, 1)} µs/request{rounds}, "
            f"{number(carried, 1)} msg/request; PG {number(m['cpu_us_per_msg'].get('postgres'), 1)} µs/msg; "
            f"{number(m.get('requests_per_s'))} requests/s"
        )
    if not lines:
        return []
    title = (
        "Broker CPU per HTTP request (median of the rounds, [range]) next to PostgreSQL's per message "
        "(consumption counts pops and their ack or transaction requests):"
    )
    return [title, *lines]


def bound(cpu: dict[str, float] | None, waits: dict[str, float]) -> str:
    """One line: who used the cores, and what PostgreSQL's active backends waited on."""
    parts = []
    if cpu:
        names = {"postgres": "PG", "other": "others"}  # a kind's own processes by their own key
        parts.append(
            "cores: "
            + ", ".join(
                f"{names.get(k, k)} {v * 100:.0f}%"
                for k, v in sorted(cpu.items(), key=lambda item: -item[1])
                if v >= 0.02
            )
        )
    states = [(k, v) for k, v in waits.items() if k != "active_backends" and v >= 0.03]
    if states:
        parts.append(
            f"PG backends ({waits.get('active_backends', 0):.1f} active): "
            + ", ".join(f"{k} {v * 100:.0f}%" for k, v in states[:5])
        )
    return "; ".join(parts) or "-"


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (files, no display), or None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def chart(document: dict[str, Any], path: Path) -> bool:
    """Write the PNG: throughput per scenario next to its limit (ratio on top), and latency p50/p99.
    Returns False (and writes nothing) when matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return False
    entries = [e for e in document["scenarios"] if e.get("median")]
    names = [e["scenario"] + ("" if e["valid"] else " (INVALID)") for e in entries]
    broker = [e["median"]["msg_per_s"] or 0 for e in entries]
    limit = [e["median"]["limit_msg_per_s"] or 0 for e in entries]
    p50 = [e["median"]["latency_ms"]["50"] or 0 for e in entries]
    p99 = [e["median"]["latency_ms"]["99"] or 0 for e in entries]
    xs = list(range(len(entries)))
    width = 0.4
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(8, 0.9 * len(entries) + 3), 9), sharex=True)
    top.bar([x - width / 2 for x in xs], broker, width, label="queenpy broker", color="#3b7dd8")
    top.bar([x + width / 2 for x in xs], limit, width, label="PostgreSQL limit (pgbench)", color="#bbbbbb")
    for x, e in zip(xs, entries):
        ratio = e["median"]["ratio"]
        if ratio is not None:
            top.annotate(f"{ratio:.2f}", (x - width / 2, broker[x]), ha="center", va="bottom", fontsize=8)
    top.set_yscale("log")
    top.set_ylabel("messages / s (log)")
    top.set_title("Throughput, broker vs its limit (ratio above the bar)")
    top.legend(loc="upper left", fontsize=8)
    top.grid(axis="y", alpha=0.3)
    bottom.bar([x - width / 2 for x in xs], p50, width, label="p50", color="#58a55c")
    bottom.bar([x + width / 2 for x in xs], p99, width, label="p99", color="#d8823b")
    bottom.set_yscale("log")
    bottom.set_ylabel("latency ms (log)")
    bottom.set_title("Request latency from wrk")
    bottom.legend(loc="upper left", fontsize=8)
    bottom.grid(axis="y", alpha=0.3)
    bottom.set_xticks(xs)
    bottom.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
    git = document["git"].get("commit", "?")
    other = document["machine"].get("other_cpu_share_median") or 0.0
    fig.suptitle(
        f"queenbench {document['started_at'][:16]}Z, git {git}, "
        f"{document['settings']['runs']} run(s), broker workers {document['broker']['workers']}; "
        f"other processes used {other * 100:.0f}% of the cores (median)",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
