"""Maintenance mode and the shared-state routes (API.md section 12), all ADMIN.

The switches are PostgreSQL's (``queen.system_state``) and reach every worker of every broker instance
through ``NOTIFY`` (see :mod:`queenpy.services.maintenance`). queenpy's instances share state through
PostgreSQL, not UDP: the shared-state routes describe that.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from queenpy.errors import InvalidRequest
from queenpy.server import validation as v
from queenpy.server.routes._base import Endpoint, Level, json_object, json_response, worker_of
from queenpy.server.worker import Worker

__all__ = ["ENDPOINTS"]


async def _enabled(request: Request) -> bool:
    body = await json_object(request)
    if not isinstance(body.get("enabled"), bool):
        raise InvalidRequest("enabled (boolean) is required")
    return bool(body["enabled"])


async def _buffer(worker: Worker) -> dict[str, Any]:
    stats = await asyncio.to_thread(worker.failover.stats)
    return {
        "bufferedMessages": stats["events"],
        "bufferHealthy": worker.failover.db_healthy and not stats["failedFiles"],
        "bufferStats": {
            **stats,
            "paused": worker.failover.paused,
            "replayedByThisWorker": worker.failover.replayed,
            "directory": str(worker.failover.directory),
        },
    }


async def get_maintenance(request: Request) -> Response:
    worker = worker_of(request)
    state = await worker.maintenance.reload()  # fresh from PostgreSQL, as the original
    return json_response(
        {
            "maintenanceMode": state["maintenanceMode"],
            "popMaintenanceMode": state["popMaintenanceMode"],
            "updatedAt": state["updatedAt"],
            **await _buffer(worker),
        }
    )


async def set_maintenance(request: Request) -> Response:
    enabled = await _enabled(request)
    worker = worker_of(request)
    state = await worker.maintenance.set("push", enabled)
    message = (
        "Maintenance mode enabled: pushes are buffered to disk and replayed when it is turned off"
        if enabled
        else "Maintenance mode disabled: buffered pushes are being replayed"
    )
    return json_response(
        {
            "maintenanceMode": state["maintenanceMode"],
            "popMaintenanceMode": state["popMaintenanceMode"],
            **await _buffer(worker),
            "message": message,
        }
    )


def _pop_answer(enabled: bool) -> dict[str, Any]:
    return {
        "popMaintenanceMode": enabled,
        "message": "Pop maintenance mode enabled: pops answer 204"
        if enabled
        else "Pop maintenance mode disabled",
    }


async def get_pop_maintenance(request: Request) -> Response:
    state = await worker_of(request).maintenance.reload()
    return json_response(_pop_answer(bool(state["popMaintenanceMode"])))


async def set_pop_maintenance(request: Request) -> Response:
    enabled = await _enabled(request)
    state = await worker_of(request).maintenance.set("pop", enabled)
    return json_response(_pop_answer(bool(state["popMaintenanceMode"])))


def shared_state(worker: Worker) -> dict[str, Any]:
    """How this process shares state with the others (PostgreSQL LISTEN/NOTIFY), with its counters."""
    engine = worker.engine
    return {
        "enabled": True,
        "running": worker.database.listening,
        "transport": "postgresql-notify",
        "server_id": f"{socket.gethostname()}:{worker.settings.port}",
        "worker_id": worker.worker_id,
        "pid": os.getpid(),
        "maintenance_mode": worker.maintenance.push,
        "pop_maintenance_mode": worker.maintenance.pop,
        "long_poll": {
            "parked": len(engine.waiters),
            "remote_waiting_queues": len(engine.remote_waiting_queues),
            "notifications_sent": engine.notifications_sent,
            "notifications_skipped": engine.notifications_skipped,
        },
        "queue_config_cache": {"size": worker.cached_queue_count()},
    }


async def shared_state_stats(request: Request) -> Response:
    return json_response(shared_state(worker_of(request)))


async def internal_notify(request: Request) -> Response:
    body = await json_object(request)
    if not isinstance(body.get("queue"), str) or not body["queue"]:
        raise InvalidRequest("queue is required")
    queue = v.check_name(body["queue"], "queue")
    partition = v.check_name(body.get("partition"), "partition", required=False)
    worker_of(request).engine.wake(queue or "", partition or None)
    return json_response({"status": "ok"})


ENDPOINTS = [
    Endpoint("/api/v1/system/maintenance", "GET", get_maintenance, Level.ADMIN),
    Endpoint("/api/v1/system/maintenance", "POST", set_maintenance, Level.ADMIN),
    Endpoint("/api/v1/system/maintenance/pop", "GET", get_pop_maintenance, Level.ADMIN),
    Endpoint("/api/v1/system/maintenance/pop", "POST", set_pop_maintenance, Level.ADMIN),
    Endpoint("/api/v1/system/shared-state", "GET", shared_state_stats, Level.ADMIN),
    Endpoint("/internal/api/shared-state/stats", "GET", shared_state_stats, Level.ADMIN),
    Endpoint("/internal/api/inter-instance/stats", "GET", shared_state_stats, Level.ADMIN),
    Endpoint("/internal/api/notify", "POST", internal_notify, Level.ADMIN),
]
