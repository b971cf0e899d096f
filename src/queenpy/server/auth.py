"""JWT authentication and role levels (API.md section 13), with PyJWT.

Off unless ``JWT_ENABLED=true``. Tokens come as ``Authorization: Bearer <jwt>`` (prefix case-insensitive;
a header without the prefix is taken as the raw token). ``JWT_ALGORITHM``: ``HS256`` (``JWT_SECRET``),
``RS256`` (header algs RS256/RS384/RS512 accepted), ``EdDSA`` (Ed25519), or ``auto`` (by the token's header);
RS256/EdDSA keys from ``JWT_PUBLIC_KEY`` (PEM) or ``JWT_JWKS_URL`` (cached by ``kid``, refetched on an
unknown kid). ``exp``/``nbf``/``iat`` are checked with ``JWT_CLOCK_SKEW`` seconds of leeway; ``iss`` and
``aud`` when ``JWT_ISSUER``/``JWT_AUDIENCE`` are set. Levels: ADMIN needs the admin role; READ_WRITE admin
or read-write; READ_ONLY any of the three (role claim ``JWT_ROLES_CLAIM`` or array ``JWT_ROLES_ARRAY_CLAIM``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import jwt

from queenpy.errors import AuthenticationError, ConfigurationError, PermissionDenied
from queenpy.settings import JwtSettings

__all__ = ["Authenticator", "Level"]


class Level(enum.IntEnum):
    """Access level a route requires."""

    PUBLIC = 0
    READ_ONLY = 1
    READ_WRITE = 2
    ADMIN = 3


_RSA = ["RS256", "RS384", "RS512"]


class Authenticator:
    """Verifies tokens and checks levels.

    Raises:
        ConfigurationError: at construction, when the settings cannot verify anything (startup aborts).
    """

    def __init__(self, settings: JwtSettings) -> None:
        self.settings = settings
        self._jwks: jwt.PyJWKClient | None = None
        if not settings.enabled:
            return
        algorithm = settings.algorithm
        if algorithm not in ("HS256", "RS256", "EdDSA", "auto"):
            raise ConfigurationError(f"JWT_ALGORITHM must be HS256, RS256, EdDSA or auto, not {algorithm}")
        if algorithm in ("HS256", "auto") and not (
            settings.secret or settings.public_key or settings.jwks_url
        ):
            raise ConfigurationError("JWT_ENABLED needs JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_URL")
        if algorithm in ("RS256", "EdDSA") and not (settings.public_key or settings.jwks_url):
            raise ConfigurationError(f"JWT_ALGORITHM={algorithm} needs JWT_PUBLIC_KEY or JWT_JWKS_URL")
        if settings.jwks_url:
            self._jwks = jwt.PyJWKClient(
                settings.jwks_url, cache_keys=True, timeout=max(1, settings.jwks_timeout_ms // 1000)
            )

    def skipped(self, path: str) -> bool:
        """Exact match, or prefix match for entries ending in ``/`` longer than one character."""
        for entry in self.settings.skip_paths:
            if path == entry or (len(entry) > 1 and entry.endswith("/") and path.startswith(entry)):
                return True
        return False

    def authenticate(self, authorization: str | None, path: str, level: Level) -> dict[str, Any] | None:
        """The verified claims, or None when auth is off, the route is public or the path is skipped.

        Raises:
            AuthenticationError: missing or invalid token (401).
            PermissionDenied: the token's roles do not reach ``level`` (403).
        """
        if not self.settings.enabled or level is Level.PUBLIC or self.skipped(path):
            return None
        if not authorization:
            raise AuthenticationError("Authentication required")
        token = authorization.strip()
        if token[:7].lower() == "bearer ":
            token = token[7:].strip()
        claims = self._verify(token)
        if self._level_of(claims) < level:
            raise PermissionDenied("Insufficient permissions")
        return claims

    def _verify(self, token: str) -> dict[str, Any]:
        settings = self.settings
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise AuthenticationError(f"Token decode error: {exc}") from exc
        alg = header.get("alg", "")
        expected = settings.algorithm
        if expected == "auto":
            expected = (
                "HS256" if alg == "HS256" else "RS256" if alg in _RSA else "EdDSA" if alg == "EdDSA" else alg
            )
        if (
            expected == "HS256"
            and alg != "HS256"
            or expected == "RS256"
            and alg not in _RSA
            or expected == "EdDSA"
            and alg != "EdDSA"
        ):
            raise AuthenticationError(f"Token uses {alg}, expected {settings.algorithm}")
        key: Any
        if expected == "HS256":
            if not settings.secret:
                raise AuthenticationError("HS256 secret not configured")
            key, algorithms = settings.secret, ["HS256"]
        else:
            algorithms = _RSA if expected == "RS256" else ["EdDSA"]
            if self._jwks is not None:
                try:
                    key = self._jwks.get_signing_key_from_jwt(token).key
                except jwt.PyJWKClientError as exc:
                    raise AuthenticationError(str(exc)) from exc
            else:
                key = settings.public_key
        options = {"require": [], "verify_aud": settings.audience is not None}
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=algorithms,
                leeway=settings.clock_skew_s,
                issuer=settings.issuer,
                audience=settings.audience,
                options=options,  # type: ignore[arg-type]
            )
        except jwt.ExpiredSignatureError as exc:
            raise AuthenticationError("Token has expired") from exc
        except jwt.InvalidIssuerError as exc:
            raise AuthenticationError("Invalid token issuer") from exc
        except jwt.InvalidAudienceError as exc:
            raise AuthenticationError("Invalid token audience") from exc
        except jwt.InvalidSignatureError as exc:
            raise AuthenticationError("Invalid token signature") from exc
        except jwt.PyJWTError as exc:
            raise AuthenticationError(f"Token decode error: {exc}") from exc
        return claims

    def _level_of(self, claims: Mapping[str, Any]) -> Level:
        settings = self.settings
        roles: set[str] = set()
        single = claims.get(settings.roles_claim)
        if isinstance(single, str):
            roles.add(single)
        many = claims.get(settings.roles_array_claim)
        if isinstance(many, list):
            roles.update(r for r in many if isinstance(r, str))
        if settings.role_admin in roles:
            return Level.ADMIN
        if settings.role_read_write in roles:
            return Level.READ_WRITE
        if settings.role_read_only in roles:
            return Level.READ_ONLY
        return Level.PUBLIC
