"""What the request path writes without touching prometheus_client's shared values per request: a
:class:`LocalHistogram` flushed into a histogram gives the exposition that observing it directly gives (so
a change of prometheus_client's internals fails here), and a flush adds each observation once; and the body
limit the app enforces under granian (``server/limits.body_limit``)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from starlette.types import Message, Receive, Scope, Send

from queenpy.server.limits import body_limit
from queenpy.services.prometheus import LocalHistogram, WorkerInstruments

BUCKETS = (0.001, 0.01, 0.1, 1.0)
VALUES = [0.0, 0.0005, 0.001, 0.0011, 0.01, 0.5, 1.0, 1.5, 30.0, 0.001]


def _samples(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
    """Every sample but the creation time (which differs between two histograms)."""
    return [
        (s.name, s.labels, s.value)
        for family in registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    ]


def _histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram("latency_seconds", "latency", ["route"], buckets=BUCKETS, registry=registry)


def test_a_flushed_tally_exposes_what_direct_observations_expose() -> None:
    direct_registry, tallied_registry = CollectorRegistry(), CollectorRegistry()
    direct = _histogram(direct_registry).labels("/push")
    tally = LocalHistogram(_histogram(tallied_registry).labels("/push"))
    for value in VALUES[:6]:
        direct.observe(value)
        tally.observe(value)
    tally.flush()
    tally.flush()  # nothing new: adds nothing
    for value in VALUES[6:]:
        direct.observe(value)
        tally.observe(value)
    assert _samples(tallied_registry) != _samples(direct_registry)  # not flushed yet
    tally.flush()
    assert _samples(tallied_registry) == _samples(direct_registry)
    assert len(_samples(direct_registry)) == len(BUCKETS) + 3  # the buckets, +Inf, _count and _sum
    assert tallied_registry.get_sample_value("latency_seconds_count", {"route": "/push"}) == len(VALUES)


def test_the_worker_flushes_its_tallies_when_it_samples() -> None:
    instruments = WorkerInstruments(worker_id=0)
    assert instruments.registry is not None  # no PROMETHEUS_MULTIPROC_DIR in the tests' environment
    latency = instruments.request_latency("POST", "/api/v1/push")
    latency.observe(0.002)
    instruments.observe_call("push", 7, 0.004)

    def count(name: str, labels: dict[str, str]) -> float | None:
        assert instruments.registry is not None
        return instruments.registry.get_sample_value(name, labels)

    push = {"method": "POST", "route": "/api/v1/push"}
    assert count("queen_http_request_duration_seconds_count", push) == 0
    numbers = {
        "poolSize": 1.0,
        "poolIdle": 1.0,
        "poolActive": 0.0,
        "rssBytes": 1.0,
        "parked": 0.0,
        "cpuPercent": 0.0,
        "eventLoopLagMs": 0.0,
    }
    instruments.sample(numbers, 0.0, 0.0, 1.0, {})
    assert count("queen_http_request_duration_seconds_count", push) == 1
    assert count("queen_fusion_batch_size_sum", {"op": "push"}) == 7
    assert count("queen_fusion_call_duration_seconds_count", {"op": "push"}) == 1


seen: list[str] = []  # what the inner app saw of each request


async def _call(app: Any, headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> list[Message]:
    """Run ``app`` on one request whose body arrives in ``chunks``; returns what it sent."""
    sent: list[Message] = []
    scope: Scope = {"type": "http", "method": "POST", "path": "/api/v1/push", "headers": headers}
    queue = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]

    async def receive() -> Message:
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def _echo(scope: Scope, receive: Receive, send: Send) -> None:
    """Reads the whole body, then answers 200 with its length."""
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            seen.append("disconnect")
            return
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    seen.append(f"body {size}")
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(size).encode()})


async def test_the_body_limit_refuses_a_large_length_and_a_long_chunked_body() -> None:
    app = body_limit(_echo, 10)
    seen.clear()
    sent = await _call(app, [(b"content-length", b"11")], [b"x" * 11])
    assert sent[0]["status"] == 413 and b"11 bytes, the limit is 10" in sent[1]["body"] and seen == []
    sent = await _call(app, [(b"content-length", b"10")], [b"x" * 10])
    assert sent[0]["status"] == 200 and seen == ["body 10"]
    seen.clear()
    sent = await _call(app, [(b"transfer-encoding", b"chunked")], [b"x" * 6, b"x" * 6])
    assert [m.get("status") for m in sent if m["type"] == "http.response.start"] == [413]
    assert seen == ["disconnect"]  # the app never had the whole body: nothing was submitted
    seen.clear()
    sent = await _call(app, [(b"transfer-encoding", b"chunked")], [b"x" * 6, b"x" * 4])
    assert sent[0]["status"] == 200 and seen == ["body 10"]
