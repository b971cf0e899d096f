"""What every chaos scenario shares: the run's settings (:class:`Profile`, quick or full), its context (the
private PostgreSQL, the work directory), the result record, and the measured load around one fault.

A scenario's verdict: *lost* = ids whose push was acknowledged (``queued``, ``duplicate`` or ``buffered``)
that no consumer completed by the end of the drain; *unexpected duplicates* = deliveries after a confirmed
ack (:mod:`queenpy.chaos.load`) plus ids stored more than once; every scenario also has checks of its own
(what the fault must show: pushes answered ``buffered``, the killed batch redelivered, ...). It passes when
nothing is lost, nothing is unexpectedly duplicated and every check holds.
"""

from __future__ import annotations

import asyncio
import collections
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from queenpy.chaos.load import Consumer, Ledger, Producer, drain, transport
from queenpy.errors import QueenError
from queenpy.harness import PrivatePostgres

__all__ = [
    "Context",
    "Profile",
    "Result",
    "configure_queue",
    "fill",
    "partition_states",
    "run_under_load",
    "stored_ids",
]


@dataclass(frozen=True)
class Profile:
    """Sizes and durations of a run. ``quick``: bounded for CI (the whole suite in under 5 minutes on a
    2-core machine); full: tens of thousands of messages per scenario and the 60 s PostgreSQL outage."""

    quick: bool
    warmup_s: float
    after_s: float  # load kept on after the repair
    outage_s: float  # PostgreSQL stopped
    lease_s: int
    producers: int
    consumers: int
    rate: float  # messages per second over all producers
    handoff_rate: float
    handoff_consumers: int
    handoff_pause_ms: int
    handoff_after_s: float
    drain_s: float  # the drain ends when nothing more was delivered for this long (load.drain)
    buffer_kib: int  # size of the failover buffer's disk in buffer-unwritable
    buffer_outage_s: float
    promote_after_s: float  # primary-failover: from the primary's kill to the standby's promotion
    failover_after_s: float  # primary-failover: load kept on after the promotion

    @classmethod
    def of(cls, quick: bool) -> Profile:
        if quick:
            return cls(
                quick=True,
                warmup_s=3,
                after_s=4,
                outage_s=8,
                lease_s=4,
                producers=3,
                consumers=3,
                rate=600,
                handoff_rate=80,
                handoff_consumers=2,
                handoff_pause_ms=10,
                handoff_after_s=4,
                drain_s=30,
                buffer_kib=64,
                buffer_outage_s=6,
                promote_after_s=3,
                failover_after_s=12,
            )
        return cls(
            quick=False,
            warmup_s=10,
            after_s=30,
            outage_s=60,
            lease_s=10,
            producers=4,
            consumers=4,
            rate=1000,
            handoff_rate=200,
            handoff_consumers=4,
            handoff_pause_ms=1,
            handoff_after_s=60,
            drain_s=60,
            buffer_kib=4096,
            buffer_outage_s=25,
            promote_after_s=8,
            failover_after_s=30,
        )


@dataclass
class Context:
    """One run: its PostgreSQL, work directory and profile."""

    postgres: PrivatePostgres
    workdir: Path
    profile: Profile
    echo: Callable[[str], None]

    async def new_database(self, scenario: str) -> str:
        """Create an empty database for ``scenario`` (the broker migrates it on start); returns its URL."""
        name = f"chaos_{scenario.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
        return self.postgres.database_url(await asyncio.to_thread(self.postgres.create_database, name))


@dataclass
class Result:
    """The figures of one scenario (one row of the table)."""

    name: str
    acknowledged: int = 0
    consumed: int = 0
    lost: int = 0
    unexpected_duplicates: int = 0
    redeliveries: int = 0
    recovery_s: float | None = None
    checks: list[tuple[str, bool]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return (
            self.error is None
            and self.lost == 0
            and self.unexpected_duplicates == 0
            and all(ok for _, ok in self.checks)
        )

    def check(self, text: str, ok: bool) -> None:
        self.checks.append((text, ok))

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.name,
            "passed": self.passed,
            "acknowledged": self.acknowledged,
            "consumed": self.consumed,
            "lost": self.lost,
            "unexpected_duplicates": self.unexpected_duplicates,
            "redeliveries": self.redeliveries,
            "recovery_s": self.recovery_s,
            "checks": [{"check": text, "ok": ok} for text, ok in self.checks],
            "notes": self.notes,
            "error": self.error,
            "seconds": round(self.seconds, 1),
        }


async def configure_queue(url: str, queue: str, lease_s: int) -> None:
    """Create ``queue`` with a short lease (a killed consumer's batch comes back after ``lease_s``) and room
    for many retries (a message never reaches the dead-letter queue because of the faults)."""
    client = transport([url])
    try:
        for _ in range(50):
            try:
                await client.request(
                    "POST",
                    "/api/v1/configure",
                    body={"queue": queue, "options": {"leaseTime": lease_s, "retryLimit": 1000}},
                )
                return
            except QueenError:
                await asyncio.sleep(0.2)
    finally:
        await client.aclose()


async def stored_ids(
    database_url: str, queue: str, key: str = "m.transaction_id"
) -> collections.Counter[str]:
    """``key`` of each stored row (an SQL expression over ``queen.messages m``; default the transactionId) ->
    number of stored rows with it, over every partition of ``queue``."""
    connection = await asyncpg.connect(database_url)
    try:
        rows = await connection.fetch(
            f"SELECT {key} AS key, count(*) AS n FROM queen.messages m "
            "JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id "
            "WHERE q.name = $1 GROUP BY 1",
            queue,
        )
    finally:
        await connection.close()
    return collections.Counter({row["key"]: row["n"] for row in rows})


async def run_under_load(
    ctx: Context,
    urls: list[str],
    database_url: str,
    fault: Callable[[], Awaitable[float]],
    result: Result,
    *,
    queue: str | None = None,
    consumer_urls: list[str] | None = None,
) -> Ledger:
    """Producers and consumers on a fresh queue; after the warm-up, ``fault()`` runs (it breaks something,
    repairs it and returns the ``time.monotonic()`` of the repair); the load goes on for ``after_s``, then
    producers stop and consumers drain until every acknowledged id was delivered, or nothing more was for
    ``drain_s`` (:func:`queenpy.chaos.load.drain`).
    Fills ``result`` (counts, lost, duplicates, recovery from the repair) and returns the ledger."""
    profile = ctx.profile
    queue = queue or f"chaos-{result.name}"
    await configure_queue(urls[0], queue, profile.lease_s)
    ledger = Ledger()
    run_id = uuid.uuid4().hex[:6]
    producers = [
        Producer(ledger, urls, queue, f"{run_id}-{n}", batch=10, rate=profile.rate / profile.producers)
        for n in range(profile.producers)
    ]
    consumers = [
        Consumer(ledger, consumer_urls or urls, queue, "chaos", batch=100) for _ in range(profile.consumers)
    ]
    workers: list[Producer | Consumer] = [*producers, *consumers]
    tasks = [asyncio.create_task(worker.run()) for worker in workers]
    try:
        await asyncio.sleep(profile.warmup_s)
        repaired = await fault()
        await asyncio.sleep(profile.after_s)
        for producer in producers:
            producer.stop(give_up_s=profile.drain_s / 2)
        await asyncio.gather(*tasks[: len(producers)])
        await drain(lambda: len(ledger.acknowledged - ledger.deliveries.keys()), profile.drain_s, 900)
    finally:
        for consumer in consumers:
            consumer.stop()
        for producer in producers:
            producer.stop(give_up_s=0)
        await asyncio.gather(*tasks, return_exceptions=True)
    stored = await stored_ids(database_url, queue)
    fill(result, ledger, stored)
    if result.lost:
        result.notes += [
            f"at the end: {line}" for line in await partition_states(database_url, queue, "chaos")
        ]
    result.recovery_s = ledger.recovery_s(repaired)
    return ledger


async def partition_states(database_url: str, queue: str, group: str) -> list[str]:
    """One line per partition of ``queue`` still holding messages for ``group``: its backlog and lease (the
    diagnosis of a run whose drain did not finish)."""
    connection = await asyncpg.connect(database_url)
    try:
        rows = await connection.fetch(
            "SELECT p.name, p.last_seq - coalesce(c.last_consumed_seq, 0) AS backlog, c.worker_id, "
            "extract(epoch FROM c.lease_expires_at - now()) AS lease_left_s, c.batch_size, c.acked_count "
            "FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
            "LEFT JOIN queen.partition_consumers c ON c.partition_id = p.id AND c.consumer_group = $2 "
            "WHERE q.name = $1 AND p.last_seq > coalesce(c.last_consumed_seq, 0) ORDER BY p.name",
            queue,
            group,
        )
    finally:
        await connection.close()
    return [
        f"{row['name']}: backlog {row['backlog']}, lease "
        + (
            f"{row['worker_id']} for {row['lease_left_s']:.0f} s more (batch {row['batch_size']}, "
            f"acked {row['acked_count']})"
            if row["worker_id"]
            else "free"
        )
        for row in rows
    ]


def fill(result: Result, ledger: Ledger, stored: collections.Counter[str]) -> None:
    """Counts, loss and duplicates of ``result`` from the ledger and what PostgreSQL holds.

    *consumed* = ids delivered to a consumer; *lost* = acknowledged ids never delivered. An id delivered
    whose ack answer never came back (the broker died after committing it) was consumed: the consumer had
    it, and the broker moved the cursor past it.
    """
    delivered = set(ledger.deliveries)
    result.acknowledged = len(ledger.acknowledged)
    result.consumed = len(delivered)
    lost = ledger.acknowledged - delivered
    result.lost = len(lost)
    stored_twice = [message_id for message_id, count in stored.items() if count > 1]
    result.unexpected_duplicates = sum(ledger.unexpected.values()) + len(stored_twice)
    result.redeliveries = ledger.redeliveries
    not_stored = ledger.acknowledged - set(stored)
    result.check(f"every acknowledged id is stored in PostgreSQL ({len(not_stored)} missing)", not not_stored)
    unconfirmed = delivered - ledger.confirmed
    if unconfirmed:
        result.notes.append(
            f"{len(unconfirmed)} delivered id(s) without a confirmed ack (the ack's answer was "
            f"lost with a killed broker, or the run ended first); not redelivered since"
        )
    unacknowledged = ledger.attempted - ledger.acknowledged
    if unacknowledged:
        result.notes.append(
            f"{len(unacknowledged)} id(s) never acknowledged (the producer gave up at the end; "
            f"{len(unacknowledged & set(stored))} of them stored anyway)"
        )
    if ledger.push_failures:
        top = ", ".join(f"{text} x{count}" for text, count in ledger.push_failures.most_common(3))
        result.notes.append(f"push answers retried: {top}")
    if lost:
        by_partition = collections.Counter(ledger.partition_of.get(message_id, "?") for message_id in lost)
        result.notes.append(f"lost (first ids): {sorted(lost)[:5]}; by partition: {dict(by_partition)}")
