"""The consume loop: N workers pop, run the handler, renew the lease meanwhile, ack, until told to stop.

Its options (:class:`ConsumeOptions`) are filled by the fluent builder (``_builders.QueueBuilder``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from queenpy.errors import AuthenticationError, InvalidRequest, PermissionDenied, QueenError

from ._messages import Message
from ._wire import ErrorHandler, Handler, StopSignal, SuccessHandler

if TYPE_CHECKING:
    from ._async import AsyncQueen

__all__ = ["ConsumeOptions", "Consumer", "call_maybe_async"]

logger = logging.getLogger("queenpy.client")

#: Errors that no retry will fix: the consumer stops and re-raises them.
_FATAL = (AuthenticationError, PermissionDenied, InvalidRequest)
#: Pause after a failed pop before the next one, in seconds.
_ERROR_PAUSE_S = 1.0
#: Pause between empty pops when long polling is off, in seconds.
_EMPTY_PAUSE_S = 0.1
#: Default lease time when neither the builder, this client's create() nor the broker tells it, in seconds.
DEFAULT_LEASE_TIME_S = 30


def _is_async(function: Callable[..., Any]) -> bool:
    """True for coroutine functions, also behind ``functools.partial`` or as an object's
    ``async __call__``."""
    while isinstance(function, functools.partial):
        function = function.func
    if inspect.iscoroutinefunction(function):
        return True
    return not inspect.isroutine(function) and inspect.iscoroutinefunction(type(function).__call__)


async def call_maybe_async(function: Callable[..., Any], *args: Any) -> Any:
    """Call a sync or async callable; a sync one runs in a worker thread so the event loop (and lease
    renewal) keeps running while it works."""
    if _is_async(function):
        return await function(*args)
    result = await asyncio.to_thread(function, *args)
    if inspect.isawaitable(result):
        result = await result
    return result


class ConsumeOptions:
    """Everything a consumer needs; filled by ``QueueBuilder`` (see its methods for meanings)."""

    __slots__ = (
        "auto_ack",
        "batch",
        "concurrency",
        "each",
        "group",
        "idle_millis",
        "lease_time_s",
        "limit",
        "namespace",
        "partition",
        "partitions",
        "queue",
        "renew_interval_millis",
        "renew_lease",
        "subscription_from",
        "subscription_mode",
        "task",
        "timeout_millis",
        "wait",
    )

    def __init__(self) -> None:
        self.queue: str | None = None
        self.partition: str | None = None
        self.namespace: str | None = None
        self.task: str | None = None
        self.group: str | None = None
        self.batch = 1
        self.wait: bool | None = None
        self.timeout_millis = 30_000
        self.concurrency = 1
        self.limit: int | None = None
        self.idle_millis: int | None = None
        self.auto_ack: bool | None = None
        self.each = False
        self.partitions = 1
        self.subscription_mode: str | None = None
        self.subscription_from: str | None = None
        self.renew_lease = True
        self.lease_time_s: int | None = None
        self.renew_interval_millis: int | None = None

    def pop_path(self) -> str:
        """``/api/v1/pop/queue/<q>[/partition/<p>]``, or ``/api/v1/pop`` for a namespace/task pop.

        Raises:
            ValueError: neither a queue nor a namespace/task is set.
        """
        if self.queue:
            path = f"/api/v1/pop/queue/{quote(self.queue, safe='')}"
            if self.partition is not None:
                path += f"/partition/{quote(self.partition, safe='')}"
            return path
        if self.namespace or self.task:
            return "/api/v1/pop"
        raise ValueError("pop needs a queue name, or a namespace/task")

    def pop_params(
        self, *, batch: int, wait: bool, timeout_millis: int, server_auto_ack: bool
    ) -> dict[str, str]:
        """The pop query string (API.md §5.2)."""
        params = {"batch": str(batch), "wait": "true" if wait else "false", "timeout": str(timeout_millis)}
        if self.group:
            params["consumerGroup"] = self.group
        if server_auto_ack:
            params["autoAck"] = "true"
        if self.subscription_mode:
            params["subscriptionMode"] = self.subscription_mode
        if self.subscription_from:
            params["subscriptionFrom"] = self.subscription_from
        if self.partitions > 1:
            params["partitions"] = str(self.partitions)
        if self.namespace:
            params["namespace"] = self.namespace
        if self.task:
            params["task"] = self.task
        return params


class Consumer:
    """One ``consume()`` run. ``run()`` returns the number of messages handled (failed ones included)."""

    def __init__(
        self,
        client: AsyncQueen,
        options: ConsumeOptions,
        handler: Handler,
        on_error: ErrorHandler | None,
        on_success: SuccessHandler | None,
        stop: StopSignal | None,
    ) -> None:
        self._client = client
        self._options = options
        self._handler = handler
        self._on_error = on_error
        self._on_success = on_success
        self._external_stop = stop
        self._stop = asyncio.Event()
        self._changed = asyncio.Condition()
        self._reserved = 0
        self._last_message = time.monotonic()
        self._fatal: BaseException | None = None
        self._lease_time_s: int | None = options.lease_time_s
        self.processed = 0
        self.failed = 0
        self.done = asyncio.Event()

    def stop(self) -> None:
        """Ask the workers to finish what they are handling and return (must run on the client's loop)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """True once a stop was requested."""
        return self._stop.is_set()

    async def run(self) -> int:
        """Run the workers until a stop condition (see ``QueueBuilder.consume``); returns messages handled."""
        options = self._options
        options.pop_path()  # fail fast on a missing queue name
        watcher = (
            asyncio.create_task(self._watch_external_stop()) if self._external_stop is not None else None
        )
        workers = [asyncio.create_task(self._worker(index)) for index in range(options.concurrency)]
        try:
            await asyncio.gather(*workers)
        finally:
            self._stop.set()
            for task in workers:
                if not task.done():
                    task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            if watcher is not None:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
            self.done.set()
        if self._fatal is not None:
            raise self._fatal
        return self.processed

    async def _watch_external_stop(self) -> None:
        signal_ = self._external_stop
        if isinstance(signal_, asyncio.Event):
            stop_wait = asyncio.create_task(signal_.wait())
            own_wait = asyncio.create_task(self._stop.wait())
            try:
                await asyncio.wait({stop_wait, own_wait}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop_wait.cancel()
                own_wait.cancel()
        elif isinstance(signal_, threading.Event):
            while not signal_.is_set() and not self._stop.is_set():
                await self._pause(0.05)
        self._stop.set()

    async def _pause(self, seconds: float) -> None:
        """Sleep up to ``seconds``, returning early when a stop is requested."""
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)
        except TimeoutError:
            pass

    # -- budget (limit) ---------------------------------------------------------------------------------

    async def _reserve(self) -> int:
        """How many messages this worker may pop now; 0 means the limit is reached."""
        limit = self._options.limit
        if limit is None:
            return self._options.batch
        async with self._changed:
            while True:
                free = limit - self.processed - self._reserved
                if free > 0:
                    size = min(self._options.batch, free)
                    self._reserved += size
                    return size
                if self._reserved == 0 or self._stop.is_set():
                    return 0
                await self._changed.wait()

    async def _release(self, reserved: int, handled: int) -> None:
        if self._options.limit is None:
            self.processed += handled
            return
        async with self._changed:
            self._reserved -= reserved
            self.processed += handled
            self._changed.notify_all()

    # -- worker -----------------------------------------------------------------------------------------

    def _idle_left_ms(self) -> int | None:
        if self._options.idle_millis is None:
            return None
        return int(self._options.idle_millis - (time.monotonic() - self._last_message) * 1000)

    async def _worker(self, index: int) -> None:
        options = self._options
        wait = True if options.wait is None else options.wait
        while not self._stop.is_set():
            idle_left = self._idle_left_ms()
            if idle_left is not None and idle_left <= 0:
                logger.info("consumer of %s idle for %d ms, stopping", options.queue, options.idle_millis)
                self._stop.set()
                break
            size = await self._reserve()
            if size == 0:
                break
            timeout_ms = (
                options.timeout_millis
                if idle_left is None
                else max(1, min(options.timeout_millis, idle_left))
            )
            handled = 0
            try:
                messages = await self._pop_unless_stopped(size, wait, timeout_ms)
                if messages is None:
                    break
                if not messages:
                    if not wait:
                        await self._pause(_EMPTY_PAUSE_S)
                    continue
                self._last_message = time.monotonic()
                handled = await self._process(messages)
                self._last_message = time.monotonic()  # idle time starts after the batch is handled
            except _FATAL as exc:
                logger.error("consumer of %s stops: %s", options.queue, exc)
                self._fatal = exc
                self._stop.set()
            except QueenError as exc:
                logger.warning("pop from %s failed (%s), retrying", options.queue, exc)
                await self._pause(_ERROR_PAUSE_S)
            finally:
                await self._release(size, handled)
        logger.debug("consumer worker %d of %s stopped", index, options.queue)

    async def _pop_unless_stopped(self, size: int, wait: bool, timeout_ms: int) -> list[Message] | None:
        """Pop, or return None if a stop came first (the pop is abandoned)."""
        pop = asyncio.create_task(
            self._client._pop(
                self._options, batch=size, wait=wait, timeout_millis=timeout_ms, server_auto_ack=False
            )
        )
        stopped = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({pop, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if pop.done():
            return pop.result()
        pop.cancel()
        await asyncio.gather(pop, return_exceptions=True)
        return None

    # -- handling ---------------------------------------------------------------------------------------

    async def _process(self, messages: list[Message]) -> int:
        """Handle one popped batch; returns how many messages were handled."""
        lease_id = next((message.lease_id for message in messages if message.lease_id), None)
        renewer = None
        if lease_id and self._options.renew_lease:
            renewer = asyncio.create_task(self._renew_while_handling(lease_id))
        try:
            if self._options.each or self._options.batch == 1:
                handled = 0
                for position, message in enumerate(messages):
                    handled += 1
                    if not await self._handle(message, [message]):
                        rest = messages[position + 1 :]
                        if rest:
                            await self._release_rest(rest)
                        break
                return handled
            await self._handle(messages, messages)
            return len(messages)
        finally:
            if renewer is not None:
                renewer.cancel()
                await asyncio.gather(renewer, return_exceptions=True)

    async def _handle(self, argument: Any, messages: list[Message]) -> bool:
        """Run the handler on one message or a batch and ack; True if the handler succeeded."""
        auto_ack = True if self._options.auto_ack is None else self._options.auto_ack
        try:
            result = await call_maybe_async(self._handler, argument)
        except Exception as exc:  # noqa: BLE001 - a handler's failure is data here, not a crash
            self.failed += len(messages)
            if self._on_error is not None:
                try:
                    await call_maybe_async(self._on_error, argument, exc)
                except Exception:
                    logger.exception("on_error callback failed")
            elif auto_ack:
                await self._ack(argument, False, error=str(exc) or type(exc).__name__)
            else:
                logger.warning("handler failed on %s: %r (not acked)", messages[0].transaction_id, exc)
            return False
        if auto_ack:
            await self._ack(argument, True)
        if self._on_success is not None:
            try:
                await call_maybe_async(self._on_success, argument, result)
            except Exception:
                logger.exception("on_success callback failed")
        return True

    async def _ack(self, target: Any, status: bool | str, error: str | None = None) -> None:
        try:
            results = await self._client.ack(target, status, error=error)
        except QueenError as exc:
            logger.warning("ack failed: %s", exc)
            return
        for result in results if isinstance(results, list) else [results]:
            if not result.success:
                logger.warning("ack of %s refused: %s", result.transaction_id, result.error)

    async def _release_rest(self, rest: list[Message]) -> None:
        """After a failure in ``each`` mode, give the unhandled rest of the batch back for redelivery."""
        try:
            await self._client.ack(rest[0], "retry")
        except QueenError as exc:
            logger.debug("releasing the rest of the batch failed: %s", exc)

    async def _renew_while_handling(self, lease_id: str) -> None:
        lease_time_s = await self._resolve_lease_time()
        interval_s = (self._options.renew_interval_millis or lease_time_s * 500) / 1000.0
        while True:
            await asyncio.sleep(interval_s)
            try:
                renewal = await self._client.renew(lease_id, lease_time_s)
            except QueenError as exc:
                logger.warning("renewing lease %s failed: %s", lease_id, exc)
                continue
            if isinstance(renewal, list) or not renewal.success:
                logger.warning("lease %s could not be renewed: %s", lease_id, getattr(renewal, "error", None))
                return
            if renewal.expires_at is not None and self._options.renew_interval_millis is None:
                left_s = (renewal.expires_at - datetime.now(UTC)).total_seconds()
                interval_s = max(0.5, min(left_s / 2.0, lease_time_s / 2.0))

    async def _resolve_lease_time(self) -> int:
        if self._lease_time_s is None:
            queue = self._options.queue
            known = self._client._lease_times.get(queue) if queue else None
            if known is None and queue:
                known = await self._client._fetch_lease_time(queue)
            self._lease_time_s = known or DEFAULT_LEASE_TIME_S
        return self._lease_time_s
