"""``queenpy bench``: the benchmark suite of :mod:`queenpy.bench` (DESIGN.md section 12), shipped in the
package with its wrk Lua scripts, so it runs from any directory after ``pip install``. It needs ``wrk``
(``apt-get install wrk``) and, for the chart, matplotlib (``pip install 'queenpy[bench]'``).
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from queenpy.cli._common import VerboseOption

__all__ = ["bench"]


QuickOption = Annotated[
    bool,
    typer.Option(
        "--quick",
        envvar="QUEENPY_BENCH_QUICK",
        help="The short suite: 1 run, 3 s windows, under two minutes.",
    ),
]
RunsOption = Annotated[
    int | None,
    typer.Option(
        "--runs",
        min=1,
        envvar="QUEENPY_BENCH_RUNS",
        help="Runs per scenario, interleaved; medians are reported (default 3, 1 with --quick).",
    ),
]
SecondsOption = Annotated[
    float | None,
    typer.Option(
        "--seconds",
        min=1,
        envvar="QUEENPY_BENCH_SECONDS",
        help="Measured window per run (default 10, 3 with --quick).",
    ),
]
WarmupOption = Annotated[
    float | None,
    typer.Option(
        "--warmup",
        min=0,
        envvar="QUEENPY_BENCH_WARMUP",
        help="Warm-up before each window (default 3, 1 with --quick).",
    ),
]
WorkersOption = Annotated[
    int,
    typer.Option(
        "--workers",
        min=0,
        envvar="QUEENPY_BENCH_WORKERS",
        help="Broker worker processes (NUM_WORKERS); 0: the broker's default, one per core.",
    ),
]
EnvOption = Annotated[
    list[str] | None,
    typer.Option(
        "--env",
        "-e",
        metavar="NAME=VALUE",
        help="A setting for the broker's environment, repeatable (QUEEN_PUSH_MAX_BATCH_SIZE=100, "
        "DB_POOL_SIZE=20). QUEEN_* variables of this shell reach the broker too.",
    ),
]
ConnectionsOption = Annotated[
    int,
    typer.Option(
        "--connections",
        min=1,
        envvar="QUEENPY_BENCH_CONNECTIONS",
        help="wrk connections of the push scenarios.",
    ),
]
OnlyOption = Annotated[
    str | None,
    typer.Option(
        "--only",
        envvar="QUEENPY_BENCH_ONLY",
        help="Comma-separated scenario name patterns, e.g. 'push-*,consume-auto'.",
    ),
]
ListOption = Annotated[bool, typer.Option("--list", help="List the scenarios and exit.")]
OutOption = Annotated[Path, typer.Option("--out", envvar="QUEENPY_BENCH_OUT", help="JSON results file.")]
ChartOption = Annotated[
    Path | None,
    typer.Option(
        "--chart", envvar="QUEENPY_BENCH_CHART", help="PNG chart (default: the --out path with .png)."
    ),
]
WorkdirOption = Annotated[
    Path | None,
    typer.Option(
        "--workdir",
        envvar="QUEENPY_BENCH_WORKDIR",
        help="Where the private PostgreSQL lives (default: system temp).",
    ),
]
KeepOption = Annotated[
    bool,
    typer.Option(
        "--keep", help="Keep the work dir: broker log, generated Lua scripts, wrk and pgbench outputs."
    ),
]
CheckpointOption = Annotated[
    bool,
    typer.Option(
        "--checkpoint/--no-checkpoint",
        envvar="QUEENPY_BENCH_CHECKPOINT",
        help="CHECKPOINT before each scenario and limit, so none inherits the previous one's dirty pages.",
    ),
]
KeepupShareOption = Annotated[
    float,
    typer.Option(
        "--keepup-share",
        min=0.05,
        max=1.0,
        envvar="QUEENPY_BENCH_KEEPUP_SHARE",
        help="keepup-ack's producer rate as a share of the same round's push-10-40B figure. The bar is 0.5; "
        "the default offers 0.55, so a producer that keeps its pace clears the bar by more than the "
        "window's noise.",
    ),
]
DatabaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="QUEENPY_BENCH_DATABASE_URL",
        help="Run on this PostgreSQL (one you started and tuned; use a scratch database: the suite writes "
        "queues and a 'bench' schema into it) instead of a private server with the embedded default's "
        "settings. PostgreSQL's CPU is measured only when the server runs on this machine.",
    ),
]
DurationOption = Annotated[
    float,
    typer.Option(
        "--duration",
        min=10,
        envvar="QUEENPY_BENCH_DURATION",
        help="Seconds the soak scenario runs (default 600; the documented long run is 3600). Only --only "
        "soak runs it.",
    ),
]
SoakShareOption = Annotated[
    float,
    typer.Option(
        "--soak-share",
        min=0.05,
        max=1.0,
        envvar="QUEENPY_BENCH_SOAK_SHARE",
        help="soak's producer rate as a share of the push capacity (push-10-40B of the round, or a probe); "
        "at most 70% of the push-and-consume estimate 1/(1/push + 1/consume) (consume-ack of the round, "
        "or a probe).",
    ),
]
SoakRateOption = Annotated[
    float | None,
    typer.Option(
        "--soak-rate",
        min=1,
        envvar="QUEENPY_BENCH_SOAK_RATE",
        help="soak's producer rate in msg/s, instead of --soak-share of a measured capacity (the same load "
        "in runs compared with each other).",
    ),
]
SoakTransactionIdsOption = Annotated[
    bool,
    typer.Option(
        "--soak-transaction-ids",
        envvar="QUEENPY_BENCH_SOAK_TRANSACTION_IDS",
        help="soak's producer gives every message a transactionId of its own (UUIDv7-shaped), as the "
        "official clients do; without it the broker assigns them.",
    ),
]
SparkMasterOption = Annotated[
    str,
    typer.Option(
        "--spark-master", envvar="QUEENPY_BENCH_SPARK_MASTER", help="Spark master of the spark-* scenarios."
    ),
]
HistoryOption = Annotated[
    Path,
    typer.Option(
        "--history",
        envvar="QUEENPY_BENCH_HISTORY",
        help="NDJSON file the run's summary row is appended to (when its directory exists).",
    ),
]
SummaryOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--summary",
        metavar="JSON_OR_DIR",
        help="Run nothing: rewrite the current-figures block of --page from these result files (or "
        "directories of them), repeatable: queenpy bench --summary benchmarks/results.",
    ),
]
PageOption = Annotated[Path, typer.Option("--page", help="The results page that --summary rewrites.")]


def _command_line() -> str:
    program = Path(sys.argv[0])
    if program.name == "__main__.py":
        start = "python -m queenpy"
    elif program.name == "queenpy":
        start = "queenpy"
    else:
        start = f"python {sys.argv[0]}"
    # a password in --database-url stays out of the JSON and the report
    return re.sub(r"(://[^:/@\s]+):[^@\s]*@", r"\1:***@", f"{start} {shlex.join(sys.argv[1:])}".strip())


def bench(
    quick: QuickOption = False,
    runs: RunsOption = None,
    seconds: SecondsOption = None,
    warmup: WarmupOption = None,
    workers: WorkersOption = 0,
    env: EnvOption = None,
    connections: ConnectionsOption = 50,
    only: OnlyOption = None,
    list_scenarios: ListOption = False,
    out: OutOption = Path("bench-results.json"),
    chart: ChartOption = None,
    workdir: WorkdirOption = None,
    keep: KeepOption = False,
    checkpoint: CheckpointOption = True,
    keepup_share: KeepupShareOption = 0.55,
    duration: DurationOption = 600.0,
    soak_share: SoakShareOption = 0.5,
    soak_rate: SoakRateOption = None,
    soak_transaction_ids: SoakTransactionIdsOption = False,
    database_url: DatabaseUrlOption = None,
    spark_master: SparkMasterOption = "local[*]",
    history: HistoryOption = Path("benchmarks/history.ndjson"),
    summary: SummaryOption = None,
    page: PageOption = Path("benchmarks/RESULTS.md"),
    verbose: VerboseOption = False,
) -> None:
    """Benchmark the broker against PostgreSQL's own limit on this machine (needs wrk).

    Starts a private PostgreSQL (fsync on; or uses --database-url) and `queenpy serve`, drives Queen's standard scenarios with wrk, and prints every figure as a ratio to what pgbench reaches on the same server in the same run, with CPU per message of broker, PostgreSQL and wrk, and the broker's memory. Writes a table, a JSON file and a PNG chart; benchmarks/RESULTS.md explains them. Exit status 1 when a scenario is INVALID (errors, lost or duplicated messages).
    """  # noqa: E501 (typer keeps the line breaks of the help paragraph)
    import queenpy.bench as queenbench

    if list_scenarios:
        for scenario in queenbench.SCENARIOS:
            typer.echo(
                f"{scenario.name:<22} {'quick ' if scenario.quick else '      '}{scenario.description}"
            )
        return
    if summary:
        try:
            read = queenbench.write_summary(summary, page)
        except (OSError, ValueError) as exc:
            raise typer.BadParameter(str(exc), param_hint="--summary/--page") from exc
        typer.echo(f"{page}: current figures rewritten from {read} result file(s)")
        return
    try:
        broker_env = queenbench.parse_env_assignments(env or [])
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--env") from exc
    config = queenbench.Config(
        quick=quick,
        runs=runs,
        seconds=seconds,
        warmup=warmup,
        workers=workers,
        broker_env=broker_env,
        connections=connections,
        only=only,
        out=out,
        chart=chart,
        workdir=workdir,
        keep=keep,
        checkpoint=checkpoint,
        keepup_fraction=keepup_share,
        soak_duration_s=duration,
        soak_share=soak_share,
        soak_rate=soak_rate,
        soak_transaction_ids=soak_transaction_ids,
        command=_command_line(),
        database_url=database_url,
        spark_master=spark_master,
        history=history,
    )
    try:
        document = queenbench.run(config, echo=typer.echo)
    except (queenbench.BenchError, ValueError) as exc:
        if verbose:
            raise
        typer.echo(f"queenpy bench: {exc}", err=True)
        raise typer.Exit(2) from exc
    if not all(entry["valid"] for entry in document["scenarios"]):
        typer.echo("some scenarios are INVALID (see above)", err=True)
        raise typer.Exit(1)
