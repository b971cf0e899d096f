"""`queenpy serve` as a user runs it: worker processes sharing one port, long-poll wake-ups across
processes and broker instances (PostgreSQL LISTEN/NOTIFY), worker restarts, the embedded PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from conftest import BrokerProcess
from helpers import unique, wait_until

SLOW_TIMER = {"POP_WAIT_INITIAL_INTERVAL_MS": "600000", "POP_WAIT_MAX_INTERVAL_MS": "600000"}
NO_GRACE = {"POP_WAIT_LISTEN_GRACE_MS": "0"}  # a push notifies only queues another process announced


def metrics(broker: BrokerProcess) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{broker.url}/metrics").json()
    return body


@pytest.mark.parametrize("b_starts", ["before the pop parks", "after the pop parks"])
def test_long_poll_is_woken_by_a_push_on_another_broker_instance(
    new_database: Callable[[], str], start_broker: Callable[..., BrokerProcess], b_starts: str
) -> None:
    """Two brokers on one database. A consumer parks on A; the push goes to B. The long-poll timer is
    set to 10 minutes, so only the NOTIFY from B's push can deliver the message before the 30 s timeout.
    B notifies a queue's pushes only once it has heard that another process has pops parked on it: A
    announces its parked pop, and a B that starts later asks A to announce it again."""
    database = new_database()
    a = start_broker(database, workers=1, extra_env=SLOW_TIMER)
    b = (
        start_broker(database, workers=1, extra_env={**SLOW_TIMER, **NO_GRACE})
        if b_starts.startswith("before")
        else None
    )
    queue = unique("wake")
    httpx.post(f"{a.url}/api/v1/configure", json={"queue": queue}).raise_for_status()
    result: dict[str, Any] = {}

    def consume() -> None:
        response = httpx.get(
            f"{a.url}/api/v1/pop/queue/{queue}",
            params={"wait": "true", "timeout": 30000, "batch": 5},
            timeout=40,
        )
        result["body"] = response.json()

    consumer = threading.Thread(target=consume)
    consumer.start()
    # wait until A has the pop parked (its metrics count parked long polls)
    wait_until(lambda: metrics(a)["longPoll"]["parked"] == 1, message="parked pop")
    if b is None:
        b = start_broker(database, workers=1, extra_env={**SLOW_TIMER, **NO_GRACE})
    wait_until(
        lambda: metrics(b)["longPoll"]["remoteWaitingQueues"] == 1, message="B hears of A's parked pop"
    )
    pushed = httpx.post(f"{b.url}/api/v1/push", json={"items": [{"queue": queue, "payload": {"hello": "A"}}]})
    assert pushed.json()[0]["status"] == "queued"
    consumer.join(timeout=40)
    assert [m["data"] for m in result["body"]["messages"]] == [{"hello": "A"}]
    assert metrics(b)["longPoll"]["notificationsSent"] == 1


def test_a_push_is_notified_only_when_another_process_has_pops_parked_on_its_queue(
    db_url: str, start_broker: Callable[..., BrokerProcess]
) -> None:
    """A PostgreSQL session listening on the broker's channel sees no NOTIFY for a push while nobody
    waits; once a process announces a parked pop on the queue (the payload a broker sends), the next
    push is notified."""
    broker = start_broker(db_url, workers=1, extra_env=NO_GRACE)
    queue = unique("quiet")
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN queen_message_available")

        def push(n: int) -> None:
            pushed = httpx.post(
                f"{broker.url}/api/v1/push",
                json={"items": [{"queue": queue, "partition": "p1", "payload": {"n": n}}]},
            )
            assert pushed.json()[0]["status"] == "queued"

        push(1)
        assert [n.payload for n in listener.notifies(timeout=0.5)] == []
        assert metrics(broker)["longPoll"]["notificationsSkipped"] == 1

        listener.execute("SELECT pg_notify('queen_long_poll_waiting', %s)", [json.dumps({"queues": [queue]})])
        wait_until(
            lambda: metrics(broker)["longPoll"]["remoteWaitingQueues"] == 1, message="the announcement"
        )
        push(2)
        assert [n.payload for n in listener.notifies(timeout=5, stop_after=1)] == [f"{queue}/p1"]
        assert metrics(broker)["longPoll"]["notificationsSent"] == 1


def test_a_parked_pop_stays_announced_while_it_waits_and_is_forgotten_after_it_leaves(
    new_database: Callable[[], str], start_broker: Callable[..., BrokerProcess]
) -> None:
    """Announcements every 300 ms; another process forgets one after 3 intervals plus a retry interval
    (1.1 s here). A pop parked for 4 s stays known to the other broker past that, and is forgotten once
    it has returned."""
    database = new_database()
    fast = {"POP_WAIT_ANNOUNCE_INTERVAL_MS": "300", "POP_WAIT_MAX_INTERVAL_MS": "200", **NO_GRACE}
    a = start_broker(database, workers=1, extra_env=fast)
    b = start_broker(database, workers=1, extra_env=fast)
    queue = unique("renew")
    httpx.post(f"{a.url}/api/v1/configure", json={"queue": queue}).raise_for_status()
    consumer = threading.Thread(
        target=lambda: httpx.get(
            f"{a.url}/api/v1/pop/queue/{queue}", params={"wait": "true", "timeout": 4000}, timeout=20
        )
    )
    consumer.start()
    wait_until(
        lambda: metrics(b)["longPoll"]["remoteWaitingQueues"] == 1, message="B hears of A's parked pop"
    )
    parked_at = time.monotonic()
    while time.monotonic() - parked_at < 2.5:  # more than twice the 1.1 s an announcement lasts
        assert metrics(b)["longPoll"]["remoteWaitingQueues"] == 1
        time.sleep(0.1)
    consumer.join(timeout=20)
    wait_until(
        lambda: metrics(b)["longPoll"]["remoteWaitingQueues"] == 0, timeout_s=5, message="B forgets it"
    )


def test_a_push_wakes_one_parked_wildcard_pop_per_partition(
    db_url: str, start_broker: Callable[..., BrokerProcess]
) -> None:
    """Ten pops of one group park on a queue (long-poll timer 10 minutes, so only wake-ups make them
    retry). A push to one partition makes the broker pop once, not ten times; a push to the other nine
    partitions delivers one partition to each of the nine still parked. The broker's own counter of pop
    requests sent to PostgreSQL (/metrics) tells how many pops ran."""
    broker = start_broker(
        db_url,
        workers=1,
        extra_env={"POP_WAIT_INITIAL_INTERVAL_MS": "600000", "POP_WAIT_MAX_INTERVAL_MS": "600000"},
    )
    queue = unique("herd")
    httpx.post(f"{broker.url}/api/v1/configure", json={"queue": queue}).raise_for_status()
    delivered: list[list[str]] = []

    def consume() -> None:
        response = httpx.get(
            f"{broker.url}/api/v1/pop/queue/{queue}",
            params={"wait": "true", "timeout": 30000, "batch": 10, "autoAck": "true"},
            timeout=40,
        )
        delivered.append([m["partition"] for m in response.json()["messages"]])

    def metrics() -> dict[str, Any]:
        return httpx.get(f"{broker.url}/metrics").json()

    consumers = [threading.Thread(target=consume) for _ in range(10)]
    for consumer in consumers:
        consumer.start()
    wait_until(lambda: metrics()["longPoll"]["parked"] == 10, message="ten parked pops")
    pops_before = metrics()["fusion"]["pop"]["items"]
    pushed = httpx.post(
        f"{broker.url}/api/v1/push",
        json={"items": [{"queue": queue, "partition": "p0", "payload": {"n": 0}}]},
    )
    assert pushed.json()[0]["status"] == "queued"
    wait_until(lambda: len(delivered) == 1, message="the first message delivered")
    wait_until(lambda: metrics()["longPoll"]["parked"] == 9, message="nine pops parked again")
    assert metrics()["fusion"]["pop"]["items"] - pops_before == 1

    pushed = httpx.post(
        f"{broker.url}/api/v1/push",
        json={"items": [{"queue": queue, "partition": f"p{n}", "payload": {"n": n}} for n in range(1, 10)]},
    )
    assert [r["status"] for r in pushed.json()] == ["queued"] * 9
    for consumer in consumers:
        consumer.join(timeout=20)
    assert sorted(p for partitions in delivered for p in partitions) == [f"p{n}" for n in range(10)]
    assert [len(partitions) for partitions in delivered] == [1] * 10
    assert metrics()["fusion"]["pop"]["items"] - pops_before <= 10 + 2  # a pop that loses a race retries


def test_worker_processes_share_the_port_and_a_killed_worker_is_replaced(
    db_url: str, start_broker: Callable[..., BrokerProcess]
) -> None:
    broker = start_broker(db_url, workers=2)
    pids: set[int] = set()

    def both_workers_answered() -> bool:
        with httpx.Client(headers={"Connection": "close"}) as client:
            pids.add(client.get(f"{broker.url}/health").json()["pid"])
        return len(pids) >= 2

    wait_until(both_workers_answered, timeout_s=60, message="answers from two worker processes")
    victim = min(pids)
    os.kill(victim, signal.SIGKILL)
    fresh: set[int] = set()

    def replaced() -> bool:
        try:
            with httpx.Client(headers={"Connection": "close"}) as client:
                fresh.add(client.get(f"{broker.url}/health", timeout=2).json()["pid"])
        except httpx.HTTPError:
            return False
        return len(fresh - {victim}) >= 2

    wait_until(replaced, timeout_s=60, message="a replacement worker")
    assert victim not in fresh or len(fresh) >= 3
    queue = unique("after-kill")
    assert (
        httpx.post(f"{broker.url}/api/v1/push", json={"items": [{"queue": queue, "payload": 1}]}).json()[0][
            "status"
        ]
        == "queued"
    )


def test_a_burst_of_connections_is_spread_over_the_workers(
    db_url: str, start_broker: Callable[..., BrokerProcess]
) -> None:
    """40 connections opened at once (as a load generator or a client pool does) land on both workers
    (SO_REUSEPORT): on one shared listening socket, the worker that woke first took most of a burst."""
    broker = start_broker(db_url, workers=2)
    host, port = broker.url.removeprefix("http://").split(":")
    request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    connections = [socket.create_connection((host, int(port))) for _ in range(40)]
    try:
        for connection in connections:
            connection.sendall(request)
        pids = []
        for connection in connections:
            with connection.makefile("rb") as reply:
                assert reply.readline().startswith(b"HTTP/1.1 200")
                length = 0
                while (line := reply.readline()) != b"\r\n":
                    name, _, value = line.decode().partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                pids.append(json.loads(reply.read(length))["pid"])
    finally:
        for connection in connections:
            connection.close()
    shares = sorted(Counter(pids).values())
    assert len(shares) == 2 and shares[0] >= 8, f"connections per worker: {shares}"


def test_serve_without_a_database_starts_the_embedded_postgresql(tmp_path: Path) -> None:
    """README command 1: no DATABASE_URL, no PG_* variables: a private PostgreSQL in the data dir."""
    broker = BrokerProcess(
        None, tmp_path / "serve.log", workers=1, env={"QUEENPY_DATA_DIR": str(tmp_path / "pgdata")}
    )
    try:
        broker.start(timeout_s=90)
        body = httpx.get(f"{broker.url}/health", timeout=10).json()
        assert body["status"] == "healthy" and body["database"] == "connected"
        assert (tmp_path / "pgdata" / "PG_VERSION").exists()
        queue = unique("embedded")
        httpx.post(f"{broker.url}/api/v1/push", json={"items": [{"queue": queue, "payload": 7}]})
        popped = httpx.get(f"{broker.url}/api/v1/pop/queue/{queue}").json()
        assert [m["data"] for m in popped["messages"]] == [7]
    finally:
        assert broker.stop(signal.SIGTERM, timeout_s=30) == 0  # to the supervisor only, as a user's kill
    # SIGTERM also stopped the embedded PostgreSQL: nothing listens on its socket any more
    assert not (tmp_path / "pgdata" / "postmaster.pid").exists()


def test_restart_keeps_every_queued_message(db_url: str, start_broker: Callable[..., BrokerProcess]) -> None:
    """No queue state lives in the broker: kill -9 it, start another, every queued message is there."""
    broker = start_broker(db_url, workers=2)
    queue = unique("durable")
    for n in range(20):
        response = httpx.post(
            f"{broker.url}/api/v1/push",
            json={"items": [{"queue": queue, "partition": f"p{n % 3}", "payload": {"n": n}}]},
        )
        assert response.json()[0]["status"] == "queued"
    broker.kill()
    second = start_broker(db_url, workers=1)
    seen = []
    while True:
        body = httpx.get(
            f"{second.url}/api/v1/pop/queue/{queue}", params={"batch": 50, "autoAck": "true"}
        ).json()
        if not body.get("messages"):
            break
        seen += [m["data"]["n"] for m in body["messages"]]
    assert sorted(seen) == list(range(20))
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM queen.messages").fetchone() == (20,)


def test_a_long_poll_whose_client_left_takes_no_lease(broker: BrokerProcess) -> None:
    """The client gives up (HTTP timeout) while its pop is parked; a message pushed afterwards must go
    to the next consumer, not be leased on behalf of the departed one."""
    queue = unique("gone")
    httpx.post(f"{broker.url}/api/v1/configure", json={"queue": queue}).raise_for_status()
    try:
        httpx.get(
            f"{broker.url}/api/v1/pop/queue/{queue}", params={"wait": "true", "timeout": 20000}, timeout=0.5
        )
    except httpx.ReadTimeout:
        pass
    httpx.post(f"{broker.url}/api/v1/push", json={"items": [{"queue": queue, "payload": "late"}]})
    body = httpx.get(
        f"{broker.url}/api/v1/pop/queue/{queue}", params={"wait": "true", "timeout": 10000}, timeout=15
    ).json()
    assert [m["data"] for m in body["messages"]] == ["late"]


def test_the_access_log_shows_each_request_when_asked_for(
    db_url: str, start_broker: Callable[..., BrokerProcess]
) -> None:
    quiet = start_broker(db_url, workers=1)
    logged = start_broker(db_url, workers=1, extra_env={"QUEEN_ACCESS_LOG": "true"})
    for broker in (quiet, logged):
        assert httpx.get(f"{broker.url}/api/v1/resources/queues", timeout=10).status_code == 200
    wait_until(
        lambda: '"GET /api/v1/resources/queues HTTP/1.1" 200' in logged.log_text(),
        timeout_s=10,
        message="the request's access-log line",
    )
    assert "GET /api/v1/resources/queues" not in quiet.log_text()  # off by default
