"""The input both window-count examples read, and the answer they must give (docs/pipelines.md).

Events ``{"key", "tsMs"}`` over ``minutes`` minutes of event time, one partition per key, each partition in
event-time order; then one ``"flush"`` event per key, 10 minutes after the others, which moves every
engine's watermark past every window (its own window stays open, so it is never emitted). The answer: the
number of events per key and 1-minute tumbling window, as ``(key, windowStartMs, windowEndMs, count)``.
"""

from __future__ import annotations

import random
import sys
from collections import Counter, defaultdict
from typing import Any

import httpx

WINDOW_MS = 60_000
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
Window = tuple[str, int, int, int]  # key, windowStartMs, windowEndMs, count


def make_events(
    events: int = 2000, keys: int = 4, minutes: int = 6, seed: int = 7
) -> dict[str, list[dict[str, Any]]]:
    """Events by key, each key's list in event-time order, ending with its flush event."""
    rng = random.Random(seed)
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for ts in sorted(BASE_MS + rng.randrange(minutes * WINDOW_MS) for _ in range(events)):
        key = f"user-{rng.randrange(keys)}"
        by_key[key].append({"key": key, "tsMs": ts})
    flush = BASE_MS + (minutes + 10) * WINDOW_MS
    for k in range(keys):
        by_key[f"user-{k}"].append({"key": f"user-{k}", "tsMs": flush, "flush": True})
    return dict(by_key)


def expected_windows(events: dict[str, list[dict[str, Any]]]) -> list[Window]:
    """The windows every engine must emit, computed in plain Python."""
    counts = Counter(
        (e["key"], e["tsMs"] - e["tsMs"] % WINDOW_MS)
        for items in events.values()
        for e in items
        if not e.get("flush")
    )
    return sorted((key, start, start + WINDOW_MS, n) for (key, start), n in counts.items())


def produce(url: str, queue: str, events: dict[str, list[dict[str, Any]]]) -> int:
    """Push the events to ``queue``, partition = key, in order; returns how many."""
    with httpx.Client(base_url=url, timeout=60) as client:
        for key, items in events.items():
            for lo in range(0, len(items), 1000):
                chunk = [
                    {"queue": queue, "partition": key, "payload": e, "transactionId": f"{key}-{lo + i}"}
                    for i, e in enumerate(items[lo : lo + 1000])
                ]
                client.post("/api/v1/push", json={"items": chunk}).raise_for_status()
    return sum(len(items) for items in events.values())


def check(produced: int, windows: list[Window], expected: list[Window]) -> int:
    """Print what a run emitted against the plain-Python computation; the exit code (0 when equal, else 1)."""
    print(f"events: {produced}, windows emitted: {len(windows)}, expected: {len(expected)}")
    if windows != expected:
        print("MISMATCH with the Python computation", file=sys.stderr)
        return 1
    print("windows ok: equal to the Python computation")
    return 0
