"""Turn SIGINT/SIGTERM into a graceful "stop consuming" while a blocking call runs in the main thread."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, Self

__all__ = ["SignalGuard"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SignalGuard:
    """Context manager: while active (main thread only), the first SIGINT/SIGTERM calls ``on_signal``.

    ``on_signal()`` returns True when it started a graceful stop (consumers were running). Otherwise, and for
    every further signal, the handler that was installed before takes over: for the default handlers that
    is ``KeyboardInterrupt`` on SIGINT and ``SystemExit(143)`` on SIGTERM. Outside the main thread the guard
    does nothing (Python only delivers signals there).
    """

    def __init__(self, on_signal: Callable[[], bool]) -> None:
        self._on_signal = on_signal
        self._previous: dict[int, Any] = {}
        self._stopping = False

    def __enter__(self) -> Self:
        if threading.current_thread() is threading.main_thread():
            for sig in _SIGNALS:
                try:
                    self._previous[sig] = signal.getsignal(sig)
                    signal.signal(sig, self._handle)
                except (ValueError, OSError):  # pragma: no cover - embedded interpreters
                    self._previous.pop(sig, None)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self._stopping and self._on_signal():
            self._stopping = True
            return
        previous = self._previous.get(signum, signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_IGN:
            return
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            raise SystemExit(128 + signum)
