"""``queenpy groups``: consumer groups (list, describe, lag, seek, delete)."""

from __future__ import annotations

from typing import Annotated

import typer

from queenpy.cli._common import (
    DEFAULT_URL,
    JsonOption,
    OptionalQueueOption,
    PartitionOption,
    QueueOption,
    TokenOption,
    UrlOption,
    VerboseOption,
    connect,
    connection_options,
    fail,
    print_json,
    remember,
    stdout,
    table,
)
from queenpy.client import Queen

__all__ = ["register"]


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


def register(app: typer.Typer) -> None:
    """Add ``groups`` to ``app``."""
    groups_app = typer.Typer(
        help="Consumer groups: list, describe, lag, seek, delete.", invoke_without_command=True
    )

    @groups_app.callback()
    def groups_default(
        ctx: typer.Context,
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
        json_output: JsonOption = False,
        verbose: VerboseOption = False,
    ) -> None:
        """List consumer groups per queue (default command)."""
        remember(ctx, url=url, token=token, json_output=json_output, verbose=verbose)
        if ctx.invoked_subcommand is None:
            with connect(url, token, verbose) as client:
                _groups_list(client, json_output)

    @groups_app.command("list")
    def groups_list(
        ctx: typer.Context,
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
        json_output: JsonOption = False,
        verbose: VerboseOption = False,
    ) -> None:
        """List consumer groups per queue."""
        url, token, json_output, verbose = connection_options(ctx, url, token, json_output, verbose)
        with connect(url, token, verbose) as client:
            _groups_list(client, json_output)

    @groups_app.command("describe")
    def groups_describe(
        ctx: typer.Context,
        group: Annotated[str, typer.Argument(help="Consumer group.")],
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
        json_output: JsonOption = False,
        verbose: VerboseOption = False,
    ) -> None:
        """Cursor, lag and lease of a group on every partition it reads."""
        url, token, json_output, verbose = connection_options(ctx, url, token, json_output, verbose)
        with connect(url, token, verbose) as client:
            detail = client.consumer_group(group)
            if json_output:
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

    @groups_app.command("lag")
    def groups_lag(
        ctx: typer.Context,
        min_lag_seconds: Annotated[
            int,
            typer.Option(
                "--min-lag-seconds",
                envvar="QUEEN_MIN_LAG_SECONDS",
                min=0,
                help="Only partitions whose oldest unconsumed message is older than this.",
            ),
        ] = 0,
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
        json_output: JsonOption = False,
        verbose: VerboseOption = False,
    ) -> None:
        """Lagging partitions per group, worst first."""
        url, token, json_output, verbose = connection_options(ctx, url, token, json_output, verbose)
        with connect(url, token, verbose) as client:
            rows = client.lagging_consumer_groups(min_lag_seconds)
            if json_output:
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

    @groups_app.command("seek")
    def groups_seek(
        ctx: typer.Context,
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
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
        json_output: JsonOption = False,
        verbose: VerboseOption = False,
    ) -> None:
        """Move a group's cursors on a queue: --to-end, or --timestamp (replay from then)."""
        url, token, json_output, verbose = connection_options(ctx, url, token, json_output, verbose)
        if partition is None and to_end == (timestamp is not None):
            fail("give where to move the cursors: --to-end or --timestamp ISO-TIME (one of them)")
            raise typer.Exit(2)
        with connect(url, token, verbose) as client:
            if partition is not None and not timestamp:
                answer = client.seek(group, queue, partition=partition)
            else:
                answer = client.seek(group, queue, to_end=to_end, timestamp=timestamp)
            if json_output:
                print_json(answer)
                return
            moved = answer.get("partitionsUpdated", answer.get("updated"))
            target = "the end" if to_end or partition is not None else timestamp
            stdout().print(
                f"group {group} on {queue}: {moved} partition cursor(s) moved to {target}", highlight=False
            )

    @groups_app.command("delete")
    def groups_delete(
        ctx: typer.Context,
        group: Annotated[str, typer.Argument(help="Consumer group.")],
        queue: OptionalQueueOption = None,
        keep_metadata: Annotated[
            bool, typer.Option("--keep-metadata", envvar="QUEEN_KEEP_METADATA", help="Keep the subscription.")
        ] = False,
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
        json_output: JsonOption = False,
        verbose: VerboseOption = False,
    ) -> None:
        """Delete a group's cursors (and subscription) on one queue or all."""
        url, token, json_output, verbose = connection_options(ctx, url, token, json_output, verbose)
        with connect(url, token, verbose) as client:
            answer = client.delete_consumer_group(group, delete_metadata=not keep_metadata, queue=queue)
            if json_output:
                print_json(answer)
            else:
                stdout().print(
                    f"deleted group {group}: {answer.get('deletedPartitions', 0)} cursor(s)", highlight=False
                )

    app.add_typer(groups_app, name="groups")


