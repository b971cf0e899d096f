"""Run the suite: private PostgreSQL, broker, rounds of (limit, scenario) pairs, medians, outputs.

Rounds are interleaved: round 1 runs every selected scenario once (each right after the pgbench limit it is
compared with, measured in the same round), then round 2, and so on, so slow drifts of a shared machine
spread over all scenarios instead of landing on one. A scenario's ratio is the median of its per-round
ratios (broker / limit of the same round).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from queenpy.bench import report
from queenpy.bench.broker import Broker
from queenpy.bench.kinds.soak import waits_limit_s
from queenpy.bench.kinds.spark import ScenarioSkipped
from queenpy.bench.parsing import median, select_names
from queenpy.bench.postgres import BenchError, BenchServer, ExternalPostgres, PrivatePostgres, Sql
from queenpy.bench.scenarios import LIMITS, SCENARIOS, Bench, Options, Scenario, environment_facts
from queenpy.bench.wrk import find_wrk, stop_all

__all__ = ["BenchError", "Config", "run", "scenario_names"]


@dataclass
class Config:
    """What to run. ``None`` for runs/seconds/warmup means the mode's default (quick: 1 run, 3 s window,
    1 s warm-up; full: 3 runs, 10 s, 3 s). ``broker_env`` is added to the broker's environment;
    ``workers`` 0 leaves the broker's default (one per core). ``database_url``: run on that server (one the
    user started and tuned) instead of a private one with the embedded default's settings."""

    quick: bool = False
    runs: int | None = None
    seconds: float | None = None
    warmup: float | None = None
    workers: int = 0
    broker_env: dict[str, str] = field(default_factory=dict)
    connections: int = 50
    only: str | None = None
    out: Path = Path("bench-results.json")
    chart: Path | None = None
    workdir: Path | None = None
    keep: bool = False
    checkpoint: bool = True
    keepup_fraction: float = 0.55
    soak_duration_s: float = 600.0
    soak_share: float = 0.5
    soak_rate: float | None = None
    soak_transaction_ids: bool = False
    command: str = ""
    database_url: str | None = None


def scenario_names(quick: bool = False) -> list[str]:
    """Names of the scenarios that a run would select by default (soak only when named)."""
    return [s.name for s in SCENARIOS if s.default and (s.quick or not quick)]


def _select(config: Config) -> list[Scenario]:
    if config.only:
        names = select_names([s.name for s in SCENARIOS], config.only)
    else:
        names = scenario_names(config.quick)
    return [s for s in SCENARIOS if s.name in names]


def _git_describe() -> dict[str, Any]:
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                                    capture_output=True, text=True, check=True).stdout.strip())
        return {"commit": commit, "dirty": dirty}
    except (OSError, subprocess.CalledProcessError):
        return {}


def _stop_on_signal(signum: int, _frame: Any) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a second signal must not cut the cleanup short
        if signal.getsignal(sig) is _stop_on_signal:
            signal.signal(sig, signal.SIG_IGN)
    stop_all()  # first: threads wait for their wrk, and the cleanup joins them
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def _install_stop_handlers() -> dict[int, Any]:
    """SIGTERM (and SIGINT, SIGHUP unless ignored, as in a background job or under nohup) stop the run through
    its cleanup: wrk killed, broker and private PostgreSQL stopped. Returns the previous handlers (none when
    not on the main thread, where Python allows no handler)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous: dict[int, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        handler = signal.getsignal(sig)
        if sig != signal.SIGTERM and handler == signal.SIG_IGN:
            continue
        previous[sig] = signal.signal(sig, _stop_on_signal)
    return previous


def run(config: Config, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the benchmark and write the outputs; return the JSON document. Raises :class:`BenchError` when
    something needed is missing (wrk, pgbench) or the broker does not start, KeyboardInterrupt when stopped by
    SIGTERM, SIGINT or SIGHUP (after stopping wrk, the broker and the private PostgreSQL)."""
    find_wrk()
    scenarios = _select(config)
    runs = config.runs or (1 if config.quick else 3)
    options = Options(seconds=config.seconds or (3.0 if config.quick else 10.0),
                      warmup=config.warmup if config.warmup is not None else (1.0 if config.quick else 3.0),
                      connections=config.connections, checkpoint=config.checkpoint,
                      keepup_fraction=config.keepup_fraction, soak_duration_s=config.soak_duration_s,
                      soak_share=config.soak_share, soak_rate=config.soak_rate,
                      soak_transaction_ids=config.soak_transaction_ids)
    limits_used = sorted({s.limit for s in scenarios} | {"select1"}, key=list(LIMITS).index)
    per_round = len(scenarios) * (options.warmup + options.seconds + 3) + len(limits_used) * (
        options.warmup + options.seconds + 1) + sum(options.soak_duration_s for s in scenarios if s.kind == "soak")
    broker_env = dict(config.broker_env)
    if any(s.kind == "soak" for s in scenarios):
        # completed retention every second, so the soak's table stays small (unless --env says otherwise)
        broker_env.setdefault("RETENTION_INTERVAL", "1000")
    # the settling and the waits before the soak's slices, at their limits; the probes not counted
    soak_extra = sum(waits_limit_s(options.soak_duration_s) for s in scenarios if s.kind == "soak")
    echo(f"queenbench: {len(scenarios)} scenario(s) x {runs} run(s), {options.seconds:g}s measured after "
         f"{options.warmup:g}s warm-up; about {runs * per_round / 60:.1f} min"
         + (f", and up to {runs * soak_extra / 60:.0f} min more for the soak's settling and the waits before its "
            "slices" if soak_extra else ""))
    if config.workdir is not None:
        config.workdir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="queenbench-", dir=config.workdir))
    os.chmod(workdir, 0o755)  # pgserver runs PostgreSQL as its own user when we are root
    started = time.time()
    git = _git_describe()  # now: other sessions may commit while the suite runs
    pg: BenchServer | None = None
    broker = sql = bench = None
    handlers = _install_stop_handlers()
    try:
        pg = ExternalPostgres(config.database_url) if config.database_url else PrivatePostgres(workdir)
        broker = Broker(pg.url, workdir, config.workers or None, broker_env)
        broker.wait_ready()
        sql = Sql(pg.url)
        facts = environment_facts(sql)
        facts["server"] = pg.origin
        facts["pgbench"] = str(pg.pgbench)
        bench = Bench(pg, broker, sql, workdir, options, echo)
        if config.database_url:  # the user's database may hold an earlier run's queues
            bench.queue_prefix = f"qb{int(started) % 1_000_000}-"
        echo(f"PostgreSQL: {pg.origin}; {report.settings_line(facts)}")
        echo(f"broker {broker.url} ({bench.memory.peak()[2]} processes); work dir {workdir}")
        for round_no in range(1, runs + 1):
            echo(f"-- round {round_no}/{runs}")
            for key in limits_used:
                if key == "select1":
                    _echo_limit(echo, bench.measure_limit(LIMITS[key], round_no))
            for scenario in scenarios:
                if (round_no, scenario.limit) not in bench.limit_results:
                    _echo_limit(echo, bench.measure_limit(LIMITS[scenario.limit], round_no))
                try:
                    result = bench.run_scenario(scenario, round_no)
                except BenchError:
                    raise
                except ScenarioSkipped as exc:
                    echo(f"   {scenario.name:<28} skipped: {exc}")
                    bench.scenario_results[(round_no, scenario.name)] = {
                        "scenario": scenario.name, "round": round_no, "valid": True, "skipped": str(exc),
                        "problems": [], "notes": [], "limit": scenario.limit}
                    continue
                except Exception as exc:  # noqa: BLE001 (a crashed scenario is reported, the others still run)
                    result = {"scenario": scenario.name, "round": round_no, "valid": False,
                              "problems": [f"crashed: {exc.__class__.__name__}: {exc}"], "notes": [],
                              "limit": scenario.limit}
                    bench.scenario_results[(round_no, scenario.name)] = result
                _echo_run(echo, result, bench.limit_results.get((round_no, scenario.limit)))
        echo("-- checking n_tup_ins against the rows stored (statistics reach PostgreSQL's views late)")
        ledger = bench.check_inserts()
        document = _document(config, options, runs, facts, scenarios, bench, broker, started)
        document["git"] = git
        document["inserts_ledger"] = ledger
    finally:
        stop_all()
        if bench is not None:
            bench.close()
        if sql is not None:
            sql.close()
        if broker is not None:
            broker.stop()
        if pg is not None:
            pg.stop()
        if not config.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    config.out.parent.mkdir(parents=True, exist_ok=True)
    config.out.write_text(json.dumps(document, indent=2, default=str) + "\n")
    echo("")
    echo(report.table(document))
    chart = config.chart or config.out.with_suffix(".png")
    made = report.chart(document, chart)
    soak_charts = report.soak_charts(document, chart) if made else []
    echo(f"\nJSON: {config.out}" + (f"   chart: {chart}" if made else f"   (no chart: {report.CHART_MISSING})")
         + "".join(f"   soak chart: {path}" for path in soak_charts))
    return document


def _echo_limit(echo: Callable[[str], None], figures: dict[str, Any]) -> None:
    latency = figures.get("latency_ms", {})
    extra = f"  p50 {latency['50']:.2f} ms p99 {latency['99']:.2f} ms" if "50" in latency else ""
    echo(f"   limit {figures['limit']:<24} {figures['msg_per_s']:>11,.0f} /s{extra}"
         + ("" if figures["valid"] else "  INVALID: " + "; ".join(
             figures.get("problems") or [f"{figures['failed']} failed transactions"])))


def _echo_run(echo: Callable[[str], None], run: dict[str, Any], limit: dict[str, Any] | None) -> None:
    if "msg_per_s" not in run:
        echo(f"   {run['scenario']:<28} INVALID: {'; '.join(run['problems'])}")
        return
    ratio = run["msg_per_s"] / limit["msg_per_s"] if limit and limit["msg_per_s"] else None
    latency = run.get("latency_ms", {})
    text = (f"   {run['scenario']:<28} {run['msg_per_s']:>11,.0f} msg/s"
            + (f"  ratio {ratio:.2f}" if ratio is not None else "")
            + (f"  p50 {latency.get('50', 0):.1f} ms p99 {latency.get('99', 0):.1f} ms" if latency else ""))
    if not run["valid"]:
        text += "  INVALID: " + "; ".join(run["problems"])
    echo(text)


def _document(config: Config, options: Options, runs: int, facts: dict[str, Any], scenarios: list[Scenario],
              bench: Bench, broker: Broker, started: float) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    for (round_no, key), figures in sorted(bench.limit_results.items()):
        limits.setdefault(key, {"description": LIMITS[key].description, "runs": []})["runs"].append(figures)
    for limit_entry in limits.values():
        rounds = limit_entry["runs"]
        limit_entry["median"] = {
            "msg_per_s": median(r["msg_per_s"] for r in rounds),
            "cpu_us_per_msg": {k: median(r["cpu_us_per_msg"][k] for r in rounds) for k in ("postgres", "pgbench")},
            "latency_ms": {k: median(r.get("latency_ms", {}).get(k) for r in rounds) for k in ("50", "99")},
            "valid": all(r["valid"] for r in rounds),
            "pg_waits": _median_shares([r.get("pg_waits", {}) for r in rounds]),
        }
    results = []
    for scenario in scenarios:
        rounds = [bench.scenario_results[(n, scenario.name)] for n in range(1, runs + 1)
                  if (n, scenario.name) in bench.scenario_results]
        measured = [r for r in rounds if "msg_per_s" in r]
        ratios, cost_ratios = [], []
        for r in measured:
            limit = bench.limit_results.get((r["round"], scenario.limit))
            if limit and limit["msg_per_s"]:
                r["ratio"] = r["msg_per_s"] / limit["msg_per_s"]
                ratios.append(r["ratio"])
            ours, theirs = r["cpu_us_per_msg"]["postgres"], (limit or {}).get("cpu_us_per_msg", {}).get("postgres")
            if ours is not None and theirs:
                # PostgreSQL's CPU per message over the bare insert's per row, same round
                r["postgres_cost_ratio"] = ours / theirs
                cost_ratios.append(r["postgres_cost_ratio"])
        skipped = next((r["skipped"] for r in rounds if "skipped" in r), None)
        entry: dict[str, Any] = {
            "scenario": scenario.name, "description": scenario.description, "limit": scenario.limit,
            "parameters": {"kind": scenario.kind, "per_request": scenario.per_request,
                           "payload_bytes": scenario.payload_bytes, "partitions": scenario.partitions,
                           "connections": options.connections if scenario.connections == 50 else scenario.connections,
                           "mode": scenario.mode, "groups": scenario.groups, "batch": scenario.batch},
            "valid": bool(rounds) and all(r["valid"] for r in rounds),
            "problems": sorted({p for r in rounds for p in r["problems"]}),
            "notes": sorted({n for r in rounds for n in r["notes"]}),
            "runs": rounds,
        }
        if skipped:
            entry["skipped"] = skipped
        if measured:
            cpu_keys = [k for k in ("broker", "postgres", "wrk", "spark")
                        if any(k in r["cpu_us_per_msg"] for r in measured)]
            share_keys = [k for k in ("broker", "postgres", "wrk", "spark", "other", "idle")
                          if any(k in r["cpu_share_of_machine"] for r in measured)]
            entry["median"] = {
                "msg_per_s": median(r["msg_per_s"] for r in measured),
                "limit_msg_per_s": limits.get(scenario.limit, {}).get("median", {}).get("msg_per_s"),
                # PostgreSQL's CPU per row of the bare insert it is compared with (same rounds, same method)
                "limit_postgres_us_per_row": limits.get(scenario.limit, {}).get("median", {}).get(
                    "cpu_us_per_msg", {}).get("postgres"),
                "ratio": median(ratios),
                "postgres_cost_ratio": median(cost_ratios),
                "requests_per_s": median(r.get("requests_per_s") for r in measured),
                "latency_ms": {k: median(r.get("latency_ms", {}).get(k) for r in measured)
                               for k in ("50", "90", "99", "99.9")},
                "cpu_us_per_msg": {k: median(r["cpu_us_per_msg"].get(k) for r in measured) for k in cpu_keys},
                "cpu_share_of_machine": {k: median(r["cpu_share_of_machine"].get(k) for r in measured)
                                         for k in share_keys},
                "broker_rss_mb_peak": max(r["broker_rss_mb_peak"] for r in measured),
                "broker_pss_mb_peak": max(r["broker_pss_mb_peak"] for r in measured),
                "pg_waits": _median_shares([r.get("pg_waits", {}) for r in measured]),
            }
            if scenario.kind == "keepup":
                entry["median"]["keepup"] = {
                    k: median(r["keepup"][k] for r in measured)
                    for k in ("target_producer_msg_per_s", "producer_msg_per_s", "producer_share_of_push",
                              "consumer_msg_per_s", "backlog_growth_per_s")}
                entry["median"]["keepup"]["keeps_up_runs"] = sum(bool(r["keepup"]["keeps_up"]) for r in measured)
            if scenario.kind == "streams":
                entry["median"]["streams"] = {k: median(r["streams"][k] for r in measured)
                                              for k in ("cycles_per_s", "windows_emitted_per_s", "messages_per_cycle")}
            if scenario.kind == "soak":
                entry["median"]["soak"] = {
                    "table_mb_slope_per_min": median(r["soak"]["flatness"]["table_mb"]["slope_per_min"]
                                                     for r in measured),
                    "stored_messages_slope_per_min": median(
                        r["soak"]["flatness"]["stored_messages"]["slope_per_min"] for r in measured),
                    "broker_rss_mb_slope_per_min": median(r["soak"]["flatness"]["broker_rss_mb"]["slope_per_min"]
                                                          for r in measured),
                    "push_on_vs_off": median(r["soak"]["throughput_on_vs_off"]["push"] for r in measured),
                    "consume_on_vs_off": median(r["soak"]["throughput_on_vs_off"]["consume"] for r in measured),
                    "push_window_vs_off": median(r["soak"]["throughput_window_vs_off"]["push"] for r in measured),
                    "consume_window_vs_off": median(r["soak"]["throughput_window_vs_off"]["consume"]
                                                    for r in measured)}
            if scenario.kind == "spark":
                entry["median"]["spark"] = {
                    k: median(r["spark"].get(k) for r in measured)
                    for k in ("first_batch_s", "vs_push-100-1KB", "vs_handoff-tx", "batches")}
                entry["median"]["spark"]["session_start_s"] = next(
                    (r["spark"]["session_start_s"] for r in measured if r["spark"].get("session_start_s")), None)
                entry["median"]["spark"]["max_per_trigger"] = scenario.batch
        results.append(entry)
    others = [r["cpu_share_of_machine"]["other"] for e in results for r in e["runs"] if "cpu_share_of_machine" in r]
    return {
        "tool": "queenbench", "format": 1,
        "started_at": datetime.datetime.fromtimestamp(started, datetime.UTC).isoformat(),
        "duration_s": time.time() - started,
        "command": config.command or " ".join(sys.argv),
        "git": _git_describe(),
        "settings": {"quick": config.quick, "runs": runs, "seconds": options.seconds, "warmup": options.warmup,
                     "push_connections": options.connections, "checkpoint_before_each": options.checkpoint,
                     "keepup_share_of_push": options.keepup_fraction,
                     "soak_duration_s": options.soak_duration_s, "soak_share_of_push": options.soak_share,
                     "soak_rate_msg_per_s": options.soak_rate,
                     "soak_transaction_ids": options.soak_transaction_ids},
        "machine": {"cores": os.cpu_count(), "load_average_at_end": os.getloadavg(),
                    "other_cpu_share_median": median(others),
                    "other_cpu_share_max": max(others) if others else None},
        "postgres": facts,
        "broker": {"workers": config.workers or "default (one per core)", "env": broker.env,
                   "processes": bench.memory.peak()[2], "pythonpath": os.environ.get("PYTHONPATH", ""),
                   "inherited_queen_env": {k: v for k, v in os.environ.items()
                                           if k.startswith(("QUEEN_", "DB_POOL", "NUM_WORKERS"))}},
        "load_generator": {"wrk": find_wrk(), "threads": 2},
        "limits": limits,
        "scenarios": results,
    }


def _median_shares(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the median over runs (a key missing from a run counts as 0), largest first."""
    keys = {key for shares in runs for key in shares}
    found = {key: median(shares.get(key, 0.0) for shares in runs) or 0.0 for key in keys}
    return dict(sorted(found.items(), key=lambda item: (item[0] == "active_backends", -item[1])))
