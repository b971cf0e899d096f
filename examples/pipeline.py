"""A three-stage chat pipeline on Queen: translate → route → notify, with a poison message every 7th.

Queues ``chat.translate``, ``chat.route`` and ``chat.notify`` (plus an optional ``--suffix``) are partitioned
by chat id, with ``leaseTime`` 8 s, ``retryLimit`` 2 and the dead-letter queue on. Each handoff is one
transaction that acks the message and pushes its successor, so a message is never lost or duplicated between
stages. Every 7th message is poisoned: its translate handler raises, the client acks it ``failed``, the broker
redelivers it, and after 3 attempts (retryLimit 2 + 1) it lands in the ``chat.translate`` DLQ.

With the defaults (100 messages) the counts must be: 100 produced, 14 poisoned, 128 translate attempts
(86 + 14 × 3), 42 translate failures, 86 routed, 86 notified, 14 dead letters, 0 duplicates. The script
prints its counts and exits 1 if any differs (2 if the broker cannot be reached).

    python examples/pipeline.py --url http://localhost:6632
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from queenpy.client import AsyncQueen, Message
from queenpy.errors import QueenError

POISON_EVERY = 7
RETRY_LIMIT = 2
LEASE_TIME_S = 8


@dataclass
class Counts:
    """What the pipeline did; ``expected(n)`` is what it must do for ``n`` produced messages."""

    produced: int = 0
    poisoned: int = 0
    translate_attempts: int = 0
    translate_failures: int = 0
    translated: int = 0
    routed: int = 0
    notified: int = 0
    dead_letters: int = 0
    duplicates: int = 0
    seen: Counter[int] = field(default_factory=Counter)

    REPORTED = (
        "produced",
        "poisoned",
        "translate_attempts",
        "translate_failures",
        "routed",
        "notified",
        "dead_letters",
        "duplicates",
    )

    @staticmethod
    def expected(messages: int) -> dict[str, int]:
        poisoned = messages // POISON_EVERY
        healthy = messages - poisoned
        attempts_per_poison = RETRY_LIMIT + 1
        return {
            "produced": messages,
            "poisoned": poisoned,
            "translate_attempts": healthy + poisoned * attempts_per_poison,
            "translate_failures": poisoned * attempts_per_poison,
            "routed": healthy,
            "notified": healthy,
            "dead_letters": poisoned,
            "duplicates": 0,
        }

    def report(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.REPORTED}


STAGES = ("translate", "route", "notify")


def queue_names(suffix: str) -> dict[str, str]:
    """Queue of each stage: ``chat.translate<suffix>``, ``chat.route<suffix>``, ``chat.notify<suffix>``."""
    return {stage: f"chat.{stage}{suffix}" for stage in STAGES}


async def create_queues(q: AsyncQueen, names: Iterable[str], lease_time_s: int = LEASE_TIME_S) -> None:
    """(Re)create the stage queues: ``leaseTime``, ``retryLimit`` 2, no retry delay, dead-letter queue on."""
    for name in names:
        await q.queue(name).delete()
        await (
            q.queue(name)
            .config(
                {
                    "leaseTime": lease_time_s,
                    "retryLimit": RETRY_LIMIT,
                    "retryDelay": 0,
                    "deadLetterQueue": True,
                    "dlqAfterMaxRetries": True,
                }
            )
            .create()
        )


async def produce(q: AsyncQueen, queue: str, messages: int, chats: int) -> tuple[int, int]:
    """Push messages 1..``messages``, message n to partition ``chat-(n % chats)`` with transactionId
    ``msg-n``, every 7th poisoned. Returns (queued, poisoned)."""
    by_chat: dict[str, list[dict[str, object]]] = {}
    poisoned = 0
    for n in range(1, messages + 1):
        poison = n % POISON_EVERY == 0
        poisoned += poison
        chat = f"chat-{n % chats}"
        by_chat.setdefault(chat, []).append(
            {
                "data": {"n": n, "chat": chat, "text": f"hello {n}", "poison": poison},
                "transactionId": f"msg-{n}",
            }
        )
    queued = 0
    for chat, items in by_chat.items():
        results = await q.queue(queue).partition(chat).push(items)
        queued += sum(result.status == "queued" for result in results)
    return queued, poisoned


def translated(data: dict[str, Any]) -> dict[str, Any]:
    """Stage 1's work on a message's data: raise ValueError on a poisoned message, else translate it."""
    if data["poison"]:
        raise ValueError(f"cannot translate message {data['n']}")
    return dict(data, text=data["text"].replace("hello", "hola"))


def routed(data: dict[str, Any]) -> dict[str, Any]:
    """Stage 2's work on a message's data: pick the notification route of its chat."""
    return dict(data, route=f"push:{data['chat']}")


async def hand_off(q: AsyncQueen, message: Message, next_queue: str, data: dict[str, Any], step: str) -> None:
    """One transaction: ack ``message`` and push ``data`` to the same partition of ``next_queue`` with
    transactionId ``<message's transactionId>.<step>`` (so a replayed handoff is a duplicate, not a copy)."""
    await (
        q.transaction()
        .ack(message)
        .queue(next_queue)
        .partition(message.partition)
        .push([{"data": data, "transactionId": f"{message.transaction_id}.{step}"}])
        .commit()
    )


async def retry_later(q: AsyncQueen, message: Message, error: BaseException) -> None:
    """A stage's error handler: report, and ack the message ``failed`` so the broker redelivers it."""
    print(f"stage failed on {message.queue}/{message.transaction_id}: {error}", file=sys.stderr)
    await q.ack(message, False, error=str(error))


async def run_pipeline(
    url: str, suffix: str = "", messages: int = 100, chats: int = 10, deadline_s: float = 120.0
) -> Counts:
    """Set up the queues, produce ``messages`` messages over ``chats`` partitions, run the three stages until
    every message is notified or dead-lettered (or ``deadline_s`` passes), and return the counts."""
    names = queue_names(suffix)
    translate_q, route_q, notify_q = names["translate"], names["route"], names["notify"]
    counts = Counts()
    progress = asyncio.Event()
    stop = asyncio.Event()

    async with AsyncQueen(url) as q:
        await create_queues(q, (translate_q, route_q, notify_q))
        counts.produced, counts.poisoned = await produce(q, translate_q, messages, chats)

        # -- stage 1: translate ------------------------------------------------------------------------------
        async def translate(message: Message) -> None:
            counts.translate_attempts += 1
            await hand_off(q, message, route_q, translated(message.data), "translated")
            counts.translated += 1
            progress.set()

        async def translate_failed(message: Message, error: BaseException) -> None:
            counts.translate_failures += 1
            result = await q.ack(message, False, error=str(error))
            counts.dead_letters += result.dlq
            progress.set()

        # -- stage 2: route ----------------------------------------------------------------------------------
        async def route(message: Message) -> None:
            await hand_off(q, message, notify_q, routed(message.data), "routed")
            counts.routed += 1
            progress.set()

        # -- stage 3: notify ---------------------------------------------------------------------------------
        async def notify(message: Message) -> None:
            counts.seen[message.data["n"]] += 1
            counts.notified += 1
            progress.set()

        stages = [
            q.queue(translate_q)
            .concurrency(4)
            .auto_ack(False)
            .timeout_millis(2000)
            .consume(translate, on_error=translate_failed, stop=stop),
            q.queue(route_q)
            .concurrency(2)
            .auto_ack(False)
            .timeout_millis(2000)
            .consume(route, on_error=functools.partial(retry_later, q), stop=stop),
            q.queue(notify_q).concurrency(2).timeout_millis(2000).consume(notify, stop=stop),
        ]
        consumers = [asyncio.create_task(stage) for stage in stages]

        def finished() -> bool:
            accounted = counts.translated + counts.dead_letters
            return (
                accounted >= counts.produced
                and counts.routed >= counts.translated
                and counts.notified >= counts.routed
            )

        deadline = time.monotonic() + deadline_s
        while not finished() and time.monotonic() < deadline and not any(task.done() for task in consumers):
            progress.clear()
            try:
                await asyncio.wait_for(progress.wait(), timeout=max(0.01, deadline - time.monotonic()))
            except TimeoutError:
                break
        stop.set()
        await asyncio.gather(*consumers)

        counts.duplicates = sum(seen - 1 for seen in counts.seen.values() if seen > 1)
        page = await q.queue(translate_q).dlq().limit(1000).get()
        counts.dead_letters = page.total
    return counts


def main(argv: list[str] | None = None) -> int:
    """Command line: run the pipeline, print the counts, exit 0 only if they are the expected ones."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("QUEEN_URL", "http://localhost:6632"),
        help="broker URL (env QUEEN_URL, default http://localhost:6632)",
    )
    parser.add_argument(
        "--suffix",
        default=os.environ.get("QUEEN_PIPELINE_SUFFIX", ""),
        help="appended to the queue names, e.g. --suffix=.run2 (env QUEEN_PIPELINE_SUFFIX)",
    )
    parser.add_argument("--messages", type=int, default=100, help="messages to produce (default 100)")
    parser.add_argument("--deadline-s", type=float, default=120.0, help="give up after this many seconds")
    args = parser.parse_args(argv)

    try:
        counts = asyncio.run(run_pipeline(args.url, args.suffix, args.messages, deadline_s=args.deadline_s))
    except QueenError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    expected = Counts.expected(args.messages)
    actual = counts.report()
    for name, value in actual.items():
        mark = "ok" if value == expected[name] else f"MISMATCH (expected {expected[name]})"
        print(f"{name.replace('_', ' ')}: {value} {mark}")
    if actual != expected:
        print("pipeline counts differ from the expected ones", file=sys.stderr)
        return 1
    print("pipeline ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
