"""Test fixtures on the process harness (:mod:`queenpy.harness`): a real PostgreSQL (pgserver's binaries,
started here with fsync off, stopped at the end), a template database migrated once per session, a fresh
``CREATE DATABASE ... TEMPLATE`` copy per test that asks for one, and ``queenpy serve`` subprocesses on free
ports.

Fixtures:
    pg_server     session: the PostgreSQL server (``.url(dbname)``)
    template_db   session: name of the migrated template database
    db_url        function: URL of a fresh database copied from the template
    new_database  function: factory making more fresh databases
    broker        session: a running ``queenpy serve`` (2 workers) on its own database; ``broker.url``
    metrics_broker  session: another one whose workers sample every 0.1 s and write metrics every 0.2 s
    start_broker  function: factory starting extra brokers (stopped after the test)
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from queenpy.harness import BrokerProcess, PrivatePostgres, free_port

from helpers import official_client

ROOT = Path(__file__).resolve().parent.parent

#: tests may run without durability (STYLE.md item 15); benchmarks and chaos start their own server
TEST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


class PgServer:
    """The test session's PostgreSQL server, on a Unix socket in a temporary directory."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="queenpy-test-pg-")) / "pgdata"
        self.server = PrivatePostgres(self.dir, settings=TEST_SETTINGS)

    def url(self, dbname: str) -> str:
        return self.server.database_url(dbname)

    def create_database(self, template: str | None = None) -> str:
        """A new database (a copy of ``template``, else empty); returns its name."""
        return self.server.create_database(f"t_{uuid.uuid4().hex[:16]}", template)

    def stop(self) -> None:
        self.server.stop()
        shutil.rmtree(self.dir.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    server = PgServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def template_db(pg_server: PgServer) -> str:
    from queenpy.server.process import migrate

    name = pg_server.create_database()
    migrate(pg_server.url(name))
    return name


@pytest.fixture
def new_database(pg_server: PgServer, template_db: str) -> Callable[[], str]:
    """Factory: URL of a fresh migrated database."""
    return lambda: pg_server.url(pg_server.create_database(template_db))


@pytest.fixture
def db_url(new_database: Callable[[], str]) -> str:
    return new_database()


def launch_broker(
    database_url: str, tmp_dir: Path, workers: int = 2, extra_env: dict[str, str] | None = None
) -> BrokerProcess:
    """A healthy ``queenpy serve`` on ``database_url`` with ``workers`` workers; its log and failover buffer
    are ``tmp_dir/broker-<port>.log`` and ``tmp_dir/buffers-<port>``."""
    port = free_port()
    broker = BrokerProcess(
        database_url,
        tmp_dir / f"broker-{port}.log",
        workers=workers,
        port=port,
        env={"FILE_BUFFER_DIR": str(tmp_dir / f"buffers-{port}"), **(extra_env or {})},
    )
    return broker.start(timeout_s=60)


@pytest.fixture(scope="session")
def broker(
    pg_server: PgServer, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    """One broker for the whole session (tests use unique queue names)."""
    url = pg_server.url(pg_server.create_database(template_db))
    process = launch_broker(url, tmp_path_factory.mktemp("broker"))
    yield process
    process.stop()


@pytest.fixture(scope="session")
def metrics_broker(
    pg_server: PgServer, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    """A broker for the operators' metrics tests: rows of queen.system_metrics etc. every 0.2 s."""
    url = pg_server.url(pg_server.create_database(template_db))
    process = launch_broker(
        url,
        tmp_path_factory.mktemp("metrics-broker"),
        extra_env={"METRICS_SAMPLE_INTERVAL_MS": "100", "METRICS_AGGREGATE_INTERVAL_S": "0.2"},
    )
    yield process
    process.stop()


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    started: list[BrokerProcess] = []

    def start(database_url: str, **kwargs: Any) -> BrokerProcess:
        process = launch_broker(database_url, tmp_path, **kwargs)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
async def q(broker: BrokerProcess) -> AsyncIterator[Any]:
    """The official ``queen-mq`` client on the session broker."""
    async with official_client(broker.url) as client:
        yield client
