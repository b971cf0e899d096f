"""Requests that match no route get JSON errors a client can read: 404 for an unknown path, 405 for a known
path with the wrong method; OPTIONS on any path is the CORS preflight (API.md 1.1)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/api/v1/nope"), ("POST", "/nothing/here"), ("DELETE", "/api/v1/pop/queue")]
)
def test_an_unknown_route_answers_a_json_404(broker: Any, method: str, path: str) -> None:
    response = httpx.request(method, broker.url + path, timeout=10)
    assert response.status_code == 404, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert "not found" in response.json()["error"].lower()


def test_a_known_path_with_the_wrong_method_answers_a_json_405(broker: Any) -> None:
    response = httpx.get(broker.url + "/api/v1/push", timeout=10)
    assert response.status_code == 405, response.text
    assert response.json()["error"].startswith("Method Not Allowed")


def test_options_on_any_path_is_the_cors_preflight(broker: Any) -> None:
    response = httpx.options(broker.url + "/anything/at/all", timeout=10)
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == "*"
