"""Worker processes sharing one port (DESIGN.md section 2), on the embedded or an external PostgreSQL.

``serve()`` resolves the database (starting the embedded PostgreSQL when none is configured), applies
migrations once, binds the port, then forks ``NUM_WORKERS`` processes that each run the ASGI app under
uvicorn (uvloop + httptools), or under granian's embedded server with ``QUEENPY_HTTP_SERVER=granian`` (it
cost more CPU per request: benchmarks/RESULTS.md, "HTTP server"). A worker that dies is restarted; SIGINT
or SIGTERM stops the workers, then the embedded PostgreSQL.

On Linux each worker listens on its own socket bound to the port with ``SO_REUSEPORT``, and the kernel
spreads new connections over them by a hash of the addresses. On one shared socket, whichever worker woke
first accepted a burst of connections: 50 connections opened at once went 91% to one worker, which then
fused small batches with one call in flight while the other worker sat idle. The supervisor keeps the port
with a bound socket that does not listen. A worker's socket dies with it; connections waiting in its
accept queue are reset. Elsewhere the workers share one listening socket.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import asyncpg

from queenpy.errors import ConfigurationError
from queenpy.settings import Settings
from queenpy.store.migrate import apply_migrations

__all__ = ["migrate", "resolve_database", "serve"]

log = logging.getLogger("queenpy.serve")


@dataclass
class ResolvedDatabase:
    url: str
    embedded: Any = None  # EmbeddedPostgres when we own the server


def resolve_database(settings: Settings) -> ResolvedDatabase:
    """The configured database, or a started embedded PostgreSQL."""
    if settings.database_url:
        return ResolvedDatabase(settings.database_url)
    from queenpy.store.embedded import EmbeddedPostgres

    embedded = EmbeddedPostgres(settings.data_dir)
    log.info("embedded PostgreSQL: data in %s", embedded.data_dir)
    return ResolvedDatabase(embedded.url, embedded)


async def _migrate(url: str, attempts: int = 30) -> list[str]:
    for attempt in range(attempts):
        try:
            connection = await asyncpg.connect(url)
            break
        except (OSError, asyncpg.CannotConnectNowError) as exc:
            if attempt == attempts - 1:
                raise
            log.info("waiting for PostgreSQL: %s", exc)
            await asyncio.sleep(1)
    try:
        return await apply_migrations(connection)
    finally:
        await connection.close()


def migrate(url: str) -> list[str]:
    """Apply migrations and procedures to ``url``; return what was applied."""
    return asyncio.run(_migrate(url))


REUSEPORT = sys.platform == "linux" and hasattr(socket, "SO_REUSEPORT")
HTTP_SERVERS = ("uvicorn", "granian")  # QUEENPY_HTTP_SERVER


def _bind(host: str, port: int, *, listen: bool = True, reuseport: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuseport:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _tune_gc() -> None:
    """Keep the cyclic garbage collector off the request path.

    Everything imported and built before serving is moved to the permanent generation (``gc.freeze``), so
    full collections do not scan it again and again, and young collections run every 50,000 net allocations
    instead of 700. Measured with py-spy under push load: the collector took 14% of a worker's CPU before.
    Request handling allocates few reference cycles; they are still collected, just less often.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def _uvicorn_log_level(settings: Settings) -> str:
    """uvicorn's level: quiet (warning) at the default ``info`` unless the access log is on (its lines are
    info); ``trace`` is uvicorn's own name for Queen's most verbose level."""
    if settings.log_level == "info":
        return "info" if settings.access_log else "warning"
    named = {"off": "critical", "warn": "warning"}.get(settings.log_level, settings.log_level)
    return named if named in ("critical", "error", "warning", "debug", "trace") else "info"


def _run_worker(worker_id: int, settings: Settings, url: str, sock: socket.socket) -> None:
    if settings.http_server == "granian":
        _run_granian_worker(worker_id, settings, url, sock)
    else:
        _run_uvicorn_worker(worker_id, settings, url, sock)


def _run_granian_worker(worker_id: int, settings: Settings, url: str, sock: socket.socket) -> None:
    """The app under granian's embedded server (its HTTP/1.1 in Rust, the app on this process's uvloop).
    granian binds its own listening socket, with ``SO_REUSEPORT`` on Linux, beside the supervisor's."""
    import uvloop

    try:
        from granian.constants import HTTPModes, Interfaces
        from granian.http import HTTP1Settings
        from granian.server.embed import Server
    except ImportError as exc:
        raise ConfigurationError(
            "QUEENPY_HTTP_SERVER=granian needs granian: install `queenpy[granian]`"
        ) from exc

    from queenpy.server.app import create_app
    from queenpy.server.limits import body_limit

    port = sock.getsockname()[1]
    sock.close()
    app = create_app(settings, url, worker_id)
    _tune_gc()
    server = Server(
        body_limit(app, settings.http_max_body_bytes),
        address=settings.host,
        port=port,
        interface=Interfaces.ASGI,
        http=HTTPModes.http1,
        websockets=False,
        backlog=2048,
        http1_settings=HTTP1Settings(
            header_read_timeout=settings.http_header_timeout_ms,
            max_buffer_size=settings.http_max_header_bytes,
        ),
        log_access=settings.access_log,
        log_enabled=settings.log_level != "off",
    )

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, server.signal_handler_interrupt)
        await server.serve()

    uvloop.run(run())


def _run_uvicorn_worker(worker_id: int, settings: Settings, url: str, sock: socket.socket) -> None:
    import uvicorn

    from queenpy.server.app import create_app
    from queenpy.server.limits import HttpLimits, protocol_with_limits

    app = create_app(settings, url, worker_id)
    _tune_gc()
    # httptools with one socket write per response instead of two (queenpy.server.http), under the HTTP
    # limits of queenpy.server.limits (head and body size, slow clients); uvicorn's own: connections per
    # worker (503 beyond) and idle keep-alive connections
    config = uvicorn.Config(
        app,
        loop="uvloop",
        http=protocol_with_limits(HttpLimits.of(settings)),
        lifespan="on",
        access_log=settings.access_log,
        log_level=_uvicorn_log_level(settings),
        timeout_keep_alive=settings.http_keep_alive_timeout_s,
        backlog=2048,
        limit_concurrency=settings.http_max_connections,
        timeout_graceful_shutdown=10,
        # client addresses are never used: skip the middleware; and no "server: uvicorn"
        # header, one less header to validate and write per response
        proxy_headers=False,
        server_header=False,
    )
    uvicorn.Server(config).run(sockets=[sock])


def serve(settings: Settings) -> None:
    """Run the broker until SIGINT/SIGTERM. Blocks."""
    logging.basicConfig(
        level=getattr(logging, settings.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    from queenpy.server.auth import Authenticator

    Authenticator(settings.jwt)  # an unusable JWT configuration aborts startup here, not in every worker
    if settings.http_server not in HTTP_SERVERS:
        raise ConfigurationError(
            f"QUEENPY_HTTP_SERVER must be one of {', '.join(HTTP_SERVERS)}, not {settings.http_server!r}"
        )
    if settings.http_server == "granian" and not REUSEPORT:
        raise ConfigurationError("QUEENPY_HTTP_SERVER=granian needs SO_REUSEPORT (Linux)")
    database = resolve_database(settings)
    try:
        applied = migrate(database.url)
        if applied:
            log.info("applied %d migration step(s): %s", len(applied), ", ".join(applied))
        sock = _bind(settings.host, settings.port, listen=not REUSEPORT, reuseport=REUSEPORT)
        log.info(
            "queenpy listening on http://%s:%d with %d worker process(es)%s",
            settings.host,
            settings.port,
            settings.num_workers,
            " on embedded PostgreSQL" if database.embedded else "",
        )
        _supervise(settings, database.url, sock)
    finally:
        if database.embedded is not None:
            database.embedded.stop()


def _metrics_dir() -> tuple[str, bool]:
    """The directory the workers share their Prometheus metrics through (``PROMETHEUS_MULTIPROC_DIR``, set
    before the workers fork; emptied at start). Returns ``(directory, created here)``."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    directory = given or tempfile.mkdtemp(prefix="queenpy-metrics-")
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        if name.endswith(".db"):
            os.unlink(os.path.join(directory, name))
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    return directory, given is None


def _supervise(settings: Settings, url: str, sock: socket.socket) -> None:
    context = multiprocessing.get_context("fork")
    workers: dict[int, multiprocessing.process.BaseProcess] = {}
    stopping = False
    metrics_dir, own_metrics_dir = _metrics_dir()

    def start(worker_id: int) -> None:
        # with SO_REUSEPORT, a listening socket of the worker's own (the supervisor closes its copy)
        worker_sock = _bind(settings.host, sock.getsockname()[1], reuseport=True) if REUSEPORT else sock
        try:
            process = context.Process(
                target=_run_worker,
                args=(worker_id, settings, url, worker_sock),
                name=f"queenpy-worker-{worker_id}",
                daemon=False,
            )
            process.start()
        finally:
            if worker_sock is not sock:
                worker_sock.close()
        workers[worker_id] = process

    def on_signal(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    for worker_id in range(settings.num_workers):
        start(worker_id)
    print(
        f"queenpy ready on http://{settings.host}:{settings.port} (pid {os.getpid()})",
        file=sys.stderr,
        flush=True,
    )
    while not stopping:
        time.sleep(0.2)
        for worker_id, process in list(workers.items()):
            if not process.is_alive() and not stopping:
                log.warning("worker %d exited with %s; restarting", worker_id, process.exitcode)
                if process.pid is not None:
                    from prometheus_client import multiprocess

                    multiprocess.mark_process_dead(process.pid, metrics_dir)  # type: ignore[no-untyped-call]
                start(worker_id)
    for process in workers.values():
        if process.is_alive() and process.pid is not None:
            os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for process in workers.values():
        process.join(timeout=max(0.1, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
    sock.close()
    if own_metrics_dir:
        shutil.rmtree(metrics_dir, ignore_errors=True)
