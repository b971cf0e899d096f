"""``queenpy configure`` and ``queenpy queues`` (list, describe, delete)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from queenpy.cli._common import (
    Connection,
    QueueOption,
    client_command,
    parse_payload,
    print_json,
    stdout,
    table,
)
from queenpy.client import Queen

__all__ = ["app", "configure"]

app = typer.Typer(help="List and describe queues.", invoke_without_command=True)


@client_command()
def configure(
    connection: Connection,
    queue: QueueOption = ...,  # type: ignore[assignment]
    namespace: Annotated[str | None, typer.Option(envvar="QUEEN_NAMESPACE", help="Namespace.")] = None,
    task: Annotated[str | None, typer.Option(envvar="QUEEN_TASK", help="Task.")] = None,
    lease_time_s: Annotated[
        int | None, typer.Option("--lease-time-s", envvar="QUEEN_LEASE_TIME_S", help="Lease time (s).")
    ] = None,
    retry_limit: Annotated[
        int | None, typer.Option(envvar="QUEEN_RETRY_LIMIT", help="Failed acks before the DLQ.")
    ] = None,
    retry_delay_ms: Annotated[
        int | None,
        typer.Option("--retry-delay-ms", envvar="QUEEN_RETRY_DELAY_MS", help="Redelivery delay (ms)."),
    ] = None,
    dead_letter_queue: Annotated[
        bool | None,
        typer.Option(
            "--dead-letter-queue/--no-dead-letter-queue",
            envvar="QUEEN_DEAD_LETTER_QUEUE",
            help="Dead-letter queue on.",
        ),
    ] = None,
    max_size: Annotated[
        int | None, typer.Option(envvar="QUEEN_MAX_SIZE", help="Max messages (0: none).")
    ] = None,
    priority: Annotated[int | None, typer.Option(envvar="QUEEN_PRIORITY", help="Priority.")] = None,
    delayed_processing_s: Annotated[
        int | None,
        typer.Option(
            "--delayed-processing-s", envvar="QUEEN_DELAYED_PROCESSING_S", help="Delay before delivery (s)."
        ),
    ] = None,
    window_buffer_s: Annotated[
        int | None,
        typer.Option(
            "--window-buffer-s",
            envvar="QUEEN_WINDOW_BUFFER_S",
            help="Quiet time before a partition is delivered (s).",
        ),
    ] = None,
    retention_s: Annotated[
        int | None,
        typer.Option("--retention-s", envvar="QUEEN_RETENTION_S", help="Delete messages after (s)."),
    ] = None,
    completed_retention_s: Annotated[
        int | None,
        typer.Option(
            "--completed-retention-s",
            envvar="QUEEN_COMPLETED_RETENTION_S",
            help="Delete consumed messages after (s).",
        ),
    ] = None,
    retention_enabled: Annotated[
        bool | None,
        typer.Option(
            "--retention-enabled/--no-retention-enabled",
            envvar="QUEEN_RETENTION_ENABLED",
            help="Retention switch (default: on when a retention period is given).",
        ),
    ] = None,
    max_wait_time_s: Annotated[
        int | None,
        typer.Option(
            "--max-wait-time-s",
            envvar="QUEEN_MAX_WAIT_TIME_S",
            help="Delete (evict) messages no consumer took within (s).",
        ),
    ] = None,
    encryption: Annotated[
        bool | None,
        typer.Option(
            "--encryption/--no-encryption", envvar="QUEEN_ENCRYPTION", help="Encrypt payloads at rest."
        ),
    ] = None,
    option: Annotated[
        list[str] | None,
        typer.Option(
            "--option",
            "-o",
            envvar="QUEEN_OPTIONS",
            help="Any other option as key=JSON value (camelCase key).",
        ),
    ] = None,
) -> None:
    """Create or reconfigure a queue (POST /api/v1/configure); options not given get broker defaults."""
    with connection.client() as client:
        options: dict[str, Any] = {
            key: value
            for key, value in {
                "leaseTime": lease_time_s,
                "retryLimit": retry_limit,
                "retryDelay": retry_delay_ms,
                "deadLetterQueue": dead_letter_queue,
                "dlqAfterMaxRetries": dead_letter_queue,
                "maxSize": max_size,
                "priority": priority,
                "delayedProcessing": delayed_processing_s,
                "windowBuffer": window_buffer_s,
                "retentionSeconds": retention_s,
                "completedRetentionSeconds": completed_retention_s,
                "retentionEnabled": retention_enabled,
                "maxWaitTimeSeconds": max_wait_time_s,
                "encryptionEnabled": encryption,
            }.items()
            if value is not None
        }
        for pair in option or []:
            key, separator, value = pair.partition("=")
            if not separator or not key:
                raise typer.BadParameter(f"--option needs key=value, got {pair!r}")
            options[key] = parse_payload(value)
        builder = client.queue(queue).config(options)
        if namespace is not None:
            builder = builder.namespace(namespace)
        if task is not None:
            builder = builder.task(task)
        answer = builder.create()
        if connection.json_output:
            print_json(answer)
            return
        shown = answer.get("options") or options
        table(f"queue {queue} configured", ["option", "value"], sorted(shown.items()))


def _queues_list(client: Queen, json_output: bool) -> None:
    queues = client.queues()
    if json_output:
        print_json(queues)
        return
    rows = []
    for queue in queues:
        counts = queue.get("messages") or {}
        options = queue.get("options") or {}
        retention = options.get("retentionEnabled")
        rows.append(
            [
                queue.get("name"),
                queue.get("namespace"),
                queue.get("task"),
                queue.get("partitions"),
                counts.get("total"),
                counts.get("pending"),
                counts.get("processing"),
                _seconds(options.get("retentionSeconds") if retention else 0),
                _seconds(options.get("completedRetentionSeconds") if retention else 0),
                _seconds(options.get("maxWaitTimeSeconds")),
                options.get("maxSize") or "-",
            ]
        )
    table(
        "queues",
        [
            "queue",
            "namespace",
            "task",
            "partitions",
            "depth",
            "pending",
            "processing",
            "retention",
            "completed retention",
            "max wait",
            "max size",
        ],
        rows,
    )


def _seconds(value: Any) -> str:
    """A retention period for the table: ``-`` when off, else seconds with a readable unit."""
    if not value:
        return "-"
    seconds = int(value)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _queue_groups(client: Queen, name: str) -> dict[str, list[dict[str, Any]]]:
    """Per consumer group that reads queue ``name``: its partitions with lag (from the group detail)."""
    groups = sorted(
        {
            str(row.get("name"))
            for row in client.consumer_groups()
            if row.get("queueName") == name or name in (row.get("topics") or [])
        }
    )
    result: dict[str, list[dict[str, Any]]] = {}
    for group in groups:
        detail = client.consumer_group(group).get(name) or {}
        result[group] = list(detail.get("partitions") or [])
    return result


# also the group's default command: ``queenpy queues`` is ``queenpy queues list``
@app.callback()
@app.command("list")
@client_command()
def queues_list(ctx: typer.Context, connection: Connection) -> None:
    """List queues: partitions, depth, pending and in-flight counts, retention, eviction and maxSize."""
    if ctx.invoked_subcommand is None:
        with connection.client() as client:
            _queues_list(client, connection.json_output)


@app.command("describe")
@client_command()
def queues_describe(
    connection: Connection,
    name: QueueOption = ...,  # type: ignore[assignment]
) -> None:
    """Partitions of a queue with their depth, and the lag of every consumer group per partition."""
    with connection.client() as client:
        queue = client.describe_queue(name)
        groups = _queue_groups(client, name)
        if connection.json_output:
            print_json({"queue": queue, "groups": groups})
            return
        rows = []
        for partition in queue.get("partitions") or []:
            stats = partition.get("stats") or {}
            rows.append(
                [
                    partition.get("name"),
                    stats.get("total"),
                    stats.get("pending"),
                    stats.get("processing"),
                    stats.get("completed"),
                    stats.get("failed"),
                    stats.get("deadLetter"),
                    partition.get("oldestMessage"),
                    partition.get("newestMessage"),
                ]
            )
        title = f"queue {name}" + (
            f" ({queue['namespace']}/{queue.get('task') or ''})" if queue.get("namespace") else ""
        )
        table(
            title,
            [
                "partition",
                "total",
                "pending",
                "processing",
                "completed",
                "failed",
                "dead letter",
                "oldest",
                "newest",
            ],
            rows,
        )
        lag_rows = [
            [
                group,
                row.get("partition"),
                row.get("offsetLag"),
                row.get("timeLagSeconds"),
                row.get("leaseActive"),
                row.get("lastConsumedAt"),
            ]
            for group, partitions in groups.items()
            for row in partitions
        ]
        table(
            "consumer group lag",
            ["group", "partition", "offset lag", "time lag (s)", "leased", "last consumed"],
            lag_rows,
        )


@app.command("delete")
@client_command()
def queues_delete(
    connection: Connection,
    name: QueueOption = ...,  # type: ignore[assignment]
    yes: Annotated[bool, typer.Option("--yes", "-y", envvar="QUEEN_YES", help="Do not ask.")] = False,
) -> None:
    """Delete a queue with all its partitions, messages, cursors and dead letters."""
    if not yes:
        typer.confirm(f"delete queue {name} and all its messages?", abort=True)
    with connection.client() as client:
        answer = client.queue(name).delete()
        if connection.json_output:
            print_json(answer)
        else:
            stdout().print(f"deleted queue {name}" if answer.get("existed", True) else f"no queue {name}")
