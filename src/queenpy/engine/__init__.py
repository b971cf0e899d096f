"""The fusion engine of one broker process: fusion queues per operation type, long-poll waiters.

``server`` submits validated items here and awaits their results; this layer turns them into procedure
calls through ``store``. The package surface only; the parts live in their modules: :mod:`.engine` (the
Engine), :mod:`.fusion` (request fusion and concurrency limits), :mod:`.longpoll` (parked pops),
:mod:`.failover` (the push buffer on disk).
"""

from __future__ import annotations

from queenpy.engine.engine import NOTIFY_CHANNEL, WAITING_CHANNEL, Engine
from queenpy.engine.fusion import Fusion, LanedFusion, StaticLimit, VegasLimit
from queenpy.engine.longpoll import WaiterRegistry, backoff_ms

__all__ = [
    "NOTIFY_CHANNEL",
    "WAITING_CHANNEL",
    "Engine",
    "Fusion",
    "LanedFusion",
    "StaticLimit",
    "VegasLimit",
    "WaiterRegistry",
    "backoff_ms",
]
