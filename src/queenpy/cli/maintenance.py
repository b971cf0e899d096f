"""``queenpy maintenance``: show, or turn on/off, push maintenance mode (pushes buffered to disk, replayed
when turned off) or, with ``--pop``, pop maintenance mode (pops answer 204), on every broker process."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from queenpy.cli._common import Connection, client_command, print_json, table

__all__ = ["app"]

app = typer.Typer(help="Maintenance mode: show, on, off.", invoke_without_command=True)

PopOption = Annotated[
    bool,
    typer.Option(
        "--pop", envvar="QUEEN_MAINTENANCE_POP", help="Pop maintenance mode instead of push maintenance mode."
    ),
]


def _print(state: dict[str, Any], json_output: bool) -> None:
    if json_output:
        print_json(state)
        return
    rows = [
        [key, state[key]]
        for key in ("maintenanceMode", "popMaintenanceMode", "bufferedMessages", "bufferHealthy", "message")
        if key in state
    ]
    table("maintenance", ["", "value"], rows)


@app.callback()
@client_command()
def show(ctx: typer.Context, connection: Connection) -> None:
    """Show both maintenance switches and the failover buffer (default command)."""
    if ctx.invoked_subcommand is None:
        with connection.client() as client:
            _print(client.maintenance(), connection.json_output)


@app.command("on")
@client_command()
def on(connection: Connection, pop: PopOption = False) -> None:
    """Turn maintenance mode on."""
    with connection.client() as client:
        _print(client.set_maintenance(True, pop=pop), connection.json_output)


@app.command("off")
@client_command()
def off(connection: Connection, pop: PopOption = False) -> None:
    """Turn maintenance mode off (push: buffered pushes are replayed)."""
    with connection.client() as client:
        _print(client.set_maintenance(False, pop=pop), connection.json_output)
