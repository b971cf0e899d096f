"""Migrations applied by the broker itself: a ledger table with checksums, under an advisory lock.

Schema ``queen`` is created if missing. Each file of ``queenpy/sql/migrations`` is applied once, in name
order, and recorded in ``queen.schema_migrations`` with its SHA-256; a changed checksum of an applied
migration is an error (migrations are immutable once released). Procedure families
(``queenpy/sql/procedures``) are ``CREATE OR REPLACE`` and re-applied when their checksum differs from the
ledger. Everything runs under ``pg_advisory_lock(MIGRATION_LOCK_ID)``, so concurrent brokers starting at
once apply each step exactly once.
"""

from __future__ import annotations

import hashlib

import asyncpg

from queenpy import sql
from queenpy.errors import ConfigurationError

__all__ = ["MIGRATION_LOCK_ID", "apply_migrations", "render_sql"]

MIGRATION_LOCK_ID = 737_000

_LEDGER = """
CREATE SCHEMA IF NOT EXISTS queen;
CREATE TABLE IF NOT EXISTS queen.schema_migrations (
    name        text PRIMARY KEY,
    kind        text NOT NULL,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
"""


def _checksum(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def render_sql() -> str:
    """The whole SQL the broker would run on an empty database, for a DBA to review."""
    parts = ["-- queenpy schema and procedures", _LEDGER.strip()]
    for name, text in sql.migrations():
        parts.append(f"-- migration {name}\n{text.strip()}")
    for name, text in sql.procedures():
        parts.append(f"-- procedures {name}\n{text.strip()}")
    return "\n\n".join(parts) + "\n"


async def apply_migrations(connection: asyncpg.Connection) -> list[str]:
    """Bring the database to the current schema and procedures; return the names applied now.

    Raises:
        ConfigurationError: an applied migration's file changed since it was applied.
    """
    applied: list[str] = []
    await connection.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_ID)
    try:
        await connection.execute(_LEDGER)
        ledger = {
            row["name"]: row["checksum"]
            for row in await connection.fetch("SELECT name, checksum FROM queen.schema_migrations")
        }
        for kind, files in (("migration", sql.migrations()), ("procedures", sql.procedures())):
            for name, text in files:
                key = f"{kind}/{name}"
                checksum = _checksum(text)
                if ledger.get(key) == checksum:
                    continue
                if key in ledger and kind == "migration":
                    raise ConfigurationError(
                        f"migration {name} changed after it was applied (ledger {ledger[key][:12]}, "
                        f"file {checksum[:12]}); add a new migration instead"
                    )
                async with connection.transaction():
                    await connection.execute(text)
                    await connection.execute(
                        "INSERT INTO queen.schema_migrations (name, kind, checksum) VALUES ($1, $2, $3) "
                        "ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()",
                        key,
                        kind,
                        checksum,
                    )
                applied.append(key)
    finally:
        await connection.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_ID)
    return applied
