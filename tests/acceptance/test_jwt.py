"""JWT authentication (API.md section 13): levels per route, error statuses, producerSub from `sub`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from conftest import BrokerProcess
from helpers import unique

SECRET = "test-secret-that-is-long-enough-for-hs256"


def token(
    role: str | None = None, sub: str = "alice", key: Any = SECRET, algorithm: str = "HS256", **claims: Any
) -> str:
    payload: dict[str, Any] = {"sub": sub, "exp": int(time.time()) + 600, **claims}
    if role:
        payload["role"] = role
    return jwt.encode(payload, key, algorithm=algorithm)


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


@pytest.fixture
def secured(db_url: str, start_broker: Callable[..., BrokerProcess]) -> BrokerProcess:
    return start_broker(db_url, workers=1, extra_env={"JWT_ENABLED": "true", "JWT_SECRET": SECRET})


def test_levels_statuses_and_producer_sub(secured: BrokerProcess) -> None:
    url = secured.url
    queue = unique("jwt")
    item = {"items": [{"queue": queue, "payload": 1, "producerSub": "forged"}]}
    assert httpx.get(f"{url}/health").status_code == 200  # public
    missing = httpx.post(f"{url}/api/v1/push", json=item)
    assert (missing.status_code, missing.json()) == (401, {"error": "Authentication required"})
    read_only = httpx.post(f"{url}/api/v1/push", json=item, headers=bearer(token("read-only")))
    assert (read_only.status_code, read_only.json()) == (403, {"error": "Insufficient permissions"})
    assert httpx.get(f"{url}/api/v1/dlq", headers=bearer(token("read-only"))).status_code == 200

    pushed = httpx.post(
        f"{url}/api/v1/push", json=item, headers=bearer(token("read-write", sub="svc-orders"))
    )
    assert pushed.json()[0]["status"] == "queued"
    popped = httpx.get(f"{url}/api/v1/pop/queue/{queue}", headers=bearer(token(roles=["read-write"]))).json()
    assert popped["messages"][0]["producerSub"] == "svc-orders"  # from the verified token, never the body

    delete = f"{url}/api/v1/resources/queues/{queue}"
    assert httpx.delete(delete, headers=bearer(token("read-write"))).status_code == 403
    assert httpx.delete(delete, headers=bearer(token("admin"))).json()["deleted"] is True


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: token("admin", exp=int(time.time()) - 3600), "Token has expired"),
        (lambda: token("admin", key="another-secret-that-is-long-enough-xx"), "Invalid token signature"),
        (lambda: "not-a-token", "Token decode error"),
    ],
)
def test_bad_tokens_are_401(secured: BrokerProcess, make: Callable[[], str], message: str) -> None:
    response = httpx.get(f"{secured.url}/api/v1/dlq", headers=bearer(make()))
    assert response.status_code == 401
    assert response.json()["error"].startswith(message)


def test_eddsa_with_a_public_key(db_url: str, start_broker: Callable[..., BrokerProcess]) -> None:
    private = Ed25519PrivateKey.generate()
    public_pem = (
        private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    broker = start_broker(
        db_url,
        workers=1,
        extra_env={"JWT_ENABLED": "true", "JWT_ALGORITHM": "EdDSA", "JWT_PUBLIC_KEY": public_pem},
    )
    good = token("read-only", key=private, algorithm="EdDSA")
    assert httpx.get(f"{broker.url}/api/v1/consumer-groups", headers=bearer(good)).status_code == 200
    hs = httpx.get(f"{broker.url}/api/v1/consumer-groups", headers=bearer(token("admin")))
    assert (hs.status_code, hs.json()["error"]) == (401, "Token uses HS256, expected EdDSA")


def test_an_unusable_jwt_configuration_aborts_startup(db_url: str) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "DATABASE_URL": db_url, "JWT_ENABLED": "true", "PORT": "0"}
    env.pop("JWT_SECRET", None)
    result = subprocess.run(
        [sys.executable, "-m", "queenpy", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "error: JWT_ENABLED needs JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_URL" in result.stderr
