"""``Queen``: the blocking client, derived from :class:`AsyncQueen` rather than written twice.

A ``Queen`` owns a private event loop running in a daemon thread and an ``AsyncQueen`` living on it. Every
attribute access is forwarded: a call runs on the loop thread, an awaitable result is awaited there and
its value returned, and builders (:class:`~queenpy.client._builders.Fluent`) come back wrapped in the same
kind of proxy, so ``q.queue("a").partition("p").push([...])`` blocks and returns the results. Sync handlers
given to ``consume`` run in worker threads and may call this client.

While a call blocks in the main thread, SIGINT/SIGTERM stop running consumers gracefully; without running
consumers (or on a second signal) they behave as before (``KeyboardInterrupt``).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

from ._async import AsyncQueen
from ._builders import Fluent
from ._signals import SignalGuard

__all__ = ["Queen"]

T = TypeVar("T")


class _LoopThread:
    """An event loop running forever in a daemon thread, fed coroutines from other threads."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name="queenpy-client-loop", daemon=True)
        self.thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
            self.loop.close()

    def run(self, coroutine: Coroutine[Any, Any, T], on_signal: Callable[[], bool] | None = None) -> T:
        """Run ``coroutine`` on the loop and block until it returns (re-raising its exception).

        Raises:
            RuntimeError: called from the loop thread itself (it would deadlock), or after ``stop()``.
        """
        if threading.current_thread() is self.thread:
            coroutine.close()
            raise RuntimeError(
                "the sync Queen cannot be used inside its own event loop; use AsyncQueen there"
            )
        if self.loop.is_closed() or not self.thread.is_alive():
            coroutine.close()
            raise RuntimeError("this Queen client is closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        guard = SignalGuard(on_signal) if on_signal is not None else None
        try:
            if guard is None:
                return future.result()
            with guard:
                return future.result()
        except BaseException:
            future.cancel()
            raise

    def stop(self) -> None:
        """Stop the loop and wait for its thread."""
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)


async def _invoke(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = function(*args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


class _Blocking:
    """Blocking proxy of an object that lives on a :class:`_LoopThread`."""

    __slots__ = ("_on_signal", "_runner", "_target")

    def __init__(self, target: Any, runner: _LoopThread, on_signal: Callable[[], bool]) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_runner", runner)
        object.__setattr__(self, "_on_signal", on_signal)

    def _wrap(self, value: Any) -> Any:
        if isinstance(value, Fluent):
            return _Blocking(value, self._runner, self._on_signal)
        return value

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not callable(attribute):
            return self._wrap(attribute)

        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self._wrap(self._runner.run(_invoke(attribute, args, kwargs), self._on_signal))

        blocking.__name__ = name
        blocking.__doc__ = getattr(attribute, "__doc__", None)
        return blocking

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} attributes are read-only")

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._target)) | set(type(self).__dict__))

    def __repr__(self) -> str:
        return f"<blocking {self._target!r}>"


class Queen(_Blocking):
    """Blocking Queen client: same arguments, methods and builders as :class:`AsyncQueen`, without ``await``.

    ``Queen("http://localhost:6632").queue("orders").push([{"id": 1}])`` returns the push results. Close it
    with ``close()`` or use ``with Queen(...) as q:``.
    """

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        runner = _LoopThread()

        async def build() -> AsyncQueen:
            return AsyncQueen(*args, **kwargs)

        try:
            client = runner.run(build())
        except BaseException:
            runner.stop()
            raise

        def on_signal() -> bool:
            if not client._consumers:
                return False
            runner.loop.call_soon_threadsafe(client.stop_consumers)
            return True

        super().__init__(client, runner, on_signal)

    @property
    def async_client(self) -> AsyncQueen:
        """The underlying :class:`AsyncQueen` (lives on this client's private loop thread)."""
        return self._target  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop consumers, flush push buffers, close connections and the private loop thread."""
        if not self._runner.thread.is_alive():
            return
        try:
            self._runner.run(self._target.close())
        finally:
            self._runner.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
