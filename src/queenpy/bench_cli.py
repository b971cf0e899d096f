"""``queenpy bench``: the benchmark suite of ``benchmarks/queenbench`` (DESIGN.md section 12).

The suite lives in the repository's ``benchmarks/`` folder, not in the installed package: this module finds
it (``QUEENPY_BENCHMARKS_DIR``, else the checkout this package was installed from in editable mode, else
``./benchmarks``) and imports it by path. It needs ``wrk`` (``apt-get install wrk``) and, for the chart,
matplotlib (``pip install 'queenpy[bench]'``).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any, List, Optional

import typer

__all__ = ["register", "find_benchmarks_dir"]


def find_benchmarks_dir() -> Path | None:
    """The folder that holds the ``queenbench`` package, or None."""
    candidates = []
    if os.environ.get("QUEENPY_BENCHMARKS_DIR"):
        candidates.append(Path(os.environ["QUEENPY_BENCHMARKS_DIR"]))
    candidates += [Path(__file__).resolve().parents[2] / "benchmarks", Path.cwd() / "benchmarks"]
    for candidate in candidates:
        if (candidate / "queenbench" / "__init__.py").is_file():
            return candidate
    return None


def _import_queenbench() -> Any:
    folder = find_benchmarks_dir()
    if folder is None:
        typer.echo("queenpy bench needs the repository's benchmarks/ folder: run it from a queenpy checkout "
                   "(pip install -e .) or set QUEENPY_BENCHMARKS_DIR to that folder.", err=True)
        raise typer.Exit(2)
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    import importlib

    return importlib.import_module("queenbench")


def register(app: typer.Typer) -> None:
    """Add the ``bench`` command to the ``queenpy`` app."""

    @app.command()
    def bench(
        quick: bool = typer.Option(False, "--quick", envvar="QUEENPY_BENCH_QUICK",
                                   help="The short suite: 1 run, 3 s windows, under two minutes."),
        runs: Optional[int] = typer.Option(None, "--runs", min=1, envvar="QUEENPY_BENCH_RUNS",
                                           help="Runs per scenario, interleaved; medians are reported "
                                                "(default 3, 1 with --quick)."),
        seconds: Optional[float] = typer.Option(None, "--seconds", min=1, envvar="QUEENPY_BENCH_SECONDS",
                                                help="Measured window per run (default 10, 3 with --quick)."),
        warmup: Optional[float] = typer.Option(None, "--warmup", min=0, envvar="QUEENPY_BENCH_WARMUP",
                                               help="Warm-up before each window (default 3, 1 with --quick)."),
        workers: int = typer.Option(0, "--workers", min=0, envvar="QUEENPY_BENCH_WORKERS",
                                    help="Broker worker processes (NUM_WORKERS); 0: the broker's default."),
        env: List[str] = typer.Option([], "--env", "-e", metavar="NAME=VALUE",
                                      help="Broker environment setting, repeatable (QUEEN_PUSH_MAX_BATCH_SIZE=100, "
                                           "DB_POOL_SIZE=20, ...). QUEEN_* variables of this shell are "
                                           "inherited too."),
        connections: int = typer.Option(50, "--connections", min=1, envvar="QUEENPY_BENCH_CONNECTIONS",
                                        help="wrk connections of the push scenarios."),
        only: Optional[str] = typer.Option(None, "--only", envvar="QUEENPY_BENCH_ONLY",
                                           help="Comma-separated scenario name patterns (push-*,consume-auto)."),
        list_scenarios: bool = typer.Option(False, "--list", help="List the scenarios and exit."),
        out: Path = typer.Option(Path("bench-results.json"), "--out", envvar="QUEENPY_BENCH_OUT",
                                 help="JSON results file."),
        chart: Optional[Path] = typer.Option(None, "--chart", help="PNG chart (default: --out with .png)."),
        workdir: Optional[Path] = typer.Option(None, "--workdir", envvar="QUEENPY_BENCH_WORKDIR",
                                               help="Where the private PostgreSQL lives (default: system temp)."),
        keep: bool = typer.Option(False, "--keep", help="Keep the work dir (database, logs, Lua scripts)."),
        checkpoint: bool = typer.Option(True, "--checkpoint/--no-checkpoint",
                                        help="CHECKPOINT before each scenario and limit."),
        verbose: bool = typer.Option(False, "-v", "--verbose", help="Tracebacks on errors."),
    ) -> None:
        """Benchmark the broker against PostgreSQL's own limit on this machine (needs wrk).

        Starts a private PostgreSQL (fsync on) and `queenpy serve`, drives Queen's standard scenarios with
        wrk, and prints each figure as a ratio to what pgbench reaches on the same server in the same run.
        Writes a table, a JSON file and a PNG chart. See benchmarks/RESULTS.md for how to read them.
        """
        queenbench = _import_queenbench()
        if list_scenarios:
            from queenbench.scenarios import SCENARIOS

            for scenario in SCENARIOS:
                typer.echo(f"{scenario.name:<22} {'quick ' if scenario.quick else '      '}{scenario.description}")
            return
        try:
            from queenbench.parsing import parse_env_assignments

            broker_env = parse_env_assignments(env)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--env") from exc
        config = queenbench.Config(
            quick=quick, runs=runs, seconds=seconds, warmup=warmup, workers=workers, broker_env=broker_env,
            connections=connections, only=only, out=out, chart=chart, workdir=workdir, keep=keep,
            checkpoint=checkpoint, command="queenpy " + shlex.join(sys.argv[1:]))
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
