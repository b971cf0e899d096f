"""The ``queenpy`` command line: ``serve``, ``db``, and the client commands (push, pop, queues, ...).

Every option can also come from the environment variable named in its ``--help``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from queenpy.settings import Settings

__all__ = ["app", "main"]

app = typer.Typer(help="queenpy: Queen MQ, the partitioned message queue on PostgreSQL.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
db_app = typer.Typer(help="Database schema: print or apply the SQL.", no_args_is_help=True)
app.add_typer(db_app, name="db")

# the database options of ``serve`` and ``db migrate`` (both resolve the database the same way)
DatabaseUrlOption = Annotated[str, typer.Option(
    "--database-url", envvar="DATABASE_URL", help="PostgreSQL URL; empty: PG_* variables, else the embedded server.")]
DataDirOption = Annotated[str, typer.Option(
    "--data-dir", envvar="QUEENPY_DATA_DIR", help="Data directory of the embedded PostgreSQL (default: user data dir).")]


@app.command()
def serve(
    host: str = typer.Option("0.0.0.0", envvar="HOST", help="Listen address."),
    port: int = typer.Option(6632, envvar="PORT", help="Listen port."),
    workers: int = typer.Option(0, envvar="NUM_WORKERS", help="Worker processes (0: one per core)."),
    database_url: DatabaseUrlOption = "",
    data_dir: DataDirOption = "",
) -> None:
    """Run the broker (HTTP API v1 on PORT), on the embedded PostgreSQL unless one is configured."""
    from queenpy.errors import QueenError
    from queenpy.server.process import serve as run

    settings = Settings.from_env(host=host, port=port, num_workers=workers or None,
                                 database_url=database_url or None, data_dir=data_dir or None)
    try:
        run(settings)
    except QueenError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from None


@db_app.command("sql")
def db_sql() -> None:
    """Print the SQL the broker applies on start (schema, migrations, procedures)."""
    from queenpy.store.migrate import render_sql

    typer.echo(render_sql(), nl=False)


@db_app.command("migrate")
def db_migrate(
    database_url: DatabaseUrlOption = "",
    data_dir: DataDirOption = "",
) -> None:
    """Apply migrations and procedures now, and say what changed."""
    from queenpy.server.process import migrate, resolve_database

    database = resolve_database(Settings.from_env(database_url=database_url or None, data_dir=data_dir or None))
    try:
        applied = migrate(database.url)
        typer.echo("\n".join(applied) if applied else "up to date")
    finally:
        if database.embedded is not None:
            database.embedded.stop()


def _register_optional_commands() -> None:
    """Client commands (push, pop, ...), ``spark`` and ``bench``; each module imports its heavy parts lazily."""
    import importlib

    for module in ("queenpy.client.cli", "queenpy.spark.cli", "queenpy.bench_cli"):
        try:
            register = importlib.import_module(module).register
        except ImportError:
            continue
        register(app)


_register_optional_commands()


def main() -> None:
    """Console entry point."""
    app()
