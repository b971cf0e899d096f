"""``GET /openapi.json`` describes exactly the routes the broker serves.

The route table is read from the app itself (``create_app(Settings(), url)`` opens no connection until its
lifespan starts), so a route added without documenting it, or documented but not served, fails here. The
``OPTIONS /{path}`` catch-all (CORS preflight, API.md 1.1) and the ``HEAD`` Starlette adds to every ``GET``
are not API operations and are left out.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount, Route

from queenpy.server.app import create_app
from queenpy.settings import Settings

from helpers import unique

HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
NO_CONNECTION = "postgresql://nobody@127.0.0.1:1/never-opened"


@pytest.fixture(scope="module")
def app() -> Starlette:
    return create_app(Settings(), NO_CONNECTION)


@pytest.fixture(scope="module")
def document(broker: Any) -> dict[str, Any]:
    response = httpx.get(f"{broker.url}/openapi.json", timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    return dict(response.json())


def openapi_path(starlette_path: str) -> str:
    """``/x/{name:conv}`` -> ``/x/{name}`` (OpenAPI path templates carry no converters)."""
    return re.sub(r"\{(\w+)(?::\w+)?\}", r"{\1}", starlette_path)


def served(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """``(method, path)`` of every route of the app (lower-case methods), without HEAD and the OPTIONS
    catch-all."""
    for route in routes:
        if isinstance(route, Mount):
            yield from served(list(route.routes), prefix + route.path)
            continue
        assert isinstance(route, Route), f"unexpected route type {type(route).__name__} at {route!r}"
        path = openapi_path(prefix + route.path)
        for method in route.methods or ():
            if method == "HEAD" or (method == "OPTIONS" and path == "/{path}"):
                continue
            yield method.lower(), path


def documented(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method, path)
        for path, item in document["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


def test_the_document_is_openapi_3(document: dict[str, Any]) -> None:
    assert re.fullmatch(r"3\.\d+\.\d+", document["openapi"]), document["openapi"]
    assert isinstance(document["info"]["title"], str) and document["info"]["title"]
    assert isinstance(document["info"]["version"], str) and document["info"]["version"]
    assert isinstance(document["paths"], dict) and document["paths"]
    for path, item in document["paths"].items():
        assert path.startswith("/"), path
        assert set(item) <= HTTP_METHODS | {"summary", "description", "parameters", "servers"}, (
            path,
            set(item),
        )


def test_documented_operations_equal_the_served_routes(app: Starlette, document: dict[str, Any]) -> None:
    routes = set(served(list(app.routes)))
    operations = documented(document)
    assert sorted(routes - operations) == [], "served but not documented"
    assert sorted(operations - routes) == [], "documented but not served"
    assert len(list(served(list(app.routes)))) == len(routes), "a route is registered twice"


async def test_the_app_serves_the_same_document_as_the_broker(
    app: Starlette, document: dict[str, Any]
) -> None:
    """In process, without lifespan (no database): the document does not depend on the running broker."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as client:
        response = await client.get("/openapi.json")
    assert response.status_code == 200 and response.json() == document


def test_every_operation_is_described_with_its_path_parameters(document: dict[str, Any]) -> None:
    for path, item in document["paths"].items():
        in_template = set(re.findall(r"\{(\w+)\}", path))
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            where = f"{method.upper()} {path}"
            assert isinstance(operation.get("summary"), str) and operation["summary"], where
            responses = operation.get("responses")
            assert isinstance(responses, dict) and responses, where
            assert all(re.fullmatch(r"[1-5]\d\d|[1-5]XX|default", code) for code in responses), (
                where,
                responses,
            )
            assert all(isinstance(r.get("description"), str) for r in responses.values()), where
            parameters = [*item.get("parameters", []), *operation.get("parameters", [])]
            for parameter in parameters:
                assert parameter["in"] in {"path", "query", "header", "cookie"}, (where, parameter)
                assert isinstance(parameter["name"], str) and (
                    "schema" in parameter or "content" in parameter
                )
            keys = [(p["in"], p["name"]) for p in parameters]
            assert len(keys) == len(set(keys)), f"{where}: a parameter is listed twice"
            path_parameters = {p["name"]: p for p in parameters if p["in"] == "path"}
            assert set(path_parameters) == in_template, (where, sorted(path_parameters), sorted(in_template))
            assert all(p.get("required") is True for p in path_parameters.values()), where  # OpenAPI 3 rule
            if "requestBody" in operation:
                assert method not in {"get", "head", "delete"}, f"{where} documents a body it never reads"
                assert "application/json" in operation["requestBody"]["content"], where


def nowhere(parameter: re.Match[str]) -> str:
    """A path parameter value naming nothing stored: a fresh UUID for ``*_id``, else a fresh name."""
    return str(uuid.uuid4()) if parameter[1].endswith("_id") else unique("nowhere")


def test_a_body_is_marked_required_exactly_where_the_broker_rejects_an_empty_one(
    broker: Any, document: dict[str, Any]
) -> None:
    """Asked of the broker itself: each POST is sent an empty body (path parameters filled with names that
    exist nowhere, so nothing changes). Lease extend and DLQ replay take an empty body as ``{}`` (API.md 7,
    'does better' point 5); their document must not mark the body required, the others must."""
    checked = []
    with httpx.Client(base_url=broker.url, timeout=30) as client:
        for path, item in document["paths"].items():
            operation = item.get("post")
            if operation is None:
                continue
            concrete = re.sub(r"\{(\w+)\}", nowhere, path)
            response = client.post(concrete, content=b"")
            rejected = response.status_code == 400 and response.json().get("error") == "Empty request body"
            documented_required = operation.get("requestBody", {}).get("required", False)
            checked.append((path, rejected, documented_required))
    assert [c for c in checked if c[1] != c[2]] == [], "(path, empty body rejected, body documented required)"
    assert any(rejected for _, rejected, _ in checked) and not all(rejected for _, rejected, _ in checked)
