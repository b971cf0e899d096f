"""``queenpy spark run PIPELINE``: run a pipeline script on Spark with quiet logs and progress lines.

The command prepares the environment (Python workers on this interpreter, log4j2 at ERROR, loopback binding
for local masters), builds the SparkSession (``--master``, default ``local[*]``; ``spark://host:7077`` for a
standalone cluster, where the driver runs here and the executors on the workers; ``--conf`` for any Spark
setting), registers the ``queen``
source, attaches a progress listener (rows/s, batch id, lag per queue, on stderr), then runs the script as
``__main__`` with the remaining arguments. The script gets the session with ``queenpy.spark.get_session()``
(or ``SparkSession.builder.getOrCreate()``) and the broker URL from ``$QUEEN_URL`` (set from ``--url``).
Exit code: the script's (``sys.exit``), 1 on an exception (traceback with ``-v``).
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["app"]

app = typer.Typer(help="Run data pipelines on Apache Spark (needs the spark extra).", no_args_is_help=True)


@app.callback()
def spark_group() -> None:
    """Run data pipelines on Apache Spark (needs the spark extra: pip install 'queenpy[spark]')."""


@app.command(
    "run",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def run(
    context: typer.Context,
    pipeline: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Pipeline script (.py).")],
    master: Annotated[
        str,
        typer.Option(
            "--master",
            envvar="QUEENPY_SPARK_MASTER",
            help="Spark master: local[*], local[2], spark://host:7077, ...",
        ),
    ] = "local[*]",
    # not the client commands' --url and -v (cli/_common.py): this URL is only handed to the script, and
    # -v also turns on Spark's WARN logs
    url: Annotated[
        str | None,
        typer.Option(
            "--url", envvar="QUEEN_URL", help="Broker base URL, passed to the script as $QUEEN_URL."
        ),
    ] = None,
    conf: Annotated[
        list[str] | None,
        typer.Option(
            "--conf",
            metavar="KEY=VALUE",
            envvar="QUEENPY_SPARK_CONF",
            help="A Spark setting, repeatable (spark.executor.memory=1g, spark.sql.shuffle.partitions=4); "
            "applied last, so it wins over queenpy's defaults. From the environment: space-separated.",
        ),
    ] = None,
    progress: Annotated[
        bool,
        typer.Option(
            "--progress/--no-progress",
            envvar="QUEENPY_SPARK_PROGRESS",
            help="Print a line per micro-batch on stderr.",
        ),
    ] = True,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", envvar="QUEEN_VERBOSE", help="Spark WARN logs and Python tracebacks."
        ),
    ] = False,
) -> None:
    """Run PIPELINE (a Python script) on Spark; extra arguments go to the script."""
    try:
        from queenpy.spark.session import MASTER_ENV, build_session, prepare_environment
    except ImportError:
        typer.echo("error: the Spark connector needs the spark extra: pip install 'queenpy[spark]'", err=True)
        raise typer.Exit(2) from None
    settings: dict[str, str] = {}
    for pair in conf or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            typer.echo(f"error: --conf expects KEY=VALUE, got {pair!r}", err=True)
            raise typer.Exit(2)
        settings[key.strip()] = value
    if url:
        os.environ["QUEEN_URL"] = url
    os.environ[MASTER_ENV] = master
    prepare_environment(master, quiet=not verbose)
    spark = build_session(master, app_name=pipeline.stem, config=settings, quiet=not verbose)
    if progress:
        from queenpy.spark.progress import ProgressPrinter

        spark.streams.addListener(ProgressPrinter())
    code: int = 0
    saved_argv = sys.argv
    sys.argv = [str(pipeline), *context.args]
    sys.path.insert(0, str(pipeline.resolve().parent))
    try:
        runpy.run_path(str(pipeline), run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            typer.echo(str(exc.code), err=True)
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:  # noqa: BLE001 (the pipeline's own error: one line unless -v)
        if verbose:
            traceback.print_exc()
        else:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            typer.echo(f"error: {type(exc).__name__}: {first}", err=True)
        code = 1
    finally:
        sys.argv = saved_argv
        for query in spark.streams.active:
            query.stop()
        spark.stop()
    raise typer.Exit(code)
