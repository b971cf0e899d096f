"""The one exception tree of queenpy, shared by the broker, the client and the Spark connector.

::

    QueenError                      root: everything queenpy raises on purpose
    ├── InvalidRequest              bad input; the broker answers 400 {"error": message}
    ├── AuthenticationError         401 (missing or bad token)
    ├── PermissionDenied            403 (role too low)
    ├── NotFound                    a queue, partition, message or lease that does not exist
    ├── LeaseError                  a lease is held by someone else, expired or unknown
    ├── TransactionFailed           a transaction rolled back; ``results`` holds the ops run before it
    ├── DatabaseUnavailable         PostgreSQL cannot be reached (503 on /health)
    ├── BrokerError                 the broker answered with an ``error`` the client cannot map further
    └── ConfigurationError          settings that cannot work (bad key length, bad JWT setup)

Stored procedures raise our own SQLSTATE codes (class ``QN``); :func:`from_sqlstate` maps them to classes
through a registry, never by matching message text.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AuthenticationError",
    "BrokerError",
    "ConfigurationError",
    "DatabaseUnavailable",
    "InvalidRequest",
    "LeaseError",
    "NotFound",
    "PermissionDenied",
    "QueenError",
    "TransactionFailed",
    "from_sqlstate",
]


class QueenError(Exception):
    """Something queenpy raised on purpose."""

    http_status: ClassVar[int] = 500
    sqlstate: ClassVar[str | None] = None
    _registry: ClassVar[dict[str, type[QueenError]]] = {}

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.message = message or (self.__doc__ or self.__class__.__name__).strip()
        self.details = details
        super().__init__(self.message)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.sqlstate:
            QueenError._registry[cls.sqlstate] = cls


class InvalidRequest(QueenError):
    """The request is malformed."""

    http_status = 400
    sqlstate = "QN400"


class AuthenticationError(QueenError):
    """Authentication required."""

    http_status = 401


class PermissionDenied(QueenError):
    """Insufficient permissions."""

    http_status = 403


class NotFound(QueenError):
    """Not found."""

    http_status = 404
    sqlstate = "QN404"


class LeaseError(QueenError):
    """Invalid or expired lease."""

    http_status = 409
    sqlstate = "QN409"


class TransactionFailed(QueenError):
    """The transaction was rolled back."""

    http_status = 200
    sqlstate = "QN422"

    def __init__(self, message: str | None = None, results: list[Any] | None = None, **details: Any) -> None:
        super().__init__(message, **details)
        self.results = results or []


class DatabaseUnavailable(QueenError):
    """PostgreSQL is unreachable."""

    http_status = 503


class BrokerError(QueenError):
    """The broker reported an error."""


class ConfigurationError(QueenError):
    """The configuration cannot work."""


def from_sqlstate(sqlstate: str | None, message: str) -> QueenError:
    """Map a PostgreSQL SQLSTATE raised by a queen procedure to its exception class.

    Unknown codes map to :class:`BrokerError`.
    """
    cls = QueenError._registry.get(sqlstate or "", BrokerError)
    return cls(message)
