"""The connection options of the client commands (``cli/_common.py``'s ``client_command``): declared once,
present with their environment variable on every client command, and given on a group's command line they
reach its subcommand unless the subcommand's own command line gives them."""

from __future__ import annotations

import json
from typing import Any

import pytest
import typer
import typer.main
from typer.testing import CliRunner

from queenpy.cli import app as queenpy_app
from queenpy.cli._common import Connection, OptionalQueueOption, client_command

# commands that talk to no broker, or to one in their own way (spark run hands --url to a script)
NOT_CLIENT_COMMANDS = {"serve", "bench", "chaos", "db", "spark"}
CONNECTION_ENVVARS = {
    "--url": "QUEEN_URL",
    "--token": "QUEEN_TOKEN",
    "--json": "QUEEN_JSON",
    "--verbose": "QUEEN_VERBOSE",
}


def client_commands() -> list[tuple[str, Any]]:
    """Every command and command group under the client commands of ``queenpy``, by path, as click objects
    (of click itself or of the copy newer typers carry, hence no isinstance checks)."""
    found: list[tuple[str, Any]] = []

    def walk(command: Any, path: str) -> None:
        found.append((path, command))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}")

    root: Any = typer.main.get_command(queenpy_app)
    for name, command in root.commands.items():
        if name not in NOT_CLIENT_COMMANDS:
            walk(command, name)
    return found


def test_every_client_command_takes_the_connection_options_with_their_variables() -> None:
    commands = client_commands()
    assert {path for path, _ in commands} >= {
        "push",
        "pop",
        "consume",
        "configure",
        "status",
        "queues",
        "queues describe",
        "groups seek",
        "dlq",
        "dlq replay",
        "messages ls",
        "maintenance",
        "maintenance on",
    }
    for path, command in commands:
        if path == "messages":  # a group without a default command: nothing to connect for
            continue
        options = {param.opts[0]: param for param in command.params if param.param_type_name == "option"}
        expected = {
            flag: variable
            for flag, variable in CONNECTION_ENVVARS.items()
            if not (path == "consume" and flag == "--json")
        }  # consume prints JSON lines only
        for flag, variable in expected.items():
            assert flag in options, f"queenpy {path} has no {flag}"
            assert options[flag].envvar == variable, f"queenpy {path} {flag}"
        # STYLE.md item 18: every option can come from an environment variable
        assert [flag for flag, option in options.items() if not option.envvar and flag != "--help"] == [], (
            path
        )


def toy_app() -> typer.Typer:
    """A group shaped like ``queenpy dlq``: its callback takes options that its subcommand takes too."""
    toy = typer.Typer(invoke_without_command=True)

    @toy.callback()
    @client_command()
    def group(ctx: typer.Context, connection: Connection, queue: OptionalQueueOption = None) -> None:
        if ctx.invoked_subcommand is None:
            typer.echo(json.dumps({"command": "group", "queue": queue, **vars(connection)}))

    @toy.command("show")
    @client_command()
    def show(connection: Connection, queue: OptionalQueueOption = None) -> None:
        typer.echo(json.dumps({"command": "show", "queue": queue, **vars(connection)}))

    @toy.command("tail")
    @client_command(json_option=False)
    def tail(connection: Connection) -> None:
        typer.echo(json.dumps({"command": "tail", **vars(connection)}))

    return toy


def invoke(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = CliRunner().invoke(
        toy_app(), list(args), env={"QUEEN_URL": None, "QUEEN_QUEUE": None, "QUEEN_JSON": None, **(env or {})}
    )
    assert done.exit_code == 0, done.output
    answer: dict[str, Any] = json.loads(done.output)
    return answer


def test_defaults_and_the_options_after_the_subcommand() -> None:
    assert invoke("show") == {
        "command": "show",
        "queue": None,
        "url": "http://localhost:6632",
        "token": None,
        "json_output": False,
        "verbose": False,
    }
    shown = invoke("show", "--url", "http://b:1", "--token", "t", "--json", "-v", "-q", "q1")
    assert shown == {
        "command": "show",
        "queue": "q1",
        "url": "http://b:1",
        "token": "t",
        "json_output": True,
        "verbose": True,
    }
    assert invoke("--json", "-q", "q1")["command"] == "group"  # the callback as the default command


def test_options_given_to_the_group_reach_the_subcommand() -> None:
    shown = invoke("--url", "http://group:1", "-q", "from-group", "--json", "show")
    assert (shown["url"], shown["queue"], shown["json_output"]) == ("http://group:1", "from-group", True)
    # the subcommand's own command line wins
    shown = invoke(
        "--url", "http://group:1", "-q", "from-group", "show", "-q", "own", "--url", "http://own:1"
    )
    assert (shown["url"], shown["queue"]) == ("http://own:1", "own")


def test_the_environment_comes_after_any_command_line() -> None:
    env = {"QUEEN_URL": "http://env:1", "QUEEN_QUEUE": "from-env"}
    shown = invoke("show", env=env)
    assert (shown["url"], shown["queue"]) == ("http://env:1", "from-env")
    shown = invoke("--url", "http://group:1", "show", env=env)  # the group's command line beats the variable
    assert (shown["url"], shown["queue"]) == ("http://group:1", "from-env")


def test_a_command_without_json_has_no_json_option() -> None:
    assert invoke("tail", "--url", "http://b:1")["url"] == "http://b:1"
    done = CliRunner().invoke(toy_app(), ["tail", "--json"])
    assert done.exit_code == 2 and "--json" in done.output


@pytest.mark.parametrize("args", [["show", "--help"], ["--help"]])
def test_help_lists_the_connection_options_after_the_own_ones(args: list[str]) -> None:
    done = CliRunner().invoke(toy_app(), args, env={"COLUMNS": "200"})
    assert done.exit_code == 0
    order = [done.output.index(flag) for flag in ("--queue", "--url", "--token", "--json", "--verbose")]
    assert order == sorted(order)
    assert "QUEEN_URL" in done.output and "QUEEN_VERBOSE" in done.output
