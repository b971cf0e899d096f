"""Maintenance mode (API.md section 12), one state for every worker of every broker instance.

The switches live in PostgreSQL (``queen.system_state``, keys ``maintenance_mode`` and
``pop_maintenance_mode``); ``queen.set_system_state_v1`` changes one and sends ``NOTIFY queen_system_state``
in the same transaction. Each worker process keeps a copy, read at start, re-read on every notification and
whenever its LISTEN connection is (re-)established (a notification may have been missed meanwhile), and
re-read every ``refresh_s`` seconds as a last resort. A change therefore reaches every process within the
notification's delivery time (milliseconds), bounded by ``refresh_s`` if LISTEN is down.

Push maintenance: every push is written to the failover buffer and answered ``buffered`` (201), and the
buffer's drain pauses; turned off, the drain resumes and replays everything (deduplicated by transactionId).
Pop maintenance: every pop answers 204 with no body.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson

from queenpy.engine import Engine
from queenpy.engine.failover import FailoverBuffer
from queenpy.store.database import Database

__all__ = ["STATE_CHANNEL", "MaintenanceState"]

log = logging.getLogger("queenpy.server")

STATE_CHANNEL = "queen_system_state"
KEYS = {"push": "maintenance_mode", "pop": "pop_maintenance_mode"}


class MaintenanceState:
    """This process's copy of the maintenance switches.

    Args:
        database: where the switches live.
        failover: the buffer whose drain pauses while push maintenance is on.
        refresh_s: the periodic re-read (a fallback; notifications normally arrive first).
    """

    def __init__(self, database: Database, failover: FailoverBuffer, refresh_s: float = 5.0) -> None:
        self._database = database
        self._failover = failover
        self.refresh_s = refresh_s
        self.push = False
        self.pop = False
        self.updated_at: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._reload_task: asyncio.Task[None] | None = None

    def attach(self, engine: Engine) -> None:
        """Listen to changes on the engine's LISTEN connection (before the engine starts)."""
        engine.subscribe(
            STATE_CHANNEL, lambda _payload: self._schedule_reload(), on_connected=self._schedule_reload
        )

    async def start(self) -> None:
        """Read the switches once (before serving), then keep re-reading in the background."""
        await self.reload()

        async def refresh() -> None:
            while True:
                await asyncio.sleep(self.refresh_s)
                try:
                    await self.reload()
                except Exception as exc:  # noqa: BLE001 - keep the last known state; retried next round
                    log.debug("maintenance state refresh failed: %s", exc)

        self._task = asyncio.get_running_loop().create_task(refresh())

    async def stop(self) -> None:
        for task in (self._task, self._reload_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _schedule_reload(self) -> None:
        if self._reload_task is None or self._reload_task.done():
            self._reload_task = asyncio.get_running_loop().create_task(self._reload_logged())

    async def _reload_logged(self) -> None:
        try:
            await self.reload()
        except Exception as exc:  # noqa: BLE001 - the periodic refresh tries again
            log.warning("maintenance state reload failed: %s", exc)

    async def reload(self) -> dict[str, Any]:
        """Read both switches from PostgreSQL and apply them; returns ``queen.system_state_v1()``."""
        state: dict[str, Any] = orjson.loads(
            await self._database.fetchval("SELECT queen.system_state_v1()::text")
        )
        self.apply(state)
        return state

    async def set(self, which: str, enabled: bool) -> dict[str, Any]:
        """Turn push (``which="push"``) or pop maintenance on or off for every broker process; returns the
        new state of both switches."""
        state: dict[str, Any] = orjson.loads(
            await self._database.fetchval(
                "SELECT queen.set_system_state_v1($1, $2)::text", KEYS[which], enabled
            )
        )
        self.apply(state)
        return state

    def apply(self, state: dict[str, Any]) -> None:
        push, pop = bool(state.get("maintenanceMode")), bool(state.get("popMaintenanceMode"))
        if push != self.push:
            log.warning("push maintenance mode %s", "on: pushes are buffered" if push else "off: replaying")
        if pop != self.pop:
            log.warning("pop maintenance mode %s", "on: pops answer 204" if pop else "off")
        self.push, self.pop, self.updated_at = push, pop, state.get("updatedAt")
        if push:
            self._failover.pause()
        elif self._failover.paused:
            self._failover.resume()
