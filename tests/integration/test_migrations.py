"""Migrations: applied by the broker under an advisory lock, recorded with checksums, idempotent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncpg
import psycopg
import pytest

from queenpy import sql
from queenpy.errors import ConfigurationError
from queenpy.store.migrate import apply_migrations, render_sql


def test_ledger_records_every_file_and_a_second_run_applies_nothing(db_url: str) -> None:
    async def run() -> list[str]:
        connection = await asyncpg.connect(db_url)
        try:
            return await apply_migrations(connection)
        finally:
            await connection.close()

    assert asyncio.run(run()) == []  # the template is already migrated
    with psycopg.connect(db_url) as conn:
        names = {row[0] for row in conn.execute("SELECT name FROM queen.schema_migrations")}
    expected = {f"migration/{n}" for n, _ in sql.migrations()} | {
        f"procedures/{n}" for n, _ in sql.procedures()
    }
    assert names == expected


def test_concurrent_first_runs_apply_each_step_once(
    pg_server: object, new_database: Callable[[], str]
) -> None:
    url = pg_server.url(pg_server.create_database())  # type: ignore[attr-defined]

    async def run() -> list[list[str]]:
        connections = [await asyncpg.connect(url) for _ in range(3)]
        try:
            return list(await asyncio.gather(*(apply_migrations(c) for c in connections)))
        finally:
            for c in connections:
                await c.close()

    results = asyncio.run(run())
    applied = [name for result in results for name in result]
    assert sorted(applied) == sorted(set(applied))
    assert len(applied) == len(sql.migrations()) + len(sql.procedures())


def test_a_changed_migration_is_refused(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE queen.schema_migrations SET checksum = 'edited' WHERE kind = 'migration'")

    async def run() -> None:
        connection = await asyncpg.connect(db_url)
        try:
            await apply_migrations(connection)
        finally:
            await connection.close()

    with pytest.raises(ConfigurationError, match="changed after it was applied"):
        asyncio.run(run())


def test_db_sql_prints_everything_the_broker_applies() -> None:
    text = render_sql()
    for name, body in sql.migrations() + sql.procedures():
        assert body.strip() in text, name
    assert "queen.push_messages_v3" in text
