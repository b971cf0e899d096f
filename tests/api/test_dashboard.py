"""The console's static files (issue 20): served at ``/`` and ``/ui/<file>`` without authentication, with
revalidation headers; nothing else changes (``/api/*``, ``/health``, ``/metrics`` answer as before, unknown
paths keep their JSON 404, a path out of the directory is refused)."""

from __future__ import annotations

import re
from importlib.resources import files
from typing import Any

import httpx
import pytest

ASSETS = files("queenpy.server") / "dashboard"


def test_the_console_page_is_served_at_the_root(broker: Any) -> None:
    response = httpx.get(broker.url + "/", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["cache-control"] == "no-cache" and response.headers["etag"]
    assert "<title>queenpy console</title>" in response.text
    # every script and stylesheet the page names is served, from the package
    referenced = re.findall(r'(?:src|href)="(/ui/[^"]+)"', response.text)
    assert len(referenced) >= 5, referenced
    for path in referenced:
        asset = httpx.get(broker.url + path, timeout=10)
        assert asset.status_code == 200, path
        assert asset.content == (ASSETS / path.removeprefix("/ui/")).read_bytes(), path
        expected = "text/css" if path.endswith(".css") else "javascript"
        assert expected in asset.headers["content-type"], (path, asset.headers["content-type"])


def test_a_revalidation_with_the_etag_answers_304(broker: Any) -> None:
    first = httpx.get(broker.url + "/ui/app.js", timeout=10)
    again = httpx.get(broker.url + "/ui/app.js", headers={"if-none-match": first.headers["etag"]}, timeout=10)
    assert (first.status_code, again.status_code, again.content) == (200, 304, b"")


@pytest.mark.parametrize(
    "path",
    [
        "/ui/nothing.js",
        "/ui/",
        "/ui/vendor",
        "/ui/../routes/dashboard.py",
        "/ui/%2e%2e/routes/dashboard.py",
        "/ui/..%2f..%2fsettings.py",
        "/console",
        "/index.html",
        "/api/v1/nope",
    ],
)
def test_other_paths_answer_the_json_404(broker: Any, path: str) -> None:
    response = httpx.get(broker.url + path, timeout=10)
    assert response.status_code == 404, (path, response.text[:200])
    assert response.headers["content-type"].startswith("application/json")
    assert "not found" in response.json()["error"].lower()


def test_the_api_answers_as_before(broker: Any) -> None:
    assert httpx.get(broker.url + "/health", timeout=10).json()["status"] == "healthy"
    assert "fusion" in httpx.get(broker.url + "/metrics", timeout=10).json()
    assert httpx.post(broker.url + "/", timeout=10).status_code == 405


def test_the_console_is_public_when_jwt_is_on(db_url: str, start_broker: Any) -> None:
    secured = start_broker(
        db_url, workers=1, extra_env={"JWT_ENABLED": "true", "JWT_SECRET": "s" * 32, "JWT_SKIP_PATHS": ""}
    )
    assert httpx.get(secured.url + "/", timeout=10).status_code == 200
    assert httpx.get(secured.url + "/ui/app.js", timeout=10).status_code == 200
    assert httpx.get(secured.url + "/api/v1/dlq", timeout=10).status_code == 401
