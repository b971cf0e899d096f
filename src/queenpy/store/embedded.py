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
import psutil

__all__ = ["EMBEDDED_SETTINGS", "EmbeddedPostgres", "default_data_dir", "pg_ctl", "shared_buffers_for"]


def pg_ctl(data_dir: Path | str, system_user: str | None, args: list[str], timeout_s: float = 60) -> None:
    """Run pgserver's ``pg_ctl`` with ``args`` on ``data_dir`` as ``system_user`` (pgserver's user when the
    process runs as root, else ``None``). Raises ``subprocess.CalledProcessError`` when pg_ctl fails and
    ``subprocess.TimeoutExpired`` after ``timeout_s`` seconds."""
    from pgserver import _commands  # a queenpy dependency; its binaries, run as its system user

    _commands.pg_ctl(args, pgdata=Path(data_dir), user=system_user, timeout=timeout_s)  # type: ignore[attr-defined]


def shared_buffers_for(memory_bytes: int) -> str:
    """``shared_buffers`` for a machine of ``memory_bytes`` of RAM: a sixteenth of it, at least initdb's
    128 MB and at most 1 GB, in whole megabytes (``"1024MB"``).

    PostgreSQL's documentation starts a dedicated server at a quarter of RAM ("Resource Consumption"); the
    embedded server shares its machine with the broker and the user's programs, and the kernel's page cache
    holds what does not fit. 1 GB is the tuned server's setting in the benchmarks (benchmarks/README.md)."""
    megabytes = memory_bytes // 16 // (1024 * 1024)
    return f"{min(max(megabytes, 128), 1024)}MB"


#: Server settings the embedded PostgreSQL runs with, applied with ``ALTER SYSTEM`` and a reload on every
#: start; ``shared_buffers`` needs a restart, done once when it changes (:class:`EmbeddedPostgres`).
#: initdb's defaults suit no workload in particular; a queue writes WAL for every push, ack and retention
#: delete, so checkpoints forced by ``max_wal_size`` every few seconds make each page touched after one log a
#: full-page image again; its table of messages, deleted behind the consumers as fast as it is filled, carries
#: the dead rows of one ``autovacuum_naptime``; and with a million partitions the per-partition tables are
#: gigabytes, against initdb's 128 MB of shared buffers (measured: benchmarks/RESULTS.md, issue 44).
EMBEDDED_SETTINGS: dict[str, str] = {
    "max_wal_size": "4GB",
    "wal_compression": "pglz",
    "autovacuum_naptime": "10s",
    "shared_buffers": shared_buffers_for(psutil.virtual_memory().total),
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
        reload; when ``shared_buffers`` (taken only at a restart) is among them and differs from the
        running value, restart the server (``pg_ctl restart -m fast``, with the options it was started
        with). Raises ``subprocess.CalledProcessError`` when psql or pg_ctl fails."""
        statements = "".join(f"ALTER SYSTEM SET {name} = '{value}';\n" for name, value in settings.items())
        self._server.psql(statements + "SELECT pg_reload_conf();\n")
        if "shared_buffers" not in settings:
            return
        # the running value, read from the server's memory (not pg_settings.pending_restart, which a
        # session sees only once it has processed the reload's signal)
        answer = self._server.psql(
            "SELECT 'restart:' || (pg_size_bytes(current_setting('shared_buffers'))"
            f" <> pg_size_bytes('{settings['shared_buffers']}'))::text;\n"
        )
        if "restart:true" in answer:
            from pgserver import utils  # a queenpy dependency

            pg_ctl(
                self.data_dir,
                self._server.system_user,
                ["-w", "-m", "fast", "-l", str(self._server.log), "restart"],
                timeout_s=120,
            )
            # pgserver stops the server it knows by its postmaster's pid: the new one
            self._server._postmaster_info = utils.PostmasterInfo.read_from_pgdata(self.data_dir)

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
