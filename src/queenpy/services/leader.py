"""Which process runs a job: a PostgreSQL session advisory lock per job (DESIGN.md section 1).

Every broker process (N workers x M instances on one database) runs the same job loops; a loop does its job
only while its process holds the job's lock. Each process keeps one dedicated connection for its locks
(never a pooled one: a session lock lives as long as its session). ``pg_try_advisory_lock`` never waits, so
at most one process holds a job. When the holder dies (``kill -9``, a lost connection), PostgreSQL ends its
session and drops the lock; the next loop of another process to try, at most one interval later, takes it.
Before every run the holder checks that its lock connection is still alive; if not, it has lost every lock
it held and tries again like the others. Behind a multi-host URL the lock connection goes, like every other,
to the host that accepts writes: after a failover the locks are taken again on the new primary (the old
primary's sessions, and their locks, died with it).

Lock keys (bigint): 737001 retention (Queen's key for its retention service), 737002 eviction, 737003 stats;
737000 is the migration lock.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg

__all__ = ["Leadership"]

log = logging.getLogger("queenpy.services")


class Leadership:
    """The job locks of one process.

    Args:
        url: the database URL.
        timeout_s: how long an attempt to connect or to check the connection may take.
    """

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.held: set[str] = set()
        self._connection: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()  # one statement at a time on the lock connection

    async def lead(self, job: str, key: int) -> bool:
        """Whether this process holds ``job``'s lock now, taking it if it is free. Never waits for another
        holder; connection errors count as "not the holder" (logged), and drop every lock this process
        held."""
        async with self._lock:
            try:
                connection = await self._connect()
                if job in self.held:
                    await connection.fetchval("SELECT 1", timeout=self.timeout_s)
                    return True
                if await connection.fetchval("SELECT pg_try_advisory_lock($1)", key, timeout=self.timeout_s):
                    self.held.add(job)
                    return True
                return False
            except (
                TimeoutError,
                OSError,
                asyncpg.PostgresError,
                asyncpg.InterfaceError,
                asyncpg.exceptions.TargetServerAttributeNotMatched,
            ) as exc:
                if self.held:
                    log.warning(
                        "services: lost the lock connection, no longer running %s: %s",
                        ", ".join(sorted(self.held)),
                        exc,
                    )
                await self._drop()
                return False

    async def close(self) -> None:
        """Close the lock connection: PostgreSQL releases every lock held on it."""
        async with self._lock:
            await self._drop()

    async def _connect(self) -> asyncpg.Connection:
        if self._connection is None or self._connection.is_closed():
            self.held.clear()
            self._connection = await asyncpg.connect(
                self.url,
                timeout=self.timeout_s,
                server_settings={"application_name": "queenpy-services", "idle_session_timeout": "0"},
            )
        return self._connection

    async def _drop(self) -> None:
        self.held.clear()
        connection, self._connection = self._connection, None
        if connection is not None and not connection.is_closed():
            try:
                await asyncio.wait_for(connection.close(), self.timeout_s)
            except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                connection.terminate()
