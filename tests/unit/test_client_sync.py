"""The blocking ``Queen`` is derived from ``AsyncQueen`` (not a hand-kept copy), and the public surface."""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import httpx
import pytest

import queenpy.client as client_package
from queenpy.client import AsyncQueen, Message, PushResult, Queen
from queenpy.client._builders import (
    DeadLetterBuilder,
    QueueBuilder,
    TransactionBuilder,
    TransactionQueueBuilder,
)

SRC = Path(client_package.__file__).resolve().parents[2]


def public_methods(cls: type) -> set[str]:
    return {name for name, value in inspect.getmembers(cls) if not name.startswith("_") and callable(value)}


def test_queen_defines_no_copy_of_the_async_methods() -> None:
    own = {name for name in vars(Queen) if not name.startswith("_")}
    assert own <= {"close", "async_client"}, own
    for builder in (QueueBuilder, TransactionBuilder, TransactionQueueBuilder, DeadLetterBuilder):
        assert builder.__module__ == "queenpy.client._builders"  # the only builders, shared by both clients


def test_every_async_method_is_reachable_on_the_sync_client() -> None:
    with Queen("http://localhost:1") as q:
        for name in public_methods(AsyncQueen):
            assert callable(getattr(q, name)), name
            assert name in dir(q)


def recording_transport(log: list[httpx.Request]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        log.append(request)
        if request.url.path == "/api/v1/push":
            items = json.loads(request.content)["items"]
            return httpx.Response(
                200, json=[{"status": "queued", "transaction_id": i["transactionId"]} for i in items]
            )
        if request.url.path.startswith("/api/v1/pop/"):
            return httpx.Response(
                200,
                json={
                    "queue": "q",
                    "messages": [
                        {
                            "id": "m",
                            "transactionId": "t",
                            "partitionId": "p",
                            "partition": "Default",
                            "leaseId": "l",
                            "data": {"n": 1},
                            "createdAt": "2026-01-01T00:00:00.000000Z",
                        }
                    ],
                },
            )
        if request.url.path == "/api/v1/ack":
            return httpx.Response(200, json=[{"transactionId": "t", "success": True}])
        return httpx.Response(404)

    return httpx.MockTransport(answer)


def test_builders_and_coroutines_block_and_return_plain_values() -> None:
    log: list[httpx.Request] = []
    with Queen("http://broker:6632", transport=recording_transport(log)) as q:
        results = q.queue("q").partition("p").push([{"a": 1}, {"a": 2}])
        assert [type(r) for r in results] == [PushResult, PushResult]
        messages = q.queue("q").pop()
        assert [type(m) for m in messages] == [Message] and messages[0].data == {"n": 1}
        assert q.ack(messages[0]).success
        assert isinstance(q.async_client, AsyncQueen)
    assert [r.url.path for r in log] == ["/api/v1/push", "/api/v1/pop/queue/q", "/api/v1/ack"]


def test_sync_handlers_run_in_a_worker_thread_and_may_call_the_client() -> None:
    log: list[httpx.Request] = []
    threads: list[str] = []
    with Queen("http://broker:6632", transport=recording_transport(log)) as q:

        def handler(message: Message) -> None:
            threads.append(threading.current_thread().name)
            q.ack(message, "completed")  # blocking call from inside a sync handler

        handled = q.queue("q").limit(2).auto_ack(False).consume(handler)
    assert handled == 2
    assert threading.main_thread().name not in threads and "queenpy-client-loop" not in threads
    assert [r.url.path for r in log].count("/api/v1/ack") == 2


def test_using_the_sync_client_after_close_fails_clearly() -> None:
    q = Queen("http://broker:6632")
    q.close()
    with pytest.raises(RuntimeError, match="closed"):
        q.queue("q").pop()


def test_public_surface_is_explicit() -> None:
    exported = set(client_package.__all__)
    assert len(exported) == len(client_package.__all__)
    for name in exported:
        assert hasattr(client_package, name), name
    import types

    # submodules (``queenpy.client._async``) appear as attributes once imported; they are not the surface
    public = {
        name
        for name, value in vars(client_package).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    } - {"annotations"}
    assert public == exported


def test_client_imports_neither_the_broker_nor_the_database_layers() -> None:
    code = (
        "import sys, queenpy.client; "
        "bad = [m for m in sys.modules if m.split('.')[:2] in (['queenpy','server'], ['queenpy','engine'],"
        " ['queenpy','store']) or m.split('.')[0] in ('asyncpg', 'psycopg', 'starlette', 'uvicorn')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


# -- graceful shutdown on signals -------------------------------------------------------------------------

SIGNAL_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys, httpx
    from queenpy.client import AsyncQueen, Queen

    acks, pops = [], []
    def answer(request):
        if request.url.path.startswith("/api/v1/pop/"):  # one message, then an empty queue
            pops.append(1)
            return httpx.Response(200, json={"queue": "q", "messages": [
                {"id": "m", "transactionId": "t", "partitionId": "p", "leaseId": "l", "data": 1}
            ] if len(pops) == 1 else []})
        acks.append(json.loads(request.content)["status"])
        return httpx.Response(200, json=[{"success": True}])

    def handler(message):
        print("handling", flush=True)
        sys.stdin.readline()  # the test sends SIGINT, then lets the handler finish
        print("finished", flush=True)

    transport = httpx.MockTransport(answer)
    if sys.argv[1] == "sync":
        with Queen("http://broker:6632", transport=transport) as q:
            handled = q.queue("q").wait(False).consume(handler)
    else:
        async def main():
            async with AsyncQueen("http://broker:6632", transport=transport) as q:
                return await q.queue("q").wait(False).consume(handler)
        handled = asyncio.run(main())
    print(f"returned handled={handled} acks={acks}", flush=True)
    """
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    return env


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_consume_after_the_handler_in_flight(flavour: str, signum: int) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", SIGNAL_SCRIPT, flavour],
        env=_env(),
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stdin is not None
    try:
        assert process.stdout.readline().strip() == "handling"
        process.send_signal(signum)
        process.stdin.write("go\n")
        process.stdin.flush()
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert out.splitlines() == ["finished", "returned handled=1 acks=['completed']"]
