"""The hot routes' short path (``server/dispatch.py``): the dict finds exactly what Starlette's router finds
for the hot routes, with the same path parameters, and a request served on it answers as through Starlette
(validation 400s naming the field, CORS, the 404/405 of everything else), with the headers Starlette's
``Response`` would give. The app is built without a database (``create_app`` opens nothing before its
lifespan), so only answers given before the engine are checked here; tests/api drives the same routes against
PostgreSQL."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.responses import Response
from starlette.routing import Match, Route

from queenpy.server.app import create_app
from queenpy.server.dispatch import BrokerApp, HotRoutes
from queenpy.server.routes import messages
from queenpy.server.routes._base import CORS_HEADERS, JsonResponse
from queenpy.settings import Settings

NO_CONNECTION = "postgresql://nobody@127.0.0.1:1/never-opened"

PATHS = [
    "/api/v1/push",
    "/api/v1/push/",
    "/api/v1/pushx",
    "/api/v1/pop",
    "/api/v1/pop/queue/orders",
    "/api/v1/pop/queue/orders/",
    "/api/v1/pop/queue//partition/p1",
    "/api/v1/pop/queue/orders/partition/p 1",
    "/api/v1/pop/queue/o%2Fr/partition/ü",
    "/api/v1/pop/queue/orders/partition/p1/extra",
    "/api/v1/pop/queue/orders/partitions/p1",
    "/api/v1/ack",
    "/api/v1/ack/batch",
    "/api/v1/ack/batch/",
    "/api/v1/transaction",
    "/api/v1/lease/abc/extend",
    "/api/v1/lease//extend",
    "/api/v1/lease/abc/renew",
    "/api/v1/queues",
    "/health",
    "/",
    "",
]


@pytest.fixture(scope="module")
def app() -> BrokerApp:
    built = create_app(Settings(), NO_CONNECTION)
    assert isinstance(built, BrokerApp)
    return built


def _scope(method: str, path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "root_path": "",
        "headers": [],
        "query_string": b"",
    }


def _starlette_match(app: BrokerApp, method: str, path: str) -> tuple[Route, dict[str, Any]] | None:
    """The hot route Starlette's router would run for ``method path`` (full match), with its parameters."""
    hot = {(e.method, e.path) for e in messages.ENDPOINTS}
    for route in app.routes:
        assert isinstance(route, Route)
        match, child = route.matches(_scope(method, path))
        if match is Match.FULL:
            return (route, child["path_params"]) if (method, route.path) in hot else None
    return None


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "HEAD"])
@pytest.mark.parametrize("path", PATHS)
def test_the_dict_finds_what_the_router_finds(app: BrokerApp, method: str, path: str) -> None:
    scope = _scope(method, path)
    found = app.hot.match(scope)
    expected = _starlette_match(app, method, path)
    if expected is None:
        assert found is None
    else:
        route, params = expected
        assert found is route.endpoint
        assert scope["path_params"] == params


def test_every_hot_endpoint_is_in_the_dict_and_nothing_else(app: BrokerApp) -> None:
    served = {(m, p) for (m, p) in app.hot.exact} | {
        (m, "/".join(t.segments)) for (m, _, _), templates in app.hot.shaped.items() for t in templates
    }
    assert served == {(e.method, e.path) for e in messages.ENDPOINTS}


def test_a_template_with_a_parameter_in_its_first_segments_is_refused() -> None:
    async def handler(_request: Any) -> Any:
        raise AssertionError("not called")

    with pytest.raises(ValueError, match="first segments must be literal"):
        HotRoutes().add("GET", "/api/{version}/pop", handler)


async def test_a_hot_route_answers_as_through_starlette(app: BrokerApp) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://broker") as client:
        response = await client.post("/api/v1/push", content=b"{not json")
        assert response.status_code == 400 and response.json()["error"].startswith("Invalid JSON")
        assert response.headers["access-control-allow-origin"] == "*"
        response = await client.post("/api/v1/push", json={"items": [{"queue": 7}]})
        assert response.status_code == 400 and response.json() == {"error": "Queue must be a string"}
        response = await client.get("/api/v1/pop/queue/orders", params={"batch": "many"})
        assert response.status_code == 400 and "batch" in response.json()["error"]
        response = await client.post("/api/v1/ack/batch", json={"acknowledgments": [{"transactionId": "t"}]})
        assert response.status_code == 400 and "partitionId" in response.json()["error"]
        response = await client.post("/api/v1/lease/%00/extend", json={})
        assert response.status_code == 400 and "leaseId" in response.json()["error"]
        # not hot, or not a route: Starlette's answers
        assert (await client.get("/api/v1/push")).status_code == 405
        assert (await client.post("/api/v1/pushx")).status_code == 404
        preflight = await client.options("/api/v1/push")
        assert preflight.status_code == 204 and "POST" in preflight.headers["access-control-allow-methods"]


async def test_an_error_a_hot_handler_does_not_map_is_a_500_and_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken(_request: Any) -> Any:
        raise RuntimeError("a bug")

    app = create_app(Settings(), NO_CONNECTION)
    assert isinstance(app, BrokerApp)
    monkeypatch.setitem(app.hot.exact, ("POST", "/api/v1/push"), broken)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://broker") as client:
        response = await client.post("/api/v1/push", json={"items": []})
    assert response.status_code == 500 and response.text == "Internal Server Error"
    with pytest.raises(RuntimeError, match="a bug"):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://b") as client:
            await client.post("/api/v1/push", json={"items": []})


@pytest.mark.parametrize("status", [200, 201, 204, 400, 503])
def test_the_json_response_has_the_headers_starlette_would_give(status: int) -> None:
    body = b'{"error":"x"}' if status != 204 else b""
    theirs = Response(body, status_code=status, media_type="application/json", headers=CORS_HEADERS)
    ours = JsonResponse(body, status)
    assert sorted(ours.raw_headers) == sorted(theirs.raw_headers)
    assert (ours.status_code, ours.body) == (theirs.status_code, theirs.body)
