"""Test harness: a real PostgreSQL (pgserver's binaries, started here, stopped at the end), a template
database migrated once per session, a fresh ``CREATE DATABASE ... TEMPLATE`` copy per test that asks for
one, and ``queenpy serve`` subprocesses on free ports.

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

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from helpers import free_port, official_client, wait_until

ROOT = Path(__file__).resolve().parent.parent


class PgServer:
    """A PostgreSQL server for the test session, on a Unix socket in a temporary directory."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="queenpy-test-pg-"))
        if not os.environ.get("XDG_RUNTIME_DIR"):
            os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="queenpy-runtime-")
        import pgserver

        self.dir = self.dir / "pgdata"
        self._server = pgserver.get_server(self.dir, cleanup_mode="delete")
        base = self._server.get_uri()  # postgresql://postgres:@/postgres?host=/tmp/...
        self._prefix, _, self._query = base.partition("/postgres?")
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            # tests may run without durability; benchmarks start their own server
            conn.execute("ALTER SYSTEM SET fsync = off")
            conn.execute("ALTER SYSTEM SET synchronous_commit = off")
            conn.execute("ALTER SYSTEM SET full_page_writes = off")
            conn.execute("SELECT pg_reload_conf()")

    def url(self, dbname: str) -> str:
        return f"{self._prefix}/{dbname}?{self._query}"

    def create_database(self, template: str | None = None) -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            if template:
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
            else:
                conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def stop(self) -> None:
        self._server.cleanup()
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


@dataclass
class BrokerProcess:
    url: str
    database_url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def kill(self) -> None:
        """SIGKILL the whole process group (supervisor and workers)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def launch_broker(database_url: str, tmp_dir: Path, workers: int = 2,
                  extra_env: dict[str, str] | None = None) -> BrokerProcess:
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "PORT": str(port), "HOST": "127.0.0.1",
           "NUM_WORKERS": str(workers), "FILE_BUFFER_DIR": str(tmp_dir / f"buffers-{port}"), **(extra_env or {})}
    log_path = tmp_dir / f"broker-{port}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "queenpy", "serve"], env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    broker = BrokerProcess(f"http://127.0.0.1:{port}", database_url, process, log_path, env)

    def healthy() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"broker exited with {process.returncode}:\n{broker.log()}")
        try:
            return httpx.get(broker.url + "/health", timeout=1).json().get("status") == "healthy"
        except httpx.HTTPError:
            return False

    wait_until(healthy, timeout_s=60, message="broker /health")
    return broker


@pytest.fixture(scope="session")
def broker(pg_server: PgServer, template_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the whole session (tests use unique queue names)."""
    url = pg_server.url(pg_server.create_database(template_db))
    process = launch_broker(url, tmp_path_factory.mktemp("broker"))
    yield process
    process.stop()


@pytest.fixture(scope="session")
def metrics_broker(pg_server: PgServer, template_db: str,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker for the operators' metrics tests: rows of queen.system_metrics etc. every 0.2 s."""
    url = pg_server.url(pg_server.create_database(template_db))
    process = launch_broker(url, tmp_path_factory.mktemp("metrics-broker"), extra_env={
        "METRICS_SAMPLE_INTERVAL_MS": "100", "METRICS_AGGREGATE_INTERVAL_S": "0.2"})
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
