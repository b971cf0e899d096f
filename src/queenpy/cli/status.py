"""``queenpy status``: the broker's overview (``/api/v1/resources/overview``) and its busiest queues
(``/api/v1/status/queues``) as tables; ``--watch`` redraws them every few seconds until Ctrl-C."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table

from queenpy.cli._common import (
    Connection,
    client_command,
    print_json,
    stdout,
)
from queenpy.client import Queen

__all__ = ["status"]


def _snapshot(client: Queen, limit: int) -> dict[str, Any]:
    return {"overview": client.overview(), "queues": client.queue_stats(limit=limit)}


def _tables(snapshot: dict[str, Any]) -> Group:
    overview = snapshot["overview"]
    messages = overview.get("messages") or {}
    throughput = overview.get("throughput") or {}
    lag = (overview.get("lag") or {}).get("time") or {}
    summary = Table(
        title=f"queenpy at {overview.get('timestamp')} (stats {overview.get('statsAge')} s old)",
        title_justify="left",
    )
    for column in (
        "queues",
        "partitions",
        "pending",
        "processing",
        "completed",
        "dead letter",
        "in/s",
        "out/s",
        "max lag s",
    ):
        summary.add_column(column, justify="right")
    summary.add_row(
        *(
            str(value)
            for value in (
                overview.get("queues"),
                overview.get("partitions"),
                messages.get("pending"),
                messages.get("processing"),
                messages.get("completed"),
                messages.get("deadLetter"),
                throughput.get("ingestedPerSecond"),
                throughput.get("processedPerSecond"),
                lag.get("max"),
            )
        )
    )
    queues = Table(title="queues", title_justify="left")
    for column in (
        "queue",
        "namespace",
        "task",
        "partitions",
        "total",
        "pending",
        "processing",
        "dead letter",
    ):
        queues.add_column(column, justify="left" if column in ("queue", "namespace", "task") else "right")
    for queue in snapshot["queues"].get("queues") or []:
        counts = queue.get("messages") or {}
        queues.add_row(
            *(
                str(value) if value is not None else ""
                for value in (
                    queue.get("name"),
                    queue.get("namespace"),
                    queue.get("task"),
                    queue.get("partitions"),
                    counts.get("total"),
                    counts.get("pending"),
                    counts.get("processing"),
                    counts.get("deadLetter"),
                )
            )
        )
    return Group(summary, queues)


@client_command()
def status(
    connection: Connection,
    watch: Annotated[
        float | None,
        typer.Option(
            "--watch",
            "-w",
            envvar="QUEEN_WATCH",
            min=0.5,
            help="Redraw every this many seconds until Ctrl-C.",
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", envvar="QUEEN_LIMIT", min=1, max=10_000, help="Queues to show.")
    ] = 20,
    iterations: Annotated[
        int | None,
        typer.Option(
            "--iterations",
            envvar="QUEEN_ITERATIONS",
            min=1,
            help="With --watch: stop after this many redraws.",
        ),
    ] = None,
) -> None:
    """Overview of the broker: message counts, throughput, lag, and the queues."""
    with connection.client() as client:
        if watch is None:
            snapshot = _snapshot(client, limit)
            if connection.json_output:
                print_json(snapshot)
            else:
                stdout().print(_tables(snapshot))
            return
        drawn = 0
        if connection.json_output:  # one JSON line per redraw
            while iterations is None or drawn < iterations:
                if drawn:
                    time.sleep(watch)
                print_json(_snapshot(client, limit))
                drawn += 1
            return
        with Live(_tables(_snapshot(client, limit)), console=stdout(), auto_refresh=False) as live:
            drawn = 1
            while iterations is None or drawn < iterations:
                time.sleep(watch)
                live.update(_tables(_snapshot(client, limit)), refresh=True)
                drawn += 1
