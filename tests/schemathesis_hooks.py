r"""schemathesis hooks for the long fuzzing run with the CLI (docs/reliability.md, "Fuzzing"):

    SCHEMATHESIS_HOOKS=schemathesis_hooks PYTHONPATH=tests \
        schemathesis run http://127.0.0.1:6632/openapi.json ...

The same two rules as tests/api/test_fuzz.py: an empty JSON body is null (API.md 1.2 and 22), and a generated
long-poll ``timeout`` is capped at 300 ms so a pop does not wait 30 s.
"""

from __future__ import annotations

from typing import Any

import schemathesis

LONG_POLL_CAP_MS = 300


@schemathesis.deserializer("application/json")
def json_or_null(_context: Any, response: Any) -> Any:
    return response.json() if response.content else None


@schemathesis.hook
def map_query(_context: Any, query: Any) -> Any:
    if isinstance(query, dict) and isinstance(query.get("timeout"), int):
        query["timeout"] = min(query["timeout"], LONG_POLL_CAP_MS)
    return query
