"""Python client of a Queen broker (queenpy or the original): ``AsyncQueen`` and its blocking twin ``Queen``.

::

    from queenpy.client import Queen

    with Queen("http://localhost:6632") as q:
        q.queue("orders").config({"leaseTime": 30, "retryLimit": 2}).create()
        q.queue("orders").partition("customer-7").push([{"data": {"total": 12}, "transactionId": "o-1"}])
        for message in q.queue("orders").batch(10).pop():
            q.ack(message)

Errors raised are the :mod:`queenpy.errors` tree: ``InvalidRequest`` (400), ``AuthenticationError`` (401),
``PermissionDenied`` (403), ``NotFound`` (404), ``DatabaseUnavailable`` (503 or no broker reachable),
``TransactionFailed`` (a commit rolled back), ``BrokerError`` (an ``{"error": ...}`` answer).
The client imports neither the broker nor its database layers; it needs ``httpx`` and ``tenacity`` only.
"""

from __future__ import annotations

from ._async import DEFAULT_URL, AsyncQueen
from ._builders import DeadLetterBuilder, QueueBuilder, TransactionBuilder, TransactionQueueBuilder
from ._messages import (
    QUEUE_MODE_GROUP,
    AckResult,
    DeadLetter,
    DeadLetterPage,
    LeaseRenewal,
    Message,
    PushResult,
)
from ._settings import RetryPolicy, Timeout
from ._sync import Queen

__all__ = [
    "DEFAULT_URL",
    "QUEUE_MODE_GROUP",
    "AckResult",
    "AsyncQueen",
    "DeadLetter",
    "DeadLetterBuilder",
    "DeadLetterPage",
    "LeaseRenewal",
    "Message",
    "PushResult",
    "Queen",
    "QueueBuilder",
    "RetryPolicy",
    "Timeout",
    "TransactionBuilder",
    "TransactionQueueBuilder",
]
