"""``queenpy serve``: run the broker (HTTP API v1), on the embedded PostgreSQL unless one is configured."""

from __future__ import annotations

from typing import Annotated

import typer

from queenpy.settings import Settings

__all__ = ["DataDirOption", "DatabaseUrlOption", "serve"]

# the database options of ``serve`` and ``db migrate`` (both resolve the database the same way)
DatabaseUrlOption = Annotated[
    str,
    typer.Option(
        "--database-url",
        envvar="DATABASE_URL",
        help="PostgreSQL URL; empty: PG_* variables, else the embedded server.",
    ),
]
DataDirOption = Annotated[
    str,
    typer.Option(
        "--data-dir",
        envvar="QUEENPY_DATA_DIR",
        help="Data directory of the embedded PostgreSQL (default: user data dir).",
    ),
]


def serve(
    host: str = typer.Option("0.0.0.0", envvar="HOST", help="Listen address."),
    port: int = typer.Option(6632, envvar="PORT", help="Listen port."),
    workers: int = typer.Option(0, envvar="NUM_WORKERS", help="Worker processes (0: one per core)."),
    database_url: DatabaseUrlOption = "",
    data_dir: DataDirOption = "",
    access_log: bool = typer.Option(
        False,
        "--access-log/--no-access-log",
        envvar="QUEEN_ACCESS_LOG",
        help="Log every request (method, path, status) on stderr; also on with LOG_LEVEL=debug.",
    ),
) -> None:
    """Run the broker (HTTP API v1 on PORT), on the embedded PostgreSQL unless one is configured."""
    from queenpy.errors import QueenError
    from queenpy.server.process import serve as run

    settings = Settings.from_env(
        host=host,
        port=port,
        num_workers=workers or None,
        database_url=database_url or None,
        data_dir=data_dir or None,
        access_log=access_log or None,
    )
    try:
        run(settings)
    except QueenError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from None
