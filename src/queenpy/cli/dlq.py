"""``queenpy dlq``: the dead-letter queue (list, replay)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from queenpy.cli._common import (
    DEFAULT_URL,
    GroupOption,
    JsonOption,
    OffsetOption,
    OptionalQueueOption,
    RowsOption,
    TokenOption,
    UrlOption,
    VerboseOption,
    connect,
    iso_z,
    merged,
    print_json,
    remember,
    required_queue,
    stdout,
    table,
)
from queenpy.client import DeadLetter, Queen

__all__ = ["register"]


def _dlq_rows(
    client: Queen, queue: str, group: str | None, limit: int, offset: int
) -> tuple[list[DeadLetter], int]:
    page = client.queue(queue).dlq(group).limit(limit).offset(offset).get()
    return page.messages, page.total


def _dlq_list(
    client: Queen, queue: str, group: str | None, limit: int, offset: int, json_output: bool
) -> None:
    rows, total = _dlq_rows(client, queue, group, limit, offset)
    if json_output:
        print_json({"messages": [row.to_wire() for row in rows], "total": total})
        return
    table(
        f"dead letters of {queue} ({len(rows)} of {total})",
        ["transaction", "partition", "group", "error", "retries", "failed at", "data"],
        [
            [
                r.transaction_id,
                r.partition,
                r.consumer_group,
                r.error_message,
                r.retry_count,
                iso_z(r.failed_at),
                json.dumps(r.data, default=str)[:60],
            ]
            for r in rows
        ],
    )


def register(app: typer.Typer) -> None:
    """Add ``dlq`` to ``app``."""
    dlq_app = typer.Typer(help="Dead-letter queue: list, replay.", invoke_without_command=True)

    @dlq_app.callback()
    def dlq_default(
        ctx: typer.Context,
        queue: OptionalQueueOption = None,
        group: GroupOption = None,
        limit: RowsOption = 100,
        offset: OffsetOption = 0,
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
        json_output: JsonOption = False,
        verbose: VerboseOption = False,
    ) -> None:
        """List the dead letters of --queue (default command); the options also apply to a subcommand."""
        remember(ctx, queue=queue, group=group, url=url, token=token, json_output=json_output, verbose=verbose)
        if ctx.invoked_subcommand is None:
            with connect(url, token, verbose) as client:
                _dlq_list(client, required_queue(queue), group, limit, offset, json_output)

    @dlq_app.command("list")
    def dlq_list(
        ctx: typer.Context,
        queue: OptionalQueueOption = None,
        group: GroupOption = None,
        limit: RowsOption = 100,
        offset: OffsetOption = 0,
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
        json_output: JsonOption = False,
        verbose: VerboseOption = False,
    ) -> None:
        """List the dead letters of a queue, newest failure first."""
        o = merged(ctx, queue=queue, group=group, url=url, token=token, json_output=json_output, verbose=verbose)
        with connect(o.url, o.token, o.verbose) as client:
            _dlq_list(client, required_queue(o.queue), o.group, limit, offset, o.json_output)

    @dlq_app.command("replay")
    def dlq_replay(
        ctx: typer.Context,
        transaction_ids: Annotated[
            list[str] | None, typer.Argument(help="Transaction ids to replay (default: --all).")
        ] = None,
        queue: OptionalQueueOption = None,
        group: GroupOption = None,
        replay_all: Annotated[
            bool, typer.Option("--all", envvar="QUEEN_REPLAY_ALL", help="Replay every dead letter.")
        ] = False,
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
        json_output: JsonOption = False,
        verbose: VerboseOption = False,
    ) -> None:
        """Put dead letters back at the head of their partition, for their group, to be delivered again."""
        o = merged(ctx, queue=queue, group=group, url=url, token=token, json_output=json_output, verbose=verbose)
        name = required_queue(o.queue)
        if not transaction_ids and not replay_all:
            raise typer.BadParameter("give transaction ids or --all")
        with connect(o.url, o.token, o.verbose) as client:
            wanted = set(transaction_ids or [])
            rows: list[DeadLetter] = []
            offset = 0
            while True:  # collect first: replaying changes the listing
                page, total = _dlq_rows(client, name, o.group, 500, offset)
                rows.extend(row for row in page if replay_all or row.transaction_id in wanted)
                offset += len(page)
                if not page or offset >= total:
                    break
            missing = wanted - {row.transaction_id for row in rows}
            if missing:
                raise ValueError(f"not in the dead-letter queue of {name}: {', '.join(sorted(missing))}")
            for row in rows:
                answer = client.replay_dlq(row)
                if o.json_output:
                    print_json({"transactionId": row.transaction_id, "partitionId": row.partition_id, **answer})
            if not o.json_output:
                stdout().print(f"replayed {len(rows)} dead letter(s) of {name}", highlight=False)

    app.add_typer(dlq_app, name="dlq")
