"""Small immutable value objects that configure the client (in the style of ``httpx.Timeout``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LONG_POLL_MARGIN_S", "RetryPolicy", "Timeout"]

#: Seconds added to a long poll's server-side ``timeout`` to get the HTTP read timeout (API.md §5.2, §15):
#: the broker answers at ``timeout``, so the client waits a little longer before giving up.
LONG_POLL_MARGIN_S = 5.0


@dataclass(frozen=True, slots=True)
class Timeout:
    """HTTP timeouts of one client, in seconds.

    Args:
        request_s: read/write/pool timeout for ordinary requests (default 30 s).
        connect_s: time allowed to open a TCP connection to one broker URL (default 5 s); a connection
            that cannot be opened in time counts as "broker unreachable" and fails over to the next URL.

    Long polls (``pop`` with ``wait``) use ``timeout_ms / 1000 + LONG_POLL_MARGIN_S`` as their read timeout
    instead of ``request_s``.

    Raises:
        ValueError: a value is not positive.
    """

    request_s: float = 30.0
    connect_s: float = 5.0

    def __post_init__(self) -> None:
        if self.request_s <= 0 or self.connect_s <= 0:
            raise ValueError("timeouts must be positive numbers of seconds")

    def for_long_poll(self, timeout_ms: int) -> float:
        """The HTTP read timeout in seconds for a long poll whose server-side timeout is ``timeout_ms``:
        ``timeout_ms / 1000 + 5`` (API.md §5.2), independent of ``request_s``."""
        return timeout_ms / 1000.0 + LONG_POLL_MARGIN_S


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often a request is retried when every broker URL failed with a connection error or a 5xx.

    Args:
        attempts: total rounds over the URL list, first one included (default 3, as Queen's clients).
        initial_delay_s: pause before the second round; it doubles each round (1 s, 2 s, 4 s, ...).
        max_delay_s: upper bound of one pause.

    4xx answers are never retried. A round tries every URL once, starting with the last one that worked.

    Raises:
        ValueError: ``attempts`` < 1 or a negative delay.
    """

    attempts: int = 3
    initial_delay_s: float = 1.0
    max_delay_s: float = 10.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.initial_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError("delays must not be negative")
