"""The PostgreSQL primary dies and its synchronous standby is promoted (issue 43): two brokers on libpq's
multi-host URL with ``target_session_attrs=read-write`` answer pops and acks with a retryable 503 meanwhile,
buffer pushes, then reconnect to the new primary: the buffered push is stored once, acked messages stay
acked, ``/health`` names the new server, and LISTEN, the services' advisory lock and the long-poll
announcements are set up again there (a poll parked on one broker is woken by a push on the other).

A real primary and standby (pgserver's binaries, ``pg_basebackup -R``) from the process harness."""

from __future__ import annotations

import concurrent.futures
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from queenpy.harness import BrokerProcess, PrivatePostgres, StandbyPostgres, free_port

from helpers import unique, wait_until

# a parked pop re-checks only every 20 s: one that returns a message within its 10 s was woken by a NOTIFY
SLOW_POLL_TIMER = {
    "POP_WAIT_INITIAL_INTERVAL_MS": "20000",
    "POP_WAIT_MAX_INTERVAL_MS": "20000",
    "STATS_INTERVAL_MS": "500",
}


@pytest.fixture
def pair() -> Iterator[tuple[PrivatePostgres, StandbyPostgres]]:
    # not under pytest's tmp_path: another pytest session on the machine makes /tmp/pytest-of-<user> private
    # again, and pgserver's system user (who runs pg_ctl) could no longer reach the data directories
    base = Path(tempfile.mkdtemp(prefix="queenpy-test-failover-"))
    primary = PrivatePostgres(base / "primary", settings={"fsync": "off"}, port=free_port())
    try:
        standby = StandbyPostgres(primary, base / "standby", free_port(), "standby1", synchronous=True)
        try:
            primary.create_database("queen")
            yield primary, standby
        finally:
            standby.stop()
    finally:
        primary.stop()
        shutil.rmtree(base, ignore_errors=True)


def count(server: PrivatePostgres | StandbyPostgres, sql: str) -> int:
    return int(server.psql(sql, "queen").strip())


def test_brokers_follow_a_promoted_standby(
    pair: tuple[PrivatePostgres, StandbyPostgres], start_broker: Callable[..., BrokerProcess]
) -> None:
    primary, standby = pair
    url = (
        f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/queen"
        "?sslmode=disable&target_session_attrs=read-write"
    )
    first = start_broker(url, workers=1, extra_env=SLOW_POLL_TIMER)
    second = start_broker(url, workers=1, extra_env=SLOW_POLL_TIMER)
    queue = unique("failover")
    http = httpx.Client(timeout=30)

    def push(broker: BrokerProcess, transaction_id: str) -> Any:
        return http.post(
            f"{broker.url}/api/v1/push",
            json={
                "items": [{"queue": queue, "partition": "p", "transactionId": transaction_id, "payload": {}}]
            },
        ).json()[0]

    def pop(broker: BrokerProcess, batch: int) -> httpx.Response:
        return http.get(
            f"{broker.url}/api/v1/pop/queue/{queue}", params={"consumerGroup": "g", "batch": str(batch)}
        )

    # a short lease: a pop answered by a backend of the killed postmaster that had not noticed yet leases the
    # partition on the standby too, until the lease runs out
    http.post(f"{first.url}/api/v1/configure", json={"queue": queue, "options": {"leaseTime": 2}})
    health = http.get(f"{first.url}/health").json()["postgres"]
    assert (health["port"], health["inRecovery"]) == (primary.port, False)
    assert (health["synchronousCommit"], health["synchronousStandbyNames"]) == ("on", "standby1")
    assert [push(first, f"tx-{n}")["status"] for n in range(5)] == ["queued"] * 5
    popped = pop(first, 2).json()["messages"]
    acks = [
        {
            "transactionId": m["transactionId"],
            "partitionId": m["partitionId"],
            "leaseId": m["leaseId"],
            "status": "completed",
        }
        for m in popped
    ]
    answer = http.post(f"{first.url}/api/v1/ack/batch", json={"acknowledgments": acks, "consumerGroup": "g"})
    assert [item["success"] for item in answer.json()] == [True, True]

    primary.kill_postmaster()
    for broker in (first, second):  # the first answer may come from a pooled connection that just broke
        refused = wait_until(lambda b=broker: (r := pop(b, 1)).status_code == 503 and r, message="pop 503")
        assert refused.headers["retry-after"] == "1" and refused.json()["success"] is False
        ack = http.post(f"{broker.url}/api/v1/ack", json={**acks[0], "consumerGroup": "g"})
        assert ack.status_code == 503 and ack.headers["retry-after"] == "1", (
            ack.text + broker.log_path.read_text()[-4000:]
        )
    assert push(second, "tx-during")["status"] == "buffered"

    standby.promote()
    for broker in (first, second):
        wait_until(
            lambda b=broker: (
                (r := http.get(f"{b.url}/health")).status_code == 200
                and r.json()["postgres"]["port"] == standby.port
            ),
            message="health on the new primary",
        )
    assert http.get(f"{first.url}/health").json()["postgres"]["inRecovery"] is False
    wait_until(
        lambda: count(standby, "SELECT count(*) FROM queen.messages WHERE transaction_id = 'tx-during'") == 1,
        message="the buffered push replayed on the new primary",
    )
    assert push(first, "tx-during")["status"] == "duplicate"  # stored once: the replay is deduplicated

    # the two messages acked before the switch stay acked; the other three and the buffered one come (the ids
    # are gathered over pops: one during the switch may hold a lease until it expires)
    delivered: set[str] = set()

    def gather() -> bool:
        answer = pop(second, 10)
        if answer.status_code == 200 and answer.content:
            delivered.update(m["transactionId"] for m in answer.json()["messages"])
        return delivered >= {"tx-2", "tx-3", "tx-4", "tx-during"}

    wait_until(gather, interval_s=0.5, message="the unacked messages delivered from the new primary")
    assert delivered == {"tx-2", "tx-3", "tx-4", "tx-during"}

    # LISTEN (one connection per broker process) and the stats job's advisory lock, on the new primary
    wait_until(
        lambda: count(standby, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'") >= 2,
        message="LISTEN on the new primary",
    )
    wait_until(
        lambda: (
            count(
                standby,
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.objid = 737003 "
                "AND a.application_name = 'queenpy-services'",
            )
            == 1
        ),
        message="the stats job's lock taken again on the new primary",
    )

    # the long-poll announcements: a pop parked on the second broker is announced to the first, whose push
    # wakes it through NOTIFY (its own poll timer would not check again within the 10 s wait)
    empty = unique("wake")
    http.post(f"{first.url}/api/v1/configure", json={"queue": empty, "options": {}})
    with httpx.Client(timeout=30) as parked_client, concurrent.futures.ThreadPoolExecutor(1) as pool:
        parked = pool.submit(
            parked_client.get,
            f"{second.url}/api/v1/pop/queue/{empty}",
            params={"wait": "true", "timeout": "10000"},
        )
        wait_until(
            lambda: http.get(f"{first.url}/metrics").json()["longPoll"]["remoteWaitingQueues"] >= 1,
            message="the parked pop announced to the other broker",
        )
        http.post(f"{first.url}/api/v1/push", json={"items": [{"queue": empty, "payload": {"x": 1}}]})
        answer = parked.result(timeout=20)
    assert answer.status_code == 200 and [m["data"] for m in answer.json()["messages"]] == [{"x": 1}]
