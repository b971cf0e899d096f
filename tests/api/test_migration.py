"""``/api/v1/migration/*`` against a real ``queenpy serve``: the queen schema copied with pg_dump | pg_restore
into another database of the test PostgreSQL, validated table by table, refused when it would overwrite."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import psycopg
import pytest

from conftest import BrokerProcess, PgServer, launch_broker

DATA_TABLES = ("queues", "partitions", "messages", "partition_consumers", "dead_letter_queue")


@pytest.fixture(scope="module")
def source(
    pg_server: PgServer, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[BrokerProcess, str]]:
    url = pg_server.url(pg_server.create_database(template_db))
    broker = launch_broker(url, Path(tmp_path_factory.mktemp("migration")))
    yield broker, url
    broker.stop()


@pytest.fixture
def http(source: tuple[BrokerProcess, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=source[0].url, timeout=60) as client:
        yield client


def target_body(pg_server: PgServer, database: str, **extra: Any) -> dict[str, Any]:
    socket_dir = parse_qs(urlparse(pg_server.url(database)).query)["host"][0]
    return {"host": socket_dir, "port": "5432", "database": database, "user": "postgres", **extra}


def wait_until_done(http: httpx.Client) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while True:
        state = http.get("/api/v1/migration/status").json()
        if state["status"] != "running" or time.monotonic() > deadline:
            return state
        time.sleep(0.2)


def test_the_schema_is_copied_once_and_validated(
    http: httpx.Client, pg_server: PgServer, source: tuple[BrokerProcess, str]
) -> None:
    items = [{"queue": "mig-orders", "partition": f"p{i % 3}", "payload": {"n": i}} for i in range(30)]
    assert {r["status"] for r in http.post("/api/v1/push", json={"items": items}).json()} == {"queued"}
    popped = http.get("/api/v1/pop/queue/mig-orders", params={"batch": 5, "autoAck": "true"}).json()[
        "messages"
    ]
    assert len(popped) == 5
    target = pg_server.create_database()
    body = target_body(pg_server, target, excludeTableData=["retention_history"])

    probe = http.post("/api/v1/migration/test-connection", json=body).json()
    assert probe["success"] is True and probe["schemaExists"] is False and "PostgreSQL" in probe["version"]
    started = http.post("/api/v1/migration/start", json=body)
    assert started.status_code == 200 and started.json()["status"] == "running", started.text
    assert "password" not in started.json()["target"]
    state = wait_until_done(http)
    assert state["status"] == "completed" and state["error"] is None, state

    report = http.post("/api/v1/migration/validate", json=body).json()
    tables = {t["table"]: t for t in report["tables"]}
    for name in DATA_TABLES:  # the tables a broker does not write to on its own while idle
        assert tables[name]["match"] and tables[name]["target"] == tables[name]["source"], tables[name]
    assert tables["messages"]["source"] == 30
    assert tables["retention_history"]["dataExcluded"] is True
    with psycopg.connect(pg_server.url(target)) as conn:
        stored = conn.execute(
            "SELECT count(*) FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id "
            "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'mig-orders'"
        ).fetchone()
        assert stored == (30,)
        assert conn.execute("SELECT count(*) FROM pg_proc WHERE proname = 'push_items_v3'").fetchone() == (1,)

    # the target has the schema now: a second start is refused, the first copy is untouched
    again = http.post("/api/v1/migration/start", json=body)
    assert again.status_code == 409 and "already has a schema queen" in again.json()["error"]
    assert http.get("/api/v1/migration/status").json()["status"] == "completed"
    assert http.post("/api/v1/migration/reset").json() == {"success": True, "status": "idle"}
    assert http.get("/api/v1/migration/status").json() == {"status": "idle"}


def test_an_unreachable_target_is_an_answer_not_an_error(http: httpx.Client, pg_server: PgServer) -> None:
    body = target_body(pg_server, "no_such_database")
    probe = http.post("/api/v1/migration/test-connection", json=body)
    assert probe.status_code == 200 and probe.json()["success"] is False
    assert "no_such_database" in probe.json()["error"]
    refused = http.post("/api/v1/migration/start", json=body)
    assert refused.status_code == 409 and "cannot connect" in refused.json()["error"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"host": None}, "host"),
        ({"host": "\u0094"}, "host"),
        ({"host": "a b"}, "host"),
        ({"host": "x" * 64 + ".example"}, "host"),
        ({"port": "http"}, "port"),
        ({"port": 70000}, "port"),
        ({"database": ""}, "database"),
        ({"ssl": "yes"}, "ssl"),
        ({"schema": "queen; DROP"}, "schema"),
        ({"excludeTableData": ["a b"]}, "excludeTableData"),
        ({"password": 5}, "password"),
    ],
)
def test_bad_targets_are_400s_naming_the_field(
    http: httpx.Client, pg_server: PgServer, change: dict[str, Any], field: str
) -> None:
    body = {k: v for k, v in {**target_body(pg_server, "x"), **change}.items() if v is not None}
    for route in ("test-connection", "start", "validate"):
        response = http.post(f"/api/v1/migration/{route}", json=body)
        assert response.status_code == 400 and field in response.json()["error"], (route, response.text)
