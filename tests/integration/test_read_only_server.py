"""A server that goes read-only under the broker (a primary demoted to a standby, issue 43): the write fails
with an error the broker treats as "PostgreSQL unavailable" (pushes buffered, pops and acks a 503), and every
pooled connection is replaced, so that the next ones go to whichever host accepts writes."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import orjson
import pytest

from queenpy.harness import PrivatePostgres
from queenpy.server.process import migrate
from queenpy.store.database import Database, Unavailable


@pytest.fixture
def own_server() -> Iterator[PrivatePostgres]:
    """A server of this test alone (it is made read-only for everyone, ``ALTER SYSTEM``) with a migrated
    database ``queen``."""
    base = Path(tempfile.mkdtemp(prefix="queenpy-test-readonly-"))
    server = PrivatePostgres(base / "pg", settings={"fsync": "off"})
    try:
        migrate(server.database_url(server.create_database("queen")))
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


async def test_a_read_only_server_expires_the_pool(own_server: PrivatePostgres) -> None:
    database = Database(own_server.database_url("queen"), pool_size=2)
    await database.open()
    configure = orjson.dumps({"queue": "q", "options": {}}).decode()
    try:
        await database.call("configure_queue_v1", configure)
        before = await database.fetchval("SELECT pg_backend_pid()")
        own_server.psql("ALTER SYSTEM SET default_transaction_read_only = on")
        own_server.psql("SELECT pg_reload_conf()")
        with pytest.raises(asyncpg.exceptions.ReadOnlySQLTransactionError) as raised:
            for _ in range(50):  # the reload reaches the pooled session between two statements
                await database.call("configure_queue_v1", configure)
        assert isinstance(raised.value, Unavailable)
        own_server.psql("ALTER SYSTEM RESET default_transaction_read_only")
        own_server.psql("SELECT pg_reload_conf()")
        after = await database.fetchval("SELECT pg_backend_pid()")
        assert after != before  # the pooled connection was replaced, not reused
        await database.call("configure_queue_v1", configure)
    finally:
        await database.close()
