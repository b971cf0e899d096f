"""The fault scenarios of ``queenpy chaos`` (docs/reliability.md says what each one proves).

Each scenario gets a fresh database on the run's PostgreSQL and brokers of its own, runs the load of
:func:`queenpy.chaos.core.run_under_load` (or its own) around one fault, and returns a :class:`Result`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from queenpy.chaos.core import (
    Context,
    Result,
    configure_queue,
    fill,
    partition_states,
    run_under_load,
    stored_ids,
)
from queenpy.chaos.load import Consumer, Ledger, Producer, drain, pop_messages, transport
from queenpy.chaos.processes import BrokerProcess
from queenpy.errors import QueenError
from queenpy.harness import PrivatePostgres, StandbyPostgres, free_port

__all__ = ["SCENARIOS", "Scenario"]


@dataclass(frozen=True)
class Scenario:
    name: str
    fault: str
    run: Callable[[Context, Result], Awaitable[None]]


@contextlib.contextmanager
def brokers(*processes: BrokerProcess) -> Iterator[None]:
    try:
        for process in processes:
            process.start()
        yield
    finally:
        for process in processes:
            process.stop()


#: most broker kills of kill-broker-tx before one lands while a hand-off is in flight
KILL_TRIES = 3


def handoff_transaction(message: dict[str, Any], target: str) -> dict[str, Any]:
    """The recipe's hand-off of a popped ``message`` (group ``chaos``) as one client transaction: ack it
    (its lease required) and push ``h-<transactionId>`` to the same partition of ``target``."""
    return {
        "operations": [
            {
                "type": "ack",
                "transactionId": message["transactionId"],
                "partitionId": message["partitionId"],
                "leaseId": message["leaseId"],
                "status": "completed",
                "consumerGroup": "chaos",
            },
            {
                "type": "push",
                "items": [
                    {
                        "queue": target,
                        "partition": message["partition"],
                        "transactionId": f"h-{message['transactionId']}",
                        "payload": {"source": message["transactionId"]},
                    }
                ],
            },
        ],
        "requiredLeases": [message["leaseId"]],
    }


@dataclass
class HandOffs:
    """What hand-off workers (:func:`hand_off`) saw: ``ledger`` counts A's deliveries and the hand-offs
    answered ``success`` (its ``confirmed``); ``handed`` the same ids; ``refused`` the ids answered with their
    own error on a retry (committed before, or their lease ran out) and ``refusals`` those errors' first two
    words; ``retried`` the sends after the first, per id."""

    ledger: Ledger = field(default_factory=Ledger)
    handed: set[str] = field(default_factory=set)
    refused: set[str] = field(default_factory=set)
    refusals: collections.Counter[str] = field(default_factory=collections.Counter)
    retried: collections.Counter[str] = field(default_factory=collections.Counter)


async def hand_off(url: str, source: str, target: str, seen: HandOffs, stopping: asyncio.Event) -> None:
    """One hand-off worker until ``stopping``: pop 5 from ``source`` (group ``chaos``, long poll), then each
    message in its own transaction (:func:`handoff_transaction`). A transaction without an answer (no
    broker, a 503, a lost answer) or answered with the call's error (no ``results``) is sent again unchanged,
    up to 300 times 0.2 s apart; one answered with its own error is final."""
    client = transport([url])
    try:
        while not stopping.is_set():
            messages = await pop_messages(client, source, "chaos", 5)
            if not messages:
                continue
            seen.ledger.record_delivery([m["transactionId"] for m in messages])
            for m in messages:
                body = handoff_transaction(m, target)
                for attempt in range(300):
                    try:
                        answer = await client.request(
                            "POST", "/api/v1/transaction", body=body, idempotent=False
                        )
                    except QueenError:
                        answer = None
                    if isinstance(answer, dict) and answer.get("success") is True:
                        seen.handed.add(m["transactionId"])
                        seen.ledger.confirmed.add(m["transactionId"])
                        break
                    if isinstance(answer, dict) and "results" in answer:  # its own error: final
                        if attempt:
                            seen.refusals[" ".join(str(answer.get("error")).split()[:2])] += 1
                            seen.refused.add(m["transactionId"])
                        break
                    seen.retried[m["transactionId"]] += 1
                    await asyncio.sleep(0.2)
    finally:
        await client.aclose()


async def kill_worker(ctx: Context, result: Result) -> None:
    database = await ctx.new_database(result.name)
    broker = BrokerProcess(database, ctx.workdir, result.name, workers=2)
    with brokers(broker):
        before = broker.worker_pids()

        async def fault() -> float:
            started = time.monotonic()
            killed = broker.kill_worker()
            deadline = started + 60
            while (
                killed in broker.worker_pids() or len(broker.worker_pids()) < len(before)
            ) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.to_thread(broker.wait_ready)  # the new worker answers
            after = broker.worker_pids()
            result.check(
                f"worker {killed} killed and replaced by the supervisor",
                killed not in after and len(after) == len(before),
            )
            result.notes.append(f"worker replaced {time.monotonic() - started:.1f} s after the kill")
            return started

        await run_under_load(ctx, [broker.url], database, fault, result)


async def kill_broker(ctx: Context, result: Result) -> None:
    database = await ctx.new_database(result.name)
    broker = BrokerProcess(database, ctx.workdir, result.name, workers=2)
    with brokers(broker):

        async def fault() -> float:
            broker.kill()
            await asyncio.sleep(1.0)  # clients find nobody listening meanwhile
            await asyncio.to_thread(broker.start)
            return time.monotonic()

        await run_under_load(ctx, [broker.url], database, fault, result)
        result.check("the broker was killed and started again", broker.starts == 2)


async def postgres_stopped(ctx: Context, result: Result) -> None:
    database = await ctx.new_database(result.name)
    broker = BrokerProcess(database, ctx.workdir, result.name, workers=2)
    outage = ctx.profile.outage_s
    window: list[float] = []
    with brokers(broker):

        async def fault() -> float:
            await asyncio.to_thread(ctx.postgres.stop_immediate)
            window.append(time.monotonic())
            await asyncio.sleep(outage)
            window.append(time.monotonic())
            await asyncio.to_thread(ctx.postgres.start)
            return time.monotonic()

        ledger = await run_under_load(ctx, [broker.url], database, fault, result)
        pids = broker.worker_pids()
    stored = await stored_ids(database, f"chaos-{result.name}")
    buffered_during = [t for t in ledger.buffered_at if window[0] <= t <= window[1]]
    result.check(
        f"pushes answered `buffered` during the {outage:.0f} s outage: {len(ledger.buffered)} messages "
        f"in {len(buffered_during)} requests",
        len(buffered_during) > 0,
    )
    replayed = [message_id for message_id in ledger.buffered if stored.get(message_id) == 1]
    result.check(
        f"every buffered message stored exactly once ({len(replayed)} of {len(ledger.buffered)})",
        len(replayed) == len(ledger.buffered),
    )
    result.check(
        "pops resumed after the outage", Ledger.first_after(ledger.delivered_at, window[1]) is not None
    )
    result.check("no broker process restarted", len(pids) == 2)


async def consumer_killed(ctx: Context, result: Result) -> None:
    """Producers feed queue A; hand-off consumer processes move each message to queue B in a transaction
    (ack + push); one is killed with SIGKILL in the middle of a batch."""
    profile = ctx.profile
    database = await ctx.new_database(result.name)
    broker = BrokerProcess(database, ctx.workdir, result.name, workers=2)
    source, target = f"chaos-{result.name}-a", f"chaos-{result.name}-b"
    ledger = Ledger()
    handed: collections.Counter[str] = collections.Counter()
    batches: dict[int, list[tuple[list[str], float]]] = collections.defaultdict(list)
    handed_at: dict[str, float] = {}
    handed_by: dict[str, int] = {}  # id -> the consumer whose hand-off committed (by its printed line)
    with brokers(broker):
        await configure_queue(broker.url, source, profile.lease_s)
        producers = [
            Producer(
                ledger,
                [broker.url],
                source,
                f"{uuid.uuid4().hex[:6]}-{n}",
                batch=5,
                rate=profile.handoff_rate / 2,
            )
            for n in range(2)
        ]
        producer_tasks = [asyncio.create_task(p.run()) for p in producers]
        processes: list[asyncio.subprocess.Process] = []

        async def spawn() -> asyncio.subprocess.Process:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "queenpy.chaos.handoff",
                broker.url,
                source,
                target,
                "chaos",
                "20",
                str(profile.handoff_pause_ms),
                stdout=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
            processes.append(process)
            return process

        kill_target: asyncio.Future[tuple[list[str], float]] = asyncio.get_running_loop().create_future()
        armed = asyncio.Event()

        async def read(number: int, process: asyncio.subprocess.Process) -> None:
            assert process.stdout is not None
            current: list[str] = []
            async for line in process.stdout:
                event = orjson.loads(line)
                if "batch" in event:
                    current = event["batch"]
                    batches[number].append((current, time.monotonic()))
                    ledger.record_delivery(current)
                elif "handed" in event:
                    message_id = event["handed"]
                    handed[message_id] += 1
                    handed_at.setdefault(message_id, time.monotonic())
                    handed_by.setdefault(message_id, number)
                    ledger.confirmed.add(message_id)
                    if (
                        number == 0
                        and armed.is_set()
                        and not kill_target.done()
                        and 0 < event["i"] <= event["n"] // 2
                        and event["n"] >= 4
                    ):
                        process.kill()  # SIGKILL in the middle of the batch
                        kill_target.set_result((current[event["i"] + 1 :], time.monotonic()))

        readers = [asyncio.create_task(read(n, await spawn())) for n in range(profile.handoff_consumers)]
        try:
            await asyncio.sleep(profile.warmup_s)
            armed.set()
            remaining, killed_at = await asyncio.wait_for(kill_target, timeout=60)
            popped_at = batches[0][-1][1]
            await asyncio.sleep(profile.handoff_after_s)
            for producer in producers:
                producer.stop(give_up_s=profile.drain_s / 2)
            await asyncio.gather(*producer_tasks)
            await drain(lambda: len(ledger.acknowledged - handed.keys()), profile.drain_s, 900)
        finally:
            for producer in producers:
                producer.stop(give_up_s=0)
            for process in processes:
                if process.returncode is None:
                    process.kill()
                await process.wait()
            await asyncio.gather(*producer_tasks, *readers, return_exceptions=True)
    stored = await stored_ids(database, source)
    fill(result, ledger, stored)
    sources = await stored_ids(database, target, key="m.payload->>'source'")  # B's messages name A's
    if ledger.acknowledged - set(sources):
        result.notes += [f"at the end: {line}" for line in await partition_states(database, source, "chaos")]
        result.notes.append(
            f"handed off in the last 10 s of the drain: "
            f"{sum(1 for t in handed_at.values() if t > time.monotonic() - 10)}"
        )
    twice = {source_id: n for source_id, n in sources.items() if n > 1}
    result.unexpected_duplicates += len(twice)
    result.check(
        f"killed mid-batch with {len(remaining)} message(s) of the batch not handed off", len(remaining) > 0
    )
    # the killed consumer keeps going until SIGKILL lands: it may commit a hand-off or two after the line the
    # kill answered, and die before printing it; those are in B, and the rest came back to the others
    back = [handed_at[m] for m in remaining if handed_by.get(m, 0) != 0]
    by_killed = [
        m for m in remaining if handed_by.get(m) == 0 or (m not in handed_by and sources.get(m) == 1)
    ]
    came_back = min(back) - popped_at if back else None
    result.check(
        f"the rest of the killed batch was redelivered and handed off by the others ({len(back)}; "
        f"{len(by_killed)} committed by the killed consumer before it died) of {len(remaining)}",
        len(back) > 0 and len(back) + len(by_killed) == len(remaining),
    )
    result.check(
        f"... only after the lease expired ({came_back if came_back is None else round(came_back, 1)} s "
        f"after the pop, lease {profile.lease_s} s)",
        came_back is not None and came_back >= profile.lease_s - 0.5,
    )
    if came_back is not None and came_back > profile.lease_s + 5:
        result.notes.append(
            f"the killed batch's partition waited {came_back - profile.lease_s:.0f} s past its "
            f"lease: the other consumers' wildcard pops served other partitions with a backlog"
        )
    missing = ledger.acknowledged - set(sources)
    result.check(
        f"every message of A is in B exactly once ({len(sources)} in B, {len(missing)} missing, "
        f"{len(twice)} twice)",
        not missing and not twice,
    )
    result.recovery_s = min(back) - killed_at if back else None


async def kill_broker_transactions(ctx: Context, result: Result) -> None:
    """Hand-off workers move each message of queue A to queue B in its own transaction (ack with the lease +
    push with transactionId ``h-<id>``, ``requiredLeases``), many at once, so the broker fuses them into
    groups (one transaction call in flight per worker process); the whole broker is killed with SIGKILL and
    started again. A transaction without an answer, or answered with the call's error (no ``results``), is
    sent again unchanged; one refused on a retry with a duplicate or a lease error had committed before."""
    profile = ctx.profile
    database = await ctx.new_database(result.name)
    broker = BrokerProcess(
        database, ctx.workdir, result.name, workers=2, env={"QUEEN_TRANSACTION_MAX_CONCURRENT": "1"}
    )
    source, target = f"chaos-{result.name}-a", f"chaos-{result.name}-b"
    seen = HandOffs()
    ledger = seen.ledger
    largest_group = [0]  # most operations seen in one fused transaction call
    kills = [0]
    stopping = asyncio.Event()

    async def watch_groups() -> None:
        async with httpx.AsyncClient(base_url=broker.url, timeout=2) as client:
            while not stopping.is_set():
                with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                    stats = (await client.get("/metrics")).json()["fusion"]["transaction"]
                    largest_group[0] = max(largest_group[0], stats["maxBatchSeen"])
                await asyncio.sleep(0.2)

    with brokers(broker):
        await configure_queue(broker.url, source, profile.lease_s)
        producers = [
            Producer(
                ledger,
                [broker.url],
                source,
                f"{uuid.uuid4().hex[:6]}-{n}",
                batch=5,
                rate=profile.handoff_rate * 2,
            )
            for n in range(2)
        ]
        tasks = [asyncio.create_task(p.run()) for p in producers]
        workers = [
            asyncio.create_task(hand_off(broker.url, source, target, seen, stopping)) for _ in range(12)
        ] + [asyncio.create_task(watch_groups())]
        try:
            await asyncio.sleep(profile.warmup_s)
            # a kill when every worker waits in a long-poll pop interrupts no transaction: kill again (up to
            # KILL_TRIES times, 2 s of load apart) until a hand-off had to be sent again
            for attempt in range(1, KILL_TRIES + 1):
                kills[0] = attempt
                broker.kill()
                await asyncio.sleep(1.0)
                await asyncio.to_thread(broker.start)
                if seen.retried:
                    break
                await asyncio.sleep(2.0)
            await asyncio.sleep(profile.handoff_after_s)
            for producer in producers:
                producer.stop(give_up_s=profile.drain_s / 2)
            await asyncio.gather(*tasks)
            await drain(lambda: len(ledger.acknowledged - seen.handed - seen.refused), profile.drain_s, 900)
            # a hand-off refused on a retry committed before, or its lease ran out first and it comes back:
            # what B holds tells
            deadline = time.monotonic() + profile.drain_s
            while (
                ledger.acknowledged - set(await stored_ids(database, target, key="m.payload->>'source'"))
                and time.monotonic() < deadline
            ):
                await asyncio.sleep(0.5)
        finally:
            stopping.set()
            for producer in producers:
                producer.stop(give_up_s=0)
            await asyncio.gather(*tasks, *workers, return_exceptions=True)
    fill(result, ledger, await stored_ids(database, source))
    in_target = await stored_ids(database, target, key="m.payload->>'source'")
    consumed = await stored_ids(
        database,
        source,
        key=(
            "CASE WHEN m.seq <= (SELECT c.last_consumed_seq FROM queen.partition_consumers c "
            "WHERE c.partition_id = m.partition_id AND c.consumer_group = 'chaos') THEN m.transaction_id END"
        ),
    )
    consumed.pop(None, None)  # type: ignore[call-overload]
    twice = {source_id: n for source_id, n in in_target.items() if n > 1}
    result.unexpected_duplicates += len(twice)
    missing = ledger.acknowledged - set(in_target)
    result.check(
        f"fused groups formed (up to {largest_group[0]} operations in one call, 2 per hand-off)",
        largest_group[0] > 2,
    )
    result.check(
        f"hand-offs sent again after {kills[0]} kill(s): {len(seen.retried)} ({sum(seen.refusals.values())} "
        f"refused on a retry, {dict(seen.refusals)}: committed before, or their lease ran out and they came "
        f"back)",
        len(seen.retried) > 0,
    )
    result.check(
        f"every message of A is in B exactly once ({len(in_target)} in B, {len(missing)} missing, "
        f"{len(twice)} twice)",
        not missing and not twice,
    )
    half = set(consumed) ^ set(in_target)
    result.check(
        f"nothing half-applied: the messages A's cursor passed are exactly those in B ({len(consumed)} "
        f"and {len(in_target)}, {len(half)} differ)",
        not half,
    )


async def broker_failover(ctx: Context, result: Result) -> None:
    database = await ctx.new_database(result.name)
    first = BrokerProcess(database, ctx.workdir, f"{result.name}-1", workers=1)
    second = BrokerProcess(database, ctx.workdir, f"{result.name}-2", workers=1)
    with brokers(first, second):

        async def fault() -> float:
            first.kill()
            return time.monotonic()

        await run_under_load(ctx, [first.url, second.url], database, fault, result)
    result.check(
        "the first broker stayed down; the second served the rest",
        first.process is not None and first.process.returncode is not None,
    )


async def longpoll_postgres_restart(ctx: Context, result: Result) -> None:
    """Long polls parked on an empty queue while PostgreSQL restarts; then pushes, which must reach them."""
    profile = ctx.profile
    database = await ctx.new_database(result.name)
    broker = BrokerProcess(database, ctx.workdir, result.name, workers=2)
    queue = f"chaos-{result.name}"
    ledger = Ledger()
    with brokers(broker):
        await configure_queue(broker.url, queue, profile.lease_s)
        pids = broker.worker_pids()
        consumers = [
            Consumer(ledger, [broker.url], queue, "chaos", batch=10, wait_ms=15000) for _ in range(6)
        ]
        tasks = [asyncio.create_task(c.run()) for c in consumers]
        producer = Producer(ledger, [broker.url], queue, uuid.uuid4().hex[:6], batch=1, partitions=2, rate=20)
        try:
            await asyncio.sleep(2)  # the polls are parked
            await asyncio.to_thread(ctx.postgres.stop_immediate)
            await asyncio.sleep(min(profile.outage_s, 5))
            await asyncio.to_thread(ctx.postgres.start)
            repaired = time.monotonic()
            producer_task = asyncio.create_task(producer.run())
            await asyncio.sleep(6)  # a trickle: each push finds the polls parked (the wake-up check)
            producer.stop(give_up_s=profile.drain_s / 2)
            await producer_task
            trickle = set(ledger.acknowledged)
            loaders = [
                Producer(
                    ledger,
                    [broker.url],
                    queue,
                    f"{uuid.uuid4().hex[:6]}-{n}",
                    batch=10,
                    rate=profile.rate / profile.producers,
                )
                for n in range(profile.producers)
            ]
            load_tasks = [asyncio.create_task(p.run()) for p in loaders]
            await asyncio.sleep(profile.after_s)  # then the usual load, consumed by the same polls
            for loader in loaders:
                loader.stop(give_up_s=profile.drain_s / 2)
            await asyncio.gather(*load_tasks)
            await drain(lambda: len(ledger.acknowledged - ledger.deliveries.keys()), profile.drain_s, 900)
        finally:
            producer.stop(give_up_s=0)
            for task in tasks:  # parked polls would hold the stop for up to 15 s
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        same = broker.worker_pids() == pids
    fill(result, ledger, await stored_ids(database, queue))
    result.recovery_s = ledger.recovery_s(repaired)
    result.check(
        "long polls delivered messages pushed after the restart",
        Ledger.first_after(ledger.delivered_at, repaired) is not None,
    )
    result.check("no broker process restarted (same worker pids)", same)
    waits = sorted(
        ledger.first_delivered_at[m] - ledger.acknowledged_at[m]
        for m in trickle
        if m in ledger.first_delivered_at
    )
    # a push wakes the parked polls of both workers at once (in process, and through LISTEN/NOTIFY, which
    # must have been re-established after the restart); the long-poll timer alone answers after 100-1,000 ms
    median = waits[len(waits) // 2] if waits else None
    result.check(
        f"pushes wake parked polls after the restart: median push-to-delivery "
        f"{'-' if median is None else f'{median * 1000:.0f} ms'} (under 500 ms), max "
        f"{'-' if not waits else f'{waits[-1] * 1000:.0f} ms'} over {len(waits)} messages",
        median is not None and median < 0.5,
    )
    if ledger.pop_errors:
        result.notes.append(
            "pop answers during the restart: "
            + ", ".join(f"{text} x{n}" for text, n in ledger.pop_errors.most_common(2))
        )


async def buffer_unwritable(ctx: Context, result: Result) -> None:
    """PostgreSQL stopped while the failover buffer cannot take everything: a disk that fills up (a tmpfs of
    ``buffer_kib``; without the right to mount one, a file size limit of that size on the broker's processes)
    and a read-only directory (a read-only tmpfs; skipped, and said so, without the right to mount)."""
    size = ctx.profile.buffer_kib
    can_mount = await asyncio.to_thread(_may_mount, ctx.workdir / "mount-probe")
    await _unwritable(ctx, result, "full", f"rw,size={size}k" if can_mount else None)
    if can_mount:
        await _unwritable(ctx, result, "read-only", f"ro,size={size}k")
    else:
        result.notes.append(
            "read-only variant skipped: this user may not mount a tmpfs (the disk-full variant "
            "used a file size limit instead)"
        )


def _may_mount(probe: Path) -> bool:
    """Whether this process may mount a tmpfs (root with CAP_SYS_ADMIN)."""
    if os.geteuid() != 0:
        return False
    probe.mkdir(parents=True, exist_ok=True)
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)], capture_output=True, check=False
        ).returncode
        == 0
    )
    if mounted:
        subprocess.run(["umount", str(probe)], capture_output=True, check=False)
    return mounted


async def _unwritable(ctx: Context, result: Result, variant: str, mount_options: str | None) -> None:
    database = await ctx.new_database(f"{result.name}-{variant}")
    queue = f"chaos-{result.name}-{variant}"
    broker = BrokerProcess(
        database,
        ctx.workdir,
        f"{result.name}-{variant}",
        workers=1,
        file_size_limit_bytes=None if mount_options else ctx.profile.buffer_kib * 1024,
    )
    mounted: Path | None = None
    if mount_options:
        mounted = broker.buffer_dir
        mounted.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(
            subprocess.run, ["mount", "-t", "tmpfs", "-o", mount_options, "tmpfs", str(mounted)], check=True
        )
    ledger = Ledger()
    try:
        with brokers(broker):
            await configure_queue(broker.url, queue, ctx.profile.lease_s)
            await asyncio.to_thread(ctx.postgres.stop_immediate)
            try:
                producer = Producer(
                    ledger, [broker.url], queue, f"{variant}-{uuid.uuid4().hex[:6]}", batch=20, rate=3000
                )
                task = asyncio.create_task(producer.run())
                await asyncio.sleep(ctx.profile.buffer_outage_s)
                producer.stop(give_up_s=0)
                await task
            finally:
                await asyncio.to_thread(ctx.postgres.start)
            started = time.monotonic()
            consumer = Consumer(ledger, [broker.url], queue, "chaos", batch=100)
            consumer_task = asyncio.create_task(consumer.run())
            await drain(lambda: len(ledger.acknowledged - ledger.deliveries.keys()), ctx.profile.drain_s, 900)
            consumer.stop()
            await consumer_task
    finally:
        if mounted is not None:
            await asyncio.to_thread(subprocess.run, ["umount", str(mounted)], check=False)
    stored = await stored_ids(database, queue)
    first = Ledger.first_after(ledger.delivered_at, started)
    if first is not None:  # from PostgreSQL's start to the first replayed message delivered
        result.recovery_s = max(result.recovery_s or 0.0, first - started)
    part = Result(result.name)
    fill(part, ledger, stored)
    result.acknowledged += part.acknowledged
    result.consumed += part.consumed
    result.lost += part.lost
    result.unexpected_duplicates += part.unexpected_duplicates
    result.redeliveries += part.redeliveries
    result.checks += [(f"{variant}: {text}", ok) for text, ok in part.checks]
    failed = sum(n for text, n in ledger.push_failures.items() if "File buffer write failed" in text)
    result.check(
        f"{variant}: pushes refused with a clear error ({failed} items answered `failed`: "
        f"{next(iter(ledger.push_failures), 'none')})",
        failed > 0,
    )
    stored_failed = {m for m in ledger.attempted - ledger.acknowledged if m in stored}
    result.check(f"{variant}: nothing refused was stored ({len(stored_failed)} stored)", not stored_failed)
    result.notes.append(
        f"{variant}: {len(ledger.buffered)} buffered before the buffer refused, "
        f"{len(ledger.attempted - ledger.acknowledged)} refused"
    )


async def primary_failover(ctx: Context, result: Result) -> None:
    """The PostgreSQL primary dies (``kill -9`` of its postmaster) under load and its synchronous standby is
    promoted (``pg_ctl promote``) after a delay; two brokers reach both through libpq's multi-host URL with
    ``target_session_attrs=read-write``. The full run then does it again with an asynchronous standby and
    reports what that loses (the trade-off docs/reliability.md documents; not a failure)."""
    await _failover_run(ctx, result, synchronous=True)
    if not ctx.profile.quick:
        part = Result(f"{result.name}-async")
        await _failover_run(ctx, part, synchronous=False)
        lost_stored = [text for text, _ in part.checks if text.startswith("every acknowledged id is stored")]
        recovery = None if part.recovery_s is None else round(part.recovery_s, 1)
        result.notes.append(
            f"asynchronous standby: {part.acknowledged:,} acknowledged, {part.lost} lost, "
            f"{part.unexpected_duplicates} duplicated, {part.redeliveries} redelivered; "
            f"{'; '.join(lost_stored)}; recovery {recovery} s"
        )
        result.notes += [
            f"asynchronous: {text}{'' if ok else ' (NOT met: the trade-off)'}" for text, ok in part.checks
        ]
        result.notes += [f"asynchronous: {note}" for note in part.notes]


async def _failover_run(ctx: Context, result: Result, *, synchronous: bool) -> None:
    mode = "sync" if synchronous else "async"
    primary = await asyncio.to_thread(PrivatePostgres, ctx.workdir / f"primary-{mode}", port=free_port())
    standby: StandbyPostgres | None = None
    try:
        standby = await asyncio.to_thread(
            StandbyPostgres, primary, ctx.workdir / f"standby-{mode}", free_port(), "standby1", synchronous
        )
        await asyncio.to_thread(primary.create_database, "queen")
        database = (
            f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/queen"
            "?sslmode=disable&target_session_attrs=read-write"
        )
        await _failover_load(ctx, result, primary, standby, database, synchronous)
    finally:
        if standby is not None:
            await asyncio.to_thread(standby.stop)
        await asyncio.to_thread(primary.stop)


async def _failover_load(
    ctx: Context,
    result: Result,
    primary: PrivatePostgres,
    standby: StandbyPostgres,
    database: str,
    synchronous: bool,
) -> None:
    profile = ctx.profile
    env = {"STATS_INTERVAL_MS": "1000", "QUEEN_TRANSACTION_MAX_CONCURRENT": "1"}
    first = BrokerProcess(database, ctx.workdir, f"{result.name}-{len(result.checks)}-1", workers=1, env=env)
    second = BrokerProcess(database, ctx.workdir, f"{result.name}-{len(result.checks)}-2", workers=1, env=env)
    urls = [first.url, second.url]
    queue, source, target = f"chaos-{result.name}", f"chaos-{result.name}-a", f"chaos-{result.name}-b"
    ledger, seen = Ledger(), HandOffs()
    handoff_ledger = seen.ledger
    stopping = asyncio.Event()
    probes: list[str] = []
    moments: dict[str, float] = {}

    async def probe_outage() -> None:
        """While no server accepts writes: a pop and an ack straight over HTTP, which must be 503s with
        Retry-After, and a push, which must be answered `buffered`."""
        async with httpx.AsyncClient(timeout=15) as client:
            pop = await client.get(f"{first.url}/api/v1/pop/queue/{queue}", params={"consumerGroup": "probe"})
            ack = await client.post(
                f"{first.url}/api/v1/ack",
                json={
                    "transactionId": "probe",
                    "partitionId": "00000000-0000-0000-0000-000000000000",
                    "leaseId": "probe",
                    "status": "completed",
                },
            )
            push = await client.post(
                f"{second.url}/api/v1/push",
                json={
                    "items": [
                        {
                            "queue": queue,
                            "partition": "probe",
                            "transactionId": f"probe-{uuid.uuid4().hex[:8]}",
                            "payload": {},
                        }
                    ]
                },
            )
        for name, answer in (("pop", pop), ("ack", ack)):
            probes.append(f"{name} {answer.status_code} Retry-After={answer.headers.get('retry-after')}")
        status = push.json()[0].get("status") if push.status_code in (200, 201) else push.status_code
        probes.append(f"push {push.status_code} {status}")
        result.check(
            f"during the switch: {', '.join(probes)} (pops and acks 503 with Retry-After, pushes buffered)",
            pop.status_code == 503
            and ack.status_code == 503
            and bool(pop.headers.get("retry-after"))
            and bool(ack.headers.get("retry-after"))
            and status == "buffered",
        )

    with brokers(first, second):
        await configure_queue(first.url, queue, profile.lease_s)
        await configure_queue(first.url, source, profile.lease_s)
        run_id = uuid.uuid4().hex[:6]
        producers = [
            Producer(
                ledger,
                urls[n % 2 :] + urls[: n % 2],
                queue,
                f"{run_id}-{n}",
                batch=10,
                rate=profile.rate / 2 / profile.producers,
            )
            for n in range(profile.producers)
        ]
        consumers = [
            Consumer(ledger, urls[n % 2 :] + urls[: n % 2], queue, "chaos", batch=50)
            for n in range(profile.consumers)
        ]
        feeders = [
            Producer(
                handoff_ledger,
                urls[n:] + urls[:n],
                source,
                f"{run_id}-h{n}",
                batch=5,
                rate=profile.handoff_rate / 2,
            )
            for n in range(2)
        ]
        loads: list[Producer | Consumer] = [*producers, *feeders, *consumers]
        tasks = [asyncio.create_task(worker.run()) for worker in loads]
        workers = [
            asyncio.create_task(hand_off(urls[n % 2], source, target, seen, stopping)) for n in range(4)
        ]
        try:
            await asyncio.sleep(profile.warmup_s)
            moments["killed"] = time.monotonic()
            await asyncio.to_thread(primary.kill_postmaster)
            await asyncio.sleep(min(1.0, profile.promote_after_s / 2))
            await probe_outage()
            await asyncio.sleep(max(0.0, moments["killed"] + profile.promote_after_s - time.monotonic()))
            await asyncio.to_thread(standby.promote)
            moments["promoted"] = time.monotonic()
            await asyncio.sleep(profile.failover_after_s)
            for producer in [*producers, *feeders]:
                producer.stop(give_up_s=profile.drain_s / 2)
            await asyncio.gather(*tasks[: len(producers) + len(feeders)])
            await drain(
                lambda: (
                    len(ledger.acknowledged - ledger.deliveries.keys())
                    + len(handoff_ledger.acknowledged - seen.handed - seen.refused)
                ),
                profile.drain_s,
                900,
            )
            await _check_reconnected(result, standby, [first, second], queue)
        finally:
            stopping.set()
            for consumer in consumers:
                consumer.stop()
            for producer in [*producers, *feeders]:
                producer.stop(give_up_s=0)
            await asyncio.gather(*tasks, *workers, return_exceptions=True)
    new_primary = standby.database_url("queen")
    fill(result, ledger, await stored_ids(new_primary, queue))
    pushed_at = Ledger.first_after(ledger.queued_at, moments["promoted"])
    popped_at = Ledger.first_after(ledger.delivered_at, moments["promoted"])
    if pushed_at is not None and popped_at is not None:
        result.recovery_s = max(pushed_at, popped_at) - moments["killed"]
    killed = moments["killed"]
    result.notes.append(
        f"from the kill: first push answered `queued` by the new primary after "
        f"{'-' if pushed_at is None else f'{pushed_at - killed:.1f} s'}, first pop that delivered "
        f"after {'-' if popped_at is None else f'{popped_at - killed:.1f} s'} (promotion at "
        f"{moments['promoted'] - killed:.1f} s)"
    )
    result.check(
        f"pushes answered `buffered` while no primary was there: {len(ledger.buffered)} messages",
        len(ledger.buffered) > 0,
    )
    stored = await stored_ids(new_primary, queue)
    replayed = [message_id for message_id in ledger.buffered if stored.get(message_id) == 1]
    result.check(
        f"every buffered message stored exactly once on the new primary ({len(replayed)} of "
        f"{len(ledger.buffered)})",
        len(replayed) == len(ledger.buffered),
    )
    result.notes.append(
        f"redeliveries allowed (leases that expired on batches whose ack failed in the switch): "
        f"{ledger.redeliveries}; acked messages delivered again: {sum(ledger.unexpected.values())}"
    )
    in_target = await stored_ids(new_primary, target, key="m.payload->>'source'")
    twice = {source_id: n for source_id, n in in_target.items() if n > 1}
    missing = handoff_ledger.acknowledged - set(in_target)
    result.unexpected_duplicates += len(twice) + sum(handoff_ledger.unexpected.values())
    result.check(
        f"hand-off: {len(handoff_ledger.acknowledged)} acknowledged into A, {len(in_target)} in B, "
        f"{len(missing)} missing, {len(twice)} twice, {len(seen.refused)} refused on a retry (committed "
        f"before the answer was lost, or their lease ran out and they came back)",
        not missing and not twice,
    )
    result.lost += len(missing)


async def _check_reconnected(
    result: Result, standby: StandbyPostgres, processes: list[BrokerProcess], queue: str
) -> None:
    """After the promotion: each broker's /health names the new primary; LISTEN, the services' advisory locks
    and the long-poll announcements work again on it."""
    async with httpx.AsyncClient(timeout=10) as client:
        roles = [
            (await client.get(f"{process.url}/health")).json().get("postgres") or {} for process in processes
        ]
        result.check(
            f"/health names the new primary on both brokers ({[r.get('port') for r in roles]}, standby "
            f"port {standby.port}; synchronous_commit {roles[0].get('synchronousCommit')!r}, "
            f"synchronous_standby_names {roles[0].get('synchronousStandbyNames')!r})",
            all(r.get("port") == standby.port and r.get("inRecovery") is False for r in roles),
        )
        listening = int(
            (
                await asyncio.to_thread(
                    standby.psql, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'", "queen"
                )
            ).strip()
        )
        deadline = time.monotonic() + 30
        locks = 0
        while time.monotonic() < deadline:  # the stats job's lock (737003), taken at its next run
            locks = int(
                (
                    await asyncio.to_thread(
                        standby.psql,
                        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                        "WHERE l.locktype = 'advisory' AND l.objid = 737003 "
                        "AND a.application_name = 'queenpy-services'",
                        "queen",
                    )
                ).strip()
            )
            if locks == 1:
                break
            await asyncio.sleep(0.5)
        result.check(
            f"on the new primary: {listening} LISTEN connections (one per broker process), the stats "
            f"job's advisory lock held by {locks} process",
            listening >= len(processes) and locks == 1,
        )
        # a long poll parked on one broker, a push through the other: woken through NOTIFY, which the pushing
        # broker sends only for queues announced by the other (the announcements were made again)
        probe_queue = f"{queue}-wake"
        await configure_queue(processes[0].url, probe_queue, 30)
        waits = []
        for n in range(5):
            poll = asyncio.create_task(
                client.get(
                    f"{processes[1].url}/api/v1/pop/queue/{probe_queue}",
                    params={"wait": "true", "timeout": "8000", "autoAck": "true"},
                    timeout=15,
                )
            )
            await asyncio.sleep(1.5)  # parked, and announced
            sent = time.monotonic()
            await client.post(
                f"{processes[0].url}/api/v1/push",
                json={"items": [{"queue": probe_queue, "partition": "p", "payload": {"n": n}}]},
            )
            answer = await poll
            if answer.status_code == 200 and answer.content:
                waits.append(time.monotonic() - sent)
        waits.sort()
        median = waits[len(waits) // 2] if waits else None
        result.check(
            f"a push on one broker wakes a long poll parked on the other: median "
            f"{'-' if median is None else f'{median * 1000:.0f} ms'} over {len(waits)} of 5 (under "
            f"500 ms: NOTIFY, not the 1 s poll timer)",
            median is not None and median < 0.5,
        )


SCENARIOS = [
    Scenario(
        "kill-worker", "kill -9 of one broker worker under load (the supervisor restarts it)", kill_worker
    ),
    Scenario("kill-broker", "kill -9 of the whole broker under load, then a restart", kill_broker),
    Scenario(
        "postgres-stopped", "PostgreSQL stopped (immediate) under push load, then started", postgres_stopped
    ),
    Scenario(
        "consumer-killed",
        "a hand-off consumer killed mid-batch; transactional hand-off to a 2nd queue",
        consumer_killed,
    ),
    Scenario(
        "kill-broker-tx",
        "kill -9 of the broker during fused groups of transactional hand-offs, then a restart",
        kill_broker_transactions,
    ),
    Scenario(
        "broker-failover",
        "two brokers on one PostgreSQL, one killed; clients hold both URLs",
        broker_failover,
    ),
    Scenario(
        "longpoll-pg-restart", "PostgreSQL restarted while long polls are parked", longpoll_postgres_restart
    ),
    Scenario(
        "buffer-unwritable", "PostgreSQL down and the failover buffer full or read-only", buffer_unwritable
    ),
    Scenario(
        "primary-failover",
        "kill -9 of the PostgreSQL primary under load, its synchronous standby promoted; "
        "two brokers on a multi-host URL",
        primary_failover,
    ),
]
