"""Queen Streams (API.md section 19): the three routes the streaming SDK (``from queen import Stream``) calls.

* ``POST /streams/v1/queries``: register a query by name with its operator chain's ``config_hash``
  (``reset`` wipes the state when the hash changed);
* ``POST /streams/v1/cycle``: state ops, sink pushes and the source ack in one PostgreSQL transaction under
  an advisory lock on (query, partition) (``queen.streams_cycle_v1``); the sink partitions' long polls are
  woken after COMMIT;
* ``POST /streams/v1/state/get``: state rows of (query, partition) by keys, key prefix and ripeness.

Bodies are validated before the database (400 naming the field); errors of the database answer 200 with
``{"success": false, "error": ...}`` (the original's asynchronous path), which the SDK raises on.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from queenpy.server import validation as v
from queenpy.server.routes._base import Endpoint, Level, json_object, json_response, worker_of

__all__ = ["ENDPOINTS"]


async def register_query(request: Request) -> Response:
    clean = v.validate_stream_register(await json_object(request))
    text = await worker_of(request).database.call("streams_register_v1", orjson.dumps(clean).decode())
    return json_response(text.encode())


async def cycle(request: Request) -> Response:
    clean = v.validate_stream_cycle(await json_object(request))
    return json_response(await worker_of(request).engine.stream_cycle(clean))


async def state_get(request: Request) -> Response:
    clean = v.validate_stream_state_get(await json_object(request))
    text = await worker_of(request).database.call("streams_state_get_v1", orjson.dumps(clean).decode())
    return json_response(text.encode())


ENDPOINTS = [
    Endpoint("/streams/v1/queries", "POST", register_query, Level.READ_WRITE),
    Endpoint("/streams/v1/cycle", "POST", cycle, Level.READ_WRITE),
    Endpoint("/streams/v1/state/get", "POST", state_get, Level.READ_ONLY),
]
