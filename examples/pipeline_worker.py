"""One stage of the ``examples/pipeline.py`` chat pipeline as its own process, so stages can crash and restart
independently (the crash test SIGKILLs them).

    python examples/pipeline_worker.py setup     --url URL --suffix .x   # create the queues, produce 100
    python examples/pipeline_worker.py translate --url URL --suffix .x   # run one stage until SIGTERM/SIGINT
    python examples/pipeline_worker.py route     --url URL --suffix .x
    python examples/pipeline_worker.py notify    --url URL --suffix .x

The queues, messages and handoffs are those of ``pipeline.py`` (its constants are imported from there): every
7th message is poisoned and lands in the ``chat.translate`` DLQ after ``RETRY_LIMIT + 1`` attempts, and each
handoff is one ``transaction().ack(msg).queue(next).partition(p).push([...]).commit()``. The queue setup, the
producer, each stage's work (``translated``, ``routed``), the handoff (``hand_off``) and the error handler
(``retry_later``) are imported from ``pipeline.py``; the handlers here add this file's event log.

A stage appends what it does to ``--log`` (one line per event, written unbuffered so a SIGKILL loses nothing
already done): ``begin N`` when a handler starts on message N, then ``translated N`` / ``failed N DLQ`` (DLQ
is 1 when the failed ack dead-lettered it) / ``routed N`` / ``notified N`` once the handoff committed, the
failed ack was answered, or the notification was made. ``--work-ms LOW:HIGH`` makes each handler sleep a
random time first, as real work would, so that a kill is likely to find messages in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import random
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline import (
    LEASE_TIME_S,
    STAGES,
    create_queues,
    hand_off,
    produce,
    queue_names,
    retry_later,
    routed,
    translated,
)

from queenpy.client import AsyncQueen, Message


class EventLog:
    """Append-only event lines, each one ``write(2)`` on an ``O_APPEND`` descriptor (survives SIGKILL)."""

    def __init__(self, path: str | None) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if path else None

    def write(self, *fields: object) -> None:
        if self._fd is not None:
            os.write(self._fd, (" ".join(str(field) for field in fields) + "\n").encode())


async def setup(url: str, suffix: str, messages: int, chats: int, lease_time_s: int) -> dict[str, int]:
    """(Re)create the three queues as ``pipeline.py`` does and produce ``messages`` messages into
    translate."""
    names = queue_names(suffix)
    async with AsyncQueen(url) as q:
        await create_queues(q, names.values(), lease_time_s)
        produced, poisoned = await produce(q, names["translate"], messages, chats)
    return {"produced": produced, "poisoned": poisoned}


async def run_stage(stage: str, url: str, suffix: str, log: EventLog, work_ms: tuple[int, int]) -> int:
    """Consume one stage's queue until SIGTERM/SIGINT (in-flight handlers finish first)."""
    names = queue_names(suffix)
    low, high = work_ms

    async def work() -> None:
        if high > 0:
            await asyncio.sleep(random.uniform(low, high) / 1000)

    async with AsyncQueen(url) as q:

        async def translate(message: Message) -> None:
            log.write("begin", message.data["n"])
            await work()
            await hand_off(q, message, names["route"], translated(message.data), "translated")
            log.write("translated", message.data["n"])

        async def translate_failed(message: Message, error: BaseException) -> None:
            result = await q.ack(message, False, error=str(error))
            log.write("failed", message.data["n"], int(bool(result.dlq)))

        async def route(message: Message) -> None:
            log.write("begin", message.data["n"])
            await work()
            await hand_off(q, message, names["notify"], routed(message.data), "routed")
            log.write("routed", message.data["n"])

        async def notify(message: Message) -> None:
            log.write("begin", message.data["n"])
            await work()
            log.write("notified", message.data["n"])

        handlers: dict[str, tuple[Callable[[Message], Awaitable[None]], Any, int, bool]] = {
            "translate": (translate, translate_failed, 4, False),
            "route": (route, functools.partial(retry_later, q), 2, False),
            "notify": (notify, None, 2, True),
        }
        handler, on_error, concurrency, auto_ack = handlers[stage]
        print(f"{stage} worker {os.getpid()} consuming {names[stage]}", file=sys.stderr, flush=True)
        return await (
            q.queue(names[stage])
            .concurrency(concurrency)
            .auto_ack(auto_ack)
            .timeout_millis(2000)
            .consume(handler, on_error=on_error)
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("setup", *STAGES))
    parser.add_argument("--url", default=os.environ.get("QUEEN_URL", "http://localhost:6632"))
    parser.add_argument("--suffix", default=os.environ.get("QUEEN_PIPELINE_SUFFIX", ""))
    parser.add_argument("--messages", type=int, default=100, help="setup: messages to produce")
    parser.add_argument(
        "--lease-time", type=int, default=LEASE_TIME_S, help="setup: the queues' leaseTime (s)"
    )
    parser.add_argument("--log", help="stage: append event lines to this file")
    parser.add_argument("--work-ms", default="0:0", help="stage: each handler sleeps LOW:HIGH ms first")
    args = parser.parse_args(argv)

    if args.command == "setup":
        counts = asyncio.run(setup(args.url, args.suffix, args.messages, 10, args.lease_time))
        print(json.dumps(counts))
        return 0
    low, _, high = args.work_ms.partition(":")
    handled = asyncio.run(
        run_stage(args.command, args.url, args.suffix, EventLog(args.log), (int(low), int(high or low)))
    )
    print(f"{args.command} worker {os.getpid()} stopped after {handled} message(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
