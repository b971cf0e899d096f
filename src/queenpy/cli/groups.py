"""``queenpy groups``: consumer groups (list, describe, lag, seek, delete)."""

from __future__ import annotations

from typing import Annotated

import typer

from queenpy.cli._common import (
    Connection,
    OptionalQueueOption,
    PartitionOption,
    QueueOption,
    client_command,
    fail,
    print_json,
    stdout,
    table,
)
from queenpy.client import Queen

__all__ = ["app"]

app = typer.Typer(help="Consumer groups: list, describe, lag, seek, delete.", invoke_without_command=True)


def _groups_list(client: Queen, json_output: bool) -> None:
    groups = client.consumer_groups()
    if json_output:
        print_json(groups)
        return
    rows = [
        [
            row.get("name"),
            row.get("queueName"),
            row.get("members"),
            row.get("partitionsWithLag"),
            row.get("maxTimeLag"),
            row.get("state"),
            row.get("subscriptionMode"),
        ]
        for row in groups
    ]
    table(
        "consumer groups",
        ["group", "queue", "partitions", "lagging", "max time lag (s)", "state", "subscription"],
        rows,
    )


# also the group's default command: ``queenpy groups`` is ``queenpy groups list``
@app.callback()
@app.command("list")
@client_command()
def groups_list(ctx: typer.Context, connection: Connection) -> None:
    """List consumer groups per queue."""
    if ctx.invoked_subcommand is None:
        with connection.client() as client:
            _groups_list(client, connection.json_output)


@app.command("describe")
@client_command()
def groups_describe(
    connection: Connection,
    group: Annotated[str, typer.Argument(help="Consumer group.")],
) -> None:
    """Cursor, lag and lease of a group on every partition it reads."""
    with connection.client() as client:
        detail = client.consumer_group(group)
        if connection.json_output:
            print_json(detail)
            return
        rows = [
            [
                queue,
                row.get("partition"),
                row.get("offsetLag"),
                row.get("timeLagSeconds"),
                row.get("totalConsumed"),
                row.get("leaseActive"),
                row.get("lastConsumedAt"),
            ]
            for queue, info in sorted(detail.items())
            for row in (info or {}).get("partitions") or []
        ]
        table(
            f"group {group}",
            ["queue", "partition", "offset lag", "time lag (s)", "consumed", "leased", "last consumed"],
            rows,
        )


@app.command("lag")
@client_command()
def groups_lag(
    connection: Connection,
    min_lag_seconds: Annotated[
        int,
        typer.Option(
            "--min-lag-seconds",
            envvar="QUEEN_MIN_LAG_SECONDS",
            min=0,
            help="Only partitions whose oldest unconsumed message is older than this.",
        ),
    ] = 0,
) -> None:
    """Lagging partitions per group, worst first."""
    with connection.client() as client:
        rows = client.lagging_consumer_groups(min_lag_seconds)
        if connection.json_output:
            print_json(rows)
            return
        table(
            "lag",
            ["group", "queue", "partition", "offset lag", "time lag (s)", "oldest unconsumed"],
            [
                [
                    r.get("consumer_group"),
                    r.get("queue_name"),
                    r.get("partition_name"),
                    r.get("offset_lag"),
                    r.get("time_lag_seconds"),
                    r.get("oldest_unconsumed_at"),
                ]
                for r in rows
            ],
        )


@app.command("seek")
@client_command()
def groups_seek(
    connection: Connection,
    group: Annotated[str, typer.Argument(help="Consumer group.")],
    queue: QueueOption = ...,  # type: ignore[assignment]
    to_end: Annotated[
        bool, typer.Option("--to-end", envvar="QUEEN_SEEK_TO_END", help="Skip to the newest message.")
    ] = False,
    timestamp: Annotated[
        str | None,
        typer.Option(
            "--timestamp",
            envvar="QUEEN_SEEK_TIMESTAMP",
            help="Re-read messages created after this ISO time.",
        ),
    ] = None,
    partition: PartitionOption = None,
) -> None:
    """Move a group's cursors on a queue: --to-end, or --timestamp (replay from then)."""
    if partition is None and to_end == (timestamp is not None):
        fail("give where to move the cursors: --to-end or --timestamp ISO-TIME (one of them)")
        raise typer.Exit(2)
    with connection.client() as client:
        if partition is not None and not timestamp:
            answer = client.seek(group, queue, partition=partition)
        else:
            answer = client.seek(group, queue, to_end=to_end, timestamp=timestamp)
        if connection.json_output:
            print_json(answer)
            return
        moved = answer.get("partitionsUpdated", answer.get("updated"))
        target = "the end" if to_end or partition is not None else timestamp
        stdout().print(
            f"group {group} on {queue}: {moved} partition cursor(s) moved to {target}", highlight=False
        )


@app.command("delete")
@client_command()
def groups_delete(
    connection: Connection,
    group: Annotated[str, typer.Argument(help="Consumer group.")],
    queue: OptionalQueueOption = None,
    keep_metadata: Annotated[
        bool, typer.Option("--keep-metadata", envvar="QUEEN_KEEP_METADATA", help="Keep the subscription.")
    ] = False,
) -> None:
    """Delete a group's cursors (and subscription) on one queue or all."""
    with connection.client() as client:
        answer = client.delete_consumer_group(group, delete_metadata=not keep_metadata, queue=queue)
        if connection.json_output:
            print_json(answer)
        else:
            stdout().print(
                f"deleted group {group}: {answer.get('deletedPartitions', 0)} cursor(s)", highlight=False
            )
