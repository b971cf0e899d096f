"""The load of a chaos scenario: producers and acking consumers that record every message id in a
:class:`Ledger`.

Both speak HTTP through the queenpy client's :class:`~queenpy.client._failover.FailoverTransport` (several
broker URLs: a request that cannot reach one broker goes to the next), with one attempt per call: the
loops here decide when to retry, so every outcome is seen and recorded.

Ids are transactionIds ``<run>-<producer>-<sequence>``, carried in the payload too. A producer retries a
batch with the same ids until the broker answers each item ``queued``, ``duplicate`` or ``buffered`` (the
answers that promise the message is kept: *acknowledged*), as an at-least-once producer does; the
transactionId makes those retries exact (dedupe on (partition, transactionId)). A consumer pops with a
lease, records each delivery, then acks the batch; an ack answered ``success`` is *confirmed*. A delivery
of an id whose ack was confirmed before is *unexpected* (the cursor moved past it): a real duplicate. Any
other repeated delivery (a lease that expired, an ack that failed or whose answer was lost) is an
at-least-once redelivery the scenario allows.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from queenpy.client._failover import FailoverTransport
from queenpy.client._settings import RetryPolicy, Timeout
from queenpy.errors import QueenError

__all__ = ["Consumer", "Ledger", "Producer", "drain", "transport"]

ACKNOWLEDGED = ("queued", "duplicate", "buffered")


def transport(urls: list[str], request_s: float = 10.0) -> FailoverTransport:
    """A client transport over ``urls`` that makes one attempt per call (a round over every URL)."""
    return FailoverTransport(
        urls,
        timeout=Timeout(request_s=request_s, connect_s=2.0),
        retry=RetryPolicy(attempts=1, initial_delay_s=0, max_delay_s=0),
    )


async def pop_messages(client: FailoverTransport, queue: str, group: str, batch: int) -> list[dict[str, Any]]:
    """One long-poll pop of up to ``batch`` messages of ``queue`` for ``group`` (1 s wait); its messages, or
    none when nothing came or no broker answered (then after a 0.2 s pause)."""
    params = {"batch": str(batch), "wait": "true", "timeout": "1000", "consumerGroup": group}
    try:
        popped = await client.request("GET", f"/api/v1/pop/queue/{queue}", params=params, read_timeout_s=15)
    except QueenError:
        await asyncio.sleep(0.2)
        return []
    messages = popped.get("messages") if isinstance(popped, dict) else None
    return list(messages or [])


@dataclass
class Ledger:
    """Everything the load saw, by message id (times are ``time.monotonic()``)."""

    acknowledged: set[str] = field(default_factory=set)
    buffered: set[str] = field(default_factory=set)
    attempted: set[str] = field(default_factory=set)
    push_failures: collections.Counter[str] = field(
        default_factory=collections.Counter
    )  # error text -> count
    deliveries: collections.Counter[str] = field(default_factory=collections.Counter)
    confirmed: set[str] = field(default_factory=set)
    unexpected: collections.Counter[str] = field(default_factory=collections.Counter)
    queued_at: list[float] = field(default_factory=list)  # each push answered `queued` (sorted)
    buffered_at: list[float] = field(default_factory=list)
    delivered_at: list[float] = field(default_factory=list)  # each non-empty pop (sorted)
    pop_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    acknowledged_at: dict[str, float] = field(default_factory=dict)  # id -> first acknowledging answer
    first_delivered_at: dict[str, float] = field(default_factory=dict)
    partition_of: dict[str, str] = field(default_factory=dict)  # id -> partition it was pushed to

    def record_push(self, ids: list[str], results: list[Any]) -> list[int]:
        """Record one push answer; returns the indexes of the items that were not acknowledged."""
        now = time.monotonic()
        retry = []
        queued = buffered = False
        for index, (message_id, result) in enumerate(zip(ids, results, strict=False)):
            status = result.get("status") if isinstance(result, dict) else None
            if status in ACKNOWLEDGED:
                self.acknowledged.add(message_id)
                self.acknowledged_at.setdefault(message_id, now)
                if status == "buffered":
                    self.buffered.add(message_id)
                    buffered = True
                else:
                    queued = queued or status == "queued"
            else:
                error = result.get("error") if isinstance(result, dict) else None
                self.push_failures[f"{status}: {error}"] += 1
                retry.append(index)
        retry.extend(range(len(results), len(ids)))  # a short answer: the rest are not acknowledged
        if queued:
            self.queued_at.append(now)
        if buffered:
            self.buffered_at.append(now)
        return retry

    def record_delivery(self, ids: list[str]) -> None:
        if not ids:
            return
        now = time.monotonic()
        self.delivered_at.append(now)
        for message_id in ids:
            self.first_delivered_at.setdefault(message_id, now)
            if message_id in self.confirmed:
                self.unexpected[message_id] += 1
            self.deliveries[message_id] += 1

    @staticmethod
    def first_after(times: list[float], moment: float) -> float | None:
        index = bisect.bisect_right(times, moment)
        return times[index] if index < len(times) else None

    def recovery_s(self, moment: float, pushes: bool = True, pops: bool = True) -> float | None:
        """Seconds from ``moment`` until a push was answered ``queued`` and a pop delivered messages again
        (both, or the one asked for); None if that never happened."""
        found = []
        if pushes:
            found.append(self.first_after(self.queued_at, moment))
        if pops:
            found.append(self.first_after(self.delivered_at, moment))
        if any(value is None for value in found):
            return None
        return max(value for value in found if value is not None) - moment

    @property
    def redeliveries(self) -> int:
        """Deliveries beyond the first of each id that at-least-once allows (not :attr:`unexpected`)."""
        return sum(count - 1 for count in self.deliveries.values()) - sum(self.unexpected.values())


async def drain(remaining: Callable[[], int], stall_s: float, cap_s: float) -> None:
    """Wait until ``remaining()`` is 0, while it keeps falling: the drain stops when it has not fallen for
    ``stall_s`` (consumers are stuck: what remains is reported lost) or after ``cap_s`` in all. On a loaded
    machine consumers may need long to catch up; a fixed deadline would call slow consumers a loss."""
    started = last_progress = time.monotonic()
    best = remaining()
    while best:
        await asyncio.sleep(0.2)
        now = time.monotonic()
        left = remaining()
        if left < best:
            best, last_progress = left, now
        if now - last_progress > stall_s or now - started > cap_s:
            return


class Producer:
    """Pushes ``batch`` messages per request to ``partitions`` partitions of ``queue`` until stopped, at most
    ``rate`` messages per second (0: as fast as answers come), retrying unacknowledged items with the same
    ids. ``stop()`` ends it after the batch in hand is acknowledged or ``give_up_s`` passed."""

    def __init__(
        self,
        ledger: Ledger,
        urls: list[str],
        queue: str,
        prefix: str,
        batch: int = 10,
        partitions: int = 4,
        rate: float = 0.0,
    ) -> None:
        self.ledger = ledger
        self.transport = transport(urls)
        self.queue = queue
        self.prefix = prefix
        self.batch = batch
        self.partitions = partitions
        self.rate = rate
        self.sequence = 0
        self._stopping = asyncio.Event()
        self.give_up_at = float("inf")

    def stop(self, give_up_s: float) -> None:
        self.give_up_at = time.monotonic() + give_up_s
        self._stopping.set()

    def _items(self) -> tuple[list[str], list[dict[str, Any]]]:
        ids, items = [], []
        for _ in range(self.batch):
            message_id = f"{self.prefix}-{self.sequence}"
            partition = f"p{self.sequence % self.partitions}"
            items.append(
                {
                    "queue": self.queue,
                    "partition": partition,
                    "transactionId": message_id,
                    "payload": {"id": message_id},
                }
            )
            self.ledger.partition_of[message_id] = partition
            ids.append(message_id)
            self.sequence += 1
        return ids, items

    async def run(self) -> None:
        started = time.monotonic()
        sent = 0
        try:
            while not self._stopping.is_set():
                ids, items = self._items()
                self.ledger.attempted.update(ids)
                while items and time.monotonic() < self.give_up_at:
                    try:
                        results = await self.transport.request("POST", "/api/v1/push", body={"items": items})
                    except QueenError as exc:
                        self.ledger.push_failures[f"error: {exc.message[:120]}"] += 1
                        await asyncio.sleep(0.2)
                        continue
                    if not isinstance(results, list):
                        self.ledger.push_failures[f"answer: {str(results)[:120]}"] += 1
                        await asyncio.sleep(0.2)
                        continue
                    retry = self.ledger.record_push(ids, results)
                    ids = [ids[i] for i in retry]
                    items = [items[i] for i in retry]
                    if items:
                        await asyncio.sleep(0.2)
                sent += self.batch
                if self.rate > 0:
                    ahead = started + sent / self.rate - time.monotonic()
                    if ahead > 0:
                        try:
                            await asyncio.wait_for(self._stopping.wait(), ahead)
                        except TimeoutError:
                            pass
        finally:
            await self.transport.aclose()


class Consumer:
    """Pops ``batch`` messages with ``wait=true`` from ``queue`` for ``group``, records each delivery and acks
    the batch, until stopped."""

    def __init__(
        self, ledger: Ledger, urls: list[str], queue: str, group: str, batch: int = 50, wait_ms: int = 1000
    ) -> None:
        self.ledger = ledger
        self.transport = transport(urls, request_s=wait_ms / 1000 + 10)
        self.queue = queue
        self.group = group
        self.batch = batch
        self.wait_ms = wait_ms
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        params = {
            "batch": str(self.batch),
            "wait": "true",
            "timeout": str(self.wait_ms),
            "consumerGroup": self.group,
        }
        try:
            while not self._stopping.is_set():
                try:
                    result = await self.transport.request(
                        "GET",
                        f"/api/v1/pop/queue/{self.queue}",
                        params=params,
                        read_timeout_s=self.wait_ms / 1000 + 10,
                    )
                except QueenError as exc:
                    self.ledger.pop_errors[exc.message[:80]] += 1
                    await asyncio.sleep(0.2)
                    continue
                messages = result.get("messages") if isinstance(result, dict) else None
                if not messages:
                    if (
                        isinstance(result, dict)
                        and result.get("success") is False
                        and result.get("error") != "no_available_partition"
                    ):
                        self.ledger.pop_errors[" ".join(str(result.get("error")).split())[:80]] += 1
                        await asyncio.sleep(0.2)
                    continue
                ids = [message["transactionId"] for message in messages]
                self.ledger.record_delivery(ids)
                acks = [
                    {
                        "transactionId": m["transactionId"],
                        "partitionId": m["partitionId"],
                        "leaseId": m.get("leaseId") or None,
                        "status": "completed",
                    }
                    for m in messages
                ]
                try:
                    answer = await self.transport.request(
                        "POST",
                        "/api/v1/ack/batch",
                        body={"acknowledgments": acks, "consumerGroup": self.group},
                    )
                except QueenError:
                    continue  # not confirmed: the batch comes back when the lease expires
                if isinstance(answer, list):
                    self.ledger.confirmed.update(
                        message_id
                        for message_id, item in zip(ids, answer, strict=False)
                        if isinstance(item, dict) and item.get("success") is True
                    )
        finally:
            await self.transport.aclose()
