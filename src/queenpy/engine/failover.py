"""The failover buffer for pushes while PostgreSQL is unreachable (DESIGN.md section 7, API.md section 17).

A push that cannot reach the database is appended to this process's open buffer file and fsync'd before
the broker answers ``buffered``; ``kill -9`` at any moment after the answer loses nothing. Files use the
original broker's record format, ``[uint32 length, little-endian][UTF-8 JSON event]`` repeated, so
buffers can be moved between brokers. Events are
``{"queue", "partition", "payload", "failover": true, "transactionId", "traceId"?, "producerSub"?,
"isEncrypted"?}``; every event carries a transactionId (the client's, or one generated at buffering
time), so replay is deduplicated by the push procedure. A payload that was encrypted before buffering
keeps ``isEncrypted`` and is never encrypted twice (API.md sharp edge 18).

Files: ``failover_<uuid>.<pid>.buf.tmp`` while being written, renamed ``.buf`` when full
(``FILE_BUFFER_EVENTS_PER_FILE``) or idle for two flush intervals; the open file of a process that died
is finalised by whoever drains next (unlike the original, which deletes small ones: those records were
fsync'd and answered ``buffered``, so they are kept). Any broker process drains ``.buf``
files, oldest first, claiming each by an atomic rename to ``.buf.draining.<pid>`` (claims of dead
processes are taken back), pushing ``FILE_BUFFER_MAX_BATCH`` events per procedure call, deleting the file
when all are stored and putting it back when the database fails again.

Push maintenance mode (API.md section 12) pauses the drain (:meth:`FailoverBuffer.pause`): pushes are then
buffered on purpose and replayed once it is turned off (:meth:`FailoverBuffer.resume`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import struct
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

__all__ = ["FailoverBuffer"]

log = logging.getLogger("queenpy.failover")

_HEADER = struct.Struct("<I")
_MAX_RECORD = 10 * 1024 * 1024


def read_events(path: Path) -> list[dict[str, Any]]:
    """All complete records of a buffer file (a torn last record is ignored)."""
    data = path.read_bytes()
    events: list[dict[str, Any]] = []
    offset = 0
    while offset + _HEADER.size <= len(data):
        (length,) = _HEADER.unpack_from(data, offset)
        if length == 0 or length > _MAX_RECORD or offset + _HEADER.size + length > len(data):
            break
        events.append(orjson.loads(data[offset + _HEADER.size : offset + _HEADER.size + length]))
        offset += _HEADER.size + length
    return events


class FailoverBuffer:
    """Append-only, fsync'd push buffer of one broker process, and its drain.

    Args:
        directory: ``FILE_BUFFER_DIR``; created if missing.
        push: stores a batch of push items (the push procedure); raises when the database is unreachable.
        max_batch: events per push call when draining (``FILE_BUFFER_MAX_BATCH``).
        events_per_file: events after which the open file is finalised (``FILE_BUFFER_EVENTS_PER_FILE``).
        flush_ms: drain interval (``FILE_BUFFER_FLUSH_MS``); a file idle for twice this is finalised.
    """

    def __init__(
        self,
        directory: Path | str,
        push: Callable[[list[dict[str, Any]]], Awaitable[list[Any]]],
        max_batch: int = 100,
        events_per_file: int = 10_000,
        flush_ms: int = 100,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._push = push
        self.max_batch = max(1, max_batch)
        self.events_per_file = max(1, events_per_file)
        self.flush_s = max(10, flush_ms) / 1000.0
        self._file: Any = None
        self._path: Path | None = None
        self._events_in_file = 0
        self._last_write = 0.0
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.replayed = 0
        self.db_healthy = True
        self.paused = False
        self._finalise_now = False
        self._wake = asyncio.Event()

    # -- writing ----------------------------------------------------------------------------------
    def _open(self) -> None:
        self._path = self.directory / f"failover_{uuid.uuid4().hex}.{os.getpid()}.buf.tmp"
        self._file = open(self._path, "ab", buffering=0)  # noqa: SIM115 - stays open across appends
        self._events_in_file = 0
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the new file's name survives a crash too
        finally:
            os.close(dir_fd)

    def _finalise(self) -> None:
        if self._file is None or self._path is None:
            return
        self._file.close()
        os.rename(self._path, self._path.with_suffix(""))  # .buf.tmp -> .buf
        self._file, self._path = None, None

    def _write(self, events: list[dict[str, Any]]) -> None:
        """Append ``events`` as one run of records and fsync, or raise OSError with the file as it was.

        A write may be short (a disk that fills up in the middle of the record, a file size limit): the
        loop writes the rest, and the error of the next write (ENOSPC, EFBIG, EROFS, ...) is raised. Before
        raising, the partial record is cut off again, so the file keeps only whole records answered
        ``buffered`` and later appends are not hidden behind a torn record (the reader stops at the first
        one). If even the truncation fails, the file is finalised as it is (its torn tail is ignored when
        replayed) and the next append opens a new file.
        """
        if self._file is None:
            self._open()
        record = b"".join(_HEADER.pack(len(body)) + body for body in map(orjson.dumps, events))
        offset = self._file.tell()
        try:
            view = memoryview(record)
            written = 0
            while written < len(record):
                count = self._file.write(view[written:])
                if not count:
                    raise OSError(errno.ENOSPC, "nothing written to the failover buffer file")
                written += count
            os.fsync(self._file.fileno())
        except OSError:
            try:
                self._file.truncate(offset)
                self._file.seek(offset)
                os.fsync(self._file.fileno())
            except OSError:
                log.exception("cannot cut a partial record off %s; closing it", self._path)
                try:
                    self._finalise()
                except OSError:
                    self._file, self._path = None, None
            raise
        self._events_in_file += len(events)
        self._last_write = time.monotonic()
        if self._events_in_file >= self.events_per_file:
            self._finalise()

    async def append(
        self, items: list[dict[str, Any]], *, database_failed: bool = True
    ) -> list[dict[str, Any]]:
        """Buffer validated push items durably; return Queen's per-item ``buffered`` results.
        ``database_failed``: the push could not reach PostgreSQL (False: buffered on purpose, in push
        maintenance mode), which marks the database unhealthy until a replay goes through.

        Raises:
            OSError: the file could not be written (the caller answers ``failed``).
        """
        events = []
        results = []
        for item in items:
            transaction_id = item.get("transactionId") or str(uuid.uuid4())
            events.append({**item, "transactionId": transaction_id, "failover": True})
            results.append(
                {
                    "status": "buffered",
                    "queue": item["queue"],
                    "partition": item["partition"],
                    "transactionId": transaction_id,
                }
            )
        async with self._lock:
            await asyncio.to_thread(self._write, events)
        if database_failed:
            self.db_healthy = False
        return results

    # -- draining ---------------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """``{"pending": files waiting, "open": events in this process's open file}``."""
        pending = sum(1 for p in self.directory.iterdir() if p.name.endswith((".buf", ".buf.tmp")))
        return {"pending": pending, "open": self._events_in_file if self._file else 0}

    def stats(self) -> dict[str, int]:
        """What waits in the buffer directory, every process's files together: ``{"files", "events",
        "bytes", "failedFiles"}`` (``failedFiles``: claimed for a drain by a process that is gone). Reads
        every file: for status routes, not the push path."""
        files = events = size = failed = 0
        for path in self.directory.glob("failover_*"):
            if ".draining." in path.name:
                pid = int(path.name.rsplit(".", 1)[1])
                if pid != os.getpid() and not _alive(pid):
                    failed += 1
            try:
                size += path.stat().st_size
                events += len(read_events(path))
            except FileNotFoundError:  # drained meanwhile
                continue
            files += 1
        return {"files": files, "events": events, "bytes": size, "failedFiles": failed}

    def pause(self) -> None:
        """Stop replaying (push maintenance mode): buffered pushes stay on disk."""
        self.paused = True

    def resume(self) -> None:
        """Replay again, at once."""
        self.paused = False
        self._finalise_now = True  # this process's open file goes to the drain now, not when idle
        self._wake.set()

    def _claim(self) -> Path | None:
        for path in self.directory.glob("failover_*.buf.tmp"):
            # the open file of a process that died (kill -9): every record in it was fsync'd and answered
            pid = int(path.name.split(".")[1])
            if pid != os.getpid() and not _alive(pid):
                os.rename(path, path.with_suffix(""))
        for path in sorted(self.directory.glob("failover_*.buf.draining.*")):
            pid = int(path.name.rsplit(".", 1)[1])
            if pid != os.getpid() and not _alive(pid):
                os.rename(path, path.with_name(path.name.split(".draining.")[0]))
        for path in sorted(self.directory.glob("failover_*.buf"), key=lambda p: p.stat().st_mtime):
            claimed = path.with_name(f"{path.name}.draining.{os.getpid()}")
            try:
                os.rename(path, claimed)
            except FileNotFoundError:
                continue  # another process claimed it first
            return claimed
        return None

    async def drain_once(self) -> int:
        """Replay every finalised file now; returns how many events were stored. Stops at the first
        database failure (the file goes back for the next round); does nothing while paused."""
        if self.paused:
            return 0
        async with self._lock:
            if self._file is not None and (
                self._finalise_now or time.monotonic() - self._last_write > 2 * self.flush_s
            ):
                self._finalise()
            self._finalise_now = False
        stored = 0
        while not self.paused and (path := self._claim()) is not None:
            events = read_events(path)
            try:
                for start in range(0, len(events), self.max_batch):
                    batch = [
                        {k: v for k, v in e.items() if k != "failover"}
                        for e in events[start : start + self.max_batch]
                    ]
                    await self._push(batch)
                    stored += len(batch)
            except Exception as exc:  # noqa: BLE001 - the database is still away: retry later
                os.rename(path, path.with_name(path.name.split(".draining.")[0]))
                self.db_healthy = False
                log.info("failover drain paused: %s", exc)
                return stored
            path.unlink()
            self.replayed += len(events)
            log.info("replayed %d buffered push(es) from %s", len(events), path.name)
        if stored or self._file is None:
            # healthy again once a replay went through, or when nothing is waiting to be replayed
            self.db_healthy = True
        return stored

    def start(self) -> None:
        """Drain in the background every flush interval."""

        async def loop() -> None:
            while True:
                try:
                    await self.drain_once()
                except Exception:
                    log.exception("failover drain failed")
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), self.flush_s if self.db_healthy else 1.0)
                except TimeoutError:
                    pass

        self._task = asyncio.get_running_loop().create_task(loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        async with self._lock:
            self._finalise()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
