"""The background services in `queenpy serve` processes: each job runs in one process at a time across every
worker of every broker instance on one database, another process takes a job over when its holder is killed,
and retention, eviction, partition cleanup and stats do their work with short intervals, end to end."""

from __future__ import annotations

import itertools
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg

from conftest import BrokerProcess
from helpers import unique, wait_until

JOBS = ("retention", "eviction", "stats")
FAST = {"STATS_INTERVAL_MS": "300", "RETENTION_INTERVAL": "300", "EVICTION_INTERVAL": "300"}


def parent_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^PPid:\s+(\d+)", status, re.MULTILINE)
    assert match is not None
    return int(match.group(1))


def holders(database: str) -> dict[str, int]:
    """The pid of each job's holder, as service_status records it."""
    with psycopg.connect(database, autocommit=True) as conn:
        rows = conn.execute("SELECT job, holder FROM queen.service_status").fetchall()
    found = {}
    for job, holder in rows:
        match = re.search(r"pid (\d+)$", holder or "")
        if match:
            found[job] = int(match.group(1))
    return found


def runs(database: str) -> list[tuple[str, str, Any, Any]]:
    with psycopg.connect(database, autocommit=True) as conn:
        return [
            tuple(r)
            for r in conn.execute(  # type: ignore[misc]
                "SELECT job, holder, started_at, finished_at FROM queen.service_runs ORDER BY job, started_at"
            )
        ]


def test_each_job_runs_in_one_process_and_another_takes_over_when_its_holder_is_killed(
    new_database: Callable[[], str], start_broker: Callable[..., BrokerProcess]
) -> None:
    """Two broker instances with two workers each: four processes try every job every 300 ms. One holds each
    job; runs of a job never overlap. SIGKILL of the instance holding the stats job: a worker of the other
    instance holds it (and every job the killed instance held) and runs it, without waiting for any
    timeout."""
    database = new_database()
    a = start_broker(database, workers=2, extra_env=FAST)
    b = start_broker(database, workers=2, extra_env=FAST)
    instances = {a.process.pid: a, b.process.pid: b}
    held = wait_until(
        lambda: (found := holders(database)) and set(found) == set(JOBS) and found, message="every job held"
    )
    wait_until(lambda: len(runs(database)) >= 9, message="a few runs")
    leader = instances[parent_of(held["stats"])]
    survivor = b if leader is a else a
    killed_pids = {pid for pid in held.values() if parent_of(pid) == leader.process.pid}

    leader.kill()  # SIGKILL of supervisor and workers: no goodbye, the sessions just end
    with psycopg.connect(database, autocommit=True) as conn:
        killed_at = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]

    def taken_over() -> bool:
        now_held = holders(database)
        return all(
            pid not in killed_pids and parent_of(pid) == survivor.process.pid for pid in now_held.values()
        ) and all(
            started > killed_at
            for job, holder, started, _ in runs(database)
            if job == "stats" and holder.endswith(f"pid {now_held['stats']}")
        )

    wait_until(taken_over, timeout_s=30, message="the surviving instance takes over")
    wait_until(
        lambda: (
            sum(1 for job, holder, started, _ in runs(database) if job == "stats" and started > killed_at)
            >= 3
        ),
        message="runs after the kill",
    )

    # one holder at a time: the runs of a job never overlap, before, across and after the takeover
    history = runs(database)
    for job in JOBS:
        mine = [r for r in history if r[0] == job]
        assert len(mine) >= 2, job
        for earlier, later in itertools.pairwise(mine):
            assert later[2] >= earlier[3], (job, earlier, later)
    stats_holders = [holder for job, holder, _, _ in history if job == "stats"]
    assert len({h for i, h in enumerate(stats_holders) if i == 0 or h != stats_holders[i - 1]}) <= 2
    health = httpx.get(f"{survivor.url}/health").json()
    assert set(health["services"]["jobs"]) == set(JOBS)
    assert all(
        job["holder"].startswith(health["services"]["holder"].split(" worker")[0])
        for job in health["services"]["jobs"].values()
    )


def test_retention_eviction_cleanup_and_stats_through_a_broker(
    db_url: str, start_broker: Callable[..., BrokerProcess]
) -> None:
    broker = start_broker(db_url, workers=2, extra_env={**FAST, "PARTITION_CLEANUP_DAYS": "0.00002"})
    done, stale, logs = unique("done"), unique("stale"), unique("logs")
    for queue, options in (
        (done, {"completedRetentionSeconds": 1}),
        (stale, {"maxWaitTimeSeconds": 1}),
        (logs, {"retentionSeconds": 1}),
    ):
        answer = httpx.post(
            f"{broker.url}/api/v1/configure", json={"queue": queue, "options": options}
        ).json()
        assert answer["configured"] is True
    for queue in (done, stale, logs):
        pushed = httpx.post(
            f"{broker.url}/api/v1/push",
            json={"items": [{"queue": queue, "partition": "p", "payload": n} for n in range(20)]},
        ).json()
        assert [r["status"] for r in pushed] == ["queued"] * 20
    popped = httpx.get(f"{broker.url}/api/v1/pop/queue/{done}/partition/p", params={"batch": 20}).json()
    acked = httpx.post(
        f"{broker.url}/api/v1/ack/batch",
        json={
            "acknowledgments": [
                {
                    "transactionId": m["transactionId"],
                    "partitionId": m["partitionId"],
                    "leaseId": m["leaseId"],
                    "status": "completed",
                }
                for m in popped["messages"]
            ]
        },
    ).json()
    assert all(a["success"] for a in acked)

    def stored(queue: str) -> int:
        with psycopg.connect(db_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM queen.messages m JOIN queen.partitions p "
                "ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id "
                "WHERE q.name = %s",
                (queue,),
            ).fetchone()
        return int(row[0]) if row else -1

    wait_until(
        lambda: stored(done) == 0 and stored(stale) == 0 and stored(logs) == 0,
        timeout_s=30,
        message="retention, completed retention and eviction delete everything",
    )
    with psycopg.connect(db_url, autocommit=True) as conn:
        kinds = dict(
            conn.execute(
                "SELECT queue_name, string_agg(DISTINCT retention_type, ',') "
                "FROM queen.retention_history GROUP BY 1"
            ).fetchall()
        )
    # partition cleanup may already have removed the emptied partitions too
    assert set(kinds[done].split(",")) - {"partition_cleanup"} == {"completed_retention"}
    assert set(kinds[stale].split(",")) - {"partition_cleanup"} == {"max_wait_time_eviction"}
    assert set(kinds[logs].split(",")) - {"partition_cleanup"} == {"retention"}

    def cleaned() -> bool:  # the emptied partitions stay idle: partition cleanup removes them
        with psycopg.connect(db_url, autocommit=True) as conn:
            left = conn.execute(
                "SELECT count(*) FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
                "WHERE q.name = ANY (%s)",
                ([done, stale, logs],),
            ).fetchone()
        return left == (0,)

    wait_until(cleaned, timeout_s=30, message="partition cleanup")

    def throughput() -> tuple[int, int, int]:
        with psycopg.connect(db_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT sum(t.ingested), sum(t.processed), sum(t.deleted) FROM queen.queue_throughput t "
                "JOIN queen.queues q ON q.id = t.queue_id WHERE q.name = ANY (%s)",
                ([done, stale, logs],),
            ).fetchone()
        return (int(row[0] or 0), int(row[1] or 0), int(row[2] or 0)) if row else (0, 0, 0)

    # partitions went, and their stats rows with them; what the minutes recorded stays per queue (cleanup
    # records the deletions the stats job has not seen yet: it runs right after the delete that emptied them)
    wait_until(
        lambda: throughput() == (60, 20, 60),
        timeout_s=30,
        message="throughput: 60 ingested, 20 processed, 60 deleted",
    )
    health = httpx.get(f"{broker.url}/health").json()["services"]
    assert health["enabled"] is True
    assert {job: health["jobs"][job]["errors"] for job in JOBS} == {job: 0 for job in JOBS}
    assert health["jobs"]["retention"]["rowsTotal"] >= 40 and health["jobs"]["eviction"]["rowsTotal"] >= 20


def test_services_can_be_off_in_a_process_and_paused_everywhere(
    new_database: Callable[[], str], start_broker: Callable[..., BrokerProcess]
) -> None:
    database = new_database()
    off = start_broker(database, workers=1, extra_env={**FAST, "QUEENPY_SERVICES": "false"})
    assert httpx.get(f"{off.url}/health").json()["services"]["enabled"] is False
    assert holders(database) == {}
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("INSERT INTO queen.system_state (key, value) VALUES ('services', '{\"paused\": true}')")
    on = start_broker(database, workers=1, extra_env=FAST)
    wait_until(lambda: set(holders(database)) == set(JOBS), message="the jobs held")
    on.stop(signal.SIGTERM)
    assert runs(database) == []  # held, but paused: nothing ran


def test_the_jobs_run_on_a_pool_of_their_own_named_queenpy_jobs(
    new_database: Callable[[], str], start_broker: Callable[..., BrokerProcess]
) -> None:
    """The jobs' statements run on connections named ``queenpy-jobs`` (at most one per job), so their
    PostgreSQL CPU is told from the requests' (``queenpy``) by application_name; none of the broker's
    request pool ran a job's procedure."""
    database = new_database()
    start_broker(database, workers=1, extra_env=FAST)
    wait_until(lambda: len(runs(database)) >= 6, message="a few runs")

    def sessions(condition: str, *args: str) -> int:
        """Other sessions of this database matching ``condition`` (SQL over pg_stat_activity)."""
        with psycopg.connect(database, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                f"AND pid <> pg_backend_pid() AND {condition}",
                args,
            ).fetchone()
        assert row is not None
        return int(row[0])

    assert 1 <= sessions("application_name = %s", "queenpy-jobs") <= len(JOBS)
    assert sessions("application_name <> 'queenpy-jobs' AND query LIKE %s", "%stats_refresh_v4%") == 0
