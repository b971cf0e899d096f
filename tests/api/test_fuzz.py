"""Fuzzing the broker with schemathesis from its own ``/openapi.json``: every operation, with generated
parameters and bodies; no response may be a 5xx (``not_a_server_error``), and every response must be what
the document says: a documented status (``status_code_conformance``), content type
(``content_type_conformance``) and body (``response_schema_conformance``).

A bounded run (``FUZZ_EXAMPLES`` generated cases per operation, about a minute); docs/reliability.md gives
the longer run with the schemathesis CLI and its figures. The broker is its own (a fresh database), so
generated deletes cannot touch other tests' data. Long polls are kept short: ``DEFAULT_TIMEOUT`` is 300 ms
and a generated ``timeout`` is capped at 300 ms (the fuzzer would otherwise wait up to 30 s per pop).

API.md 1.2 and 22: an empty result is an empty body with the JSON content type, read as null by clients;
the JSON deserializer registered here does the same, and the document marks those results nullable.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from queenpy.server.openapi import OPERATIONS
from queenpy.server.openapi_shapes import ANY, RESULTS

from conftest import BrokerProcess, PgServer, launch_broker
from helpers import unique

FUZZ_EXAMPLES = int(os.environ.get("QUEENPY_FUZZ_EXAMPLES", "12"))
# the dashboard's time-series routes run seconds-long queries over generated (wide) time ranges; the
# migration routes try to connect to the generated hosts
SLOW_PREFIXES = ("/api/v1/status", "/api/v1/analytics/", "/api/v1/migration/")
LONG_POLL_CAP_MS = 300
# the worker writes its metrics rows (read by the analytics routes) every half second, sampling every 200 ms,
# so the real-data test finds its own pops and parked long polls there without waiting for the minute's end
METRICS_ENV = {"METRICS_SAMPLE_INTERVAL_MS": "200", "METRICS_AGGREGATE_INTERVAL_S": "0.5"}


@schemathesis.deserializer("application/json")
def _json_or_null(_context: Any, response: Any) -> Any:
    return response.json() if response.content else None


@pytest.fixture(scope="module")
def fuzzed_broker(
    pg_server: PgServer, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    url = pg_server.url(pg_server.create_database(template_db))
    broker = launch_broker(
        url,
        Path(tmp_path_factory.mktemp("fuzz")),
        workers=1,
        extra_env={"DEFAULT_TIMEOUT": str(LONG_POLL_CAP_MS), **METRICS_ENV},
    )
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def api_schema(fuzzed_broker: BrokerProcess) -> Any:
    return schemathesis.openapi.from_url(f"{fuzzed_broker.url}/openapi.json")


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.mark.parametrize(("method", "path"), sorted(OPERATIONS), ids=lambda value: str(value))
def test_every_operation_answers_as_documented(api_schema: Any, method: str, path: str) -> None:
    """Hypothesis drives the operation's strategy (schemathesis' pytest plugin is not used: it does not run
    under pytest 9)."""
    operation = api_schema[path][method]

    examples = max(2, FUZZ_EXAMPLES // 4) if path.startswith(SLOW_PREFIXES) else FUZZ_EXAMPLES

    @given(case=operation.as_strategy())
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],  # a failure is reported as found, not shrunk for minutes
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case: Any) -> None:
        if case.query and isinstance(case.query.get("timeout"), int):
            case.query["timeout"] = min(case.query["timeout"], LONG_POLL_CAP_MS)
        case.call_and_validate(timeout=30, checks=CHECKS)

    fuzz()


def test_real_results_conform_to_the_document(
    api_schema: Any, fuzzed_broker: BrokerProcess, pg_server: PgServer
) -> None:
    """Generated data rarely reaches the success shapes (a pop that returns messages, a trace of a real
    message, a DLQ listing with rows), so every operation is also called on real data, each answer checked
    against the document."""
    checked: set[tuple[str, str]] = set()

    def call(method: str, path: str, concrete: str | None = None, **kwargs: Any) -> Any:
        response = client.request(method, concrete or path, **kwargs)
        assert response.status_code < 500, (method, concrete or path, response.text)
        api_schema[path][method.lower()].validate_response(response)
        checked.add((method.lower(), path))
        return response.json() if response.content else None

    queue, group = unique("docs"), unique("group")
    with httpx.Client(base_url=fuzzed_broker.url, timeout=30) as client:
        for switch in ("/api/v1/system/maintenance", "/api/v1/system/maintenance/pop"):
            client.post(
                switch, json={"enabled": False}
            ).raise_for_status()  # the fuzzer may have turned it on
        call("GET", "/health")
        call("GET", "/metrics")
        call("GET", "/openapi.json")
        call("GET", "/api/v1/status/buffers")
        call(
            "POST",
            "/api/v1/configure",
            json={
                "queue": queue,
                "namespace": "docs",
                "task": "check",
                "options": {"leaseTime": 30, "retryLimit": 0},
            },
        )
        call(
            "POST",
            "/api/v1/push",
            json={
                "items": [{"queue": queue, "payload": {"n": n}, "transactionId": f"t{n}"} for n in range(8)]
            },
        )
        call("POST", "/api/v1/push", json={"items": []})
        q = f"/api/v1/pop/queue/{queue}"
        first = call("GET", "/api/v1/pop/queue/{queue}", q, params={"batch": 2})["messages"]
        assert len(first) == 2
        ack = {
            "transactionId": first[0]["transactionId"],
            "partitionId": first[0]["partitionId"],
            "leaseId": first[0]["leaseId"],
        }
        call("POST", "/api/v1/ack", json=ack)
        call(
            "POST",
            "/api/v1/ack",
            json={**ack, "transactionId": first[1]["transactionId"], "status": "failed"},
        )
        popped = call(
            "GET",
            "/api/v1/pop/queue/{queue}/partition/{partition}",
            f"{q}/partition/Default",
            params={"batch": 2},
        )
        lease = popped["leaseId"]
        call("POST", "/api/v1/lease/{lease_id}/extend", f"/api/v1/lease/{lease}/extend", json={"seconds": 60})
        call(
            "POST",
            "/api/v1/ack/batch",
            json={
                "acknowledgments": [
                    {"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": lease}
                    for m in popped["messages"]
                ]
            },
        )
        call(
            "GET", "/api/v1/pop", params={"namespace": "docs", "task": "check", "batch": 1, "autoAck": "true"}
        )
        message = call("GET", "/api/v1/pop/queue/{queue}", q, params={"consumerGroup": group})["messages"][0]
        partition_id, transaction_id = message["partitionId"], message["transactionId"]
        call(
            "POST",
            "/api/v1/transaction",
            json={
                "operations": [
                    {
                        "type": "ack",
                        "transactionId": transaction_id,
                        "partitionId": partition_id,
                        "consumerGroup": group,
                    },
                    {"type": "push", "items": [{"queue": f"{queue}-next", "payload": 1}]},
                ]
            },
        )
        call(
            "POST",
            "/api/v1/traces",
            json={
                "transactionId": transaction_id,
                "partitionId": partition_id,
                "data": {"step": 1},
                "traceNames": ["docs-trace"],
            },
        )
        call("GET", "/api/v1/traces/names")
        call("GET", "/api/v1/traces/by-name/{name}", "/api/v1/traces/by-name/docs-trace")
        call(
            "GET",
            "/api/v1/traces/{partition_id}/{transaction_id}",
            f"/api/v1/traces/{partition_id}/{transaction_id}",
        )
        assert call("GET", "/api/v1/dlq", params={"queue": queue})["total"] == 1
        call(
            "POST",
            "/api/v1/messages/{partition_id}/{transaction_id}/retry",
            f"/api/v1/messages/{partition_id}/{first[1]['transactionId']}/retry",
            json={},
        )
        call("GET", "/api/v1/consumer-groups")
        call("GET", "/api/v1/consumer-groups/lagging", params={"minLagSeconds": 0})
        call("GET", "/api/v1/consumer-groups/{group}", f"/api/v1/consumer-groups/{group}")
        call(
            "POST",
            "/api/v1/consumer-groups/{group}/subscription",
            f"/api/v1/consumer-groups/{group}/subscription",
            json={"subscriptionTimestamp": "2026-01-01T00:00:00Z"},
        )
        call(
            "POST",
            "/api/v1/consumer-groups/{group}/queues/{queue}/seek",
            f"/api/v1/consumer-groups/{group}/queues/{queue}/seek",
            json={"timestamp": "2026-01-01T00:00:00Z"},
        )
        call(
            "POST",
            "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek",
            f"/api/v1/consumer-groups/{group}/queues/{queue}/partitions/Default/seek",
        )
        call("GET", "/api/v1/resources/queues")
        call("GET", "/api/v1/resources/queues/{queue}", f"/api/v1/resources/queues/{queue}")
        call("GET", "/api/v1/spark/offsets", params={"queue": queue, "consumerGroup": "spark"})
        call("GET", "/api/v1/spark/messages", params={"partitionId": partition_id, "after": 0, "upto": 3})
        call(
            "POST",
            "/api/v1/spark/cursor",
            json={"queue": queue, "consumerGroup": "spark", "offsets": {partition_id: 2}},
        )
        call(
            "POST",
            "/api/v1/spark/stage",
            json={
                "queryId": queue,
                "batchId": 1,
                "token": "t1",
                "items": [{"queue": f"{queue}-sink", "payload": 1}],
            },
        )
        call("POST", "/api/v1/spark/commit", json={"queryId": queue, "batchId": 1, "tokens": ["t1"]})
        call("POST", "/api/v1/spark/abort", json={"queryId": queue, "batchId": 2, "tokens": ["t2"]})
        read = call(
            "POST",
            "/api/v1/spark/read",
            json={"ranges": [{"partitionId": partition_id, "after": 0, "upto": 3}]},
        )
        assert read["ranges"] and read["ranges"][0]["offsets"] == [1, 2, 3]
        call(
            "POST",
            "/api/v1/spark/rows",
            json={
                "queryId": queue,
                "batchId": 3,
                "token": "t3",
                "queue": f"{queue}-sink",
                "data": ['{"n": 1}', "2"],
            },
        )
        assert (
            call(
                "POST",
                "/api/v1/spark/commit",
                json={"queryId": queue, "batchId": 3, "tokens": ["t3"], "counts": [2], "mode": "pipelined"},
            )["pending"]
            is True
        )
        assert (
            call(
                "POST",
                "/api/v1/spark/push",
                json={
                    "queryId": f"{queue}-direct",
                    "batchId": 0,
                    "task": 0,
                    "token": "d0",
                    "queue": f"{queue}-direct",
                    "partitions": ["p"],
                    "partitionIndexes": [0],
                    "transactionIds": ["d-1"],
                    "data": ['{"n": 1}'],
                },
            )["pushed"]
            == 1
        )
        assert (
            call(
                "POST",
                "/api/v1/spark/commit",
                json={"queryId": f"{queue}-direct", "batchId": 0, "mode": "direct"},
            )["pushed"]
            == 1
        )
        assert (
            call("POST", "/api/v1/spark/flush", json={"queryId": queue})["success"] is True
        )  # the broker may
        # have applied the batch already, right after its answer
        stream = call(
            "POST",
            "/streams/v1/queries",
            json={"name": unique("stream"), "source_queue": queue, "config_hash": "h1"},
        )
        call(
            "POST",
            "/streams/v1/cycle",
            json={
                "query_id": stream["query_id"],
                "partition_id": partition_id,
                "state_ops": [{"type": "upsert", "key": "k", "value": {"n": 1}}],
                "push_items": [{"queue": f"{queue}-sink", "payload": 1}],
            },
        )
        assert call(
            "POST",
            "/streams/v1/state/get",
            json={"query_id": stream["query_id"], "partition_id": partition_id},
        )["rows"]
        target = pg_server.create_database()
        socket_dir = pg_server.url(target).split("host=", 1)[1]
        body = {"host": socket_dir, "database": target, "user": "postgres"}
        assert call("POST", "/api/v1/migration/test-connection", json=body)["success"] is True
        assert call("POST", "/api/v1/migration/start", json=body)["status"] == "running"
        deadline = time.monotonic() + 60
        while call("GET", "/api/v1/migration/status")["status"] == "running" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert call("POST", "/api/v1/migration/validate", json=body)["tables"]
        assert call("POST", "/api/v1/migration/reset")["status"] == "idle"
        operator_routes(call, client, queue, partition_id, first[0]["transactionId"])
        call(
            "DELETE",
            "/api/v1/consumer-groups/{group}/queues/{queue}",
            f"/api/v1/consumer-groups/{group}/queues/{queue}",
        )
        call("DELETE", "/api/v1/consumer-groups/{group}", f"/api/v1/consumer-groups/{group}")
        call("DELETE", "/api/v1/resources/queues/{queue}", f"/api/v1/resources/queues/{queue}-next")
    # every operation whose 200 body is documented key by key: all of them (only payloads and a few free-form
    # values inside the bodies are any JSON)
    shaped = {key for key, schema in RESULTS.items() if schema is not ANY}
    assert shaped <= checked, sorted(shaped - checked)


def operator_routes(
    call: Any, client: httpx.Client, queue: str, partition_id: str, transaction_id: str
) -> None:
    """The dashboard and operator routes (API.md sections 10-12) on the data of the test above: ``queue``
    (namespace docs, task check) holds 8 messages of partition ``partition_id``, consumed in queue mode and by
    consumer groups, one dead-lettered; ``transaction_id`` is its first message. Each answer is checked
    against the document by ``call``."""
    # maintenance: a push while it is on is buffered (to a queue of its own), replayed once it is off
    assert call("POST", "/api/v1/system/maintenance", json={"enabled": True})["maintenanceMode"] is True
    buffered = call("POST", "/api/v1/push", json={"items": [{"queue": f"{queue}-buffered", "payload": 1}]})
    assert buffered[0]["status"] == "buffered"
    assert call("GET", "/api/v1/system/maintenance")["maintenanceMode"] is True
    assert call("POST", "/api/v1/system/maintenance", json={"enabled": False})["maintenanceMode"] is False
    assert (
        call("POST", "/api/v1/system/maintenance/pop", json={"enabled": True})["popMaintenanceMode"] is True
    )
    assert call("GET", "/api/v1/system/maintenance/pop")["popMaintenanceMode"] is True
    assert (
        call("POST", "/api/v1/system/maintenance/pop", json={"enabled": False})["popMaintenanceMode"] is False
    )
    for path in (
        "/api/v1/system/shared-state",
        "/internal/api/shared-state/stats",
        "/internal/api/inter-instance/stats",
    ):
        assert call("GET", path)["transport"] == "postgresql-notify"
    assert call("POST", "/internal/api/notify", json={"queue": queue, "partition": "Default"}) == {
        "status": "ok"
    }

    # message browsing; the first message goes to the dead-letter queue of a group that has consumed nothing
    one = "/api/v1/messages/{partition_id}/{transaction_id}"
    first = f"/api/v1/messages/{partition_id}/{transaction_id}"
    to_dlq = "/api/v1/messages/{partition_id}/{transaction_id}/dlq"
    dlq_group = unique("dlq-group")
    moved = call("POST", to_dlq, f"{first}/dlq", json={"consumerGroup": dlq_group, "errorMessage": "by hand"})
    assert moved["success"] is True and moved["consumerGroup"] == dlq_group
    assert (
        call("POST", to_dlq, f"{first}/dlq", json={"consumerGroup": dlq_group})["success"] is False
    )  # already
    detail = call("GET", one, first)
    assert (
        detail["payload"] == {"n": 0}
        and detail["status"] == "dead_letter"
        and detail["errorMessage"] == "by hand"
    )
    assert dlq_group in {g["name"] for g in detail["consumerGroups"]}
    assert call("GET", one, f"/api/v1/messages/{partition_id}/{unique('missing')}") == {
        "error": "Message not found"
    }
    listed = call("GET", "/api/v1/messages", params={"queue": queue})
    assert listed["total"] == len(listed["messages"]) == 8 and listed["mode"]["type"] == "hybrid"
    assert call("GET", "/api/v1/messages", params={"queue": queue, "status": "dead_letter"})["total"] >= 1
    assert call("GET", "/api/v1/messages", params={"queue": unique("none")})["messages"] == []
    newest = "/api/v1/status/queues/{queue}/messages"
    assert len(call("GET", newest, f"/api/v1/status/queues/{queue}/messages", params={"limit": 5})) == 5

    # delete one message, then clear a queue of its own (by partition, then whole)
    scratch = f"{queue}-scratch"
    pushed = call(
        "POST",
        "/api/v1/push",
        json={
            "items": [
                {"queue": scratch, "partition": "p", "payload": n, "transactionId": f"s{n}"} for n in range(3)
            ]
        },
    )
    scratch_message = f"/api/v1/messages/{pushed[0]['partition_id']}/s0"
    assert call("DELETE", one, scratch_message)["success"] is True
    assert call("DELETE", one, scratch_message) == {
        "success": False,
        "partitionId": pushed[0]["partition_id"],
        "transactionId": "s0",
        "message": "Message not found",
    }
    clear, scratch_clear = "/api/v1/queues/{queue}/clear", f"/api/v1/queues/{scratch}/clear"
    assert call("DELETE", clear, scratch_clear, params={"partition": "p"})["deleted"] == 2
    assert call("DELETE", clear, scratch_clear)["partition"] is None
    assert (
        call("DELETE", clear, scratch_clear, params={"partition": "nowhere"})["error"]
        == "Partition not found"
    )
    assert call("GET", newest, f"/api/v1/status/queues/{scratch}/messages") == []

    # resources and status, from the stats job's tables
    assert call("POST", "/api/v1/stats/refresh", json={"full": True})["full"] is True
    call("POST", "/api/v1/stats/refresh")  # no body: an incremental run
    overview = call("GET", "/api/v1/resources/overview")
    assert overview["queues"] >= 1 and overview["statsAge"] is not None
    assert "docs" in {row["namespace"] for row in call("GET", "/api/v1/resources/namespaces")["namespaces"]}
    assert "check" in {row["task"] for row in call("GET", "/api/v1/resources/tasks")["tasks"]}
    partitions = call("GET", "/api/v1/resources/partitions", params={"queue": queue})["partitions"]
    assert [p["name"] for p in partitions] == ["Default"] and partitions[0]["messages"]["total"] == 8
    status = call("GET", "/api/v1/status", params={"queue": queue})
    assert [q["name"] for q in status["queues"]] == [queue] and status["messages"]["total"] == 8
    assert call("GET", "/api/v1/status/queues", params={"namespace": "docs"})["total"] >= 1
    queue_status = call("GET", "/api/v1/status/queues/{queue}", f"/api/v1/status/queues/{queue}")
    assert (
        queue_status["queue"]["name"] == queue
        and queue_status["partitions"][0]["cursor"]["offset"] is not None
    )
    assert call("GET", "/api/v1/status/queues/{queue}", f"/api/v1/status/queues/{unique('none')}") == {
        "error": "Queue not found"
    }
    analytics = call(
        "GET",
        "/api/v1/status/analytics",
        params={"queue": queue, "interval": "minute", "from": status["timeRange"]["from"]},
    )
    assert analytics["total"] == 8 == sum(point["messages"] for point in analytics["dataPoints"])

    # analytics, from the metrics rows the worker writes (METRICS_ENV): a long poll parked on the empty
    # scratch queue, then a push and a pop there, repeated until the rows show them (a flush every 0.5 s). A
    # namespace/task long poll of the fuzzer's once made every flush of the minute fail
    # (test_operators_metrics.py)
    deadline = time.monotonic() + 30
    while True:
        assert (
            call(
                "GET",
                "/api/v1/pop/queue/{queue}",
                f"/api/v1/pop/queue/{scratch}",
                params={"wait": "true", "timeout": 1000},
            )["messages"]
            == []
        )
        call("POST", "/api/v1/push", json={"items": [{"queue": scratch, "partition": "p", "payload": 1}]})
        assert (
            len(
                call(
                    "GET",
                    "/api/v1/pop/queue/{queue}",
                    f"/api/v1/pop/queue/{scratch}",
                    params={"autoAck": "true"},
                )["messages"]
            )
            == 1
        )
        time.sleep(1)  # two flushes
        parked = call("GET", "/api/v1/analytics/queue-parked-replicas", params={"queue": scratch})
        lag = call("GET", "/api/v1/analytics/queue-lag", params={"queue": scratch})
        if parked["series"] and lag:
            break
        assert time.monotonic() < deadline, (
            "no parked long poll or pop of the scratch queue in the metrics rows"
        )
    assert parked["replicas"] and lag[0]["popCount"] >= 1
    system = call("GET", "/api/v1/analytics/system-metrics")
    assert system["series"] and system["replicas"]
    workers = call("GET", "/api/v1/analytics/worker-metrics")
    assert workers["workers"] and scratch in {q["queueName"] for q in workers["queues"]}
    assert (
        call("GET", "/api/v1/analytics/queue-ops", params={"queue": scratch})["totals"]["pushMessages"] >= 1
    )
    assert call("GET", "/api/v1/analytics/retention", params={"queue": scratch})["totals"] == {"deleted": 3}
    assert call("GET", "/api/v1/analytics/postgres-stats")["tableSizes"]
