"""The embedded PostgreSQL default (DESIGN.md section 9), from the ``pgserver`` package.

With no database configured, ``queenpy serve`` starts a private PostgreSQL (real binaries shipped in a
wheel) with its data in the user data directory, listening on a Unix socket only.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import platformdirs

__all__ = ["EMBEDDED_SETTINGS", "EmbeddedPostgres", "default_data_dir"]

#: Server settings the embedded PostgreSQL runs with, applied with ``ALTER SYSTEM`` and a reload on every
#: start (all take effect without a restart). initdb's defaults suit no workload in particular; a queue writes
#: WAL for every push, ack and retention delete, so checkpoints forced by ``max_wal_size`` every few seconds
#: make each page touched after one log a full-page image again; and its table of messages, deleted behind the
#: consumers as fast as it is filled, carries the dead rows of one ``autovacuum_naptime`` (measured:
#: benchmarks/RESULTS.md).
EMBEDDED_SETTINGS: dict[str, str] = {
    "max_wal_size": "4GB",
    "wal_compression": "pglz",
    "autovacuum_naptime": "10s",
}


def default_data_dir() -> Path:
    """``<user data dir>/queenpy/pgdata`` (for example ``~/.local/share/queenpy/pgdata``)."""
    return Path(platformdirs.user_data_dir("queenpy")) / "pgdata"


def postgres_program(name: str, *, path_first: bool = False) -> Path | None:
    """A PostgreSQL program (``pg_dump``, ``pg_restore``, ``pgbench``, ...): the one shipped in the pgserver
    wheel, else the one on ``PATH``; ``path_first`` looks on ``PATH`` first (the user's own installation).
    None when neither has it."""

    def shipped() -> Path | None:
        try:
            import pgserver
        except ImportError:  # pragma: no cover - pgserver is a queenpy dependency
            return None
        candidate = Path(pgserver.__file__).parent / "pginstall" / "bin" / name
        return candidate if candidate.exists() else None

    def on_path() -> Path | None:
        found = shutil.which(name)
        return Path(found) if found else None

    first, second = (on_path, shipped) if path_first else (shipped, on_path)
    return first() or second()


class EmbeddedPostgres:
    """A PostgreSQL server owned by this process; :attr:`url` is its connection URL.

    ``cleanup_mode``: ``"stop"`` stops the server when the owner exits (the default), ``"delete"`` also
    removes the data directory, ``None`` leaves it running. ``settings``: the server settings applied on
    every start (:data:`EMBEDDED_SETTINGS` unless the owner needs others, as the tests' fsync off).
    """

    def __init__(
        self,
        data_dir: Path | str | None = None,
        cleanup_mode: str | None = "stop",
        settings: Mapping[str, str] = EMBEDDED_SETTINGS,
    ) -> None:
        self.data_dir = Path(data_dir) if data_dir else default_data_dir()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not os.path.isdir(os.environ.get("XDG_RUNTIME_DIR", "")):  # before pgserver (platformdirs) loads
            runtime = self.data_dir.parent / "runtime"
            runtime.mkdir(mode=0o700, exist_ok=True)
            os.environ["XDG_RUNTIME_DIR"] = str(runtime)
        import pgserver

        self._server: Any = pgserver.get_server(  # type: ignore[attr-defined]
            self.data_dir, cleanup_mode=cleanup_mode
        )
        self._configure(settings)

    def _configure(self, settings: Mapping[str, str]) -> None:
        """``ALTER SYSTEM SET`` each of ``settings`` (names and values are ours, never a user's), then
        reload."""
        statements = "".join(f"ALTER SYSTEM SET {name} = '{value}';\n" for name, value in settings.items())
        self._server.psql(statements + "SELECT pg_reload_conf();\n")

    @property
    def url(self) -> str:
        """``postgresql://postgres:@/postgres?host=<socket dir>``."""
        return str(self._server.get_uri())

    @property
    def socket_dir(self) -> str:
        """The directory of the server's Unix socket (the URL's ``host``)."""
        return parse_qs(urlparse(self.url).query)["host"][0]

    @property
    def server(self) -> Any:
        """The ``pgserver`` server object (its postmaster pid, system user, cleanup)."""
        return self._server

    def stop(self) -> None:
        """Stop the server (idempotent)."""
        self._server.cleanup()
