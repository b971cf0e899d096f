"""System routes (API.md section 12): health, the JSON metrics, the failover buffer's state, the OpenAPI
document."""

from __future__ import annotations

import os
import time

import orjson
from starlette.requests import Request
from starlette.responses import Response

from queenpy.server.openapi import openapi_document
from queenpy.server.routes._base import CORS_HEADERS, Endpoint, Level, json_response, worker_of
from queenpy.server.routes.maintenance import shared_state
from queenpy.services.prometheus import CONTENT_TYPE

__all__ = ["ENDPOINTS", "VERSION"]

VERSION = "1.0.0"


async def health(request: Request) -> Response:
    worker = worker_of(request)
    healthy = await worker.database.healthy()
    body = {
        "status": "healthy" if healthy else "unhealthy",
        "database": "connected" if healthy else "disconnected",
        "server": "queenpy (Python Queen broker)",
        "worker_id": worker.worker_id,
        "version": VERSION,
        "pid": os.getpid(),
        "shared_state": shared_state(worker),
        # the server the pool writes to now (behind a multi-host URL, the primary of the moment) and what a
        # commit waits for: {host, port, inRecovery, synchronousCommit, synchronousStandbyNames}
        "postgres": await worker.database.server_role() if healthy else None,
        "queen": {"worker_id": worker.worker_id, "status": "active"},
        "services": await worker.services.status()
        if healthy
        else {
            "enabled": bool(worker.services.jobs),
            "holder": worker.services.holder,
            "jobs": worker.services.local_status(),
        },
    }
    return Response(
        orjson.dumps(body),
        status_code=200 if healthy else 503,
        media_type="application/json",
        headers=CORS_HEADERS,
    )


async def metrics(request: Request) -> Response:
    worker = worker_of(request)
    engine = worker.engine
    fusions = {
        name: {
            "requests": f.stats.requests,
            "items": f.stats.items,
            "calls": f.stats.calls,
            "errors": f.stats.errors,
            "inflight": f.inflight,
            "pending": f.pending,
            "limit": f.limit.limit,
            "maxBatchSeen": f.stats.max_batch_seen,
            "avgBatch": round(f.stats.items / f.stats.calls, 2) if f.stats.calls else 0,
            "avgCallMs": round(1000 * f.stats.busy_s / f.stats.calls, 3) if f.stats.calls else 0,
        }
        for name, f in engine.fusions.items()
    }
    pool = worker.database.pool
    return json_response(
        {
            "uptime": round(time.time() - worker.started_at, 3),
            "worker_id": worker.worker_id,
            "pid": os.getpid(),
            "database": {"poolSize": pool.get_size(), "idleConnections": pool.get_idle_size()},
            "fusion": fusions,
            "longPoll": {
                "parked": len(engine.waiters),
                "remoteWaitingQueues": len(engine.remote_waiting_queues),
                "notificationsSent": engine.notifications_sent,
                "notificationsSkipped": engine.notifications_skipped,
            },
        }
    )


async def prometheus(request: Request) -> Response:
    """Queen's families in the Prometheus text format (what a scrape does: ``services/prometheus.py``)."""
    body = await worker_of(request).prometheus.render()
    return Response(body, media_type=CONTENT_TYPE, headers=CORS_HEADERS)


async def status_buffers(request: Request) -> Response:
    worker = worker_of(request)
    counts = worker.failover.counts()
    return json_response(
        {
            "pending": counts["pending"],
            "failed": 0,
            "dbHealthy": worker.failover.db_healthy,
            "replayed": worker.failover.replayed,
            "worker": worker.worker_id,
        },
        empty_as_body=True,
    )


async def openapi(_request: Request) -> Response:
    return Response(
        orjson.dumps(openapi_document(VERSION)), media_type="application/json", headers=CORS_HEADERS
    )


ENDPOINTS = [
    Endpoint("/health", "GET", health, Level.PUBLIC),
    Endpoint("/metrics", "GET", metrics, Level.PUBLIC),
    Endpoint("/metrics/prometheus", "GET", prometheus, Level.PUBLIC),
    Endpoint("/openapi.json", "GET", openapi, Level.PUBLIC),
    Endpoint("/api/v1/status/buffers", "GET", status_buffers, Level.READ_ONLY),
]
