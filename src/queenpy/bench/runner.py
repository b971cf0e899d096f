"""Run the suite: private PostgreSQL, broker, rounds of (limit, scenario) pairs, medians, outputs.

Each scenario is run by its kind (:data:`queenpy.bench.kinds.KINDS`, looked up by ``scenario.kind``): the
runner computes what every kind shares (rates, ratios to the limit, CPU, latency, memory) and merges in the
kind's own medians (``summarize``); it knows no kind by name.

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from queenpy.bench import report, summary
from queenpy.bench.broker import Broker
from queenpy.bench.catalog import LIMITS, SCENARIOS, Options, Scenario
from queenpy.bench.core import Context, Kind, ScenarioSkipped, environment_facts
from queenpy.bench.kinds import KINDS
from queenpy.bench.parsing import median, select_names
from queenpy.bench.postgres import BenchError, BenchServer, ExternalPostgres, PrivatePostgres, Sql
from queenpy.bench.wrk import find_wrk, stop_all

__all__ = [
    "BenchError",
    "Config",
    "dispatch",
    "kind_lines",
    "run",
    "scenario_entry",
    "scenario_names",
    "write_summary",
]


@dataclass
class Config:
    """What to run. ``None`` for runs/seconds/warmup means the mode's default (quick: 1 run, 3 s window,
    1 s warm-up; full: 3 runs, 10 s, 3 s). ``broker_env`` is added to the broker's environment;
    ``workers`` 0 leaves the broker's default (one per core). ``database_url``: run on that server (one the
    user started and tuned) instead of a private one with the embedded default's settings. ``history``: the
    NDJSON file the run's summary row is appended to (None: none)."""

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
    spark_master: str = "local[*]"
    command: str = ""
    database_url: str | None = None
    history: Path | None = None


def scenario_names(quick: bool = False) -> list[str]:
    """Names of the scenarios that a run would select by default (soak only when named)."""
    return [s.name for s in SCENARIOS if s.default and (s.quick or not quick)]


def _select(config: Config) -> list[Scenario]:
    if config.only:
        names = select_names([s.name for s in SCENARIOS], config.only)
    else:
        names = scenario_names(config.quick)
    chosen = [s for s in SCENARIOS if s.name in names]
    unknown = sorted({s.kind for s in chosen} - KINDS.keys())
    if unknown:
        raise BenchError(f"no kind module for {', '.join(unknown)} (queenpy.bench.kinds.KINDS)")
    return chosen


def kind_lines(entry: dict[str, Any]) -> list[str]:
    """A scenario's own report lines, by its kind's ``report_lines`` (none for a kind not known here)."""
    kind = KINDS.get(entry.get("parameters", {}).get("kind", ""))
    return kind.report_lines(entry) if kind is not None else []


def write_summary(paths: list[Path], page: Path) -> int:
    """``queenpy bench --summary``: rewrite ``page``'s current figures from the result files in ``paths``
    (:func:`queenpy.bench.summary.write_summary`); returns how many were read."""
    return summary.write_summary(paths, page, kind_lines)


def dispatch(kind: Kind, context: Context, scenario: Scenario, round_no: int) -> dict[str, Any]:
    """One run of ``scenario`` by ``kind``, with ``valid`` set: a kind that raises
    :class:`~queenpy.bench.core.ScenarioSkipped` gives a skipped run (valid, no figures), any other exception
    but :class:`BenchError` a crashed one (INVALID), so the other scenarios still run."""
    try:
        result = kind.run(context, scenario, round_no)
    except BenchError:
        raise
    except ScenarioSkipped as exc:
        return {
            "scenario": scenario.name,
            "round": round_no,
            "valid": True,
            "skipped": str(exc),
            "problems": [],
            "notes": [],
            "limit": scenario.limit,
        }
    except Exception as exc:  # noqa: BLE001 (a crashed scenario is reported, the others still run)
        return {
            "scenario": scenario.name,
            "round": round_no,
            "valid": False,
            "problems": [f"crashed: {exc.__class__.__name__}: {exc}"],
            "notes": [],
            "limit": scenario.limit,
        }
    result["valid"] = not result["problems"]
    return result


def _git_describe() -> dict[str, Any]:
    """The commit the run measures, and whether tracked files outside ``benchmarks/`` differ from it (the
    records there, history.ndjson first, which every run appends to, are not code the run measures)."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                [
                    "git",
                    "status",
                    "--porcelain",
                    "--untracked-files=no",
                    "--",
                    ":/",
                    ":(top,exclude)benchmarks",
                ],
                cwd=here,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
        return {"commit": commit, "dirty": dirty}
    except (OSError, subprocess.CalledProcessError):
        return {}


def _stop_on_signal(signum: int, _frame: Any) -> None:
    for sig in (
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGHUP,
    ):  # a second signal must not cut the cleanup short
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
    options = Options(
        seconds=config.seconds or (3.0 if config.quick else 10.0),
        warmup=config.warmup if config.warmup is not None else (1.0 if config.quick else 3.0),
        connections=config.connections,
        checkpoint=config.checkpoint,
        keepup_fraction=config.keepup_fraction,
        soak_duration_s=config.soak_duration_s,
        soak_share=config.soak_share,
        soak_rate=config.soak_rate,
        soak_transaction_ids=config.soak_transaction_ids,
        spark_master=config.spark_master,
    )
    limits_used = sorted({s.limit for s in scenarios} | {"select1"}, key=list(LIMITS).index)
    kinds_used = list({s.kind: KINDS[s.kind] for s in scenarios}.values())
    planned = [KINDS[s.kind].planned_s(s, options) for s in scenarios]
    per_round = sum(seconds for seconds, _ in planned) + len(limits_used) * (
        options.warmup + options.seconds + 1
    )
    extra = sum(more for _, more in planned)
    broker_env = dict(config.broker_env)
    for kind in kinds_used:
        for name, value in kind.broker_env.items():
            broker_env.setdefault(name, value)
    echo(
        f"queenbench: {len(scenarios)} scenario(s) x {runs} run(s), {options.seconds:g}s measured after "
        f"{options.warmup:g}s warm-up; about {runs * per_round / 60:.1f} min"
        + (f", and up to {runs * extra / 60:.0f} min more for settling and waits" if extra else "")
    )
    if config.workdir is not None:
        config.workdir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="queenbench-", dir=config.workdir))
    os.chmod(workdir, 0o755)  # pgserver runs PostgreSQL as its own user when we are root
    started = time.time()
    git = _git_describe()  # now: other sessions may commit while the suite runs
    pg: BenchServer | None = None
    broker = sql = context = None
    handlers = _install_stop_handlers()
    try:
        pg = ExternalPostgres(config.database_url) if config.database_url else PrivatePostgres(workdir)
        broker = Broker(pg.url, workdir, config.workers or None, broker_env)
        broker.wait_ready()
        sql = Sql(pg.url)
        facts = environment_facts(sql)
        facts["server"] = pg.origin
        facts["pgbench"] = str(pg.pgbench)
        context = Context(pg, broker, sql, workdir, options, echo)
        if config.database_url:  # the user's database may hold an earlier run's queues
            context.queue_prefix = f"qb{int(started) % 1_000_000}-"
        echo(f"PostgreSQL: {pg.origin}; {report.settings_line(facts)}")
        echo(f"broker {broker.url} ({context.memory.peak()[2]} processes); work dir {workdir}")
        for round_no in range(1, runs + 1):
            echo(f"-- round {round_no}/{runs}")
            for key in limits_used:
                if key == "select1":
                    _echo_limit(echo, context.measure_limit(LIMITS[key], round_no))
            for scenario in scenarios:
                if (round_no, scenario.limit) not in context.limit_results:
                    _echo_limit(echo, context.measure_limit(LIMITS[scenario.limit], round_no))
                result = dispatch(KINDS[scenario.kind], context, scenario, round_no)
                context.scenario_results[(round_no, scenario.name)] = result
                if "skipped" in result:
                    echo(f"   {scenario.name:<28} skipped: {result['skipped']}")
                else:
                    _echo_run(echo, result, context.limit_results.get((round_no, scenario.limit)))
        echo("-- checking n_tup_ins against the rows stored (statistics reach PostgreSQL's views late)")
        ledger = context.check_inserts()
        document = _document(config, options, runs, facts, scenarios, context, broker, started)
        document["git"] = git
        document["inserts_ledger"] = ledger
    finally:
        stop_all()
        if context is not None:
            context.close()
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
    echo(report.table(document, kind_lines))
    chart = config.chart or config.out.with_suffix(".png")
    made = report.chart(document, chart)
    more = [path for kind in kinds_used for path in kind.charts(document, chart)] if made else []
    echo(
        f"\nJSON: {config.out}"
        + (f"   chart: {chart}" if made else f"   (no chart: {report.CHART_MISSING})")
        + "".join(f"   chart: {path}" for path in more)
    )
    if config.history is not None:
        if config.history.parent.is_dir():
            summary.append_history(config.history, summary.history_row(document, str(config.out)))
            echo(f"history: one row appended to {config.history}")
        else:
            echo(f"history: {config.history.parent} is not a directory here, no row appended")
    return document


def _echo_limit(echo: Callable[[str], None], figures: dict[str, Any]) -> None:
    latency = figures.get("latency_ms", {})
    extra = f"  p50 {latency['50']:.2f} ms p99 {latency['99']:.2f} ms" if "50" in latency else ""
    echo(
        f"   limit {figures['limit']:<24} {figures['msg_per_s']:>11,.0f} /s{extra}"
        + (
            ""
            if figures["valid"]
            else "  INVALID: "
            + "; ".join(figures.get("problems") or [f"{figures['failed']} failed transactions"])
        )
    )


def _echo_run(echo: Callable[[str], None], run: dict[str, Any], limit: dict[str, Any] | None) -> None:
    if "msg_per_s" not in run:
        echo(f"   {run['scenario']:<28} INVALID: {'; '.join(run['problems'])}")
        return
    ratio = run["msg_per_s"] / limit["msg_per_s"] if limit and limit["msg_per_s"] else None
    latency = run.get("latency_ms", {})
    text = (
        f"   {run['scenario']:<28} {run['msg_per_s']:>11,.0f} msg/s"
        + (f"  ratio {ratio:.2f}" if ratio is not None else "")
        + (f"  p50 {latency.get('50', 0):.1f} ms p99 {latency.get('99', 0):.1f} ms" if latency else "")
    )
    if not run["valid"]:
        text += "  INVALID: " + "; ".join(run["problems"])
    echo(text)


def _limits_section(limit_results: dict[tuple[int, str], dict[str, Any]]) -> dict[str, Any]:
    """The JSON's ``limits``: per limit, its runs and their medians."""
    limits: dict[str, Any] = {}
    for (_, key), figures in sorted(limit_results.items()):
        limits.setdefault(key, {"description": LIMITS[key].description, "runs": []})["runs"].append(figures)
    for limit_entry in limits.values():
        rounds = limit_entry["runs"]
        limit_entry["median"] = {
            "msg_per_s": median(r["msg_per_s"] for r in rounds),
            "cpu_us_per_msg": {
                k: median(r["cpu_us_per_msg"][k] for r in rounds) for k in ("postgres", "pgbench")
            },
            "latency_ms": {k: median(r.get("latency_ms", {}).get(k) for r in rounds) for k in ("50", "99")},
            "valid": all(r["valid"] for r in rounds),
            "pg_waits": _median_shares([r.get("pg_waits", {}) for r in rounds]),
        }
    return limits


def _paired_with_limit(measured: list[dict[str, Any]], limit_of_round: dict[int, dict[str, Any]]) -> None:
    """Each run's ``ratio`` (msg/s over its round's limit) and ``postgres_cost_ratio`` (PostgreSQL's CPU per
    message over the bare insert's per row, same round)."""
    for r in measured:
        limit = limit_of_round.get(r["round"])
        if limit and limit["msg_per_s"]:
            r["ratio"] = r["msg_per_s"] / limit["msg_per_s"]
        ours, theirs = (
            r["cpu_us_per_msg"]["postgres"],
            (limit or {}).get("cpu_us_per_msg", {}).get("postgres"),
        )
        if ours is not None and theirs:
            r["postgres_cost_ratio"] = ours / theirs


def _shared_medians(measured: list[dict[str, Any]], limit_median: dict[str, Any]) -> dict[str, Any]:
    """The medians every kind reports (the scenario table's columns)."""
    # the broker's, PostgreSQL's and wrk's CPU, then any other process a kind measures (Spark's), then the
    # rest
    extra = sorted({k for r in measured for k in r["cpu_us_per_msg"]} - {"broker", "postgres", "wrk"})
    cpu_keys = [
        k for k in ("broker", "postgres", "wrk", *extra) if any(k in r["cpu_us_per_msg"] for r in measured)
    ]
    share_keys = [
        k
        for k in ("broker", "postgres", "wrk", *extra, "other", "idle")
        if any(k in r["cpu_share_of_machine"] for r in measured)
    ]
    return {
        "msg_per_s": median(r["msg_per_s"] for r in measured),
        "limit_msg_per_s": limit_median.get("msg_per_s"),
        # PostgreSQL's CPU per row of the bare insert it is compared with (same rounds, same method)
        "limit_postgres_us_per_row": limit_median.get("cpu_us_per_msg", {}).get("postgres"),
        "ratio": median(r.get("ratio") for r in measured),
        "postgres_cost_ratio": median(r.get("postgres_cost_ratio") for r in measured),
        "requests_per_s": median(r.get("requests_per_s") for r in measured),
        # the broker's CPU per HTTP request (kinds that know their requests exactly), and its spread over the
        # rounds: on a shared machine it moves far less than msg/s does
        "broker_us_per_request": median(r.get("broker_us_per_request") for r in measured),
        "broker_us_per_request_range": _spread(r.get("broker_us_per_request") for r in measured),
        "latency_ms": {
            k: median(r.get("latency_ms", {}).get(k) for r in measured) for k in ("50", "90", "99", "99.9")
        },
        "cpu_us_per_msg": {k: median(r["cpu_us_per_msg"].get(k) for r in measured) for k in cpu_keys},
        "cpu_share_of_machine": {
            k: median(r["cpu_share_of_machine"].get(k) for r in measured) for k in share_keys
        },
        "broker_rss_mb_peak": max(r["broker_rss_mb_peak"] for r in measured),
        "broker_pss_mb_peak": max(r["broker_pss_mb_peak"] for r in measured),
        "pg_waits": _median_shares([r.get("pg_waits", {}) for r in measured]),
    }


def scenario_entry(
    scenario: Scenario,
    kind: Kind,
    rounds: list[dict[str, Any]],
    options: Options,
    limit_of_round: dict[int, dict[str, Any]],
    limit_median: dict[str, Any],
) -> dict[str, Any]:
    """The JSON's entry of one scenario: its parameters, validity, problems and notes of every round, the
    rounds themselves, and (when a round measured) the medians: those every kind shares, ratios paired with
    the limit of the same round (``limit_of_round``: round -> the limit's figures; ``limit_median``: the
    limit's medians), and the kind's own (``kind.summarize``)."""
    measured = [r for r in rounds if "msg_per_s" in r]
    _paired_with_limit(measured, limit_of_round)
    skipped = next((r["skipped"] for r in rounds if "skipped" in r), None)
    entry: dict[str, Any] = {
        "scenario": scenario.name,
        "description": scenario.description,
        "limit": scenario.limit,
        "parameters": {
            "kind": scenario.kind,
            "per_request": scenario.per_request,
            "payload_bytes": scenario.payload_bytes,
            "partitions": scenario.partitions,
            "connections": scenario.wrk_connections(options),
            "mode": scenario.mode,
            "groups": scenario.groups,
            "batch": scenario.batch,
        },
        "valid": bool(rounds) and all(r["valid"] for r in rounds),
        "problems": sorted({p for r in rounds for p in r["problems"]}),
        "notes": sorted({n for r in rounds for n in r["notes"]}),
        "runs": rounds,
    }
    if skipped:
        entry["skipped"] = skipped
    if measured:
        entry["median"] = {**_shared_medians(measured, limit_median), **kind.summarize(measured)}
    return entry


def _document(
    config: Config,
    options: Options,
    runs: int,
    facts: dict[str, Any],
    scenarios: list[Scenario],
    context: Context,
    broker: Broker,
    started: float,
) -> dict[str, Any]:
    limits = _limits_section(context.limit_results)
    results = []
    for scenario in scenarios:
        rounds = [
            context.scenario_results[(n, scenario.name)]
            for n in range(1, runs + 1)
            if (n, scenario.name) in context.scenario_results
        ]
        limit_of_round = {
            n: figures for (n, key), figures in context.limit_results.items() if key == scenario.limit
        }
        results.append(
            scenario_entry(
                scenario,
                KINDS[scenario.kind],
                rounds,
                options,
                limit_of_round,
                limits.get(scenario.limit, {}).get("median", {}),
            )
        )
    others = [
        r["cpu_share_of_machine"]["other"] for e in results for r in e["runs"] if "cpu_share_of_machine" in r
    ]
    return {
        "tool": "queenbench",
        "format": 1,
        "started_at": datetime.datetime.fromtimestamp(started, datetime.UTC).isoformat(),
        "duration_s": time.time() - started,
        "command": config.command or " ".join(sys.argv),
        "git": _git_describe(),
        "settings": {
            "quick": config.quick,
            "runs": runs,
            "seconds": options.seconds,
            "warmup": options.warmup,
            "push_connections": options.connections,
            "checkpoint_before_each": options.checkpoint,
            "keepup_share_of_push": options.keepup_fraction,
            "soak_duration_s": options.soak_duration_s,
            "soak_share_of_push": options.soak_share,
            "soak_rate_msg_per_s": options.soak_rate,
            "soak_transaction_ids": options.soak_transaction_ids,
            "spark_master": options.spark_master,
        },
        "machine": {
            "cores": os.cpu_count(),
            "load_average_at_end": os.getloadavg(),
            "other_cpu_share_median": median(others),
            "other_cpu_share_max": max(others) if others else None,
        },
        "postgres": facts,
        "broker": {
            "workers": config.workers or "default (one per core)",
            "env": broker.env,
            "processes": context.memory.peak()[2],
            "pythonpath": os.environ.get("PYTHONPATH", ""),
            "inherited_queen_env": {
                k: v for k, v in os.environ.items() if k.startswith(("QUEEN_", "DB_POOL", "NUM_WORKERS"))
            },
        },
        "load_generator": {"wrk": find_wrk(), "threads": 2},
        "limits": limits,
        "scenarios": results,
    }


def _spread(values: Iterable[float | None]) -> list[float] | None:
    """``[min, max]`` of the values that are not None, or None when there are none."""
    present = [v for v in values if v is not None]
    return [min(present), max(present)] if present else None


def _median_shares(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the median over runs (a key missing from a run counts as 0), largest first."""
    keys = {key for shares in runs for key in shares}
    found = {key: median(shares.get(key, 0.0) for shares in runs) or 0.0 for key in keys}
    return dict(sorted(found.items(), key=lambda item: (item[0] == "active_backends", -item[1])))
