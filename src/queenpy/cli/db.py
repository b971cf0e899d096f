"""``queenpy db``: print or apply the SQL the broker runs on start (schema, migrations, procedures)."""

from __future__ import annotations

import typer

from queenpy.cli.serve import DatabaseUrlOption, DataDirOption
from queenpy.settings import Settings

__all__ = ["app"]

app = typer.Typer(help="Database schema: print or apply the SQL.", no_args_is_help=True)


@app.command("sql")
def db_sql() -> None:
    """Print the SQL the broker applies on start (schema, migrations, procedures)."""
    from queenpy.store.migrate import render_sql

    typer.echo(render_sql(), nl=False)


@app.command("migrate")
def db_migrate(
    database_url: DatabaseUrlOption = "",
    data_dir: DataDirOption = "",
) -> None:
    """Apply migrations and procedures now, and say what changed."""
    from queenpy.server.process import migrate, resolve_database

    database = resolve_database(
        Settings.from_env(database_url=database_url or None, data_dir=data_dir or None)
    )
    try:
        applied = migrate(database.url)
        typer.echo("\n".join(applied) if applied else "up to date")
    finally:
        if database.embedded is not None:
            database.embedded.stop()
