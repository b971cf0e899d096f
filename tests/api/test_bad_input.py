"""Bad input is rejected up front (API.md sections 1.3, 3.1, 4.1, 6, 7, 8, 9 and "Where queenpy deliberately
does better" point 4): every invalid request answers a real **400** with ``{"error": "<text naming the
problem>"}``, and **nothing is stored**, which is checked in PostgreSQL itself.

Each request carries a unique tag (in its queue, partition, transaction id, group and payload), so that any
row it could have written is found by searching the tables for the tag. One bad request never fails good
requests fused with it into the same database call. A bounded property-based fuzz (``hypothesis``) throws
random JSON and random bytes at the write routes of a broker on its own database: never a 5xx, always a
string ``error`` with a 400, and the broker stays healthy.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest

from helpers import unique, wait_until

MAX = 255


def too_long(tag: str) -> str:
    """A name of exactly 256 characters that still contains the tag."""
    return tag + "x" * (MAX + 1 - len(tag))


@pytest.fixture(scope="module")
def http(broker: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def db(broker: Any) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(broker.database_url, autocommit=True) as conn:
        yield conn


def stored(db: psycopg.Connection[Any], tag: str) -> dict[str, list[Any]]:
    """Every row, in the tables a request can write, that mentions ``tag``; empty when nothing was stored."""
    probes = {
        "queues": "SELECT name FROM queen.queues WHERE strpos(name, %(t)s) > 0",
        "partitions": "SELECT name FROM queen.partitions WHERE strpos(name, %(t)s) > 0",
        "messages": """SELECT m.transaction_id FROM queen.messages m
                       JOIN queen.partitions p ON p.id = m.partition_id
                       JOIN queen.queues q ON q.id = p.queue_id
                       WHERE strpos(q.name, %(t)s) > 0 OR strpos(p.name, %(t)s) > 0
                          OR strpos(m.transaction_id, %(t)s) > 0 OR strpos(m.payload::text, %(t)s) > 0""",
        "partition_consumers": "SELECT consumer_group FROM queen.partition_consumers "
        "WHERE strpos(consumer_group, %(t)s) > 0",
        "consumer_groups_metadata": "SELECT consumer_group FROM queen.consumer_groups_metadata "
        "WHERE strpos(consumer_group, %(t)s) > 0 OR strpos(queue_name, %(t)s) > 0",
        "dead_letter_queue": "SELECT consumer_group FROM queen.dead_letter_queue "
        "WHERE strpos(consumer_group, %(t)s) > 0 OR strpos(coalesce(error_message, ''), %(t)s) > 0",
        "streams_queries": "SELECT name FROM queen_streams.queries WHERE strpos(name, %(t)s) > 0 "
        "OR strpos(source_queue, %(t)s) > 0 OR strpos(coalesce(sink_queue, ''), %(t)s) > 0",
        "streams_state": "SELECT key FROM queen_streams.state WHERE strpos(key, %(t)s) > 0 "
        "OR strpos(value::text, %(t)s) > 0",
    }
    found = {table: db.execute(sql, {"t": tag}).fetchall() for table, sql in probes.items()}
    return {table: rows for table, rows in found.items() if rows}


def assert_rejected(response: httpx.Response, *words: str) -> str:
    """A real 400 with a JSON ``{"error": str}`` that mentions every one of ``words`` (case-insensitive)."""
    assert response.status_code == 400, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], body
    for word in words:
        assert word.lower() in body["error"].lower(), f"error {body['error']!r} does not mention {word!r}"
    return str(body["error"])


# -- the catalogue of invalid requests -----------------------------------------------------------------------

Build = Callable[[str], dict[str, Any]]


@dataclass(frozen=True)
class Bad:
    """One invalid request: ``path`` may use ``{t}`` (the tag); ``build(tag)`` gives httpx keyword arguments;
    the ``error`` must mention every one of ``words``."""

    method: str
    path: str
    build: Build
    words: tuple[str, ...]
    id: str


ROUTES = {
    "push": "/api/v1/push",
    "ack": "/api/v1/ack",
    "ack/batch": "/api/v1/ack/batch",
    "transaction": "/api/v1/transaction",
    "configure": "/api/v1/configure",
    "subscription": "/api/v1/consumer-groups/{t}-g/subscription",
    "seek": "/api/v1/consumer-groups/{t}-g/queues/{t}/seek",
    "lease": "/api/v1/lease/{t}/extend",
    "traces": "/api/v1/traces",
    "streams/queries": "/streams/v1/queries",
    "streams/cycle": "/streams/v1/cycle",
    "streams/state": "/streams/v1/state/get",
}


def post(route: str, what: str, make: Callable[[str], Any], *words: str) -> Bad:
    """POST the JSON ``make(tag)`` to ``ROUTES[route]``."""
    return Bad("POST", ROUTES[route], lambda t: {"json": make(t)}, words, f"{route}: {what}")


def post_raw(route: str, what: str, content: bytes | None, *words: str, **headers: str) -> Bad:
    """POST these bytes (no body at all when None) to ``ROUTES[route]``."""
    if content is None:
        return Bad("POST", ROUTES[route], lambda t: {}, words, f"{route}: {what}")
    sent = {"content": content, "headers": {"Content-Type": "application/json", **headers}}
    return Bad("POST", ROUTES[route], lambda t: sent, words, f"{route}: {what}")


def get(path: str, what: str, *words: str) -> Bad:
    return Bad("GET", path, lambda t: {}, words, what)


def item(t: str, **fields: Any) -> dict[str, Any]:
    """A valid push item tagged everywhere, with ``fields`` overriding."""
    return {"queue": t, "partition": f"{t}-p", "transactionId": f"{t}-tx", "payload": {"tag": t}, **fields}


def items(t: str, **fields: Any) -> dict[str, Any]:
    """A push body of one item."""
    return {"items": [item(t, **fields)]}


def ack(t: str, **fields: Any) -> dict[str, Any]:
    """A valid ack of a message that does not exist, tagged, with ``fields`` overriding (None removes)."""
    valid = {
        "transactionId": f"{t}-tx",
        "partitionId": str(uuid.uuid4()),
        "status": "completed",
        "consumerGroup": f"{t}-g",
    }
    return {k: v for k, v in {**valid, **fields}.items() if v is not None}


def acks(t: str, *acknowledgments: dict[str, Any]) -> dict[str, Any]:
    return {"acknowledgments": list(acknowledgments), "consumerGroup": f"{t}-g"}


def operations(*ops: dict[str, Any]) -> dict[str, Any]:
    return {"operations": list(ops)}


def push_op(*push_items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "push", "items": list(push_items)}


def options(t: str, **values: Any) -> dict[str, Any]:
    return {"queue": t, "options": values}


UUID = str(uuid.UUID(int=1))
NOT_AN_OBJECT_WORDS = {"push": ("items",), "subscription": ("subscriptionTimestamp",)}
CASES: list[Bad] = []
for route in (
    "push",
    "ack",
    "ack/batch",
    "transaction",
    "configure",
    "subscription",
    "seek",
    "streams/queries",
    "streams/cycle",
    "streams/state",
):
    CASES += [
        post_raw(route, "no body", None, "empty request body"),
        post_raw(route, "Content-Length 0", b"", "empty request body", **{"Content-Length": "0"}),
        post_raw(route, "whitespace body", b" \r\n\t ", "empty request body"),
        post_raw(route, "truncated JSON", b'{"items": [{"queue": "x"', "invalid json"),
        post_raw(route, "not JSON", b"{'queue': 'single quotes'}", "invalid json"),
        post_raw(route, "number out of range", b'{"a": 1e400}', "invalid json"),
        post_raw(route, "invalid UTF-8", b"\xff\xfe{}", "invalid json"),
    ]
    for shape, content in (("array", b"[]"), ("string", b'"text"'), ("number", b"42"), ("null", b"null")):
        CASES.append(post_raw(route, f"JSON {shape}", content, *NOT_AN_OBJECT_WORDS.get(route, ("object",))))

CASES += [
    # push (API.md 4.1)
    post("push", "items missing", lambda t: {"queue": t}, "items"),
    post("push", "items is an object", lambda t: {"items": item(t)}, "items"),
    post("push", "items is a string", lambda t: {"items": t}, "items"),
    post("push", "item not an object", lambda t: {"items": [t]}, "items[0]", "object"),
    post("push", "item is an array", lambda t: {"items": [[item(t)]]}, "items[0]", "object"),
    post(
        "push", "queue missing", lambda t: {"items": [{"payload": {"tag": t}, "transactionId": t}]}, "queue"
    ),
    post("push", "queue not a string", lambda t: items(t, queue=5), "queue", "string"),
    post("push", "queue null", lambda t: items(t, queue=None), "queue"),
    post("push", "queue empty", lambda t: items(t, queue=""), "queue", "empty"),
    post("push", "queue over 255", lambda t: items(t, queue=too_long(t)), "queue", "255"),
    post("push", "queue with NUL", lambda t: items(t, queue=t + "\u0000"), "queue", "nul"),
    post("push", "partition not a string", lambda t: items(t, partition=7), "partition", "string"),
    post("push", "partition an object", lambda t: items(t, partition={"name": t}), "partition"),
    post("push", "partition over 255", lambda t: items(t, partition=too_long(t)), "partition", "255"),
    post(
        "push", "transactionId not a string", lambda t: items(t, transactionId=12), "transactionid", "string"
    ),
    post(
        "push",
        "transactionId over 255",
        lambda t: items(t, transactionId=too_long(t)),
        "transactionid",
        "255",
    ),
    post("push", "traceId not a string", lambda t: items(t, traceId=1), "traceid", "string"),
    post("push", "traceId not a UUID", lambda t: items(t, traceId="not-a-uuid"), "traceid", "uuid"),
    post("push", "traceId one digit too long", lambda t: items(t, traceId=UUID + "0"), "traceid", "uuid"),
    post(
        "push",
        "NUL in a payload string",
        lambda t: items(t, payload={"t": t, "s": "a\u0000b"}),
        "payload",
        "nul",
    ),
    post(
        "push", "NUL in a payload key", lambda t: items(t, payload={"t": t, "k\u0000": 1}), "payload", "nul"
    ),
    post(
        "push",
        "NUL deep in the payload",
        lambda t: items(t, payload=[t, [{"x": "\u0000"}]]),
        "payload",
        "nul",
    ),
    post(
        "push",
        "valid items then one invalid",
        lambda t: {
            "items": [
                item(t, transactionId=f"{t}-ok1"),
                item(t, transactionId=f"{t}-ok2"),
                item(t, transactionId=f"{t}-bad", traceId="garbage"),
            ]
        },
        "items[2]",
        "traceid",
    ),
    post(
        "push",
        "invalid item then a valid one",
        lambda t: {"items": [item(t, transactionId=f"{t}-bad", queue=[t]), item(t, transactionId=f"{t}-ok")]},
        "queue",
    ),
    # ack (API.md 6.1)
    post("ack", "transactionId missing", lambda t: ack(t, transactionId=None), "transactionid"),
    post("ack", "transactionId not a string", lambda t: ack(t, transactionId=3), "transactionid"),
    post("ack", "transactionId empty", lambda t: ack(t, transactionId=""), "transactionid"),
    post("ack", "partitionId missing", lambda t: ack(t, partitionId=None), "partitionid"),
    post("ack", "partitionId not a UUID", lambda t: ack(t, partitionId="partition-1"), "partitionid", "uuid"),
    post("ack", "unknown status", lambda t: ack(t, status="finished"), "status", "finished"),
    post("ack", "status not a string", lambda t: ack(t, status=True), "status"),
    post(
        "ack", "consumerGroup over 255", lambda t: ack(t, consumerGroup=too_long(t)), "consumergroup", "255"
    ),
    post("ack", "leaseId not a string", lambda t: ack(t, leaseId=["lease"]), "leaseid"),
    post("ack", "error text with NUL", lambda t: ack(t, error=f"{t} went \u0000 wrong"), "error", "nul"),
    # ack/batch (API.md 6.2)
    post("ack/batch", "acknowledgments missing", lambda t: {"consumerGroup": f"{t}-g"}, "acknowledgments"),
    post("ack/batch", "acknowledgments an object", lambda t: {"acknowledgments": ack(t)}, "acknowledgments"),
    post("ack/batch", "acknowledgments a string", lambda t: {"acknowledgments": "all"}, "acknowledgments"),
    post(
        "ack/batch", "item not an object", lambda t: {"acknowledgments": [t]}, "acknowledgments[0]", "object"
    ),
    post(
        "ack/batch",
        "item without transactionId",
        lambda t: acks(t, ack(t, transactionId=None)),
        "transactionid",
    ),
    post("ack/batch", "item without partitionId", lambda t: acks(t, ack(t, partitionId=None)), "partitionid"),
    post(
        "ack/batch",
        "one item with a non-UUID partitionId",
        lambda t: acks(t, ack(t), ack(t, partitionId="not-a-uuid")),
        "acknowledgments[1]",
        "partitionid",
    ),
    post("ack/batch", "unknown status", lambda t: acks(t, ack(t, status="done")), "status"),
    post(
        "ack/batch",
        "consumerGroup not a string",
        lambda t: {**acks(t, ack(t)), "consumerGroup": 5},
        "consumergroup",
    ),
    post("ack/batch", "error text with NUL", lambda t: acks(t, ack(t, error=f"{t} \u0000")), "error", "nul"),
    # transaction (API.md 9)
    post("transaction", "operations missing", lambda t: {"requiredLeases": [t]}, "operations"),
    post("transaction", "operations empty", lambda t: operations(), "operations", "empty"),
    post("transaction", "operations an object", lambda t: {"operations": push_op(item(t))}, "operations"),
    post("transaction", "operation not an object", lambda t: {"operations": [t]}, "operations[0]", "object"),
    post(
        "transaction",
        "unknown operation type",
        lambda t: operations({"type": "delete", "queue": t}),
        "unknown operation type",
        "delete",
    ),
    post(
        "transaction", "operation without type", lambda t: operations({"items": [item(t)]}), "operation type"
    ),
    post(
        "transaction",
        "push op with a bad item",
        lambda t: operations(push_op(item(t), item(t, traceId="nope"))),
        "traceid",
    ),
    post("transaction", "push op with no items", lambda t: operations(push_op()), "items"),
    post(
        "transaction",
        "push op items not an array",
        lambda t: operations({"type": "push", "items": item(t)}),
        "items",
    ),
    post(
        "transaction",
        "valid push then an ack with a non-UUID partitionId",
        lambda t: operations(push_op(item(t)), {"type": "ack", **ack(t, partitionId="p-1")}),
        "partitionid",
    ),
    post(
        "transaction",
        "ack op with unknown status",
        lambda t: operations(push_op(item(t)), {"type": "ack", **ack(t, status="maybe")}),
        "status",
    ),
    post(
        "transaction",
        "ack op error text with NUL",
        lambda t: operations(push_op(item(t)), {"type": "ack", **ack(t, error=f"{t}\u0000")}),
        "error",
        "nul",
    ),
    # configure (API.md 3.1)
    post("configure", "queue missing", lambda t: {"namespace": t, "options": {"leaseTime": 30}}, "queue"),
    post("configure", "queue not a string", lambda t: {"queue": 17, "namespace": t}, "queue"),
    post("configure", "queue empty", lambda t: {"queue": "", "namespace": t}, "queue"),
    post("configure", "queue over 255", lambda t: {"queue": too_long(t)}, "queue", "255"),
    post(
        "configure",
        "namespace over 255",
        lambda t: {"queue": t, "namespace": too_long(t)},
        "namespace",
        "255",
    ),
    post("configure", "leaseTime a string", lambda t: options(t, leaseTime="30"), "leaseTime", "integer"),
    post("configure", "leaseTime a boolean", lambda t: options(t, leaseTime=True), "leaseTime", "integer"),
    post("configure", "retryLimit not whole", lambda t: options(t, retryLimit=1.5), "retryLimit"),
    post("configure", "negative leaseTime", lambda t: options(t, leaseTime=-1), "leaseTime"),
    post("configure", "retryDelay beyond int4", lambda t: options(t, retryDelay=2**31), "retryDelay"),
    post(
        "configure",
        "encryptionEnabled an integer",
        lambda t: options(t, encryptionEnabled=1),
        "encryptionEnabled",
        "boolean",
    ),
    post(
        "configure",
        "retentionEnabled a string",
        lambda t: options(t, retentionEnabled="true"),
        "retentionEnabled",
        "boolean",
    ),
    post("configure", "options an array", lambda t: {"queue": t, "options": [["leaseTime", 30]]}, "options"),
    # lease extend (API.md 7): the body may be empty, but when present it must make sense
    post("lease", "seconds a string", lambda t: {"seconds": "sixty"}, "seconds"),
    post("lease", "negative seconds", lambda t: {"seconds": -5}, "seconds"),
    post_raw("lease", "body an array", b"[1]", "object"),
    post_raw("lease", "malformed JSON", b"{not json", "invalid json"),
    # pop (API.md 5.2): queenpy rejects what the original silently defaults
    get("/api/v1/pop/queue/{t}?batch=abc&consumerGroup={t}-g", "pop: batch=abc", "batch"),
    get("/api/v1/pop/queue/{t}?batch=0&consumerGroup={t}-g", "pop: batch=0", "batch"),
    get("/api/v1/pop/queue/{t}?batch=-3", "pop: negative batch", "batch"),
    get("/api/v1/pop/queue/{t}/partition/p?batch=1.5", "pop: batch=1.5", "batch"),
    get("/api/v1/pop/queue/{t}?timeout=soon&wait=true", "pop: timeout=soon", "timeout"),
    get("/api/v1/pop/queue/{t}?partitions=0", "pop: partitions=0", "partitions"),
    get(
        "/api/v1/pop/queue/{t}?consumerGroup=" + "g" * 256,
        "pop: consumerGroup over 255",
        "consumergroup",
        "255",
    ),
    get("/api/v1/pop/queue/{t}?consumerGroup={t}%00", "pop: consumerGroup with NUL", "consumergroup", "nul"),
    # seek and subscription (API.md 8.1)
    post("seek", "neither toEnd nor timestamp", lambda t: {}, "toEnd", "timestamp"),
    post("seek", "toEnd false", lambda t: {"toEnd": False}, "toEnd", "timestamp"),
    post("seek", "timestamp not ISO-8601", lambda t: {"timestamp": "last tuesday"}, "timestamp"),
    post("subscription", "subscriptionTimestamp missing", lambda t: {}, "subscriptionTimestamp"),
    post(
        "subscription",
        "subscriptionTimestamp not ISO-8601",
        lambda t: {"subscriptionTimestamp": "soon"},
        "subscriptionTimestamp",
    ),
    post(
        "subscription",
        "subscriptionTimestamp a number",
        lambda t: {"subscriptionTimestamp": 1700000000},
        "subscriptionTimestamp",
    ),
    # DLQ listing and traces (API.md 10)
    get("/api/v1/dlq?queue={t}&limit=many", "dlq: limit=many", "limit"),
    get("/api/v1/dlq?queue={t}&offset=-1", "dlq: offset=-1", "offset"),
    get("/api/v1/dlq?queue={t}&from=yesterday", "dlq: from not ISO-8601", "from"),
    post("traces", "data missing", lambda t: {"transactionId": f"{t}-tx", "partitionId": UUID}, "data"),
    post("traces", "ids missing", lambda t: {"data": {"tag": t}}, "transactionid", "partitionid"),
    post(
        "traces",
        "data with NUL",
        lambda t: {"transactionId": f"{t}-tx", "partitionId": UUID, "data": {"t": f"{t}\u0000"}},
        "data",
        "nul",
    ),
]


# Queen Streams (API.md section 19)
def register(t: str, **fields: Any) -> dict[str, Any]:
    """A valid query registration, tagged, with ``fields`` overriding (None removes)."""
    valid = {
        "name": f"{t}-query",
        "source_queue": t,
        "sink_queue": f"{t}-sink",
        "config_hash": "h",
        "reset": False,
    }
    return {k: v for k, v in {**valid, **fields}.items() if v is not None}


def cycle(t: str, **fields: Any) -> dict[str, Any]:
    """A valid cycle (upserts a tagged key, pushes a tagged item), with ``fields`` overriding (None
    removes)."""
    valid = {
        "query_id": UUID,
        "partition_id": UUID,
        "consumer_group": f"{t}-g",
        "state_ops": [{"type": "upsert", "key": t, "value": {"tag": t}}],
        "push_items": [item(t)],
        "ack": None,
        "release_lease": True,
    }
    return {k: v for k, v in {**valid, **fields}.items() if v is not None}


def cycle_ack(t: str, **fields: Any) -> dict[str, Any]:
    return cycle(
        t, ack={"transactionId": f"{t}-tx", "leaseId": UUID, "status": "completed", "count": 1, **fields}
    )


def state_get(t: str, **fields: Any) -> dict[str, Any]:
    valid = {"query_id": UUID, "partition_id": UUID, "keys": [t], "key_prefix": t, "ripe_at_or_before": 1}
    return {k: v for k, v in {**valid, **fields}.items() if v is not None}


CASES += [
    post("streams/queries", "name missing", lambda t: register(t, name=None), "name is required"),
    post("streams/queries", "name empty", lambda t: register(t, name=""), "name is required"),
    post("streams/queries", "name not a string", lambda t: register(t, name=5), "name", "string"),
    post("streams/queries", "name over 255", lambda t: register(t, name=too_long(t)), "name", "255"),
    post(
        "streams/queries",
        "source_queue missing",
        lambda t: register(t, source_queue=None),
        "source_queue is required",
    ),
    post(
        "streams/queries",
        "source_queue with NUL",
        lambda t: register(t, source_queue=t + "\u0000"),
        "source_queue",
        "nul",
    ),
    post(
        "streams/queries",
        "config_hash missing",
        lambda t: register(t, config_hash=None),
        "config_hash is required",
    ),
    post(
        "streams/queries", "config_hash an object", lambda t: register(t, config_hash={"h": t}), "config_hash"
    ),
    post("streams/queries", "sink_queue not a string", lambda t: register(t, sink_queue=7), "sink_queue"),
    post(
        "streams/queries",
        "sink_queue over 255",
        lambda t: register(t, sink_queue=too_long(t)),
        "sink_queue",
        "255",
    ),
    post("streams/queries", "reset a string", lambda t: register(t, reset="yes"), "reset", "boolean"),
    post("streams/cycle", "query_id missing", lambda t: cycle(t, query_id=None), "query_id"),
    post("streams/cycle", "query_id a number", lambda t: cycle(t, query_id=42), "query_id", "string"),
    post("streams/cycle", "query_id not a UUID", lambda t: cycle(t, query_id=t), "query_id", "uuid"),
    post("streams/cycle", "partition_id missing", lambda t: cycle(t, partition_id=None), "partition_id"),
    post(
        "streams/cycle",
        "partition_id not a UUID",
        lambda t: cycle(t, partition_id="p1"),
        "partition_id",
        "uuid",
    ),
    post(
        "streams/cycle",
        "consumer_group not a string",
        lambda t: cycle(t, consumer_group=["g"]),
        "consumer_group",
    ),
    post(
        "streams/cycle",
        "consumer_group over 255",
        lambda t: cycle(t, consumer_group=too_long(t)),
        "consumer_group",
        "255",
    ),
    post(
        "streams/cycle",
        "state_ops an object",
        lambda t: cycle(t, state_ops={"type": "upsert", "key": t}),
        "state_ops",
        "array",
    ),
    post(
        "streams/cycle", "state op not an object", lambda t: cycle(t, state_ops=[t]), "state_ops[0]", "object"
    ),
    post(
        "streams/cycle",
        "state op of unknown type",
        lambda t: cycle(t, state_ops=[{"type": "merge", "key": t, "value": 1}]),
        "state_ops[0].type",
        "merge",
    ),
    post(
        "streams/cycle",
        "state op without type",
        lambda t: cycle(t, state_ops=[{"key": t, "value": 1}]),
        "state_ops[0].type",
    ),
    post(
        "streams/cycle",
        "state op without key",
        lambda t: cycle(t, state_ops=[{"type": "delete"}]),
        "state_ops[0].key",
    ),
    post(
        "streams/cycle",
        "state key not a string",
        lambda t: cycle(t, state_ops=[{"type": "upsert", "key": 3, "value": t}]),
        "state_ops[0].key",
        "string",
    ),
    post(
        "streams/cycle",
        "state key with NUL",
        lambda t: cycle(t, state_ops=[{"type": "upsert", "key": t + "\u0000", "value": 1}]),
        "state_ops[0].key",
        "nul",
    ),
    post(
        "streams/cycle",
        "state key over 2048 bytes",
        lambda t: cycle(t, state_ops=[{"type": "upsert", "key": t + "é" * 1100, "value": 1}]),
        "state_ops[0].key",
        "2048",
    ),
    post(
        "streams/cycle",
        "upsert without value",
        lambda t: cycle(
            t, state_ops=[{"type": "upsert", "key": f"{t}-1", "value": 1}, {"type": "upsert", "key": t}]
        ),
        "state_ops[1].value",
    ),
    post(
        "streams/cycle",
        "value with NUL",
        lambda t: cycle(t, state_ops=[{"type": "upsert", "key": t, "value": {"s": "\u0000"}}]),
        "state_ops[0].value",
        "nul",
    ),
    post(
        "streams/cycle",
        "push_items not an array",
        lambda t: cycle(t, push_items=item(t)),
        "push_items",
        "array",
    ),
    post(
        "streams/cycle",
        "push item without queue",
        lambda t: cycle(t, push_items=[{"payload": {"tag": t}}]),
        "push_items[0]",
        "queue",
    ),
    post(
        "streams/cycle",
        "second push item with a bad traceId",
        lambda t: cycle(t, push_items=[item(t), item(t, traceId="nope")]),
        "push_items[1]",
        "traceid",
    ),
    post(
        "streams/cycle",
        "push item partition over 255",
        lambda t: cycle(t, push_items=[item(t, partition=too_long(t))]),
        "push_items[0].partition",
        "255",
    ),
    post(
        "streams/cycle",
        "push item payload with NUL",
        lambda t: cycle(t, push_items=[item(t, payload={"t": t, "s": "\u0000"})]),
        "push_items[0].payload",
        "nul",
    ),
    post("streams/cycle", "ack a string", lambda t: cycle(t, ack=t), "ack", "object"),
    post(
        "streams/cycle",
        "ack without transactionId",
        lambda t: cycle_ack(t, transactionId=None),
        "ack.transactionId",
    ),
    post(
        "streams/cycle",
        "ack transactionId a number",
        lambda t: cycle_ack(t, transactionId=12),
        "ack.transactionId",
        "string",
    ),
    post(
        "streams/cycle",
        "ack of unknown status",
        lambda t: cycle_ack(t, status="finished"),
        "ack.status",
        "finished",
    ),
    post(
        "streams/cycle",
        "ack status retry (not a cycle status)",
        lambda t: cycle_ack(t, status="retry"),
        "ack.status",
    ),
    post("streams/cycle", "ack count negative", lambda t: cycle_ack(t, count=-1), "ack.count"),
    post("streams/cycle", "ack count a string", lambda t: cycle_ack(t, count="3"), "ack.count"),
    post("streams/cycle", "ack count a boolean", lambda t: cycle_ack(t, count=True), "ack.count"),
    post("streams/cycle", "ack leaseId a number", lambda t: cycle_ack(t, leaseId=5), "ack.leaseId"),
    post(
        "streams/cycle", "ack error with NUL", lambda t: cycle_ack(t, error=f"{t}\u0000"), "ack.error", "nul"
    ),
    post(
        "streams/cycle",
        "release_lease a string",
        lambda t: cycle(t, release_lease="no"),
        "release_lease",
        "boolean",
    ),
    post("streams/state", "query_id missing", lambda t: state_get(t, query_id=None), "query_id"),
    post("streams/state", "query_id not a UUID", lambda t: state_get(t, query_id=t), "query_id", "uuid"),
    post("streams/state", "partition_id a number", lambda t: state_get(t, partition_id=1), "partition_id"),
    post("streams/state", "keys a string", lambda t: state_get(t, keys=t), "keys", "array"),
    post("streams/state", "a key not a string", lambda t: state_get(t, keys=[t, 2]), "keys[1]", "string"),
    post("streams/state", "key_prefix a number", lambda t: state_get(t, key_prefix=7), "key_prefix"),
    post(
        "streams/state",
        "ripe_at_or_before a string",
        lambda t: state_get(t, ripe_at_or_before="now"),
        "ripe_at_or_before",
        "number",
    ),
    post(
        "streams/state",
        "ripe_at_or_before a boolean",
        lambda t: state_get(t, ripe_at_or_before=True),
        "ripe_at_or_before",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_invalid_request_is_rejected_with_400_and_stores_nothing(
    case: Bad, http: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    tag = unique("bad")
    response = http.request(case.method, case.path.format(t=tag), **case.build(tag))
    assert_rejected(response, *case.words)
    assert stored(db, tag) == {}


def test_the_storage_probe_sees_a_stored_request(http: httpx.Client, db: psycopg.Connection[Any]) -> None:
    """Control for the test above: the same tagged request, made valid, is found by ``stored``."""
    tag = unique("good")
    response = http.post("/api/v1/push", json={"items": [item(tag)]})
    assert response.status_code == 200 and [r["status"] for r in response.json()] == ["queued"]
    assert set(stored(db, tag)) == {"queues", "partitions", "messages"}


def test_the_storage_probe_sees_a_stored_stream_cycle(
    http: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    """Control for the streams cases: a valid registration and cycle, tagged as they are, are found."""
    tag = unique("good")
    registered = http.post("/streams/v1/queries", json=register(tag)).json()
    assert registered["success"] is True
    done = http.post("/streams/v1/cycle", json=cycle(tag, query_id=registered["query_id"])).json()
    assert done["success"] is True, done
    assert set(stored(db, tag)) == {"queues", "partitions", "messages", "streams_queries", "streams_state"}
    rows = http.post(
        "/streams/v1/state/get", json=state_get(tag, query_id=registered["query_id"], ripe_at_or_before=None)
    ).json()["rows"]
    assert [(row["key"], row["value"]) for row in rows] == [(tag, {"tag": tag})]


def test_names_of_exactly_255_characters_are_accepted(
    http: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    tag = unique("edge")
    name = tag + "q" * (MAX - len(tag))
    pushed = http.post(
        "/api/v1/push",
        json={
            "items": [
                item(
                    tag, queue=name, partition=name, transactionId=name, traceId=str(uuid.uuid4()), payload=""
                )
            ]
        },
    )
    assert pushed.status_code == 200 and [r["status"] for r in pushed.json()] == ["queued"], pushed.text
    configured = http.post("/api/v1/configure", json={"queue": name, "options": {"leaseTime": 30}})
    assert configured.status_code == 200 and configured.json()["configured"] is True
    popped = http.get(f"/api/v1/pop/queue/{name}/partition/{name}", params={"consumerGroup": name})
    assert [m["transactionId"] for m in popped.json()["messages"]] == [name]


def test_acknowledgments_empty_answers_an_empty_array(http: httpx.Client) -> None:
    response = http.post("/api/v1/ack/batch", json={"acknowledgments": []})
    assert response.status_code == 200 and response.json() == []
    grouped = http.post("/api/v1/ack/batch", json={"acknowledgments": [], "consumerGroup": "g"})
    assert grouped.status_code == 200 and grouped.json() == []


def test_items_empty_is_not_an_error(http: httpx.Client) -> None:
    response = http.post("/api/v1/push", json={"items": []})
    assert response.status_code == 201 and response.json() == []


def test_lease_extend_accepts_an_empty_body(http: httpx.Client) -> None:
    """The official Python client sends no body at all (API.md 7): that means ``{}``, i.e. 60 seconds."""
    queue = unique("lease")
    http.post("/api/v1/configure", json={"queue": queue, "options": {"leaseTime": 5}})
    http.post("/api/v1/push", json={"items": [{"queue": queue, "payload": 1}]})
    lease_id = http.get(f"/api/v1/pop/queue/{queue}").json()["leaseId"]
    assert lease_id

    empty_bodies: list[dict[str, Any]] = [
        {},
        {"content": b"", "headers": {"Content-Length": "0"}},
        {"json": {}},
    ]
    for kwargs in empty_bodies:
        response = http.post(f"/api/v1/lease/{lease_id}/extend", **kwargs)
        assert response.status_code == 200, response.text
        [result] = response.json()
        assert result["success"] is True and result["leaseId"] == lease_id and result["expiresAt"], result

    unknown = http.post(f"/api/v1/lease/{uuid.uuid4()}/extend")
    assert unknown.status_code == 200
    assert [(r["success"], r["error"]) for r in unknown.json()] == [(False, "Lease not found")]


def test_a_rejected_pop_leases_nothing(http: httpx.Client) -> None:
    queue = unique("badpop")
    http.post("/api/v1/push", json={"items": [{"queue": queue, "payload": "waiting"}]})
    for query in ("batch=abc", "batch=0", "partitions=0", "timeout=x&wait=true"):
        assert_rejected(http.get(f"/api/v1/pop/queue/{queue}?{query}"), query.split("=")[0])
    popped = http.get(f"/api/v1/pop/queue/{queue}", params={"batch": 5}).json()
    assert [m["data"] for m in popped["messages"]] == ["waiting"]


# -- bad requests fused with good ones -----------------------------------------------------------------------

BAD_PUSH_ITEMS: list[Callable[[str, int], dict[str, Any]]] = [
    lambda t, n: item(t, transactionId=f"{t}-{n}", traceId=f"trace-{n}"),
    lambda t, n: item(t, transactionId=f"{t}-{n}", partition=too_long(t)),
    lambda t, n: item(t, transactionId=f"{t}-{n}", payload={"text": f"{t}\u0000{n}"}),
    lambda t, n: item(t, transactionId=too_long(f"{t}-{n}")),
    lambda t, n: item(t, queue=n),
]


async def test_bad_pushes_fired_with_good_ones_never_fail_the_good_ones(
    broker: Any, db: psycopg.Connection[Any]
) -> None:
    good, bad = unique("fused-good"), unique("fused-bad")

    async def push_good(client: httpx.AsyncClient, n: int) -> httpx.Response:
        return await client.post(
            "/api/v1/push",
            json={
                "items": [
                    {
                        "queue": good,
                        "partition": f"p{n % 3}",
                        "transactionId": f"good-{n}",
                        "payload": {"n": n},
                    }
                ]
            },
        )

    async def push_bad(client: httpx.AsyncClient, n: int) -> httpx.Response:
        valid = {"queue": bad, "transactionId": f"{bad}-valid-{n}", "payload": {"n": n}}
        return await client.post("/api/v1/push", json={"items": [valid, BAD_PUSH_ITEMS[n % 5](bad, n)]})

    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    async with httpx.AsyncClient(base_url=broker.url, timeout=60, limits=limits) as client:
        calls = [push_good(client, n) for n in range(50)] + [push_bad(client, n) for n in range(50)]
        order = list(range(100))
        order[::2], order[1::2] = order[:50], order[50:]  # interleave good and bad
        responses = await asyncio.gather(*(calls[i] for i in order))
    by_call = dict(zip(order, responses, strict=True))

    for n in range(50):
        response = by_call[n]
        assert response.status_code == 200, response.text
        assert [r["status"] for r in response.json()] == ["queued"], response.text
    for n in range(50, 100):
        assert_rejected(by_call[n])
    rows = db.execute(
        """SELECT m.transaction_id FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
                         JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = %s""",
        (good,),
    ).fetchall()
    assert sorted(r[0] for r in rows) == sorted(f"good-{n}" for n in range(50))
    assert stored(db, bad) == {}


async def test_bad_acks_fired_with_good_ones_never_fail_the_good_ones(
    broker: Any, http: httpx.Client
) -> None:
    queue = unique("fused-ack")
    http.post("/api/v1/configure", json={"queue": queue, "options": {"leaseTime": 60}})
    for partition in range(50):
        http.post(
            "/api/v1/push",
            json={
                "items": [
                    {
                        "queue": queue,
                        "partition": f"p{partition}",
                        "transactionId": f"a{partition}",
                        "payload": partition,
                    }
                ]
            },
        )
    popped = http.get(f"/api/v1/pop/queue/{queue}", params={"batch": 50, "partitions": 50}).json()["messages"]
    assert len(popped) == 50

    bad_acks = [
        lambda m: {**m, "partitionId": "not-a-uuid"},
        lambda m: {**m, "status": "finished"},
        lambda m: {**m, "error": "broken \u0000 text", "status": "failed"},
        lambda m: {k: v for k, v in m.items() if k != "transactionId"},
    ]
    async with httpx.AsyncClient(
        base_url=broker.url, timeout=60, limits=httpx.Limits(max_connections=100)
    ) as client:
        goods = [
            client.post(
                "/api/v1/ack",
                json={
                    "transactionId": m["transactionId"],
                    "partitionId": m["partitionId"],
                    "leaseId": m["leaseId"],
                },
            )
            for m in popped
        ]
        bads = [
            client.post(
                "/api/v1/ack",
                json=bad_acks[n % 4]({"transactionId": m["transactionId"], "partitionId": m["partitionId"]}),
            )
            for n, m in enumerate(popped)
        ]
        responses = await asyncio.gather(*(call for pair in zip(goods, bads, strict=True) for call in pair))

    def acked(response: httpx.Response) -> bool:
        result = response.json() if response.status_code == 200 else None
        return isinstance(result, list) and result[0]["success"] is True

    good_failed = [response.text for response in responses[0::2] if not acked(response)]
    bad_accepted = [(r.status_code, r.text) for r in responses[1::2] if r.status_code != 400]
    assert good_failed == [] and bad_accepted == [], (len(good_failed), good_failed[:2], bad_accepted[:2])
    again = http.get(f"/api/v1/pop/queue/{queue}", params={"batch": 50, "partitions": 50}).json()
    assert again.get("messages") == [], again


# -- property-based fuzz -------------------------------------------------------------------------------------

OPTION_NAMES = [
    "leaseTime",
    "retryLimit",
    "retryDelay",
    "maxSize",
    "priority",
    "delayedProcessing",
    "windowBuffer",
    "ttl",
    "encryptionEnabled",
    "retentionEnabled",
    "deadLetterQueue",
    "unknownOption",
]
FUZZ_EXAMPLES_PER_ROUTE = 200


def fuzz_bodies(
    st: Any, partition_ids: list[str], transaction_ids: list[str], query_ids: list[str] | None = None
) -> dict[str, Any]:
    """Per write route, a strategy of request bodies: raw bytes, random text, random JSON, and (two times in
    three) JSON shaped like the route's body whose values are mostly plausible (names, UUIDs, statuses, the
    ids of real messages) and sometimes anything at all, so that the fuzz reaches the database, not only the
    validation. Repeating a branch of ``one_of`` adds no weight, hence the ``integers().flatmap`` choices."""
    json_value = st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=12),
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
        ),
        max_leaves=12,
    )
    wild = json_value | st.sampled_from(
        ["", "x" * 256, "a\u0000b", "Default", "2026-01-01T00:00:00Z", 0, -1, 2**31, True]
    )

    def mostly(plausible: Any) -> Any:
        return st.integers(0, 3).flatmap(lambda k: plausible if k else wild)

    queue = mostly(st.sampled_from(["fuzz-a", "fuzz-b", "fuzz.c"]) | st.text(min_size=1, max_size=12))
    name = mostly(st.sampled_from(["Default", "p1", ""]) | st.text(max_size=12))
    an_uuid = st.uuids().map(str)
    partition_id = mostly(st.sampled_from(partition_ids) | an_uuid)
    transaction_id = mostly(st.sampled_from(transaction_ids) | st.text(min_size=1, max_size=12))
    status = st.sampled_from(["completed", "success", "failed", "dlq", "retry"])
    push_item = st.fixed_dictionaries(
        {"queue": queue},
        optional={
            "partition": name,
            "payload": json_value,
            "transactionId": transaction_id,
            "traceId": mostly(an_uuid),
        },
    )
    ack_item = st.fixed_dictionaries(
        {"transactionId": transaction_id, "partitionId": partition_id},
        optional={
            "status": mostly(status),
            "leaseId": mostly(an_uuid),
            "consumerGroup": name,
            "error": mostly(st.text(max_size=8)),
        },
    )
    operation = st.integers(0, 2).flatmap(
        lambda k: [
            ack_item.map(lambda a: {"type": "ack", **a}),
            st.lists(push_item, min_size=1, max_size=2).map(lambda items: {"type": "push", "items": items}),
            st.fixed_dictionaries(
                {}, optional={"type": mostly(st.sampled_from(["ack", "push"])), "items": wild}
            ),
        ][k]
    )
    options = st.dictionaries(
        st.sampled_from(OPTION_NAMES), mostly(st.integers(0, 100) | st.booleans()), max_size=5
    )
    shaped = {
        "/api/v1/push": st.fixed_dictionaries(
            {"items": mostly(st.lists(mostly(push_item), min_size=1, max_size=3))}
        ),
        "/api/v1/ack": ack_item,
        "/api/v1/ack/batch": st.fixed_dictionaries(
            {"acknowledgments": mostly(st.lists(mostly(ack_item), min_size=1, max_size=3))},
            optional={"consumerGroup": name},
        ),
        "/api/v1/transaction": st.fixed_dictionaries(
            {"operations": mostly(st.lists(operation, min_size=1, max_size=3))},
            optional={"requiredLeases": wild},
        ),
        "/api/v1/configure": st.fixed_dictionaries(
            {"queue": queue}, optional={"namespace": name, "task": name, "options": mostly(options)}
        ),
        # Queen Streams: a registered query's id (when given) so that cycles reach the database
        "/streams/v1/queries": st.fixed_dictionaries(
            {
                "name": mostly(st.sampled_from(["fuzz-q", "fuzz-r"])),
                "source_queue": queue,
                "config_hash": mostly(st.sampled_from(["h1", "h2"])),
            },
            optional={"sink_queue": queue, "reset": mostly(st.booleans())},
        ),
        "/streams/v1/cycle": st.fixed_dictionaries(
            {
                "query_id": mostly(st.sampled_from(query_ids or [str(uuid.UUID(int=1))]) | an_uuid),
                "partition_id": partition_id,
            },
            optional={
                "consumer_group": name,
                "state_ops": mostly(
                    st.lists(
                        st.fixed_dictionaries(
                            {
                                "type": mostly(st.sampled_from(["upsert", "delete"])),
                                "key": mostly(st.text(max_size=8)),
                            },
                            optional={"value": json_value},
                        ),
                        max_size=3,
                    )
                ),
                "push_items": mostly(st.lists(mostly(push_item), max_size=2)),
                "ack": mostly(st.none() | ack_item.map(lambda a: {**a, "count": 1})),
                "release_lease": mostly(st.booleans()),
            },
        ),
        "/streams/v1/state/get": st.fixed_dictionaries(
            {
                "query_id": mostly(st.sampled_from(query_ids or [str(uuid.UUID(int=1))])),
                "partition_id": partition_id,
            },
            optional={
                "keys": mostly(st.lists(st.text(max_size=8), max_size=3)),
                "key_prefix": mostly(st.text()),
                "ripe_at_or_before": mostly(st.integers() | st.floats(allow_nan=False)),
            },
        ),
    }
    unshaped = [
        st.binary(max_size=40),
        st.text(max_size=40).map(str.encode),
        json_value.map(lambda value: json.dumps(value).encode()),
    ]

    def bodies(shape: Any) -> Any:
        as_json = shape.map(lambda value: json.dumps(value).encode())
        return st.integers(0, 8).flatmap(lambda k: unshaped[k] if k < len(unshaped) else as_json)

    return {path: bodies(shape) for path, shape in shaped.items()}


def check_fuzzed_response(path: str, content: bytes, response: httpx.Response) -> None:
    """Never a 5xx; a 400 carries a string ``error``; anything else is the route's normal JSON shape."""
    context = (path, content, response.status_code, response.text)
    assert response.status_code < 500, context
    if response.status_code == 400:
        assert isinstance(response.json().get("error"), str), context
    elif path in ("/api/v1/push", "/api/v1/ack", "/api/v1/ack/batch"):
        # per-item results; a dict here is a failed database call (API.md 6.3): bad input got through
        assert isinstance(response.json(), list), context
    elif path == "/api/v1/configure":
        assert response.json()["configured"] is True, context
    else:
        assert isinstance(response.json()["success"], bool), context


def test_fuzzed_bodies_never_cause_a_server_error(start_broker: Callable[..., Any], db_url: str) -> None:
    """On its own broker and database, since valid fuzzed requests do create queues with random names."""
    hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is installed by the test extra")
    strategies_module = pytest.importorskip("hypothesis.strategies")
    fuzz_broker = start_broker(db_url, workers=1)
    sent: list[tuple[str, int]] = []
    failures: list[str] = []

    def fuzz(client: httpx.Client, path: str, bodies: Any) -> None:
        @hypothesis.settings(
            max_examples=FUZZ_EXAMPLES_PER_ROUTE,
            deadline=None,
            database=None,
            suppress_health_check=[hypothesis.HealthCheck.too_slow, hypothesis.HealthCheck.data_too_large],
        )
        @hypothesis.given(content=bodies)
        def post(content: bytes) -> None:
            response = client.post(path, content=content, headers={"Content-Type": "application/json"})
            sent.append((path, response.status_code))
            check_fuzzed_response(path, content, response)

        try:
            post()
        except (
            AssertionError,
            ValueError,
            KeyError,
            TypeError,
        ) as failure:  # report every route, not the first
            failures.append(f"{path}: {failure}")

    with httpx.Client(base_url=fuzz_broker.url, timeout=30) as client:
        client.post(
            "/api/v1/push",
            json={
                "items": [
                    {"queue": "fuzz-a", "partition": p, "transactionId": f"t{n}", "payload": n}
                    for n in range(4)
                    for p in ("Default", "p1")
                ]
            },
        )
        leased = client.get("/api/v1/pop/queue/fuzz-a", params={"batch": 2}).json()["messages"]
        query = client.post(
            "/streams/v1/queries", json={"name": "fuzz-q", "source_queue": "fuzz-a", "config_hash": "h1"}
        ).json()["query_id"]
        strategies = fuzz_bodies(
            strategies_module,
            sorted({m["partitionId"] for m in leased}),
            [f"t{n}" for n in range(4)],
            [query],
        )
        for path, bodies in strategies.items():
            fuzz(client, path, bodies)

        health = client.get("/health")
        assert health.status_code == 200 and health.json()["status"] == "healthy"
        queue = unique("after-fuzz")
        pushed = client.post("/api/v1/push", json={"items": [{"queue": queue, "payload": "still works"}]})
        assert [r["status"] for r in pushed.json()] == ["queued"]
        popped = wait_until(
            lambda: client.get(f"/api/v1/pop/queue/{queue}").json().get("messages"),
            timeout_s=10,
            message="a pop after the fuzz",
        )
        assert [m["data"] for m in popped] == ["still works"]

    assert failures == [], "\n\n".join(failures)
    assert len(sent) >= len(strategies) * FUZZ_EXAMPLES_PER_ROUTE
    assert any(status != 400 for _, status in sent)  # the fuzz got past validation too
