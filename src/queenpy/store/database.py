"""PostgreSQL access of a broker process: one asyncpg pool, procedure calls over JSONB, LISTEN.

JSONB goes in and out as text: a fused batch is serialised once (orjson) and passed as one ``$1::jsonb``
parameter; the procedure's JSONB result comes back as one string. No per-message Python object is built
by this layer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

import asyncpg
import orjson
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_random

from queenpy.errors import DatabaseUnavailable

__all__ = ["PROCEDURES", "Database", "Unavailable"]

log = logging.getLogger("queenpy.store")

# The procedures the broker calls with one JSONB batch, and the statement that calls each: the name is
# the key, never taken from users. Pushes do not NOTIFY inside their transaction (see push_items_v3);
# the engine notifies after COMMIT with :meth:`Database.notify`.
PROCEDURES: dict[str, str] = {
    "push_items_v3": "SELECT queen.push_items_v3($1::jsonb, false, false)",
    "pop_v2": "SELECT queen.pop_v2($1::jsonb)::text",
    "pop_group_v1": "SELECT queen.pop_group_v1($1::jsonb)::text",
    "ack_v2": "SELECT queen.ack_v2($1::jsonb)::text",
    "renew_lease_v1": "SELECT queen.renew_lease_v1($1::jsonb)::text",
    "transaction_v1": "SELECT queen.transaction_v1($1::jsonb)::text",
    "transaction_v2": "SELECT queen.transaction_v2($1::jsonb)::text",
    "transaction_v3": "SELECT queen.transaction_v3($1::jsonb)::text",
    "configure_queue_v1": "SELECT queen.configure_queue_v1($1::jsonb)::text",
    "dlq_list_v1": "SELECT queen.dlq_list_v1($1::jsonb)::text",
    "trace_record_v1": "SELECT queen.trace_record_v1($1::jsonb)::text",
    "streams_register_v1": "SELECT queen.streams_register_v1($1::jsonb)::text",
    "streams_cycle_v1": "SELECT queen.streams_cycle_v1($1::jsonb)::text",
    "streams_state_get_v1": "SELECT queen.streams_state_get_v1($1::jsonb)::text",
}

ConnectionErrors = (
    OSError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.InterfaceError,
    asyncio.TimeoutError,
    # a multi-host URL with target_session_attrs=read-write whose reachable hosts are all standbys (the
    # primary died and no standby is promoted yet)
    asyncpg.exceptions.TargetServerAttributeNotMatched,
    # the client's side of a connection broke mid-message (asyncpg's ProtocolError) or its statement cache
    # went stale: the connection is dropped and the same call may be made again on another one
    asyncpg.exceptions.InternalClientError,
)

# Errors meaning "PostgreSQL is not reachable" (as opposed to an SQL error): pushes go to the failover
# buffer on these; pops and acks are answered 503 with Retry-After (queenpy.server.app).
Unavailable = (
    *ConnectionErrors,
    asyncpg.exceptions.OperatorInterventionError,  # admin shutdown, crash shutdown
    asyncpg.exceptions.ConnectionFailureError,
    asyncpg.exceptions.ReadOnlySQLTransactionError,  # the server went read-only (demoted to a standby)
    DatabaseUnavailable,
)

#: The errors after which PostgreSQL has rolled a call back whole and asks for it to be made again (its
#: manual, "Serialization Failure Handling": SQLSTATE 40001 serialization_failure, 40P01 deadlock_detected).
#: A call is one statement in a transaction of its own, so making it again applies it at most once.
Transient = (asyncpg.exceptions.SerializationError, asyncpg.exceptions.DeadlockDetectedError)
#: Attempts of one call that meets :data:`Transient` errors, and the longest random pause before each retry
#: (seconds; random, so the calls that met each other do not meet again in step).
CALL_ATTEMPTS = 3
RETRY_PAUSE_S = 0.05

#: Seconds to wait for one connection attempt (all hosts of a multi-host URL together: asyncpg applies one
#: timeout to the whole attempt): a host that died without refusing (a machine gone, not a process) must not
#: hold a request for asyncpg's default 60 s.
CONNECT_TIMEOUT_S = 5.0


async def _keep_session(connection: asyncpg.Connection) -> None:
    """The pool's reset hook: nothing to reset. asyncpg's default runs ``SELECT pg_advisory_unlock_all();
    CLOSE ALL; UNLISTEN *; RESET ALL`` on every release, one more round trip and PostgreSQL statement per
    procedure call; pooled connections here only ever run single procedure calls (no session advisory locks,
    cursors, LISTEN or SET: those live on dedicated connections), so there is no session state to undo."""


class Database:
    """An asyncpg pool plus a dedicated LISTEN connection.

    Behind libpq's multi-host URL (``postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write``)
    every new connection goes to the host that accepts writes: after a failover, connections to the old
    primary fail (:data:`Unavailable`), the pool replaces them on the new one, and a server that went
    read-only has every pooled connection expired (:meth:`call`). The LISTEN connection reconnects the same
    way (:meth:`listen`).

    Args:
        url: a libpq URL (``postgresql://user:pw@host:port/db``, ``...?host=/socket/dir``, or several
            ``host:port`` separated by commas).
        pool_size: most connections this process opens for requests.
        statement_timeout_ms: server-side ``statement_timeout`` of every pooled connection.
        application_name: how the pool's connections are named in ``pg_stat_activity``.
    """

    def __init__(
        self,
        url: str,
        pool_size: int = 10,
        statement_timeout_ms: int = 30000,
        application_name: str = "queenpy",
    ) -> None:
        self.url = url
        self.application_name = application_name
        self.pool_size = pool_size
        self.statement_timeout_ms = statement_timeout_ms
        self._pool: asyncpg.Pool | None = None
        self._listener: asyncpg.Connection | None = None
        self._relisten: asyncio.Task[None] | None = None
        self._notifier: asyncpg.Connection | None = None

    async def open(self) -> None:
        """Open the pool. Raises :class:`DatabaseUnavailable` when PostgreSQL cannot be reached."""
        try:
            self._pool = await asyncpg.create_pool(
                self.url,
                min_size=1,
                max_size=self.pool_size,
                reset=_keep_session,
                timeout=CONNECT_TIMEOUT_S,
                server_settings={
                    "statement_timeout": str(self.statement_timeout_ms),
                    "application_name": self.application_name,
                    "jit": "off",
                },
            )
        except ConnectionErrors as exc:
            raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {exc}") from exc

    async def close(self) -> None:
        """Close the LISTEN connection and the pool."""
        pool, self._pool = self._pool, None
        if self._relisten is not None:
            self._relisten.cancel()
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        if self._notifier is not None:
            await self._notifier.close()
            self._notifier = None
        if pool is not None:
            await pool.close()

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise DatabaseUnavailable("database pool is not open")
        return self._pool

    async def call(self, procedure: str, payload: str) -> str:
        """``SELECT queen.<procedure>($1::jsonb)``: the JSONB result as text.

        ``procedure`` is a key of :data:`PROCEDURES` (names are never taken from users); KeyError otherwise.
        A call rolled back by a :data:`Transient` error (a deadlock, a serialization failure) is made again,
        :data:`CALL_ATTEMPTS` times in all, and raises that error after the last; other errors are raised at
        once.
        """
        statement = PROCEDURES[procedure]
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(Transient),
            stop=stop_after_attempt(CALL_ATTEMPTS),
            wait=wait_random(0, RETRY_PAUSE_S),
            before_sleep=lambda state: log.warning(
                "%s rolled back (%s), calling it again",
                procedure,
                state.outcome and state.outcome.exception(),
            ),
            reraise=True,
        ):
            with attempt:
                try:
                    async with self.pool.acquire() as connection:
                        result: str = await connection.fetchval(statement, payload)
                except asyncpg.exceptions.ReadOnlySQLTransactionError:
                    await self._expire()
                    raise
        return result

    async def _expire(self) -> None:
        """The server this pool reached went read-only (a primary demoted): replace every pooled connection
        (new ones go to the host that accepts writes)."""
        log.warning("PostgreSQL answered read-only: reconnecting the pool to the primary")
        if self._pool is not None:
            await self._pool.expire_connections()
        if self._notifier is not None:
            self._notifier.terminate()
            self._notifier = None

    async def notify(self, notifications: list[tuple[str, str]]) -> None:
        """NOTIFY each ``(channel, payload)``, in one transaction on a dedicated connection that commits
        without waiting for the WAL flush (``synchronous_commit = off``: the notification carries no data
        that must survive a crash), so PostgreSQL's global notify lock is held only for an instant."""
        if self._notifier is None or self._notifier.is_closed():
            self._notifier = await asyncpg.connect(
                self.url,
                timeout=CONNECT_TIMEOUT_S,
                server_settings={"synchronous_commit": "off", "application_name": "queenpy-notify"},
            )
        await self._notifier.execute(
            "SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS t(c, p)",
            [channel for channel, _ in notifications],
            [payload for _, payload in notifications],
        )

    async def fetchval(self, query: str, *args: Any) -> Any:
        """One value of a fixed query (queries live in the procedures; ``query`` is a call of one)."""
        try:
            async with self.pool.acquire() as connection:
                return await connection.fetchval(query, *args)
        except asyncpg.exceptions.ReadOnlySQLTransactionError:
            await self._expire()
            raise

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        """Rows of a fixed query."""
        try:
            async with self.pool.acquire() as connection:
                return list(await connection.fetch(query, *args))
        except asyncpg.exceptions.ReadOnlySQLTransactionError:
            await self._expire()
            raise

    async def server_role(self) -> dict[str, Any] | None:
        """The server the pool reaches now (``queen.server_role_v1``): ``{host, port, inRecovery,
        synchronousCommit, synchronousStandbyNames}`` (host None on a Unix socket); None when it cannot be
        asked within 2 s."""
        try:
            async with self.pool.acquire(timeout=2) as connection:
                text = await connection.fetchval("SELECT queen.server_role_v1()::text", timeout=2)
        except Exception:  # noqa: BLE001 - unreachable, or an older schema: /health says so with a null
            return None
        role: dict[str, Any] = orjson.loads(text)
        return role

    async def healthy(self) -> bool:
        """``SELECT 1`` works within 2 s."""
        try:
            async with self.pool.acquire(timeout=2) as connection:
                return bool(await connection.fetchval("SELECT 1", timeout=2) == 1)
        except Exception:  # noqa: BLE001 - any failure means unhealthy
            return False

    @property
    def listening(self) -> bool:
        """The LISTEN connection is up: notifications sent now reach this process."""
        return self._listener is not None and not self._listener.is_closed()

    async def listen(
        self, callbacks: Mapping[str, Callable[[str], None]], on_connected: Callable[[], None] | None = None
    ) -> None:
        """LISTEN on each channel of ``callbacks`` on one dedicated connection;
        ``callbacks[channel](payload)`` runs per notification, except for notifications this process sent
        itself (:meth:`notify`): their wake-ups happened in process already, and a second one would wake a
        second long poll for the same messages. ``on_connected()`` runs once the channels are listened to, and
        again after each reconnect.

        If that connection dies (PostgreSQL restart, network), it is re-established in the background
        with a 1 s backoff; long polls fall back to their timer meanwhile.
        """

        def _on_notify(_connection: Any, pid: int, channel: str, payload: str) -> None:
            notifier = self._notifier
            if notifier is not None and not notifier.is_closed() and pid == notifier.get_server_pid():
                return
            callbacks[channel](payload)

        def _on_lost(_connection: Any) -> None:
            if self._pool is not None:
                self._relisten = asyncio.get_running_loop().create_task(_reconnect())

        async def _connect() -> None:
            self._listener = await asyncpg.connect(self.url, timeout=CONNECT_TIMEOUT_S)
            self._listener.add_termination_listener(_on_lost)
            for channel in callbacks:
                await self._listener.add_listener(channel, _on_notify)
            if on_connected is not None:
                on_connected()

        async def _reconnect() -> None:
            while self._pool is not None:
                try:
                    await _connect()
                    log.info("LISTEN %s re-established", ", ".join(callbacks))
                    return
                except (*Unavailable, asyncpg.PostgresError) as exc:
                    log.warning("LISTEN %s lost, retrying: %s", ", ".join(callbacks), exc)
                    await asyncio.sleep(1)

        await _connect()
