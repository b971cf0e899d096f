"""``queenpy messages``: browse stored messages (``ls``), look at one (``show``), delete one (``rm``), replay
a dead-lettered one (``retry``). Messages are named by partition id and transaction id, as ``ls`` prints
them."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from queenpy.cli._common import (
    Connection,
    OffsetOption,
    OptionalQueueOption,
    PartitionOption,
    client_command,
    print_json,
    stdout,
    table,
)

__all__ = ["app"]

app = typer.Typer(help="Browse, show, delete and retry stored messages.", no_args_is_help=True)

PartitionIdArgument = Annotated[
    str, typer.Argument(help="Partition id (a UUID, as `messages ls` prints it).")
]
TransactionIdArgument = Annotated[str, typer.Argument(help="Transaction id of the message.")]


@app.command("ls")
@client_command()
def ls(
    connection: Connection,
    queue: OptionalQueueOption = None,
    partition: PartitionOption = None,
    status: Annotated[
        str | None,
        typer.Option(
            "--status", envvar="QUEEN_STATUS", help="pending, processing, completed or dead_letter."
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--from", envvar="QUEEN_FROM", help="Created at or after (ISO 8601; default: an hour ago)."
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--to", envvar="QUEEN_TO", help="Created before the end of this minute (ISO 8601; default: now)."
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", envvar="QUEEN_LIMIT", min=1, max=10_000, help="Rows to show.")
    ] = 50,
    offset: OffsetOption = 0,
) -> None:
    """List messages, newest first, with their status."""
    with connection.client() as client:
        page = client.list_messages(
            queue=queue,
            partition=partition,
            status=status,
            start=since,
            end=until,
            limit=limit,
            offset=offset,
        )
        if connection.json_output:
            print_json(page)
            return
        rows = page.get("messages") or []
        table(
            f"messages ({len(rows)} of {page.get('total', len(rows))}, offset {offset})",
            ["created", "queue/partition", "status", "offset", "transaction", "partition id"],
            [
                [
                    m.get("createdAt"),
                    m.get("queuePath"),
                    m.get("status"),
                    m.get("offset"),
                    m.get("transactionId"),
                    m.get("partitionId"),
                ]
                for m in rows
            ],
        )


@app.command("show")
@client_command()
def show(
    connection: Connection,
    partition_id: PartitionIdArgument,
    transaction_id: TransactionIdArgument,
) -> None:
    """Show one message: payload (decrypted), status, consumer groups, DLQ error."""
    with connection.client() as client:
        message: dict[str, Any] = client.get_message(partition_id, transaction_id)
        if connection.json_output:
            print_json(message)
            return
        fields = [
            "queuePath",
            "status",
            "offset",
            "transactionId",
            "id",
            "createdAt",
            "traceId",
            "producerSub",
            "isEncrypted",
            "errorMessage",
            "retryCount",
            "leaseExpiresAt",
        ]
        table(None, ["field", "value"], [[f, message.get(f)] for f in fields])
        groups = message.get("consumerGroups") or []
        if groups:
            table(
                "consumer groups",
                ["group", "consumed", "lease expires"],
                [[g.get("name"), g.get("consumed"), g.get("leaseExpiresAt")] for g in groups],
            )
        stdout().print(
            json.dumps(message.get("payload"), indent=2, ensure_ascii=False, default=str),
            highlight=False,
            markup=False,
        )


@app.command("rm")
@client_command()
def rm(
    connection: Connection,
    partition_id: PartitionIdArgument,
    transaction_id: TransactionIdArgument,
) -> None:
    """Delete one message (with its DLQ rows and traces)."""
    with connection.client() as client:
        result = client.delete_message(partition_id, transaction_id)
        if connection.json_output:
            print_json(result)
        if not result.get("success"):
            raise ValueError(str(result.get("message") or result.get("error") or "message not deleted"))
        if not connection.json_output:
            stdout().print(f"deleted {transaction_id}", highlight=False)


@app.command("retry")
@client_command()
def retry(
    connection: Connection,
    partition_id: PartitionIdArgument,
    transaction_id: TransactionIdArgument,
) -> None:
    """Replay a dead-lettered message: back at the head of its partition for the group(s) that failed it."""
    with connection.client() as client:
        result = client.replay_dlq(partition_id, transaction_id)
        if connection.json_output:
            print_json(result)
            return
        groups = ", ".join(result.get("consumerGroups") or [])
        stdout().print(f"replayed {transaction_id} for {groups}", highlight=False)
