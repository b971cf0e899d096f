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


def _migrate(url: str) -> list[str]:
    """:func:`apply_migrations` on one connection to ``url``: the names applied."""

    async def run() -> list[str]:
        connection = await asyncpg.connect(url)
        try:
            return await apply_migrations(connection)
        finally:
            await connection.close()

    return asyncio.run(run())


def test_ledger_records_every_file_and_a_second_run_applies_nothing(db_url: str) -> None:
    assert _migrate(db_url) == []  # the template is already migrated
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

    with pytest.raises(ConfigurationError, match="changed after it was applied"):
        _migrate(db_url)


def test_db_sql_prints_everything_the_broker_applies() -> None:
    text = render_sql()
    for name, body in sql.migrations() + sql.procedures():
        assert body.strip() in text, name
    assert "queen.push_messages_v3" in text


def test_an_upgrade_across_029_takes_has_lag_from_the_offset_lag_a_row_kept(
    pg_server: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database at migration 028, its consumer_stats rows written by the stats job of then (offset_lag),
    upgraded by the broker: 029 is applied with the procedures, and a row's has_lag is whether its offset
    lag was above zero (the sums those rows fed are exact again after the next reconcile pass; the stats
    tests check that pass)."""
    url = pg_server.url(pg_server.create_database())  # type: ignore[attr-defined]
    # the broker of then: the migrations before 029 (its procedures, at their versions of then, are not in
    # the tree; the rows below stand for what its stats job wrote)
    with monkeypatch.context() as then:
        before = [(name, text) for name, text in sql.migrations() if name < "029"]
        then.setattr(sql, "migrations", lambda: before)
        then.setattr(sql, "procedures", list)
        assert _migrate(url) == [f"migration/{name}" for name, _ in before]
    with psycopg.connect(url, autocommit=True) as conn:
        queue = conn.execute("INSERT INTO queen.queues (name) VALUES ('up') RETURNING id").fetchall()[0][0]
        partitions = {
            name: conn.execute(
                "INSERT INTO queen.partitions (queue_id, name) VALUES (%s, %s) RETURNING id", (queue, name)
            ).fetchall()[0][0]
            for name in ("p1", "p2")
        }
        kept = {("p1", "g1"): 0, ("p1", "g2"): 5, ("p2", "g1"): 3}
        for (partition, group), lag in kept.items():
            conn.execute(
                "INSERT INTO queen.consumer_stats (partition_id, consumer_group, queue_id, offset_lag) "
                "VALUES (%s, %s, %s, %s)",
                (partitions[partition], group, queue, lag),
            )

    applied = _migrate(url)
    assert [name for name in applied if name.startswith("migration/")] == [
        f"migration/{name}" for name, _ in sql.migrations() if name >= "029"
    ]
    assert len([name for name in applied if name.startswith("procedures/")]) == len(sql.procedures())
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT p.name, s.consumer_group, s.has_lag FROM queen.consumer_stats s "
            "JOIN queen.partitions p ON p.id = s.partition_id"
        ).fetchall()
        columns = {
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = 'queen' AND table_name = 'consumer_stats'"
            )
        }
    assert {(p, g): has for p, g, has in rows} == {key: lag > 0 for key, lag in kept.items()}
    assert "offset_lag" not in columns


def test_messages_autovacuum_is_throttled_and_starts_at_five_percent(db_url: str) -> None:
    """Migration 030 over 016: the vacuum of queen.messages sleeps 2 ms after every 1,000 cost units (016 had
    it unthrottled), and still starts at 5% dead rows; no other table carries these settings."""
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT c.relname, c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'queen' AND c.relkind = 'r' "
            "AND c.reloptions::text LIKE '%autovacuum_vacuum_cost%'"
        ).fetchall()
    assert [name for name, _ in rows] == ["messages"]
    assert set(rows[0][1]) >= {
        "autovacuum_vacuum_cost_delay=2",
        "autovacuum_vacuum_cost_limit=1000",
        "autovacuum_vacuum_scale_factor=0.05",
    }
