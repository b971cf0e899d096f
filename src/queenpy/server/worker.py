"""The parts of one worker process, composed once by ``create_app`` and reached by the routes through
``worker_of(request)``: the database pool, the fusion engine, the failover buffer, the payload cipher with its
queue-configuration cache, and the background work of ``queenpy.services`` (maintenance switches, metrics
sampler, Prometheus exposition, background jobs, Spark sink applier, schema copy), each given what it reads.
:meth:`Worker.start` and :meth:`Worker.stop` start and stop them, in order, from the app's lifespan."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import time
from typing import Any

import platformdirs

from queenpy.engine import Engine
from queenpy.engine.failover import FailoverBuffer
from queenpy.errors import ConfigurationError
from queenpy.server.encryption import PayloadCipher
from queenpy.services import Services
from queenpy.services.maintenance import MaintenanceState
from queenpy.services.metrics import WorkerMetrics
from queenpy.services.prometheus import Exposition, WorkerInstruments
from queenpy.services.schema_copy import SchemaCopy
from queenpy.services.spark_apply import PendingApplier
from queenpy.settings import Settings
from queenpy.store.database import Database

__all__ = ["Worker"]

log = logging.getLogger("queenpy.server")


class Worker:
    """The parts of one worker process (see the module docstring).

    Args:
        settings: the process settings.
        database_url: PostgreSQL URL; nothing is opened before :meth:`start`.
        worker_id: index of this worker process.
    """

    def __init__(self, settings: Settings, database_url: str, worker_id: int) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self.database = Database(database_url, settings.pool_size, settings.statement_timeout_ms)
        self.engine = Engine(self.database, settings)
        self.cipher = _cipher(settings.encryption_key)
        self._encrypted_queues: dict[str, tuple[bool, float]] = {}
        self.started_at = time.time()
        self.failover = FailoverBuffer(
            settings.file_buffer_dir or _default_buffer_dir(database_url),
            self.engine.fusions["push"].submit,
            max_batch=settings.file_buffer_max_batch,
            events_per_file=settings.file_buffer_events_per_file,
            flush_ms=settings.file_buffer_flush_ms,
        )
        self.maintenance = MaintenanceState(self.database, self.failover)
        self.maintenance.attach(self.engine)
        instance = f"{socket.gethostname()}:{settings.port}"
        self.instruments = WorkerInstruments(worker_id)
        self.metrics = WorkerMetrics(
            self.database,
            self.engine,
            self.instruments,
            worker_id=worker_id,
            instance=instance,
            started_at=self.started_at,
            sample_interval_ms=settings.metrics_sample_interval_ms,
            aggregate_interval_s=settings.metrics_aggregate_interval_s,
        )
        self.engine.observe_calls(self.instruments.observe_call)
        self.prometheus = Exposition(self.database, self.failover, self.maintenance, self.instruments)
        holder = f"{instance} worker {worker_id} pid {os.getpid()}"
        self.services = Services(self.database, settings.services, holder)
        self.spark_applier = PendingApplier(self.database, self.engine.announce)
        self.schema_copy = SchemaCopy(self.database, database_url, holder)

    async def start(self) -> None:
        """Open the database, then start the engine and the background work (the order matters: comments)."""
        await self.database.open()
        await self.engine.start()
        await self.maintenance.start()  # before the drain: push maintenance keeps the buffer on disk
        await self.failover.drain_once()  # leftovers of a previous run are stored before serving
        self.failover.start()
        self.metrics.start()
        await self.services.start()
        self.spark_applier.start()

    async def stop(self) -> None:
        """Stop the background work and the engine, then close the database."""
        await self.schema_copy.stop()
        await self.spark_applier.stop()
        await self.services.stop()
        await self.metrics.stop()
        self.instruments.flush()  # the request path's last observations (services/prometheus.py)
        await self.maintenance.stop()
        await self.failover.stop()
        await self.engine.stop()
        await self.database.close()

    async def queues_with_encryption(self, names: set[str]) -> set[str]:
        """Which of ``names`` have ``encryptionEnabled`` (cached for 5 s per queue)."""
        now = time.monotonic()
        missing = [n for n in names if n not in self._encrypted_queues or self._encrypted_queues[n][1] < now]
        if missing:
            rows = await self.database.fetch(
                "SELECT name, encryption_enabled FROM queen.queues WHERE name = ANY($1::text[])", missing
            )
            found = {row["name"]: row["encryption_enabled"] for row in rows}
            for name in missing:
                self._encrypted_queues[name] = (bool(found.get(name, False)), now + 5.0)
        return {n for n in names if self._encrypted_queues[n][0]}

    async def encrypt_items(self, items: list[dict[str, Any]]) -> None:
        """Encrypt, in place, the payload of every push item whose queue has ``encryptionEnabled`` (and mark
        it ``isEncrypted``); nothing when no key is configured."""
        if self.cipher is None or not items:
            return
        encrypted = await self.queues_with_encryption({item["queue"] for item in items})
        for item in items:
            if item["queue"] in encrypted:
                item["payload"] = self.cipher.encrypt(item["payload"])
                item["isEncrypted"] = True

    def cached_queue_count(self) -> int:
        """Queues in the encryption-flag cache."""
        return len(self._encrypted_queues)

    def forget_queue(self, name: str) -> None:
        self._encrypted_queues.pop(name, None)

    def decrypt_messages(self, messages: list[dict[str, Any]], key: str = "data") -> None:
        if self.cipher is None:
            return
        for message in messages:
            if PayloadCipher.looks_encrypted(message.get(key)):
                message[key] = self.cipher.decrypt(message[key])


def _default_buffer_dir(database_url: str) -> str:
    """``<user data dir>/queenpy/buffers/<hash of the database URL>``: brokers on different databases never
    replay each other's buffers."""
    digest = hashlib.sha256(database_url.encode()).hexdigest()[:16]
    return os.path.join(platformdirs.user_data_dir("queenpy"), "buffers", digest)


def _cipher(key: str | None) -> PayloadCipher | None:
    """The payload cipher, or None without a key; a key that is not 64 hex characters disables encryption
    with a warning (API.md section 14), as in the original broker."""
    if not key:
        return None
    try:
        return PayloadCipher(key)
    except ConfigurationError as exc:
        log.warning("%s: encryption disabled", exc.message)
        return None
