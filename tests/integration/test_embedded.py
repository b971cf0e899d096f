"""The embedded PostgreSQL (``queenpy serve`` with no database configured) runs with queenpy's settings."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import psutil

from queenpy.store.embedded import EMBEDDED_SETTINGS, EmbeddedPostgres, shared_buffers_for

from helpers import wait_until


async def _settings(url: str) -> dict[str, tuple[str, str | None, bool]]:
    """name -> (setting, unit, pending_restart) for every name in EMBEDDED_SETTINGS."""
    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch(
            "SELECT name, setting, unit, pending_restart FROM pg_settings WHERE name = ANY($1::text[])",
            list(EMBEDDED_SETTINGS),
        )
        return {row["name"]: (row["setting"], row["unit"], row["pending_restart"]) for row in rows}
    finally:
        await connection.close()


def _applied(url: str, expected: dict[str, tuple[str, str | None, bool]]) -> None:
    """Wait for ``expected`` in a new session (the reload reaches the postmaster asynchronously)."""
    wait_until(
        lambda: asyncio.run(_settings(url)) == expected, timeout_s=10, message=f"{expected} in pg_settings"
    )


def test_embedded_server_runs_with_the_queue_settings_on_every_start(tmp_path: Path) -> None:
    data_dir = tmp_path / "pgdata"
    buffers_mb = int(shared_buffers_for(psutil.virtual_memory().total).removesuffix("MB"))
    expected = {
        "max_wal_size": ("4096", "MB", False),
        "wal_compression": ("pglz", None, False),
        "autovacuum_naptime": ("10", "s", False),
        # in 8 kB pages; taken at the restart the first start made (initdb's is 128 MB)
        "shared_buffers": (str(buffers_mb * 128), "8kB", False),
    }
    assert set(EMBEDDED_SETTINGS) == set(expected)
    server = EmbeddedPostgres(data_dir, cleanup_mode="stop")
    try:
        _applied(server.url, expected)
        server._server.psql("ALTER SYSTEM SET max_wal_size = '1GB'; ALTER SYSTEM SET work_mem = '16MB';")
    finally:
        server.stop()
    # a second start on the same data directory: queenpy's settings again, a user's other setting kept
    again = EmbeddedPostgres(data_dir, cleanup_mode="delete")
    try:
        _applied(again.url, expected)
        assert "work_mem = '16MB'" in (data_dir / "postgresql.auto.conf").read_text()
    finally:
        again.stop()


def test_shared_buffers_is_a_sixteenth_of_memory_between_128_mb_and_1_gb() -> None:
    gib = 1024**3
    assert shared_buffers_for(1 * gib) == "128MB"
    assert shared_buffers_for(4 * gib) == "256MB"
    assert shared_buffers_for(8 * gib + 123) == "512MB"
    assert shared_buffers_for(24 * gib) == "1024MB"
