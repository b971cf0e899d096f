"""Tumbling-window count per key with Queen Streams (the ``queen-mq`` SDK), running on the broker.

Reads ``{"key", "tsMs"}`` events from a queue (one partition per key), counts them per key and 1-minute
event-time window, and pushes each closed window to a second queue as ``{"key", "windowStartMs",
"windowEndMs", "count"}`` (partition = key). Every cycle (window state, emitted windows, source ack) is one
PostgreSQL transaction in the broker, so a crash and restart emits each window exactly once. The same job on
Spark: ``spark_window_count.py``; both compared in docs/pipelines.md.

    python examples/streams_window_count.py --url http://localhost:6632          # demo data, then the job

With ``--source`` it runs on an existing queue until stopped (Ctrl-C); without, it pushes the demo events of
``window_count_data.py``, runs until they are all processed, and exits 0 only if the windows equal the plain
Python computation (1 if not, 2 if the broker cannot be reached).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from typing import Any

import httpx
from window_count_data import WINDOW_MS, Window, check, expected_windows, make_events, produce


def window_count(queen: Any, source: str, sink: str) -> Any:
    """The pipeline: a ``queen.Stream`` (``queen`` is a ``queen.Queen`` client)."""
    from queen import Stream

    return (
        Stream.from_(queen.queue(source))
        .key_by(lambda message: message["data"]["key"])
        .window_tumbling(
            seconds=WINDOW_MS // 1000, event_time=lambda message: message["data"]["tsMs"], idle_flush_ms=1000
        )
        .aggregate({"count": lambda event: 1})
        .map(
            lambda counted, ctx: {
                "key": ctx["key"],
                "windowStartMs": ctx["windowStart"],
                "windowEndMs": ctx["windowEnd"],
                "count": counted["count"],
            }
        )
        .to(queen.queue(sink))
    )


async def read_windows(queen: Any, sink: str) -> list[Window]:
    """Every window in ``sink`` (read with a consumer group of its own, acked)."""
    group = f"reader-{uuid.uuid4().hex[:8]}"
    found: list[Window] = []
    while True:
        messages = await queen.queue(sink).group(group).batch(1000).wait(False).pop()
        if not messages:
            return sorted(found)
        found += [
            (m["data"]["key"], m["data"]["windowStartMs"], m["data"]["windowEndMs"], m["data"]["count"])
            for m in messages
        ]
        await queen.ack(messages, True, {"group": group})


async def run_window_count(
    url: str, source: str, sink: str, query_id: str, events: int, timeout_s: float = 120.0
) -> list[Window]:
    """Run the job until it has processed ``events`` source messages, stop it, return the sink's windows."""
    from queen import Queen

    async with Queen(url) as queen:
        runner = await window_count(queen, source, sink).run(query_id=query_id, url=url, max_wait_millis=500)
        try:
            deadline = time.monotonic() + timeout_s
            while runner.metrics()["messagesTotal"] < events:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"processed {runner.metrics()['messagesTotal']} of {events} events")
                await asyncio.sleep(0.1)
        finally:
            await runner.stop()
        return await read_windows(queen, sink)


async def run_forever(url: str, source: str, sink: str, query_id: str) -> None:
    from queen import Queen

    async with Queen(url) as queen:
        runner = await window_count(queen, source, sink).run(query_id=query_id, url=url)
        print(f"counting {source} -> {sink} (query {query_id}); Ctrl-C stops", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("QUEEN_URL", "http://localhost:6632"),
        help="broker URL (env QUEEN_URL)",
    )
    parser.add_argument("--source", help="an existing queue to count (default: push demo events)")
    parser.add_argument("--sink", help="queue of the results (default: <source>.counts)")
    parser.add_argument("--query-id", default="window-count", help="the query's durable name")
    parser.add_argument("--events", type=int, default=2000, help="demo events (without --source)")
    args = parser.parse_args(argv)
    try:
        httpx.get(f"{args.url}/health", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        print(f"error: broker {args.url} unreachable: {exc}", file=sys.stderr)
        return 2
    if args.source:
        asyncio.run(run_forever(args.url, args.source, args.sink or f"{args.source}.counts", args.query_id))
        return 0
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"clicks.{suffix}", f"clicks.{suffix}.counts"
    events = make_events(args.events)
    produced = produce(args.url, source, events)
    windows = asyncio.run(run_window_count(args.url, source, sink, f"{args.query_id}-{suffix}", produced))
    return check(produced, windows, expected_windows(events))


if __name__ == "__main__":
    sys.exit(main())
