"""Long polling (DESIGN.md section 6, API.md section 15).

A parked pop holds no database connection: it waits on an :class:`asyncio.Event` in the
:class:`WaiterRegistry` and retries on Queen's schedule (``initial`` ms while ``n <= threshold``, then
``min(initial * n * multiplier, max)``: 100, 100, 100, 800, 1000, ... ms with the defaults). A push wakes
matching waiters at once: in this process directly, in other processes through PostgreSQL LISTEN/NOTIFY.
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
    """One parked pop: woken for its queue (any partition) or for one partition."""

    __slots__ = ("event", "partition", "queue")

    def __init__(self, queue: str, partition: str | None) -> None:
        self.queue = queue
        self.partition = partition
        self.event = asyncio.Event()


class WaiterRegistry:
    """Parked pops of this process, keyed by queue name."""

    def __init__(self) -> None:
        self._by_queue: dict[str, set[Waiter]] = defaultdict(set)

    def __len__(self) -> int:
        return sum(len(waiters) for waiters in self._by_queue.values())

    def register(self, queue: str, partition: str | None) -> Waiter:
        waiter = Waiter(queue, partition)
        self._by_queue[queue].add(waiter)
        return waiter

    def unregister(self, waiter: Waiter) -> None:
        waiters = self._by_queue.get(waiter.queue)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del self._by_queue[waiter.queue]

    def wake(self, queue: str, partition: str | None = None) -> int:
        """Wake waiters of ``queue`` (wildcard ones, and those of ``partition`` or of any partition when
        ``partition`` is None). Returns how many were woken."""
        woken = 0
        for waiter in self._by_queue.get(queue, ()):
            if partition is None or waiter.partition is None or waiter.partition == partition:
                waiter.event.set()
                woken += 1
        return woken

    def wake_notification(self, payload: str) -> None:
        """Handle a NOTIFY payload ``<queue>/<partition>`` (queue names may not contain ``/``... but
        partition names may, so split at the first ``/``)."""
        queue, _, partition = payload.partition("/")
        self.wake(queue, partition or None)
