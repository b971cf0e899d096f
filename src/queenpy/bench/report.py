"""Outputs of a run: the terminal table (plain text, pasteable into Markdown) and the PNG chart."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from queenpy.bench.postgres import PrivatePostgres

__all__ = ["CHART_MISSING", "bound", "chart", "number", "settings_line", "soak_charts", "table"]

CHART_MISSING = "matplotlib is not installed: pip install 'queenpy[bench]'"


def number(value: float | None, digits: int = 0) -> str:
    """``value`` with thousands separators and ``digits`` decimals; ``-`` for None."""
    return "-" if value is None else f"{value:,.{digits}f}"


_SETTINGS = ("fsync", "synchronous_commit", "full_page_writes", "wal_sync_method", "shared_buffers", "max_connections",
             "work_mem", "wal_buffers", "max_wal_size", "checkpoint_timeout", "commit_delay", "wal_compression",
             "jit")


def settings_line(facts: dict[str, Any]) -> str:
    """PostgreSQL's version and the settings that decide its speed, on one line."""
    return f"{facts['version']}; " + " ".join(f"{name}={facts[name]}" for name in _SETTINGS if name in facts)


def table(document: dict[str, Any], kind_lines: Callable[[dict[str, Any]], list[str]]) -> str:
    """The results as Markdown tables: scenarios (medians), then limits, what limited each, each scenario's
    own lines (``kind_lines(entry)``: its kind's ``report_lines``), then problems and notes."""
    settings, pg, broker = document["settings"], document["postgres"], document["broker"]
    machine = document["machine"]
    git = document["git"]
    title = (f"queenbench {document['started_at'][:19]}Z  git {git.get('commit', '?')}"
             f"{' (dirty)' if git.get('dirty') else ''}  command: {document['command']}")
    origin = pg.get("server", PrivatePostgres.origin)  # documents written before "server" was recorded
    server = (f"PostgreSQL: {origin}; {settings_line(pg)}\n"
              f"broker workers: {broker['workers']} ({broker['processes']} processes), env {broker['env'] or '{}'}")
    load = (f"{settings['runs']} run(s), medians; {settings['seconds']:g}s window after {settings['warmup']:g}s "
            f"warm-up; CPU used by other processes on this {machine['cores']}-core machine during the windows: "
            f"median {number((machine['other_cpu_share_median'] or 0) * 100)}%, max "
            f"{number((machine['other_cpu_share_max'] or 0) * 100)}% of all cores")
    lines = [
        title, server, load, "",
        ("| scenario | msg/s | limit msg/s | ratio | p50 ms | p99 ms | broker µs/msg | PG µs/msg | limit PG µs/row "
         "| PG cost ratio | wrk µs/msg | broker RSS (PSS) MB | other CPU | valid |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for entry in document["scenarios"]:
        m = entry.get("median")
        if entry.get("skipped") and not m:
            lines.append(f"| {entry['scenario']} | - | - | - | - | - | - | - | - | - | - | skipped |")
            continue
        if not m:
            lines.append(f"| {entry['scenario']} | - | - | - | - | - | - | - | - | - | - | - | - | INVALID |")
            continue
        cpu, latency = m["cpu_us_per_msg"], m["latency_ms"]
        lines.append(
            f"| {entry['scenario']} | {number(m['msg_per_s'])} | {number(m['limit_msg_per_s'])} | "
            f"{number(m['ratio'], 2)} | {number(latency['50'], 1)} | {number(latency['99'], 1)} | "
            f"{number(cpu['broker'], 1)} | {number(cpu['postgres'], 1)} | {number(m.get('limit_postgres_us_per_row'), 1)} | "
            f"{number(m.get('postgres_cost_ratio'), 2)} | {number(cpu['wrk'], 1)} | "
            f"{number(m['broker_rss_mb_peak'])} ({number(m['broker_pss_mb_peak'])}) | "
            f"{number(m['cpu_share_of_machine']['other'] * 100)}% | {'yes' if entry['valid'] else 'INVALID'} |")
    lines += ["", "| limit (pgbench, same server, same run) | rows/s | PG µs/row | pgbench µs/row | p50 ms | p99 ms |",
              "|---|---:|---:|---:|---:|---:|"]
    for key, entry in document["limits"].items():
        m = entry["median"]
        lines.append(f"| {key}: {entry['description']} | {number(m['msg_per_s'])} | "
                     f"{number(m['cpu_us_per_msg']['postgres'], 1)} | {number(m['cpu_us_per_msg']['pgbench'], 1)} | "
                     f"{number(m['latency_ms']['50'], 2)} | {number(m['latency_ms']['99'], 2)} |"
                     + ("" if m["valid"] else " INVALID"))
    lines += ["", ("What limited each (share of all cores during the window; what PostgreSQL's active backends were "
              "doing, sampled every 50 ms: CPU = running, IO:WALSync = WAL fsync, Lock:* = row/transaction locks, "
              "LWLock:WALWrite = waiting for another backend's WAL flush):")]
    for entry in document["scenarios"]:
        m = entry.get("median")
        if m:
            lines.append(f"- {entry['scenario']}: {bound(m['cpu_share_of_machine'], m['pg_waits'])}")
    for key, entry in document["limits"].items():
        lines.append(f"- limit {key}: {bound(None, entry['median']['pg_waits'])}")
    for entry in document["scenarios"]:
        own = kind_lines(entry)
        if own:
            lines += [""] + own
    ledger = document.get("inserts_ledger")
    if ledger:
        lines.append("")
        lines.append(f"queen.messages over the whole run: n_tup_ins +{ledger['n_tup_ins_delta']:,}, rows stored "
                     f"+{ledger['rows_delta']:,}: {ledger['verdict']}")
    remarks = [(e["scenario"], "INVALID: " + p) for e in document["scenarios"] for p in e["problems"]]
    remarks += [(e["scenario"], n) for e in document["scenarios"] for n in e["notes"]]
    remarks += [(e["scenario"], "skipped: " + e["skipped"]) for e in document["scenarios"] if e.get("skipped")]
    if remarks:
        lines.append("")
        lines += [f"- {name}: {text}" for name, text in remarks]
    return "\n".join(lines)


def bound(cpu: dict[str, float] | None, waits: dict[str, float]) -> str:
    """One line: who used the cores, and what PostgreSQL's active backends waited on."""
    parts = []
    if cpu:
        names = {"postgres": "PG", "broker": "broker", "wrk": "wrk", "spark": "Spark", "other": "others",
                 "idle": "idle"}
        parts.append("cores: " + ", ".join(f"{names[k]} {v * 100:.0f}%" for k, v in
                                           sorted(cpu.items(), key=lambda item: -item[1]) if v >= 0.02))
    states = [(k, v) for k, v in waits.items() if k != "active_backends" and v >= 0.03]
    if states:
        parts.append(f"PG backends ({waits.get('active_backends', 0):.1f} active): "
                     + ", ".join(f"{k} {v * 100:.0f}%" for k, v in states[:5]))
    return "; ".join(parts) or "-"


def _pyplot() -> Any:
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
    plt = _pyplot()
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
    fig.suptitle(f"queenbench {document['started_at'][:16]}Z, git {git}, "
                 f"{document['settings']['runs']} run(s), broker workers {document['broker']['workers']}; "
                 f"other processes used {other * 100:.0f}% of the cores (median)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def soak_charts(document: dict[str, Any], path: Path) -> list[Path]:
    """Write one PNG per soak run next to ``path`` (``<stem>-soak-r<round>.png``): over time, in minutes from the
    measured soak's start (the settling before it at negative minutes), the messages table's size by part (the
    heap, each index), the broker's RSS, and the producer's and consumers' rates between samples, with the
    settling and the paused ("off") slices shaded and the flatness window marked. Returns the paths written;
    none when matplotlib is missing or no run has soak samples."""
    runs = [run for entry in document["scenarios"] for run in entry.get("runs", [])
            if run.get("soak", {}).get("samples")]
    plt = _pyplot()
    if plt is None:
        return []
    written = []
    for run in runs:
        soak = run["soak"]
        settle = soak.get("settle") or {}
        shift = settle.get("seconds", 0.0)
        samples = [{**x, "t": x["t"] - shift} for x in settle.get("samples", [])] + soak["samples"]
        minutes = [x["t"] / 60 for x in samples]
        parts = sorted({k for x in samples for k in x.get("table_parts_bytes", {})}, key=lambda k: (k != "heap", k))
        fig, (table_ax, rss_ax, rate_ax) = plt.subplots(3, 1, figsize=(11, 10), sharex=True)
        table_ax.stackplot(minutes, *[[x.get("table_parts_bytes", {}).get(k, 0.0) / 2**20 for x in samples]
                                      for k in parts], labels=parts, alpha=0.8)
        table_ax.set_ylabel("queen.messages MB")
        trend = soak["flatness"]["table_mb"]
        table_ax.set_title(f"messages table by part: over the flatness window {number(trend.get('slope_per_min'), 3)}"
                           f" MB/min, flat {trend.get('flat')}", fontsize=10)
        table_ax.legend(loc="upper left", fontsize=7)
        rss_ax.plot(minutes, [x["rss_bytes"] / 2**20 for x in samples], color="#3b7dd8")
        rss = soak["flatness"]["broker_rss_mb"]
        rss_ax.set_ylim(0, 1.1 * max(x["rss_bytes"] / 2**20 for x in samples))
        rss_ax.set_ylabel("broker RSS MB")
        rss_ax.set_title(f"broker RSS (all processes): {number(rss.get('slope_per_min'), 3)} MB/min, flat "
                         f"{rss.get('flat')}", fontsize=10)
        # samples a second or more apart (a wait samples every second; two taken at a slice's boundary are a few
        # milliseconds apart, and their difference is a batch or nothing)
        pairs = [(a, b) for a, b in itertools.pairwise(samples) if b["t"] - a["t"] >= 1.0]
        mids = [(a["t"] + b["t"]) / 120 for a, b in pairs]
        rate_ax.plot(mids, [_per_second(a, b, "produced") for a, b in pairs], label="pushed", lw=0.8)
        rate_ax.plot(mids, [_per_second(a, b, "cursor") for a, b in pairs], label="consumed", lw=0.8)
        ratios = soak.get("throughput_on_vs_off", {})
        rate_ax.set_title(f"msg/s between samples; services on/off: push {number(ratios.get('push'), 3)}, consume "
                          f"{number(ratios.get('consume'), 3)}", fontsize=10)
        rate_ax.set_ylabel("msg/s")
        rate_ax.set_xlabel("minutes from the measured soak's start (settling before 0)")
        rate_ax.legend(loc="upper left", fontsize=7)
        for ax in (table_ax, rss_ax, rate_ax):
            if settle.get("samples"):
                ax.axvspan(minutes[0], 0, color="#999999", alpha=0.15, lw=0)
            for begin, end in _spans(samples, "off"):
                ax.axvspan(begin / 60, end / 60, color="#d84b3b", alpha=0.15, lw=0)
            for bound in soak.get("flatness_window_s", []):
                ax.axvline(bound / 60, color="#333333", ls="--", lw=0.8)
            ax.grid(alpha=0.3)
        fig.suptitle(f"soak {document['started_at'][:16]}Z, git {document['git'].get('commit', '?')}: producer "
                     f"{soak.get('target_producer_msg_per_s', 0):,.0f} msg/s; grey: settling, red: services paused,"
                     " dashed: flatness window", fontsize=10)
        fig.tight_layout()
        out = path.with_name(f"{path.stem}-soak-r{run.get('round', 1)}.png")
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110)
        plt.close(fig)
        written.append(out)
    return written


def _per_second(a: dict[str, Any], b: dict[str, Any], key: str) -> float:
    return (b[key] - a[key]) / (b["t"] - a["t"]) if b["t"] > a["t"] else 0.0


def _spans(samples: list[dict[str, Any]], state: str) -> list[tuple[float, float]]:
    """(first t, last t) of each run of consecutive samples in ``state`` (``services``)."""
    runs = (list(group) for key, group in itertools.groupby(samples, key=lambda x: x["services"]) if key == state)
    return [(run[0]["t"], run[-1]["t"]) for run in runs]
