"""The Prometheus exposition and the analytics routes of a ``queenpy serve`` with two workers that write
their metrics rows every 0.2 s (``METRICS_AGGREGATE_INTERVAL_S``), checked against what the test did."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import unique, wait_until


@pytest.fixture
def http(metrics_broker: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=metrics_broker.url, timeout=30) as client:
        yield client


def scrape(http: httpx.Client) -> dict[str, list[Any]]:
    """Samples by family name, and by sample name (a counter family ``x`` has samples ``x_total``)."""
    response = http.get("/metrics/prometheus")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    families: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(response.text):
        families[family.name] = family.samples
        for sample in family.samples:
            if sample.name != family.name:
                families.setdefault(sample.name, []).append(sample)
    return families


def value(families: dict[str, list[Any]], name: str, **labels: str) -> float:
    matches = [
        s.value
        for s in families[name]
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(matches) == 1, (name, labels, families.get(name))
    return float(matches[0])


def fill(http: httpx.Client, queue: str) -> None:
    """10 messages in 2 partitions; queue mode consumes 4 (acks 3), group g consumes 10, 1 goes to the DLQ."""
    for partition in ("a", "b"):
        items = [
            {"queue": queue, "partition": partition, "payload": {"n": n}, "transactionId": f"{partition}{n}"}
            for n in range(5)
        ]
        assert {r["status"] for r in http.post("/api/v1/push", json={"items": items}).json()} == {"queued"}
    popped = http.get(f"/api/v1/pop/queue/{queue}/partition/a", params={"batch": 4}).json()["messages"]
    acks = [
        {
            "transactionId": m["transactionId"],
            "partitionId": m["partitionId"],
            "leaseId": m["leaseId"],
            "status": "completed",
        }
        for m in popped[:3]
    ]
    assert all(r["success"] for r in http.post("/api/v1/ack/batch", json={"acknowledgments": acks}).json())
    for partition in ("a", "b"):
        got = http.get(
            f"/api/v1/pop/queue/{queue}/partition/{partition}", params={"batch": 5, "consumerGroup": "g"}
        ).json()["messages"]
        acks = [
            {
                "transactionId": m["transactionId"],
                "partitionId": m["partitionId"],
                "leaseId": m["leaseId"],
                "status": "dlq" if m["transactionId"] == "b4" else "completed",
            }
            for m in got
        ]
        body = {"acknowledgments": acks, "consumerGroup": "g"}
        assert all(r["success"] for r in http.post("/api/v1/ack/batch", json=body).json())


def test_the_exposition_parses_and_counts_what_was_done(http: httpx.Client) -> None:
    queue = unique("prom")
    fill(http, queue)
    assert http.post("/api/v1/stats/refresh").status_code == 200  # per-queue numbers come from the stats
    families = scrape(http)
    assert value(families, "queen_queue_partitions", queue=queue) == 2
    assert value(families, "queen_queue_messages", queue=queue) == 10
    # not consumed by the slowest group on each partition: a has 2 after queue mode's cursor (3 acked, the
    # 4th leased), b has none (g consumed all of it; queue mode never read b)
    assert value(families, "queen_queue_depth", queue=queue) == 2
    assert value(families, "queen_queue_processing", queue=queue) == 1  # the 4th popped, not acked
    assert value(families, "queen_dlq_depth_by_queue", queue=queue) == 1
    assert value(families, "queen_consumer_group_lag_messages", queue=queue, group="g") == 0
    assert value(families, "queen_consumer_group_lag_messages", queue=queue, group="__QUEUE_MODE__") == 2
    assert (
        value(families, "queen_consumer_group_partitions_lagging", queue=queue, group="__QUEUE_MODE__") == 1
    )
    oldest = value(families, "queen_queue_oldest_unconsumed_timestamp_seconds", queue=queue)
    assert 0 < time.time() - oldest < 120
    assert (
        value(
            families,
            "queen_consumer_group_oldest_unconsumed_timestamp_seconds",
            queue=queue,
            group="__QUEUE_MODE__",
        )
        == oldest
    )
    assert value(families, "queen_maintenance_mode_enabled") == 0
    assert value(families, "queen_file_buffer_db_healthy") == 1

    def pushes_timed(families: dict[str, Any]) -> float:
        return sum(
            s.value
            for s in families["queen_http_request_duration_seconds"]
            if s.name.endswith("_count") and s.labels == {"method": "POST", "route": "/api/v1/push"}
        )

    # a worker adds its request-path histograms to the shared ones at each sample (services/prometheus.py),
    # so the other worker's pushes show up within a sample interval
    wait_until(lambda: pushes_timed(scrape(http)) >= 2, message="push latency histogram")
    wait_until(
        lambda: {s.labels["op"] for s in scrape(http)["queen_fusion_batch_size"]} >= {"push", "pop", "ack"},
        message="fusion histograms",
    )
    wait_until(lambda: value(scrape(http), "queen_messages_pushed_total") >= 10, message="pushed counter")
    workers = {s.labels["pid"] for s in scrape(http)["queen_worker_resident_memory_bytes"]}
    assert len(workers) == 2, "both workers' gauges, whichever worker answered"
    assert value(scrape(http), "queen_db_pool_size") >= 2


def test_the_maintenance_gauge_follows_the_switch(http: httpx.Client) -> None:
    http.post("/api/v1/system/maintenance/pop", json={"enabled": True})
    try:
        wait_until(
            lambda: value(scrape(http), "queen_pop_maintenance_mode_enabled") == 1,
            timeout_s=5,
            message="pop maintenance gauge",
        )
    finally:
        http.post("/api/v1/system/maintenance/pop", json={"enabled": False})


def test_queue_ops_and_lag_count_every_worker(http: httpx.Client) -> None:
    queue = unique("ops")
    fill(http, queue)

    def ops() -> dict[str, Any] | None:
        answer = http.get("/api/v1/analytics/queue-ops", params={"queue": queue}).json()
        totals = answer["totals"]
        return answer if totals["pushMessages"] == 10 and totals["ackMessages"] == 13 else None

    answer = wait_until(ops, timeout_s=10, message="queue-ops totals")
    totals = answer["totals"]
    assert totals["popMessages"] == 14 and totals["popCount"] == 3 and totals["ackFailed"] == 1
    assert answer["bucketMinutes"] == 1 and answer["queues"][0]["queueName"] == queue
    lag = http.get("/api/v1/analytics/queue-lag", params={"queue": queue}).json()
    assert sum(row["popCount"] for row in lag) == 3 and all(
        row["maxLagMs"] >= row["avgLagMs"] >= 0 for row in lag
    )


def test_system_and_worker_metrics_have_both_workers(http: httpx.Client) -> None:
    def both(route: str, key: str) -> dict[str, Any] | None:
        answer = http.get(f"/api/v1/analytics/{route}").json()
        return answer if len(answer[key]) == 2 else None

    system = wait_until(lambda: both("system-metrics", "replicas"), timeout_s=10, message="two workers")
    assert system["bucketMinutes"] == 1 and system["pointCount"] == len(system["series"]) >= 2
    point = system["series"][-1]
    assert point["memory"]["rssBytes"]["max"] > 10_000_000 and point["database"]["poolSize"]["max"] >= 1
    assert point["cpu"]["percent"]["max"] >= point["cpu"]["percent"]["min"] >= 0
    workers = wait_until(lambda: both("worker-metrics", "workers"), timeout_s=10, message="two workers")
    assert {"timeRange", "bucketMinutes", "pointCount", "timeSeries", "workers", "queues", "summary"} <= set(
        workers
    )
    assert workers["summary"]["requests"] >= 1 and workers["summary"]["workers"] == 2
    # whole counts, as documented (they were written and summed as floats: 12.0)
    assert all(type(w["requests"]) is int and type(w["errors"]) is int for w in workers["workers"])
    status = http.get("/api/v1/status").json()
    assert type(status["errors"]["requestErrors"]) is int
    parked = http.get("/api/v1/analytics/queue-parked-replicas").json()
    assert len(parked["replicas"]) == 2


def wait_for_a_parked_pop(http: httpx.Client, queue: str, message: str) -> None:
    """Waits until the per-queue parked series of ``/api/v1/analytics/queue-parked-replicas`` counts one
    parked long poll of ``queue`` (10 s at most)."""

    def parked() -> bool:
        series = http.get("/api/v1/analytics/queue-parked-replicas", params={"queue": queue}).json()["series"]
        return any(row["parked"] == 1 for row in series)

    wait_until(parked, timeout_s=10, message=message)


def test_parked_long_polls_are_counted_per_queue(http: httpx.Client) -> None:
    queue = unique("parked")
    with httpx.Client(base_url=http.base_url, timeout=30) as other:
        thread = threading.Thread(
            target=lambda: other.get(f"/api/v1/pop/queue/{queue}", params={"wait": "true", "timeout": 1500})
        )
        thread.start()
        wait_for_a_parked_pop(http, queue, "a parked long poll")
        thread.join()


def test_a_parked_namespace_long_poll_leaves_the_metrics_rows_written(http: httpx.Client) -> None:
    """A namespace/task long poll parks under no queue name; the per-queue rows of the minute once got a row
    for queue None, and the worker's flush failed (queue_lag_metrics.queue_name is NOT NULL) for the rest of
    the minute: no row of any queue was written. Here a queue's parked pop is counted while one parks."""
    queue = unique("beside")
    with (
        httpx.Client(base_url=http.base_url, timeout=30) as other,
        httpx.Client(base_url=http.base_url, timeout=30) as third,
    ):
        by_namespace = threading.Thread(
            target=lambda: other.get(
                "/api/v1/pop", params={"namespace": unique("nobody"), "wait": "true", "timeout": 4000}
            )
        )
        by_namespace.start()
        time.sleep(0.6)  # three samples with only the namespace pop parked
        by_queue = threading.Thread(
            target=lambda: third.get(f"/api/v1/pop/queue/{queue}", params={"wait": "true", "timeout": 2000})
        )
        by_queue.start()
        wait_for_a_parked_pop(http, queue, "the queue's parked long poll, beside a namespace one")
        by_queue.join()
        by_namespace.join()


def test_retention_and_postgres_stats_shapes(http: httpx.Client) -> None:
    retention = http.get("/api/v1/analytics/retention").json()
    assert retention["bucketMinutes"] == 15 and {"series", "totals", "timeRange"} <= set(retention)
    stats = http.get("/api/v1/analytics/postgres-stats").json()
    assert {
        "timestamp",
        "database",
        "databaseCache",
        "tableCache",
        "indexCache",
        "cacheSummary",
        "deadTuples",
        "hotUpdates",
        "activeQueries",
        "autovacuumStatus",
        "bufferConfig",
        "bufferUsage",
        "tableSizes",
    } <= set(stats)
    assert "messages" in {t["table"] for t in stats["tableSizes"]}
    assert stats["database"]["commits"] > 0


def test_the_grafana_dashboard_uses_served_series(http: httpx.Client) -> None:
    """Every ``queen_*`` series a panel of docs/grafana-queenpy.json queries is in the exposition."""
    import json
    import re
    from pathlib import Path

    dashboard = json.loads(
        (Path(__file__).resolve().parents[2] / "docs" / "grafana-queenpy.json").read_text()
    )
    wanted = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bqueen_[a-z_]+", target["expr"])
    }
    fill(http, unique("grafana"))
    served = set(scrape(http))
    assert len(wanted) >= 20 and sorted(wanted - served) == []


def test_the_per_queue_numbers_follow_each_stats_run(http: httpx.Client) -> None:
    """The rendered per-queue families are kept between stats runs (SnapshotCache) and renewed by the next."""
    queue = unique("cache")
    http.post("/api/v1/push", json={"items": [{"queue": queue, "payload": 1}]})
    http.post("/api/v1/stats/refresh")
    for _ in range(3):  # several scrapes, both workers, same numbers
        assert value(scrape(http), "queen_queue_messages", queue=queue) == 1
    http.post("/api/v1/push", json={"items": [{"queue": queue, "payload": n} for n in range(4)]})
    http.post("/api/v1/stats/refresh")
    for _ in range(3):
        assert value(scrape(http), "queen_queue_messages", queue=queue) == 5
