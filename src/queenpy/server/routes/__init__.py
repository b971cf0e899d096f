"""The broker's routes, one module per area of the API. Each module declares ``ENDPOINTS``; a new area
(status, maintenance, streams, dashboard, ...) is a new module listed in ``AREAS``."""

from __future__ import annotations

from queenpy.server.routes import (
    analytics,
    browse,
    dashboard,
    dlq,
    groups,
    maintenance,
    messages,
    queues,
    resources,
    schema_copy,
    spark,
    status,
    streams,
    system,
    traces,
)
from queenpy.server.routes._base import Endpoint

__all__ = ["AREAS", "endpoints"]

AREAS = (
    system,
    maintenance,
    messages,
    browse,
    queues,
    resources,
    groups,
    dlq,
    traces,
    spark,
    streams,
    status,
    analytics,
    schema_copy,
    dashboard,
)


def endpoints() -> list[Endpoint]:
    """Every endpoint of every area, in ``AREAS`` order."""
    return [endpoint for area in AREAS for endpoint in area.ENDPOINTS]
