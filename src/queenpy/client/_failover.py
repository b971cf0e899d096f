"""The HTTP layer: one ``httpx.AsyncClient``, several broker URLs, failover and retries.

A request is tried on the URL that answered last; on a connection failure or a 5xx it moves on to the next
URL. When every URL failed, the round is retried with exponential backoff (``tenacity``) as set by
:class:`RetryPolicy`. 4xx answers are never retried. Wire rules (API.md §1.2, §22): 204 or an empty body is
``None``; a non-2xx answer raises the exception that matches its status, with the body's ``error`` text.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from queenpy.errors import (
    AuthenticationError,
    BrokerError,
    DatabaseUnavailable,
    InvalidRequest,
    LeaseError,
    NotFound,
    PermissionDenied,
    QueenError,
)

from ._settings import RetryPolicy, Timeout

__all__ = ["FailoverTransport", "error_for_status", "normalize_urls"]

logger = logging.getLogger("queenpy.client")

_STATUS_ERRORS: dict[int, type[QueenError]] = {
    cls.http_status: cls
    for cls in (
        InvalidRequest,
        AuthenticationError,
        PermissionDenied,
        NotFound,
        LeaseError,
        DatabaseUnavailable,
    )
}


def normalize_urls(urls: str | Sequence[str]) -> list[str]:
    """Check and normalise broker base URLs (``http(s)://host[:port]``, trailing ``/`` removed).

    Raises:
        ValueError: no URL, or one that is not an absolute http(s) URL.
    """
    items = [urls] if isinstance(urls, str) else list(urls)
    if not items:
        raise ValueError("at least one broker URL is required")
    result = []
    for url in items:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"not a broker URL (expected http://host:port): {url!r}")
        result.append(url.strip().rstrip("/"))
    return result


def error_for_status(status: int, body: Any, url: str) -> QueenError:
    """The exception for a non-2xx answer: 400 InvalidRequest, 401 AuthenticationError, 403 PermissionDenied,
    404 NotFound, 409 LeaseError, 503 DatabaseUnavailable, other 4xx InvalidRequest, other 5xx BrokerError."""
    message = None
    if isinstance(body, Mapping) and isinstance(body.get("error"), str):
        message = body["error"]
    elif isinstance(body, str) and body.strip():
        message = body.strip()[:500]
    cls = _STATUS_ERRORS.get(status) or (InvalidRequest if status < 500 else BrokerError)
    return cls(message or f"HTTP {status} from {url}", status=status, url=url)


class _RoundFailed(Exception):
    """Every URL failed in one round with a retryable error (internal)."""

    def __init__(self, error: QueenError) -> None:
        super().__init__(error.message)
        self.error = error


class FailoverTransport:
    """Sends JSON requests to the first broker URL that answers.

    Args:
        urls: broker base URLs, tried in order (see :func:`normalize_urls`).
        token: bearer token sent as ``Authorization: Bearer <token>``.
        timeout: :class:`Timeout` for ordinary requests.
        retry: :class:`RetryPolicy` for rounds over the URLs.
        headers: extra headers for every request.
        transport: an ``httpx`` transport (e.g. ``httpx.ASGITransport`` or ``httpx.MockTransport``) for tests.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        token: str | None = None,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.urls = normalize_urls(urls)
        self.timeout = timeout or Timeout()
        self.retry = retry or RetryPolicy()
        merged = {"Accept": "application/json", **(headers or {})}
        if token:
            merged["Authorization"] = f"Bearer {token}"
        self._client = httpx.AsyncClient(
            headers=merged,
            timeout=httpx.Timeout(self.timeout.request_s, connect=self.timeout.connect_s),
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
            transport=transport,
        )
        self._current = 0

    @property
    def current_url(self) -> str:
        """The URL the next request is sent to first (the last one that answered)."""
        return self.urls[self._current]

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        read_timeout_s: float | None = None,
        idempotent: bool = True,
    ) -> Any:
        """Send one request and return the decoded JSON body (``None`` for 204 or an empty body).

        Args:
            method: HTTP method.
            path: path starting with ``/`` (path parameters already quoted).
            params: query parameters.
            body: JSON body; ``None`` sends no body.
            read_timeout_s: read timeout for this request (long polls), default ``timeout.request_s``.
            idempotent: whether a request whose answer was lost (read timeout, dropped connection) may be
                sent again, to this or another URL. Connection failures are always retried.

        Raises:
            InvalidRequest, AuthenticationError, PermissionDenied, NotFound: 4xx answers (not retried).
            DatabaseUnavailable: 503, or no broker URL could be reached after all retries.
            BrokerError: another 5xx after all retries.
        """
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.retry.attempts),
            wait=wait_exponential(multiplier=self.retry.initial_delay_s, max=self.retry.max_delay_s),
            retry=retry_if_exception_type(_RoundFailed),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._round(method, path, params, body, read_timeout_s, idempotent)
        except _RoundFailed as failed:
            raise failed.error from failed.error.__cause__
        raise AssertionError("unreachable")  # pragma: no cover

    async def _round(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        body: Any,
        read_timeout_s: float | None,
        idempotent: bool,
    ) -> Any:
        timeout = None
        if read_timeout_s is not None:
            timeout = httpx.Timeout(read_timeout_s, connect=self.timeout.connect_s)
        last: QueenError | None = None
        count = len(self.urls)
        for step in range(count):
            index = (self._current + step) % count
            url = self.urls[index] + path
            try:
                response = await self._client.request(
                    method,
                    url,
                    params=params,
                    json=body,
                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                last = DatabaseUnavailable(
                    f"cannot reach broker {self.urls[index]}: {exc or type(exc).__name__}"
                )
                last.__cause__ = exc
                logger.info("broker %s unreachable: %s", self.urls[index], exc)
                continue
            except httpx.TransportError as exc:
                error = DatabaseUnavailable(
                    f"broker {self.urls[index]} did not answer {method} {path}: {exc or type(exc).__name__}"
                )
                error.__cause__ = exc
                if not idempotent:
                    raise error from exc
                last = error
                logger.info("broker %s failed: %s", self.urls[index], exc)
                continue
            decoded = _decode(response)
            if response.status_code >= 500:
                last = error_for_status(response.status_code, decoded, url)
                logger.info("broker %s answered HTTP %s", self.urls[index], response.status_code)
                continue
            if response.status_code >= 400:
                raise error_for_status(response.status_code, decoded, url)
            self._current = index
            return decoded
        assert last is not None
        raise _RoundFailed(last)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()


def _decode(response: httpx.Response) -> Any:
    if response.status_code == 204 or not response.content:
        return None
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return response.text
