"""``queenpy push``, ``pop`` and ``consume``: messages in and out, as JSON lines."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from queenpy.cli._common import (
    AckOption,
    BatchOption,
    Connection,
    GroupOption,
    PartitionOption,
    QueueOption,
    TimeoutOption,
    client_command,
    parse_payload,
    print_json,
    read_json_lines,
    stderr,
    stdout,
)
from queenpy.client import Message, PushResult
from queenpy.errors import QueenError

__all__ = ["consume", "pop", "push"]


def _partition_runs(items: list[Any], default: str | None) -> list[tuple[str | None, list[Any]]]:
    """Consecutive runs of items by target partition: a line ``{"data": ..., "partition": "p"}`` goes to
    ``p``, every other item to ``--partition`` (or ``Default``). Order within the input is kept."""
    runs: list[tuple[str | None, list[Any]]] = []
    for item in items:
        target = default
        if isinstance(item, dict) and ("data" in item or "payload" in item) and "partition" in item:
            if not isinstance(item["partition"], str):
                raise ValueError(f"partition must be a string, got {item['partition']!r}")
            target = item["partition"]
        if runs and runs[-1][0] == target:
            runs[-1][1].append(item)
        else:
            runs.append((target, [item]))
    return runs


@client_command()
def push(
    connection: Connection,
    payloads: Annotated[
        list[str] | None,
        typer.Argument(help="Payloads (JSON, else taken as text). Default: --file or stdin."),
    ] = None,
    queue: QueueOption = ...,  # type: ignore[assignment]
    partition: PartitionOption = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", "-f", envvar="QUEEN_PUSH_FILE", help="JSON-lines file ('-' for stdin)."),
    ] = None,
    batch_size: Annotated[
        int, typer.Option("--batch-size", envvar="QUEEN_PUSH_BATCH_SIZE", min=1, help="Items per request.")
    ] = 100,
) -> None:
    """Push messages. Each JSON line may be a payload or {"data": ..., "transactionId": ...}."""
    with connection.client() as client:
        if payloads:
            items = [parse_payload(text) for text in payloads]
        elif file is not None and str(file) != "-":
            items = read_json_lines(file.read_text(encoding="utf-8").splitlines(), str(file))
        elif file is not None or not sys.stdin.isatty():
            items = read_json_lines(sys.stdin.read().splitlines(), "stdin")
        else:
            raise ValueError("nothing to push: give payloads, --file, or pipe JSON lines into stdin")
        results: list[PushResult] = []
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        progress = Progress(
            TextColumn("pushing"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=stderr(),
            disable=connection.json_output or len(items) <= batch_size,
            transient=True,
        )
        with progress:
            task = progress.add_task("push", total=len(items))
            for target_partition, run in _partition_runs(items, partition):
                builder = client.queue(queue)
                if target_partition is not None:
                    builder = builder.partition(target_partition)
                for start in range(0, len(run), batch_size):
                    chunk = run[start : start + batch_size]
                    results.extend(builder.push(chunk))
                    progress.advance(task, len(chunk))
        if connection.json_output:
            for result in results:
                print_json(
                    {
                        "status": result.status,
                        "transactionId": result.transaction_id,
                        "messageId": result.message_id,
                        "partitionId": result.partition_id,
                        "queue": result.queue,
                        "partition": result.partition,
                    }
                )
            return
        counts: dict[str, int] = {}
        for result in results:
            counts[result.status] = counts.get(result.status, 0) + 1
        summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items())) or "nothing"
        target = f"{queue}/{partition}" if partition is not None else queue
        stdout().print(f"pushed {len(results)} message(s) to {target}: {summary}", highlight=False)


@client_command()
def pop(
    connection: Connection,
    queue: QueueOption = ...,  # type: ignore[assignment]
    partition: PartitionOption = None,
    group: GroupOption = None,
    batch: BatchOption = 1,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", envvar="QUEEN_WAIT", help="Long poll.")] = False,
    timeout_millis: TimeoutOption = 30_000,
    ack: AckOption = True,
) -> None:
    """Pop once and print the messages as JSON lines (nothing when the queue has none); with --json, one JSON
    array (``[]`` when there is none)."""
    with connection.client() as client:
        builder = client.queue(queue).batch(batch).wait(wait).timeout_millis(timeout_millis)
        if partition is not None:
            builder = builder.partition(partition)
        if group:
            builder = builder.group(group)
        messages: list[Message] = builder.pop()
        if connection.json_output:
            print_json([message.to_wire() for message in messages])
        else:
            for message in messages:
                print_json(message.to_wire())
        if ack and messages:
            refused = [result for result in client.ack(messages) if not result.success]
            if refused:
                raise QueenError(f"{len(refused)} ack(s) refused: {refused[0].error}")


@client_command(json_option=False)  # its output is JSON lines already
def consume(
    connection: Connection,
    queue: QueueOption = ...,  # type: ignore[assignment]
    partition: PartitionOption = None,
    group: GroupOption = None,
    batch: BatchOption = 1,
    concurrency: Annotated[
        int, typer.Option("--concurrency", envvar="QUEEN_CONCURRENCY", min=1, help="Parallel pop loops.")
    ] = 1,
    limit: Annotated[
        int | None, typer.Option("--limit", "-n", envvar="QUEEN_LIMIT", min=1, help="Stop after N messages.")
    ] = None,
    idle_millis: Annotated[
        int | None,
        typer.Option(
            "--idle-millis", envvar="QUEEN_IDLE_MILLIS", min=1, help="Stop after this many idle ms."
        ),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", envvar="QUEEN_WAIT", help="Long poll.")] = True,
    timeout_millis: TimeoutOption = 30_000,
    subscription_mode: Annotated[
        str | None,
        typer.Option(
            "--subscription-mode", envvar="QUEEN_SUBSCRIPTION_MODE", help="'new' or 'all' (new groups)."
        ),
    ] = None,
    ack: AckOption = True,
) -> None:
    """Consume until --limit, --idle-millis or Ctrl-C, printing each message as a JSON line."""
    lock = threading.Lock()

    def handler(messages: list[Message] | Message) -> None:
        # the whole popped batch at once (a single Message when --batch is 1): it is then acknowledged with
        # one batch ack, not one request per message
        with lock:
            for message in messages if isinstance(messages, list) else [messages]:
                print_json(message.to_wire())

    with connection.client() as client:
        builder = (
            client.queue(queue)
            .batch(batch)
            .concurrency(concurrency)
            .wait(wait)
            .timeout_millis(timeout_millis)
            .auto_ack(ack)
            .limit(limit)
            .idle_millis(idle_millis)
        )
        if partition is not None:
            builder = builder.partition(partition)
        if group:
            builder = builder.group(group)
        if subscription_mode:
            builder = builder.subscription_mode(subscription_mode)
        handled = builder.consume(handler)
        stderr().print(f"consumed {handled} message(s)", highlight=False)
