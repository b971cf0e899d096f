"""Client-side push buffering: items wait in memory per (queue, partition) and go out in batches.

A buffer is sent when it holds ``max_size`` items or when its oldest item has waited ``max_wait_ms``,
whichever comes first, and on :meth:`PushBuffers.flush_all` (also called by ``close()``). Items keep their
order per (queue, partition). A batch the broker refused is put back at the head of its buffer and the
error is raised by the next ``flush_all()``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ._messages import PushResult

__all__ = ["BufferOptions", "PushBuffers"]

logger = logging.getLogger("queenpy.client")

SendBatch = Callable[[list[dict[str, Any]]], Awaitable[list[PushResult]]]


@dataclass(frozen=True, slots=True)
class BufferOptions:
    """When a push buffer is sent: at ``max_size`` items or after ``max_wait_ms`` milliseconds."""

    max_size: int = 100
    max_wait_ms: int = 1000

    def __post_init__(self) -> None:
        if self.max_size < 1 or self.max_wait_ms < 0:
            raise ValueError("max_size must be >= 1 and max_wait_ms >= 0")


@dataclass
class _Buffer:
    options: BufferOptions
    items: list[dict[str, Any]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class PushBuffers:
    """All push buffers of one client. ``send`` pushes one batch of wire items and returns their results."""

    def __init__(self, send: SendBatch) -> None:
        self._send = send
        self._buffers: dict[tuple[str, str], _Buffer] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._errors: list[BaseException] = []
        self.batches_sent = 0

    def add(self, key: tuple[str, str], items: list[dict[str, Any]], options: BufferOptions) -> None:
        """Append wire items to the buffer of ``key`` = (queue, partition); must run on the client's loop."""
        buffer = self._buffers.get(key)
        if buffer is None:
            buffer = self._buffers[key] = _Buffer(options)
        buffer.items.extend(items)
        if len(buffer.items) >= buffer.options.max_size:
            self._cancel_timer(buffer)
            self._spawn(key)
        elif buffer.timer is None:
            loop = asyncio.get_running_loop()
            buffer.timer = loop.call_later(buffer.options.max_wait_ms / 1000.0, self._spawn, key)

    def pending(self) -> int:
        """Number of items waiting in all buffers."""
        return sum(len(buffer.items) for buffer in self._buffers.values())

    async def flush(self, key: tuple[str, str]) -> None:
        """Send everything buffered for ``key`` now.

        Raises:
            QueenError: the broker refused a batch (its items stay buffered).
        """
        buffer = self._buffers.get(key)
        if buffer is None:
            return
        self._cancel_timer(buffer)
        async with buffer.lock:
            while buffer.items:
                batch = buffer.items[: buffer.options.max_size]
                del buffer.items[: len(batch)]
                try:
                    results = await self._send(batch)
                except BaseException:
                    buffer.items[:0] = batch
                    raise
                self.batches_sent += 1
                failed = [result for result in results if result.status == "failed"]
                if failed:
                    logger.warning("%d buffered items failed: %s", len(failed), failed[0].error)

    async def flush_all(self) -> None:
        """Send every buffer and wait for background sends.

        Raises:
            QueenError: the first error of this flush or of an earlier background send.
        """
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for key in list(self._buffers):
            try:
                await self.flush(key)
            except Exception as exc:  # noqa: BLE001 - keep flushing the other buffers, raise below
                self._errors.append(exc)
        if self._errors:
            error, self._errors = self._errors[0], []
            raise error

    def _spawn(self, key: tuple[str, str]) -> None:
        buffer = self._buffers.get(key)
        if buffer is not None:
            buffer.timer = None
        task = asyncio.get_running_loop().create_task(self._background_flush(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _background_flush(self, key: tuple[str, str]) -> None:
        try:
            await self.flush(key)
        except Exception as exc:  # noqa: BLE001 - kept and raised by the next flush_all()
            logger.warning("buffered push to %s/%s failed: %s", key[0], key[1], exc)
            self._errors.append(exc)

    @staticmethod
    def _cancel_timer(buffer: _Buffer) -> None:
        if buffer.timer is not None:
            buffer.timer.cancel()
            buffer.timer = None
