"""The ``queenpy`` command line, one module per command group: ``serve``, ``db``, the client commands
(``push``/``pop``/``consume`` in :mod:`.messages`, ``messages ls/show/rm/retry`` in :mod:`.browse`,
``configure``/``queues``, ``groups``, ``dlq``, ``status``, ``maintenance``), ``bench``, ``chaos`` and
``spark``. Every command is a module-level function (a command group is its module's ``app``), and the list
below adds them all to ``queenpy``. The client commands take the connection options (``--url``, ``--token``,
``--json``, ``-v``) from :func:`~queenpy.cli._common.client_command`, which declares them once.

Every option can also come from the environment variable named in its ``--help``; errors are one plain
sentence on stderr and a non-zero exit (``-v`` shows the traceback). Modules import their heavy parts (the
server, Spark, the benchmark suite) inside the command, so ``queenpy --help`` stays fast.

Layering: this package sits on top (it may import ``client``, ``server``, ``spark``, ``bench``); nothing in
queenpy imports it.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

from queenpy.cli import (
    bench,
    browse,
    chaos,
    db,
    dlq,
    groups,
    maintenance,
    messages,
    queues,
    serve,
    spark,
    status,
)

__all__ = ["app", "main"]


def _version() -> str:
    try:
        return version("queenpy")
    except PackageNotFoundError:  # running from a source tree without an install
        return "unknown"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"queenpy {_version()}")
        raise typer.Exit()


app = typer.Typer(
    help="queenpy: Queen MQ, the partitioned message queue on PostgreSQL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    _version_flag: Annotated[
        bool,
        typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """queenpy: Queen MQ, the partitioned message queue on PostgreSQL."""


# the commands, in the order ``queenpy --help`` lists them (typer lists the groups after the commands);
# each module defines its commands at module level, a command group as its own ``app``
app.command("serve")(serve.serve)
app.command("push")(messages.push)
app.command("pop")(messages.pop)
app.command("consume")(messages.consume)
app.command("configure")(queues.configure)
app.command("status")(status.status)
app.command("bench")(bench.bench)
app.command("chaos")(chaos.chaos)
app.add_typer(db.app, name="db")
app.add_typer(browse.app, name="messages")
app.add_typer(queues.app, name="queues")
app.add_typer(groups.app, name="groups")
app.add_typer(dlq.app, name="dlq")
app.add_typer(maintenance.app, name="maintenance")
app.add_typer(spark.app, name="spark")


def main() -> None:
    """Console entry point."""
    app()
