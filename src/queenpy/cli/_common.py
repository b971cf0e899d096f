"""What the client commands share: the connection options, declared once here and added to a command by
:func:`client_command`; the other options (each readable from the environment variable named in its
``--help``); errors as one plain sentence on stderr and exit 1 (``-v`` for the traceback); output as rich
tables or JSON lines."""

from __future__ import annotations

import functools
import inspect
import json
import sys
import typing
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from queenpy.client import DEFAULT_URL, Queen
from queenpy.errors import QueenError

__all__ = [
    "AckOption",
    "BatchOption",
    "Connection",
    "GroupOption",
    "JsonOption",
    "OffsetOption",
    "OptionalQueueOption",
    "PartitionOption",
    "QueueOption",
    "RowsOption",
    "TimeoutOption",
    "VerboseOption",
    "client_command",
    "fail",
    "iso_z",
    "parse_payload",
    "print_json",
    "read_json_lines",
    "required_queue",
    "stderr",
    "stdout",
    "table",
]

UrlOption = Annotated[
    str,
    typer.Option("--url", envvar="QUEEN_URL", help="Broker base URL; several, comma-separated, fail over."),
]
TokenOption = Annotated[str | None, typer.Option("--token", envvar="QUEEN_TOKEN", help="Bearer token (JWT).")]
JsonOption = Annotated[
    bool, typer.Option("--json", envvar="QUEEN_JSON", help="Print JSON instead of tables.")
]
VerboseOption = Annotated[
    bool, typer.Option("--verbose", "-v", envvar="QUEEN_VERBOSE", help="Show tracebacks on errors.")
]
QueueOption = Annotated[str, typer.Option("--queue", "-q", envvar="QUEEN_QUEUE", help="Queue name.")]
PartitionOption = Annotated[
    str | None, typer.Option("--partition", "-p", envvar="QUEEN_PARTITION", help="Partition name.")
]
GroupOption = Annotated[
    str | None,
    typer.Option("--group", "-g", envvar="QUEEN_GROUP", help="Consumer group (default: queue mode)."),
]
BatchOption = Annotated[
    int, typer.Option("--batch", "-b", envvar="QUEEN_BATCH", min=1, help="Messages per pop.")
]
AckOption = Annotated[
    bool,
    typer.Option("--ack/--no-ack", envvar="QUEEN_ACK", help="Ack messages as completed once printed."),
]
OptionalQueueOption = Annotated[
    str | None, typer.Option("--queue", "-q", envvar="QUEEN_QUEUE", help="Queue name.")
]
RowsOption = Annotated[int, typer.Option("--limit", "-n", envvar="QUEEN_LIMIT", min=1, help="Rows to show.")]
OffsetOption = Annotated[int, typer.Option("--offset", envvar="QUEEN_OFFSET", min=0, help="Rows to skip.")]
TimeoutOption = Annotated[
    int,
    typer.Option("--timeout-millis", envvar="QUEEN_TIMEOUT_MILLIS", min=1, help="Long-poll timeout in ms."),
]


def stdout() -> Console:
    return Console(soft_wrap=True)


def stderr() -> Console:
    return Console(stderr=True, soft_wrap=True)


@dataclass(frozen=True)
class Connection:
    """The connection options of a client command: where the broker is, the token, how to print, and
    whether errors show their traceback."""

    url: str = DEFAULT_URL
    token: str | None = None
    json_output: bool = False
    verbose: bool = False

    @contextmanager
    def client(self) -> Iterator[Queen]:
        """A connected sync client; broker and input errors become one line on stderr and exit code 1."""
        client: Queen | None = None
        try:
            client = Queen([part.strip() for part in self.url.split(",") if part.strip()], token=self.token)
            yield client
        except (QueenError, ValueError, OSError) as exc:
            if self.verbose:
                stderr().print_exception(show_locals=False)
            else:
                fail(exc.message if isinstance(exc, QueenError) else str(exc))
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        finally:
            if client is not None:
                try:
                    client.close()
                except QueenError as exc:  # a push buffer could not be flushed
                    stderr().print(f"error while closing: {exc}", highlight=False, markup=False)


Command = Callable[..., None]

# (parameter, its option, default) in the order --help lists them, after the command's own options
_CONNECTION_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("url", UrlOption, DEFAULT_URL),
    ("token", TokenOption, None),
    ("json_output", JsonOption, False),
    ("verbose", VerboseOption, False),
)


def client_command(*, json_option: bool = True) -> Callable[[Command], Command]:
    """Give a command the connection options ``--url``, ``--token``, ``--json`` (unless ``json_option`` is
    false: the command prints no table) and ``-v``, declared here once.

    The decorated function names a parameter ``connection: Connection`` (first, by habit) and gets the
    options in it; typer sees the function's other parameters followed by the connection options, so they
    come after the command's own in ``--help``. Used on a group callback and on its subcommands alike, so
    ``queenpy dlq -q X --json list`` and ``queenpy dlq list -q X --json`` mean the same: an option given on a
    group's command line applies to a subcommand parameter of the same name unless the subcommand's own
    command line gives it (:func:`_inherit`). A name therefore means the same option in a group and in its
    subcommands.
    """
    added = [
        (name, option, default)
        for name, option, default in _CONNECTION_OPTIONS
        if json_option or name != "json_output"
    ]

    def decorate(command: Command) -> Command:
        hints = typing.get_type_hints(command, include_extras=True)
        own = [
            parameter.replace(
                annotation=hints.get(parameter.name, parameter.annotation),
                kind=inspect.Parameter.KEYWORD_ONLY,
            )
            for parameter in inspect.signature(command).parameters.values()
            if parameter.name != "connection"
        ]
        context = next((parameter.name for parameter in own if parameter.annotation is typer.Context), None)
        parameters = [
            *(
                []
                if context
                else [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)]
            ),
            *own,
            *(
                inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=option, default=default)
                for name, option, default in added
            ),
        ]

        @functools.wraps(command)
        def wrapper(**arguments: Any) -> None:
            ctx = arguments[context] if context else arguments.pop("ctx")
            _inherit(ctx, arguments)
            connection = Connection(**{name: arguments.pop(name) for name, _, _ in added})
            command(connection=connection, **arguments)

        # typer reads inspect.signature (which stops at __signature__ instead of following __wrapped__ to the
        # command) and typing.get_type_hints (these annotations, already resolved)
        wrapper.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {parameter.name: parameter.annotation for parameter in parameters}
        return wrapper

    return decorate


def _inherit(ctx: typer.Context, arguments: dict[str, Any]) -> None:
    """Options given on the command lines of the enclosing groups (kept in ``ctx.obj``) fill the parameters of
    the same name that this command's own command line leaves out, whether they come from the environment or
    the default; the options given to this command are kept in ``ctx.obj`` in turn for its subcommands."""
    given = dict(ctx.obj) if isinstance(ctx.obj, dict) else {}
    for name, value in arguments.items():
        # by name: typer 0.12 uses click's ParameterSource, newer typers their own copy of click
        if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE":
            given[name] = value
        elif name in given:
            arguments[name] = given[name]
    ctx.obj = given


def fail(sentence: str) -> None:
    """Print ``error: <sentence>`` on stderr (one line, no exception class names)."""
    stderr().print(f"[red]error:[/red] {escape(sentence)}", highlight=False, markup=True)


def iso_z(moment: datetime | None) -> str | None:
    """A timestamp as the broker writes them: UTC, milliseconds, ``Z`` (``YYYY-MM-DDTHH:MM:SS.sssZ``)."""
    if moment is None:
        return None
    utc = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")  # a four-digit year, unlike strftime


def required_queue(queue: str | None) -> str:
    """The queue, which this command needs. Raises typer.BadParameter naming ``--queue``."""
    if not queue:
        raise typer.BadParameter(
            "a queue is required: give --queue (-q) or QUEEN_QUEUE", param_hint="--queue"
        )
    return queue


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*("" if value is None else str(value) for value in row))
    stdout().print(table)


def parse_payload(text: str) -> Any:
    """A command-line payload: JSON if it parses, else the plain string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def read_json_lines(lines: Sequence[str], source: str) -> list[Any]:
    items = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source} line {number} is not JSON: {exc.msg}") from None
    return items
