"""Pipelined Spark sink commits: apply the recorded micro-batches after the commit has answered.

A pipelined commit (``POST /api/v1/spark/commit`` with ``"mode": "pipelined"``) records the micro-batch and
its task tokens in one short transaction and answers; Spark then starts the next micro-batch while this
process moves the batch's staged rows into ``queen.messages`` (``queen.spark_apply_pending_v2``, one
transaction under the query's advisory lock). The same procedure runs, so nothing is applied twice or out of
order, when:

- the query's next commit arrives (it applies the query's pending batches first, waiting for a running apply);
- ``POST /api/v1/spark/flush`` asks for it (a caller that needs the rows visible now);
- the sweep finds pending batches (at start, then every :data:`SWEEP_INTERVAL_S`): a broker that died between
  recording and applying, or an apply that gave up after :data:`RETRY_DELAYS_S` while PostgreSQL was away.

An apply that fails on an SQL error (a target queue at maxSize: QN500) is not retried here: the batch stays
pending and the query's next commit fails with that error, as a synchronous commit would have.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import asyncpg
import orjson

from queenpy.store.database import Database, Unavailable

__all__ = ["RETRY_DELAYS_S", "SWEEP_INTERVAL_S", "PendingApplier"]

log = logging.getLogger("queenpy.server")

RETRY_DELAYS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
SWEEP_INTERVAL_S = 60.0


class PendingApplier:
    """Applies one process's pipelined sink batches in the background (one task per query at a time).

    ``announce`` gets the ``(queue, partition)`` pairs that received messages (long polls waiting on them
    wake).
    """

    def __init__(self, database: Database, announce: Callable[[set[tuple[str, str]]], None]) -> None:
        self._database = database
        self._announce = announce
        self._running: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self._sweeper: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the sweep loop (first sweep at once, in the background)."""
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop())

    async def stop(self) -> None:
        """Cancel the sweep and the running applies (a cancelled apply rolls back; the next sweep redoes
        it)."""
        tasks = [t for t in (self._sweeper, *self._running.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._running.clear()

    def schedule(self, query_id: str) -> None:
        """Apply ``query_id``'s pending batches soon (after the running apply of that query, if any)."""
        running = self._running.get(query_id)
        if running is not None and not running.done():
            self._again.add(query_id)
            return
        self._running[query_id] = asyncio.get_running_loop().create_task(self._apply_soon(query_id))

    async def apply(self, query_id: str) -> dict[str, Any]:
        """Apply ``query_id``'s pending batches now, in batch order: ``{"applied", "pushed", "touched"}``.

        Raises:
            asyncpg.PostgresError: the apply failed (the batches stay pending).
            DatabaseUnavailable (and the other :data:`Unavailable` errors): PostgreSQL is not reachable.
        """
        text = await self._database.fetchval("SELECT queen.spark_apply_pending_v2($1)::text", query_id)
        result: dict[str, Any] = orjson.loads(text)
        touched = {
            (queue, partition)
            for queue, _, partition in (key.partition("/") for key in result.pop("touched", []))
        }
        if touched:
            self._announce(touched)
        return result

    async def sweep(self) -> int:
        """Apply every query's pending batches; the number of batches applied."""
        queries: list[str] = await self._database.fetchval("SELECT queen.spark_pending_queries_v2()")
        applied = 0
        for query_id in queries:
            try:
                applied += int((await self.apply(query_id))["applied"])
            except asyncpg.PostgresError as exc:
                log.warning("spark sink: pending batches of query %s not applied: %s", query_id, exc)
        return applied

    async def _apply_soon(self, query_id: str) -> None:
        try:
            while True:
                self._again.discard(query_id)
                if not await self._apply_with_retries(query_id) or query_id not in self._again:
                    return
        finally:
            self._running.pop(query_id, None)

    async def _apply_with_retries(self, query_id: str) -> bool:
        for delay in (0.0, *RETRY_DELAYS_S):
            if delay:
                await asyncio.sleep(delay)
            try:
                await self.apply(query_id)
                return True
            except asyncpg.PostgresError as exc:
                if isinstance(exc, Unavailable):
                    continue
                log.warning(
                    "spark sink: pending batches of query %s not applied (the next commit reports it): %s",
                    query_id,
                    exc,
                )
                return False
            except Unavailable:
                continue
        log.warning(
            "spark sink: PostgreSQL unreachable; pending batches of query %s wait for the sweep", query_id
        )
        return False

    async def _sweep_loop(self) -> None:
        while True:
            try:
                applied = await self.sweep()
                if applied:
                    log.info("spark sink: the sweep applied %d pending batch(es)", applied)
            except Unavailable:
                pass
            await asyncio.sleep(SWEEP_INTERVAL_S)
