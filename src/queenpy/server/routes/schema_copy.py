"""``/api/v1/migration/*`` (API.md section 12, ADMIN): copy the ``queen`` schema to another PostgreSQL with
``pg_dump | pg_restore``. Queen calls it a migration; the copy itself is :mod:`queenpy.services.schema_copy`,
which also parses the target (``parse_target``).

- ``POST /api/v1/migration/test-connection`` ``{host, port="5432", database, user, password?, ssl=false,
  schema="queen"}`` -> ``{success, version, schemaExists}`` or ``{success: false, error}``
- ``POST /api/v1/migration/start`` (the same body, plus ``excludeTableData: [table, ...]``) -> the new state;
  409 when a run is going on, the target has the schema already or cannot be reached
- ``GET /api/v1/migration/status`` -> ``{status: idle|running|completed|failed, startedAt, finishedAt, target,
  excludeTableData, error, holder, heartbeatAt}``
- ``POST /api/v1/migration/validate`` (the same body) -> ``{success, schema, tables: [{table, source, target,
  match, dataExcluded}]}``
- ``POST /api/v1/migration/reset`` -> ``{success, status: "idle"}``; 409 while a run is going on

A bad body is a 400 naming the field.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from queenpy.server.routes._base import Endpoint, Level, error_response, json_object, json_response, worker_of
from queenpy.services.schema_copy import SchemaCopyConflict, parse_target

__all__ = ["ENDPOINTS"]


async def test_connection(request: Request) -> Response:
    target = parse_target(await json_object(request))
    return json_response(await worker_of(request).schema_copy.test_connection(target))


async def start(request: Request) -> Response:
    target = parse_target(await json_object(request))
    try:
        return json_response(await worker_of(request).schema_copy.start(target))
    except SchemaCopyConflict as exc:
        return error_response(str(exc), 409)


async def status(request: Request) -> Response:
    return json_response(await worker_of(request).schema_copy.state())


async def validate(request: Request) -> Response:
    target = parse_target(await json_object(request))
    return json_response(await worker_of(request).schema_copy.validate(target))


async def reset(request: Request) -> Response:
    try:
        return json_response(await worker_of(request).schema_copy.reset())
    except SchemaCopyConflict as exc:
        return error_response(str(exc), 409)


ENDPOINTS = [
    Endpoint("/api/v1/migration/test-connection", "POST", test_connection, Level.ADMIN),
    Endpoint("/api/v1/migration/start", "POST", start, Level.ADMIN),
    Endpoint("/api/v1/migration/status", "GET", status, Level.ADMIN),
    Endpoint("/api/v1/migration/validate", "POST", validate, Level.ADMIN),
    Endpoint("/api/v1/migration/reset", "POST", reset, Level.ADMIN),
]
