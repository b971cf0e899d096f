"""What the client commands share: the options (each readable from the environment variable named in its
``--help``), the client context (errors as one plain sentence on stderr, exit 1; ``-v`` for the traceback),
and output as rich tables or JSON lines."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from queenpy.client import DEFAULT_URL, Queen
from queenpy.errors import QueenError

__all__ = [
    "DEFAULT_URL",
    "AckOption",
    "BatchOption",
    "GroupOption",
    "JsonOption",
    "OffsetOption",
    "OptionalQueueOption",
    "PartitionOption",
    "QueueOption",
    "RowsOption",
    "TimeoutOption",
    "TokenOption",
    "UrlOption",
    "VerboseOption",
    "connect",
    "fail",
    "iso_z",
    "merged",
    "parse_payload",
    "print_json",
    "read_json_lines",
    "remember",
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


@contextmanager
def connect(url: str, token: str | None, verbose: bool) -> Iterator[Queen]:
    """A connected sync client; broker and input errors become one line on stderr and exit code 1."""
    client: Queen | None = None
    try:
        client = Queen([part.strip() for part in url.split(",") if part.strip()], token=token)
        yield client
    except (QueenError, ValueError, OSError) as exc:
        if verbose:
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


def fail(sentence: str) -> None:
    """Print ``error: <sentence>`` on stderr (one line, no exception class names)."""
    stderr().print(f"[red]error:[/red] {escape(sentence)}", highlight=False, markup=True)


def iso_z(moment: datetime | None) -> str | None:
    """A timestamp as the broker writes them: UTC, milliseconds, ``Z`` (``2026-11-24T22:30:49.599Z``)."""
    if moment is None:
        return None
    utc = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")  # a four-digit year, unlike strftime


_DEFAULTS: dict[str, Any] = {"url": DEFAULT_URL, "json_output": False, "verbose": False}


def remember(ctx: typer.Context, **options: Any) -> None:
    """A command group's callback keeps its options for the subcommand (``queenpy dlq -q X list``)."""
    ctx.obj = options


def merged(ctx: typer.Context, **options: Any) -> SimpleNamespace:
    """A subcommand's options, each falling back to the same option given to its group when the subcommand
    left it at its default."""
    parent = ctx.obj if isinstance(ctx.obj, dict) else {}
    values = {}
    for name, value in options.items():
        default = _DEFAULTS.get(name)
        values[name] = parent.get(name, value) if value is None or value == default else value
        if values[name] is None:
            values[name] = value
    return SimpleNamespace(**values)


def connection_options(ctx: typer.Context, url: str, token: str | None, json_output: bool,
                       verbose: bool) -> tuple[str, str | None, bool, bool]:
    """``(url, token, json_output, verbose)`` of a subcommand, each falling back to its group's."""
    o = merged(ctx, url=url, token=token, json_output=json_output, verbose=verbose)
    return o.url, o.token, o.json_output, o.verbose


def required_queue(queue: str | None) -> str:
    """The queue, which this command needs. Raises typer.BadParameter naming ``--queue``."""
    if not queue:
        raise typer.BadParameter("a queue is required: give --queue (-q) or QUEEN_QUEUE", param_hint="--queue")
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
