"""Client commands of the ``queenpy`` CLI: push, pop, consume, configure, queues, groups, dlq.

``register(app)`` adds them to the main typer app. Every option can also come from the environment variable
shown in ``--help`` (``QUEEN_URL``, ``QUEEN_TOKEN``, ...). Output is a human-readable table by default and
JSON with ``--json`` (pop/consume always print one JSON message per line). Errors are one line on stderr
(exit 1) unless ``-v`` asks for the traceback. Run standalone with ``python -m queenpy.client.cli``.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from queenpy.errors import QueenError

from ._async import DEFAULT_URL
from ._messages import DeadLetter, Message, PushResult
from ._sync import Queen

__all__ = ["main", "register"]

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


# -- shared plumbing --------------------------------------------------------------------------------------


def _stdout() -> Console:
    return Console(soft_wrap=True)


def _stderr() -> Console:
    return Console(stderr=True, soft_wrap=True)


@contextmanager
def _client(url: str, token: str | None, verbose: bool) -> Iterator[Queen]:
    """A connected sync client; broker and input errors become one line on stderr and exit code 1."""
    client: Queen | None = None
    try:
        client = Queen([part.strip() for part in url.split(",") if part.strip()], token=token)
        yield client
    except (QueenError, ValueError, OSError) as exc:
        if verbose:
            _stderr().print_exception(show_locals=False)
        else:
            _stderr().print(f"[red]error:[/red] {type(exc).__name__}: {exc}", highlight=False, markup=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        if client is not None:
            try:
                client.close()
            except QueenError as exc:  # a push buffer could not be flushed
                _stderr().print(f"error while closing: {exc}", highlight=False, markup=False)


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def _table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*("" if value is None else str(value) for value in row))
    _stdout().print(table)


def _parse_payload(text: str) -> Any:
    """A command-line payload: JSON if it parses, else the plain string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _read_json_lines(lines: Sequence[str], source: str) -> list[Any]:
    items = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source} line {number} is not JSON: {exc.msg}") from None
    return items


# -- push / pop / consume ----------------------------------------------------------------------------------


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


def push(
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
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    json_output: JsonOption = False,
    verbose: VerboseOption = False,
) -> None:
    """Push messages. Each JSON line may be a payload or {"data": ..., "transactionId": ...}."""
    with _client(url, token, verbose) as client:
        if payloads:
            items = [_parse_payload(text) for text in payloads]
        elif file is not None and str(file) != "-":
            items = _read_json_lines(file.read_text(encoding="utf-8").splitlines(), str(file))
        elif file is not None or not sys.stdin.isatty():
            items = _read_json_lines(sys.stdin.read().splitlines(), "stdin")
        else:
            raise ValueError("nothing to push: give payloads, --file, or pipe JSON lines into stdin")
        results: list[PushResult] = []
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        progress = Progress(
            TextColumn("pushing"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=_stderr(),
            disable=json_output or len(items) <= batch_size,
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
        if json_output:
            for result in results:
                _print_json(
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
        _stdout().print(f"pushed {len(results)} message(s) to {target}: {summary}", highlight=False)


def pop(
    queue: QueueOption = ...,  # type: ignore[assignment]
    partition: PartitionOption = None,
    group: GroupOption = None,
    batch: BatchOption = 1,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", envvar="QUEEN_WAIT", help="Long poll.")] = False,
    timeout_millis: TimeoutOption = 30_000,
    ack: AckOption = True,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    verbose: VerboseOption = False,
) -> None:
    """Pop once and print the messages as JSON lines (nothing when the queue has none)."""
    with _client(url, token, verbose) as client:
        builder = client.queue(queue).batch(batch).wait(wait).timeout_millis(timeout_millis)
        if partition is not None:
            builder = builder.partition(partition)
        if group:
            builder = builder.group(group)
        messages: list[Message] = builder.pop()
        for message in messages:
            _print_json(message.to_wire())
        if ack and messages:
            refused = [result for result in client.ack(messages) if not result.success]
            if refused:
                raise QueenError(f"{len(refused)} ack(s) refused: {refused[0].error}")


def consume(
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
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    verbose: VerboseOption = False,
) -> None:
    """Consume until --limit, --idle-millis or Ctrl-C, printing each message as a JSON line."""
    lock = threading.Lock()

    def handler(messages: list[Message] | Message) -> None:
        # the whole popped batch at once (a single Message when --batch is 1): it is then acknowledged with
        # one batch ack, not one request per message
        with lock:
            for message in messages if isinstance(messages, list) else [messages]:
                _print_json(message.to_wire())

    with _client(url, token, verbose) as client:
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
        _stderr().print(f"consumed {handled} message(s)", highlight=False)


def configure(
    queue: Annotated[str, typer.Argument(help="Queue to create or reconfigure (a full overwrite).")],
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
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    json_output: JsonOption = False,
    verbose: VerboseOption = False,
) -> None:
    """Create or reconfigure a queue (POST /api/v1/configure); options not given get broker defaults."""
    with _client(url, token, verbose) as client:
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
                "encryptionEnabled": encryption,
            }.items()
            if value is not None
        }
        if retention_s or completed_retention_s:
            options["retentionEnabled"] = True
        for pair in option or []:
            key, separator, value = pair.partition("=")
            if not separator or not key:
                raise typer.BadParameter(f"--option needs key=value, got {pair!r}")
            options[key] = _parse_payload(value)
        builder = client.queue(queue).config(options)
        if namespace is not None:
            builder = builder.namespace(namespace)
        if task is not None:
            builder = builder.task(task)
        answer = builder.create()
        if json_output:
            _print_json(answer)
            return
        shown = answer.get("options") or options
        _table(f"queue {queue} configured", ["option", "value"], sorted(shown.items()))


# -- queues ---------------------------------------------------------------------------------------------------


def _queues_list(client: Queen, json_output: bool) -> None:
    queues = client.queues()
    if json_output:
        _print_json(queues)
        return
    rows = []
    for queue in queues:
        counts = queue.get("messages") or {}
        rows.append(
            [
                queue.get("name"),
                queue.get("namespace"),
                queue.get("task"),
                queue.get("partitions"),
                counts.get("total"),
                counts.get("pending"),
                counts.get("processing"),
            ]
        )
    _table("queues", ["queue", "namespace", "task", "partitions", "total", "pending", "processing"], rows)


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


def _register_queues(app: typer.Typer) -> None:
    queues_app = typer.Typer(help="List and describe queues.", invoke_without_command=True)

    @queues_app.callback()
    def queues_default(
        ctx: typer.Context,
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
        json_output: JsonOption = False,
        verbose: VerboseOption = False,
    ) -> None:
        """List queues with partition and message counts (default command)."""
        if ctx.invoked_subcommand is None:
            with _client(url, token, verbose) as client:
                _queues_list(client, json_output)

    @queues_app.command("list")
    def queues_list(
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
        json_output: JsonOption = False,
        verbose: VerboseOption = False,
    ) -> None:
        """List queues with partition and message counts."""
        with _client(url, token, verbose) as client:
            _queues_list(client, json_output)

    @queues_app.command("describe")
    def queues_describe(
        name: Annotated[str, typer.Argument(help="Queue name.")],
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
        json_output: JsonOption = False,
        verbose: VerboseOption = False,
    ) -> None:
        """Partitions of a queue with their depth, and the lag of every consumer group per partition."""
        with _client(url, token, verbose) as client:
            queue = client.describe_queue(name)
            groups = _queue_groups(client, name)
            if json_output:
                _print_json({"queue": queue, "groups": groups})
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
            _table(
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
            _table(
                "consumer group lag",
                ["group", "partition", "offset lag", "time lag (s)", "leased", "last consumed"],
                lag_rows,
            )

    @queues_app.command("delete")
    def queues_delete(
        name: Annotated[str, typer.Argument(help="Queue name.")],
        yes: Annotated[bool, typer.Option("--yes", "-y", envvar="QUEEN_YES", help="Do not ask.")] = False,
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
        json_output: JsonOption = False,
        verbose: VerboseOption = False,
    ) -> None:
        """Delete a queue with all its partitions, messages, cursors and dead letters."""
        if not yes:
            typer.confirm(f"delete queue {name} and all its messages?", abort=True)
        with _client(url, token, verbose) as client:
            answer = client.queue(name).delete()
            if json_output:
                _print_json(answer)
            else:
                _stdout().print(
                    f"deleted queue {name}" if answer.get("existed", True) else f"no queue {name}"
                )

    app.add_typer(queues_app, name="queues")


# -- consumer groups ----------------------------------------------------------------------------------------------


def _groups_list(client: Queen, json_output: bool) -> None:
    groups = client.consumer_groups()
    if json_output:
        _print_json(groups)
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
    _table(
        "consumer groups",
        ["group", "queue", "partitions", "lagging", "max time lag (s)", "state", "subscription"],
        rows,
    )


def _register_groups(app: typer.Typer) -> None:
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
        if ctx.invoked_subcommand is None:
            with _client(url, token, verbose) as client:
                _groups_list(client, json_output)

    @groups_app.command("list")
    def groups_list(
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
        json_output: JsonOption = False,
        verbose: VerboseOption = False,
    ) -> None:
        """List consumer groups per queue."""
        with _client(url, token, verbose) as client:
            _groups_list(client, json_output)

    @groups_app.command("describe")
    def groups_describe(
        group: Annotated[str, typer.Argument(help="Consumer group.")],
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
        json_output: JsonOption = False,
        verbose: VerboseOption = False,
    ) -> None:
        """Cursor, lag and lease of a group on every partition it reads."""
        with _client(url, token, verbose) as client:
            detail = client.consumer_group(group)
            if json_output:
                _print_json(detail)
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
            _table(
                f"group {group}",
                ["queue", "partition", "offset lag", "time lag (s)", "consumed", "leased", "last consumed"],
                rows,
            )

    @groups_app.command("lag")
    def groups_lag(
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
        with _client(url, token, verbose) as client:
            rows = client.lagging_consumer_groups(min_lag_seconds)
            if json_output:
                _print_json(rows)
                return
            _table(
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
        with _client(url, token, verbose) as client:
            if partition is not None and not timestamp:
                answer = client.seek(group, queue, partition=partition)
            else:
                answer = client.seek(group, queue, to_end=to_end, timestamp=timestamp)
            if json_output:
                _print_json(answer)
                return
            moved = answer.get("partitionsUpdated", answer.get("updated"))
            target = "the end" if to_end or partition is not None else timestamp
            _stdout().print(
                f"group {group} on {queue}: {moved} partition cursor(s) moved to {target}", highlight=False
            )

    @groups_app.command("delete")
    def groups_delete(
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
        with _client(url, token, verbose) as client:
            answer = client.delete_consumer_group(group, delete_metadata=not keep_metadata, queue=queue)
            if json_output:
                _print_json(answer)
            else:
                _stdout().print(
                    f"deleted group {group}: {answer.get('deletedPartitions', 0)} cursor(s)", highlight=False
                )

    app.add_typer(groups_app, name="groups")


# -- dead-letter queue ---------------------------------------------------------------------------------------------


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
        _print_json({"messages": [row.to_wire() for row in rows], "total": total})
        return
    _table(
        f"dead letters of {queue} ({len(rows)} of {total})",
        ["transaction", "partition", "group", "error", "retries", "failed at", "data"],
        [
            [
                r.transaction_id,
                r.partition,
                r.consumer_group,
                r.error_message,
                r.retry_count,
                r.failed_at.isoformat() if r.failed_at else None,
                json.dumps(r.data, default=str)[:60],
            ]
            for r in rows
        ],
    )


def _register_dlq(app: typer.Typer) -> None:
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
        """List the dead letters of --queue (default command)."""
        if ctx.invoked_subcommand is None:
            if not queue:
                raise typer.BadParameter("--queue is required", param_hint="--queue")
            with _client(url, token, verbose) as client:
                _dlq_list(client, queue, group, limit, offset, json_output)

    @dlq_app.command("list")
    def dlq_list(
        queue: QueueOption = ...,  # type: ignore[assignment]
        group: GroupOption = None,
        limit: RowsOption = 100,
        offset: OffsetOption = 0,
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
        json_output: JsonOption = False,
        verbose: VerboseOption = False,
    ) -> None:
        """List the dead letters of a queue, newest failure first."""
        with _client(url, token, verbose) as client:
            _dlq_list(client, queue, group, limit, offset, json_output)

    @dlq_app.command("replay")
    def dlq_replay(
        transaction_ids: Annotated[
            list[str] | None, typer.Argument(help="Transaction ids to replay (default: --all).")
        ] = None,
        queue: QueueOption = ...,  # type: ignore[assignment]
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
        if not transaction_ids and not replay_all:
            raise typer.BadParameter("give transaction ids or --all")
        with _client(url, token, verbose) as client:
            wanted = set(transaction_ids or [])
            rows: list[DeadLetter] = []
            offset = 0
            while True:  # collect first: replaying changes the listing
                page, total = _dlq_rows(client, queue, group, 500, offset)
                rows.extend(row for row in page if replay_all or row.transaction_id in wanted)
                offset += len(page)
                if not page or offset >= total:
                    break
            missing = wanted - {row.transaction_id for row in rows}
            if missing:
                raise ValueError(f"not in the dead-letter queue of {queue}: {', '.join(sorted(missing))}")
            for row in rows:
                answer = client.replay_dlq(row)
                if json_output:
                    _print_json(
                        {"transactionId": row.transaction_id, "partitionId": row.partition_id, **answer}
                    )
            if not json_output:
                _stdout().print(f"replayed {len(rows)} dead letter(s) of {queue}", highlight=False)

    app.add_typer(dlq_app, name="dlq")


# -- registration ----------------------------------------------------------------------------------------------------

_COMMANDS: tuple[tuple[str, Callable[..., None]], ...] = (
    ("push", push),
    ("pop", pop),
    ("consume", consume),
    ("configure", configure),
)


def register(app: typer.Typer) -> None:
    """Add the client commands (push, pop, consume, configure, queues, groups, dlq) to ``app``."""
    for name, command in _COMMANDS:
        app.command(name)(command)
    _register_queues(app)
    _register_groups(app)
    _register_dlq(app)


def main() -> None:
    """Run the client commands as a standalone CLI (``python -m queenpy.client.cli``)."""
    app = typer.Typer(help="queenpy client commands.", no_args_is_help=True, pretty_exceptions_enable=False)
    register(app)
    app()


if __name__ == "__main__":
    main()
