"""Long polling (DESIGN.md section 6, API.md section 15).

A parked pop holds no database connection: it waits on an :class:`asyncio.Event` in the
:class:`WaiterRegistry` and retries on Queen's schedule (``initial`` ms while ``n <= threshold``, then
``min(initial * n * multiplier, max)``: 100, 100, 100, 800, 1000, ... ms with the defaults). A push wakes
matching waiters at once: in this process directly, in other processes through PostgreSQL LISTEN/NOTIFY
(for the queues on which they announced parked pops: :meth:`queenpy.engine.Engine.announce`).

A push to one partition wakes every pop parked on that partition, but only one wildcard pop per consumer
group: one wildcard pop of a group leases the partition and the others would find nothing. Waking them all
(a thundering herd) cost most of the database time of a consumer group that keeps up with its producer: with
10 consumers and a producer at 2,500 msg/s, 11,900 of 14,400 pops in 10 s found nothing
(benchmarks/RESULTS.md). The oldest waiter of the group that is not already woken goes first. A waiter that
was woken but finds nothing (another pop took the messages, or the partition is leased) parks again, and its
backoff timer still runs, so nothing waits longer than the schedule above.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

__all__ = ["Waiter", "WaiterRegistry", "backoff_ms"]


def backoff_ms(attempt: int, initial_ms: int, threshold: int, multiplier: float, max_ms: int) -> float:
    """Delay before the next check after ``attempt`` consecutive empty attempts (attempt >= 1)."""
    if attempt <= threshold:
        return float(initial_ms)
    return float(min(initial_ms * attempt * multiplier, max_ms))


class Waiter:
    """One parked pop of ``group`` (None: queue mode): woken for its queue (``partition`` None, a wildcard
    pop) or for one partition."""

    __slots__ = ("event", "group", "partition", "queue")

    def __init__(self, queue: str, partition: str | None, group: str | None = None) -> None:
        self.queue = queue
        self.partition = partition
        self.group = group
        self.event = asyncio.Event()


class WaiterRegistry:
    """Parked pops of this process, keyed by queue name, oldest first."""

    def __init__(self) -> None:
        self._by_queue: dict[str, dict[Waiter, None]] = defaultdict(dict)

    def __len__(self) -> int:
        return sum(len(waiters) for waiters in self._by_queue.values())

    def register(self, queue: str, partition: str | None, group: str | None = None) -> Waiter:
        waiter = Waiter(queue, partition, group)
        self._by_queue[queue][waiter] = None
        return waiter

    def queues(self) -> list[str]:
        """Names of the queues with parked pops."""
        return list(self._by_queue)

    def counts(self) -> dict[str | None, int]:
        """Parked pops per queue (None: the namespace/task pops, which name no queue)."""
        return {queue: len(waiters) for queue, waiters in self._by_queue.items()}

    def unregister(self, waiter: Waiter) -> None:
        """Remove a waiter. A wildcard waiter that leaves with a wake it did not act on (woken while its
        last pop was in flight) passes the wake to the oldest other waiter of its group: the wake may have
        been for a partition its pop did not take."""
        waiters = self._by_queue.get(waiter.queue)
        if waiters is None or waiters.pop(waiter, False) is False:
            return
        if not waiters:
            del self._by_queue[waiter.queue]
        elif waiter.partition is None and waiter.event.is_set():
            for other in waiters:
                if other.partition is None and other.group == waiter.group and not other.event.is_set():
                    other.event.set()
                    break

    def wake(self, queue: str, partition: str | None = None) -> int:
        """Messages arrived on ``partition`` of ``queue`` (None: on any partition). Wakes the waiters of that
        partition and, per consumer group, the oldest wildcard waiter not already woken (with ``partition``
        None: every waiter of the queue). Returns how many were woken."""
        woken = 0
        served: set[str | None] = set()  # groups whose wildcard waiter for this partition is woken
        for waiter in self._by_queue.get(queue, ()):
            if waiter.partition is None and partition is not None:
                if waiter.group in served or waiter.event.is_set():
                    continue
                served.add(waiter.group)
            elif partition is not None and waiter.partition != partition:
                continue
            waiter.event.set()
            woken += 1
        return woken

    def wake_notification(self, payload: str) -> None:
        """Handle a NOTIFY payload ``<queue>/<partition>`` (queue names may not contain ``/``... but
        partition names may, so split at the first ``/``)."""
        queue, _, partition = payload.partition("/")
        self.wake(queue, partition or None)
