"""``queenpy dlq``: the dead-letter queue (list, replay)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from queenpy.cli._common import (
    Connection,
    GroupOption,
    OffsetOption,
    OptionalQueueOption,
    RowsOption,
    client_command,
    iso_z,
    print_json,
    required_queue,
    stdout,
    table,
)
from queenpy.client import DeadLetter, Queen

__all__ = ["app"]

app = typer.Typer(help="Dead-letter queue: list, replay.", invoke_without_command=True)


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


# also the group's default command (``queenpy dlq -q X``), whose options apply to a subcommand too
@app.callback()
@app.command("list")
@client_command()
def dlq_list(
    ctx: typer.Context,
    connection: Connection,
    queue: OptionalQueueOption = None,
    group: GroupOption = None,
    limit: RowsOption = 100,
    offset: OffsetOption = 0,
) -> None:
    """List the dead letters of a queue, newest failure first."""
    if ctx.invoked_subcommand is None:
        with connection.client() as client:
            _dlq_list(client, required_queue(queue), group, limit, offset, connection.json_output)


@app.command("replay")
@client_command()
def dlq_replay(
    connection: Connection,
    transaction_ids: Annotated[
        list[str] | None, typer.Argument(help="Transaction ids to replay (default: --all).")
    ] = None,
    queue: OptionalQueueOption = None,
    group: GroupOption = None,
    replay_all: Annotated[
        bool, typer.Option("--all", envvar="QUEEN_REPLAY_ALL", help="Replay every dead letter.")
    ] = False,
) -> None:
    """Put dead letters back at the head of their partition, for their group, to be delivered again."""
    name = required_queue(queue)
    if not transaction_ids and not replay_all:
        raise typer.BadParameter("give transaction ids or --all")
    with connection.client() as client:
        wanted = set(transaction_ids or [])
        rows: list[DeadLetter] = []
        offset = 0
        while True:  # collect first: replaying changes the listing
            page, total = _dlq_rows(client, name, group, 500, offset)
            rows.extend(row for row in page if replay_all or row.transaction_id in wanted)
            offset += len(page)
            if not page or offset >= total:
                break
        missing = wanted - {row.transaction_id for row in rows}
        if missing:
            raise ValueError(f"not in the dead-letter queue of {name}: {', '.join(sorted(missing))}")
        for row in rows:
            answer = client.replay_dlq(row)
            if connection.json_output:
                print_json({"transactionId": row.transaction_id, "partitionId": row.partition_id, **answer})
        if not connection.json_output:
            stdout().print(f"replayed {len(rows)} dead letter(s) of {name}", highlight=False)
