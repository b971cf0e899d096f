"""``queenpy maintenance``: show, or turn on/off, push maintenance mode (pushes buffered to disk, replayed
when turned off) or, with ``--pop``, pop maintenance mode (pops answer 204), on every broker process."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from queenpy.cli._common import (
    DEFAULT_URL,
    JsonOption,
    TokenOption,
    UrlOption,
    VerboseOption,
    connect,
    print_json,
    table,
)

__all__ = ["register"]

PopOption = Annotated[bool, typer.Option("--pop", envvar="QUEEN_MAINTENANCE_POP",
                                         help="Pop maintenance mode instead of push maintenance mode.")]


def _print(state: dict[str, Any], json_output: bool) -> None:
    if json_output:
        print_json(state)
        return
    rows = [[key, state[key]] for key in ("maintenanceMode", "popMaintenanceMode", "bufferedMessages",
                                          "bufferHealthy", "message") if key in state]
    table("maintenance", ["", "value"], rows)


def _switch(enabled: bool, pop: bool, url: str, token: str | None, json_output: bool, verbose: bool) -> None:
    with connect(url, token, verbose) as client:
        _print(client.set_maintenance(enabled, pop=pop), json_output)


def register(app: typer.Typer) -> None:
    """Add ``maintenance [on|off] [--pop]`` to ``app``."""
    group = typer.Typer(help="Maintenance mode: show, on, off.", invoke_without_command=True)

    @group.callback()
    def show(ctx: typer.Context, url: UrlOption = DEFAULT_URL, token: TokenOption = None,
             json_output: JsonOption = False, verbose: VerboseOption = False) -> None:
        """Show both maintenance switches and the failover buffer (default command)."""
        if ctx.invoked_subcommand is None:
            with connect(url, token, verbose) as client:
                _print(client.maintenance(), json_output)

    @group.command("on")
    def on(pop: PopOption = False, url: UrlOption = DEFAULT_URL, token: TokenOption = None,
           json_output: JsonOption = False, verbose: VerboseOption = False) -> None:
        """Turn maintenance mode on."""
        _switch(True, pop, url, token, json_output, verbose)

    @group.command("off")
    def off(pop: PopOption = False, url: UrlOption = DEFAULT_URL, token: TokenOption = None,
            json_output: JsonOption = False, verbose: VerboseOption = False) -> None:
        """Turn maintenance mode off (push: buffered pushes are replayed)."""
        _switch(False, pop, url, token, json_output, verbose)

    app.add_typer(group, name="maintenance")
