"""A Queen Streams runner as its own process, for the crash test (``test_streams.py``): an event-time tumbling
window (10 s) per key, ``count`` and ``sum`` of ``x``, each closed window pushed to the sink as
``{"key", "start", "end", "count", "sum"}``. Every message is slowed by ``--delay-ms`` (a blocking sleep in a
pre-window map) so that a kill finds work in flight. Runs until killed.

    python streams_worker.py URL SOURCE SINK QUERY_ID [--batch-size N] [--delay-ms MS]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from queen import Queen, Stream

WINDOW_S = 10


def slow(delay_s: float) -> Any:
    def value(message: dict[str, Any]) -> Any:
        time.sleep(delay_s)
        return message["data"]

    return value


def window_record(aggregate: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    return {
        "key": ctx["key"],
        "start": ctx["windowStart"],
        "end": ctx["windowEnd"],
        "count": aggregate["count"],
        "sum": aggregate["sum"],
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("url", "source", "sink", "query_id"):
        parser.add_argument(name)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--delay-ms", type=float, default=15)
    args = parser.parse_args()
    queen = Queen(args.url)
    stream = (
        Stream.from_(queen.queue(args.source))
        .map(slow(args.delay_ms / 1000))
        .key_by(lambda message: message["data"]["k"])
        .window_tumbling(
            seconds=WINDOW_S, event_time=lambda message: message["data"]["ts"], idle_flush_ms=500
        )
        .aggregate({"count": lambda value: 1, "sum": lambda value: value["x"]})
        .map(window_record)
        .to(queen.queue(args.sink))
    )
    await stream.run(query_id=args.query_id, url=args.url, batch_size=args.batch_size, max_wait_millis=200)
    print("running", flush=True)
    await asyncio.Event().wait()  # until killed


if __name__ == "__main__":
    asyncio.run(main())
