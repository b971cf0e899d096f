"""Copy of the ``queen`` schema to another PostgreSQL database (API.md section 12, ``/api/v1/migration/*``).

Queen's API calls this a "migration"; here it is the schema copy, apart from the schema migrations the broker
applies to its own database (``store/migrate.py``). The routes are ``server/routes/schema_copy.py``.

The copy is PostgreSQL's own: ``pg_dump --format=custom --schema=<schema>`` of the broker's database piped
into ``pg_restore --single-transaction --exit-on-error`` on the target, so the target either gets the whole
schema or nothing. The binaries are those shipped with the ``pgserver`` wheel (PostgreSQL 16, able to dump
servers up to 16), else the first ``pg_dump``/``pg_restore`` on ``PATH``. A target that already has the schema
is refused: a copy never overwrites data.

State is PostgreSQL's, so every worker of every instance answers the same status: ``queen.system_state`` key
``migration`` holds ``{status: idle|running|completed|failed, startedAt, finishedAt, target: {host, port,
database, user, ssl, schema}, excludeTableData, error, holder, heartbeatAt}`` (never the password). A run
belongs to the worker that started it, which refreshes ``heartbeatAt`` every 2 s; a ``running`` state whose
heartbeat is older than ``STALE_AFTER_S`` is reported ``failed`` (that worker stopped mid-run), and ``reset``
or a new ``start`` may then replace it. Starting takes a transaction-level advisory lock, so two workers
cannot start two runs.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import orjson

from queenpy.errors import InvalidRequest
from queenpy.store.database import Database
from queenpy.store.embedded import postgres_program
from queenpy.store.hosts import check_host

__all__ = ["SchemaCopy", "SchemaCopyConflict", "Target", "parse_target"]

STATE_KEY = "migration"
LOCK_ID = 0x51554545_4D494752  # 'QUEE' 'MIGR'
HEARTBEAT_S = 2.0
STALE_AFTER_S = 15.0
CONNECT_TIMEOUT_S = 10.0
_UPSERT = (
    "INSERT INTO queen.system_state (key, value, updated_at) VALUES ($1, $2::jsonb, now()) "
    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()"
)
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class SchemaCopyConflict(Exception):
    """The request cannot be done in the copy's present state (answered 409)."""


@dataclass(frozen=True)
class Target:
    """Where to copy to. ``host`` may be a Unix socket directory (libpq's rule: a path)."""

    host: str
    port: int
    database: str
    user: str
    password: str | None
    ssl: bool
    schema: str
    exclude_table_data: tuple[str, ...]

    def public(self) -> dict[str, Any]:
        """What is stored and shown: everything but the password."""
        return {
            "host": self.host,
            "port": self.port,
            "database": self.database,
            "user": self.user,
            "ssl": self.ssl,
            "schema": self.schema,
        }

    def libpq(self) -> str:
        """A libpq keyword/value connection string (the password goes through ``PGPASSWORD``, not here)."""

        def quoted(value: str) -> str:
            return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"

        return (
            f"host={quoted(self.host)} port={self.port} dbname={quoted(self.database)} "
            f"user={quoted(self.user)} sslmode={'require' if self.ssl else 'prefer'} "
            f"connect_timeout={int(CONNECT_TIMEOUT_S)}"
        )

    async def connect(self) -> asyncpg.Connection:
        """A connection to the target; raises what asyncpg raises (OSError, asyncpg errors, TimeoutError)."""
        return await asyncpg.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            database=self.database,
            ssl="require" if self.ssl else False,
            timeout=CONNECT_TIMEOUT_S,
        )


def _text(body: dict[str, Any], field: str, *, default: str | None = None, limit: int = 255) -> str:
    value = body.get(field, default)
    if not isinstance(value, str) or not value or len(value) > limit or "\x00" in value:
        raise InvalidRequest(f"{field} must be a non-empty string of at most {limit} characters")
    return value


def parse_target(body: dict[str, Any]) -> Target:
    """The target of ``POST /api/v1/migration/*``: ``{host, port="5432", database, user, password?,
    ssl=false, schema="queen", excludeTableData: [table, ...]}``. Raises InvalidRequest naming the field."""
    port_value = body.get("port", "5432")
    port = (
        int(port_value)
        if isinstance(port_value, (str, int))
        and not isinstance(port_value, bool)
        and str(port_value).isdigit()
        else -1
    )
    if not 1 <= port <= 65535:
        raise InvalidRequest("port must be a TCP port number (1-65535), as a string or an integer")
    password = body.get("password")
    if password is not None and (not isinstance(password, str) or len(password) > 1024):
        raise InvalidRequest("password must be a string")
    ssl = body.get("ssl", False)
    if not isinstance(ssl, bool):
        raise InvalidRequest("ssl must be a boolean")
    schema = _text(body, "schema", default="queen", limit=63)
    if not _IDENTIFIER.match(schema):
        raise InvalidRequest("schema must be a plain PostgreSQL identifier (letters, digits, _)")
    excluded = body.get("excludeTableData", [])
    if not isinstance(excluded, list) or not all(
        isinstance(t, str) and _IDENTIFIER.match(t) for t in excluded
    ):
        raise InvalidRequest("excludeTableData must be an array of table names (plain identifiers)")
    host = _text(body, "host")
    try:
        check_host(host)  # before any resolver sees it: Python's idna codec raises UnicodeError
    except ValueError as exc:
        raise InvalidRequest(f"host: {exc}") from exc
    return Target(
        host=host,
        port=port,
        database=_text(body, "database", limit=63),
        user=_text(body, "user", limit=63),
        password=password,
        ssl=ssl,
        schema=schema,
        exclude_table_data=tuple(excluded),
    )


def _binary(name: str) -> str:
    found = postgres_program(name)
    if found is None:
        raise SchemaCopyConflict(f"{name} not found (neither in the pgserver wheel nor on PATH)")
    return str(found)


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class SchemaCopy:
    """Starts, reports, validates and resets schema copies from one broker process (see the module docstring).

    Args:
        database: the broker's database (the source; the state lives there too).
        source_url: its URL, for ``pg_dump``.
        holder: how this process is named in the state (host, port, worker, pid).
    """

    def __init__(self, database: Database, source_url: str, holder: str) -> None:
        self.database = database
        self.source_url = source_url
        self.holder = holder or f"{socket.gethostname()} pid {os.getpid()}"
        self._task: asyncio.Task[None] | None = None

    async def state(self) -> dict[str, Any]:
        """The stored state, with a stale ``running`` reported as ``failed``."""
        raw = await self.database.fetchval(
            "SELECT value::text FROM queen.system_state WHERE key = $1", STATE_KEY
        )
        state: dict[str, Any] = orjson.loads(raw) if raw else {"status": "idle"}
        if state.get("status") == "running" and self._stale(state):
            state = {
                **state,
                "status": "failed",
                "error": f"the worker running it ({state.get('holder')}) stopped: no heartbeat since "
                f"{state.get('heartbeatAt')}",
            }
        return state

    @staticmethod
    def _stale(state: dict[str, Any]) -> bool:
        beat = state.get("heartbeatAt")
        if not isinstance(beat, str):
            return True
        age = datetime.now(UTC) - datetime.fromisoformat(beat)
        return age.total_seconds() > STALE_AFTER_S

    async def _store(self, state: dict[str, Any]) -> None:
        await self.database.fetchval(_UPSERT, STATE_KEY, orjson.dumps(state).decode())

    async def test_connection(self, target: Target) -> dict[str, Any]:
        """``{success, version, schemaExists}`` or ``{success: false, error}`` (never raises for the target's
        failures: they are the answer)."""
        try:
            connection = await target.connect()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            return {
                "success": False,
                "error": f"cannot connect to {target.host}:{target.port}/{target.database}: {exc}",
            }
        try:
            version = await connection.fetchval("SELECT version()")
            exists = await connection.fetchval(
                "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", target.schema
            )
        finally:
            await connection.close()
        return {"success": True, "version": version, "schemaExists": bool(exists)}

    async def start(self, target: Target) -> dict[str, Any]:
        """Check the target, record the run as ``running`` and start it in this process. Raises
        SchemaCopyConflict when a run is going on, the target already has the schema or cannot be reached."""
        probe = await self.test_connection(target)
        if not probe["success"]:
            raise SchemaCopyConflict(probe["error"])
        if probe["schemaExists"]:
            raise SchemaCopyConflict(
                f"the target database already has a schema {target.schema}: a migration "
                "never overwrites data (drop it there first)"
            )
        dump, restore = _binary("pg_dump"), _binary("pg_restore")
        async with self.database.pool.acquire() as connection, connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock($1)", LOCK_ID)
            current = await self.state()
            if current.get("status") == "running":
                raise SchemaCopyConflict(
                    f"a migration is running (started {current.get('startedAt')} by {current.get('holder')})"
                )
            state = {
                "status": "running",
                "startedAt": _now(),
                "finishedAt": None,
                "target": target.public(),
                "excludeTableData": list(target.exclude_table_data),
                "error": None,
                "holder": self.holder,
                "heartbeatAt": _now(),
            }
            await connection.execute(_UPSERT, STATE_KEY, orjson.dumps(state).decode())
        self._task = asyncio.create_task(self._run(target, state, dump, restore))
        return {"success": True, **state}

    async def _run(self, target: Target, state: dict[str, Any], dump: str, restore: str) -> None:
        env = {**os.environ, "PGCONNECT_TIMEOUT": str(int(CONNECT_TIMEOUT_S))}
        restore_env = {**env, "PGPASSWORD": target.password or ""}
        dump_args = [
            dump,
            "--format=custom",
            f"--schema={target.schema}",
            "--no-owner",
            "--no-privileges",
            *[f"--exclude-table-data={target.schema}.{t}" for t in target.exclude_table_data],
            f"--dbname={self.source_url}",
        ]
        restore_args = [
            restore,
            "--no-owner",
            "--no-privileges",
            "--single-transaction",
            "--exit-on-error",
            f"--dbname={target.libpq()}",
        ]
        heartbeat = asyncio.create_task(self._heartbeat(state))
        try:
            read_end, write_end = os.pipe()
            try:
                dumper = await asyncio.create_subprocess_exec(
                    *dump_args, stdout=write_end, stderr=asyncio.subprocess.PIPE, env=env
                )
                restorer = await asyncio.create_subprocess_exec(
                    *restore_args, stdin=read_end, stderr=asyncio.subprocess.PIPE, env=restore_env
                )
            finally:
                os.close(read_end)
                os.close(write_end)
            try:
                (_, dump_err), (_, restore_err) = await asyncio.gather(
                    dumper.communicate(), restorer.communicate()
                )
            except asyncio.CancelledError:
                for process in (dumper, restorer):
                    if process.returncode is None:
                        process.kill()
                raise
            problems = [
                f"{name} exited {code}: {err.decode(errors='replace').strip()[-2000:]}"
                for name, code, err in (
                    ("pg_dump", dumper.returncode, dump_err),
                    ("pg_restore", restorer.returncode, restore_err),
                )
                if code
            ]
            state.update(status="failed" if problems else "completed", error="; ".join(problems) or None)
        except (OSError, asyncio.CancelledError) as exc:
            state.update(status="failed", error=f"the copy stopped: {exc!r}")
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            heartbeat.cancel()
            state.update(finishedAt=_now(), heartbeatAt=_now())
            await asyncio.shield(self._store(state))

    async def _heartbeat(self, state: dict[str, Any]) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            state["heartbeatAt"] = _now()
            await self._store(state)

    async def validate(self, target: Target) -> dict[str, Any]:
        """Rows per table of the schema, here and on the target: ``{success, tables: [{table, source, target,
        match, dataExcluded}]}``; ``success`` when every table whose data was copied has as many rows there.
        Counts are exact (``count(*)``), taken while the broker may still write: validate after writes
        stop."""
        try:
            connection = await target.connect()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            return {"success": False, "error": f"cannot connect to the target: {exc}"}
        tables: list[dict[str, Any]] = []
        try:
            names = [
                r["tablename"]
                for r in await self.database.fetch(
                    "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename", target.schema
                )
            ]
            there = {
                r["tablename"]
                for r in await connection.fetch(
                    "SELECT tablename FROM pg_tables WHERE schemaname = $1", target.schema
                )
            }
            for name in names:
                query = f'SELECT count(*) FROM "{target.schema}"."{name}"'
                source_rows = int(await self.database.fetchval(query))
                target_rows = int(await connection.fetchval(query)) if name in there else None
                excluded = name in target.exclude_table_data
                tables.append(
                    {
                        "table": name,
                        "source": source_rows,
                        "target": target_rows,
                        "match": target_rows == (0 if excluded else source_rows),
                        "dataExcluded": excluded,
                    }
                )
        finally:
            await connection.close()
        return {
            "success": bool(tables) and all(t["match"] for t in tables),
            "schema": target.schema,
            "tables": tables,
        }

    async def reset(self) -> dict[str, Any]:
        """Back to ``idle``; SchemaCopyConflict while a run is alive."""
        async with self.database.pool.acquire() as connection, connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock($1)", LOCK_ID)
            current = await self.state()
            if current.get("status") == "running":
                raise SchemaCopyConflict("a migration is running: wait for it to end")
            await connection.execute(_UPSERT, STATE_KEY, orjson.dumps({"status": "idle"}).decode())
        return {"success": True, "status": "idle"}

    async def stop(self) -> None:
        """Cancel a run of this process (its state is stored as failed)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
