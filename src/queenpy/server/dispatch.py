"""The hot routes' short path: matched by a dict and served without Starlette's middleware stack.

A push through Starlette passed ``ServerErrorMiddleware``, ``ExceptionMiddleware`` and the ``Router``, which
tries every route's regular expression in order until one matches; that was about a tenth of a worker's
samples under push load, nearly as much as the handler itself (benchmarks/profiles/README.md). The hot routes
(push, pop, ack, batch ack, transaction, lease extension: ``routes/messages.py``) need none of it: their
wrapper (``app.guarded``) already authenticates and maps every error to its answer, they use no Starlette
exception handler, and CORS is in their responses. :class:`BrokerApp` looks a request up in :class:`HotRoutes`
first and runs the matched handler directly; anything else (a miss, another method, a path Starlette would
redirect) goes through Starlette as before, so 404, 405, the CORS preflight and every other route are
unchanged. The routes stay registered in Starlette too, so the route table (``/openapi.json``'s test) is
whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from queenpy.server.routes._base import Handler

__all__ = ["BrokerApp", "HotRoutes"]


@dataclass(frozen=True)
class _Template:
    """A path template split at ``/``: literal segments, and the names of the ``{parameter}`` ones."""

    segments: tuple[str, ...]
    names: tuple[str | None, ...]  # the parameter's name where a segment is one, else None
    handler: Handler

    @classmethod
    def of(cls, path: str, handler: Handler) -> _Template:
        segments = tuple(path.split("/"))
        names = tuple(s[1:-1] if s.startswith("{") and s.endswith("}") else None for s in segments)
        return cls(segments, names, handler)

    def match(self, parts: list[str]) -> dict[str, str] | None:
        """The path parameters when ``parts`` fits (a parameter is one non-empty segment, as Starlette's
        ``{name}``), else None."""
        params: dict[str, str] = {}
        for part, literal, name in zip(parts, self.segments, self.names, strict=True):
            if name is None:
                if part != literal:
                    return None
            elif not part:
                return None
            else:
                params[name] = part
        return params


class HotRoutes:
    """Routes found by dictionary lookups, not a scan: a template without parameters by ``(method, path)``;
    one with parameters by ``(method, number of segments, first segment after /api/v1)``, then checked
    segment by segment (one template per key among the hot routes)."""

    def __init__(self) -> None:
        self.exact: dict[tuple[str, str], Handler] = {}
        self.shaped: dict[tuple[str, int, str], list[_Template]] = {}

    def add(self, method: str, path: str, handler: Handler) -> None:
        if "{" not in path:
            self.exact[(method, path)] = handler
            return
        template = _Template.of(path, handler)
        if any(name is not None for name in template.names[:4]):
            raise ValueError(f"a hot route's first segments must be literal: {path}")
        self.shaped.setdefault((method, len(template.segments), template.segments[3]), []).append(template)

    def match(self, scope: Scope) -> Handler | None:
        """The handler for ``scope``'s method and path, with ``scope["path_params"]`` set; None on a miss."""
        method, path = scope["method"], scope["path"]
        handler = self.exact.get((method, path))
        if handler is not None:
            scope["path_params"] = {}
            return handler
        parts = path.split("/")
        if len(parts) < 4:
            return None
        for template in self.shaped.get((method, len(parts), parts[3]), ()):
            params = template.match(parts)
            if params is not None:
                scope["path_params"] = params
                return template.handler
        return None


class BrokerApp(Starlette):
    """Starlette with :class:`HotRoutes` in front (see the module docstring). An exception that escapes a hot
    handler is answered as Starlette's ``ServerErrorMiddleware`` answers it (a plain ``500``) and raised
    again for the server's log."""

    hot: HotRoutes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("root_path", "") == "":
            handler = self.hot.match(scope)
            if handler is not None:
                scope["app"] = self
                request = Request(scope, receive, send)
                try:
                    response = await handler(request)
                except Exception:
                    await PlainTextResponse("Internal Server Error", status_code=500)(scope, receive, send)
                    raise
                await response(scope, receive, send)
                return
        await super().__call__(scope, receive, send)
