"""``queenpy chaos``: the fault scenarios of :mod:`queenpy.chaos` (docs/reliability.md), shipped in the
package so they run from any directory after ``pip install``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from queenpy.cli._common import JsonOption, VerboseOption

__all__ = ["chaos"]

QuickOption = Annotated[
    bool,
    typer.Option(
        "--quick",
        envvar="QUEENPY_CHAOS_QUICK",
        help="The bounded run for CI: short outages, a few thousand messages per scenario, under 5 minutes.",
    ),
]
OnlyOption = Annotated[
    str | None,
    typer.Option(
        "--only", envvar="QUEENPY_CHAOS_ONLY", help="Comma-separated scenario name patterns, e.g. 'kill-*'."
    ),
]
ListOption = Annotated[bool, typer.Option("--list", help="List the scenarios and exit.")]
OutOption = Annotated[
    Path | None,
    typer.Option("--out", envvar="QUEENPY_CHAOS_OUT", help="Also write the results as JSON to this file."),
]
WorkdirOption = Annotated[
    Path | None,
    typer.Option(
        "--workdir",
        envvar="QUEENPY_CHAOS_WORKDIR",
        help="Where the private PostgreSQL, broker logs and buffers live (default: system temp).",
    ),
]
KeepOption = Annotated[
    bool,
    typer.Option(
        "--keep", envvar="QUEENPY_CHAOS_KEEP", help="Keep the work dir (broker and PostgreSQL logs)."
    ),
]


def chaos(
    quick: QuickOption = False,
    only: OnlyOption = None,
    list_scenarios: ListOption = False,
    out: OutOption = None,
    workdir: WorkdirOption = None,
    keep: KeepOption = False,
    json_output: JsonOption = False,
    verbose: VerboseOption = False,
) -> None:
    """Break real processes under load and count what was lost.

    Starts a private PostgreSQL and `queenpy serve` subprocesses on loopback, runs producers and acking consumers that record every message id, and injects one fault per scenario: kill -9 of a worker and of the broker, PostgreSQL stopped, a consumer killed mid-batch, one of two brokers killed, PostgreSQL restarted under parked long polls, an unwritable failover buffer. Prints scenario | pushed and acknowledged | consumed | lost | duplicated | redelivered | recovery. Exit status 1 when anything was lost or duplicated or a check failed, 2 when the run could not start.
    """  # noqa: E501 (typer keeps the line breaks of the help paragraph)
    import json

    import queenpy.chaos as chaos_suite

    if list_scenarios:
        for scenario in chaos_suite.SCENARIOS:
            typer.echo(f"{scenario.name:<22} {scenario.fault}")
        return
    config = chaos_suite.Config(quick=quick, only=only, out=out, workdir=workdir, keep=keep)
    try:
        results = chaos_suite.run(config, echo=(lambda _line: None) if json_output else typer.echo)
    except chaos_suite.ChaosError as exc:
        if verbose:
            raise
        typer.echo(f"queenpy chaos: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(json.dumps(results, indent=2) if json_output else "\n" + chaos_suite.table(results))
    if not all(result["passed"] for result in results):
        typer.echo("chaos: something was lost or duplicated, or a check failed (see above)", err=True)
        raise typer.Exit(1)
