"""Progress lines for streaming queries: rows/s, batch id and lag per queue (``queenpy spark run`` shows
them).

One line per micro-batch that read rows, plus one per query start, idle transition and end::

    12:04:31 translate  batch 7     1,200 rows    2,431 rows/s  lag chat.translate=0

Lag is the ``queen`` source's heads (Spark's ``latestOffset``) minus the batch's end offset, summed over the
queue's partitions (:func:`queenpy.spark.offsets.lag`).
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from .offsets import lag

__all__ = ["ProgressPrinter", "describe_progress"]


def _queue_of(offset: Any) -> str | None:
    import json

    if isinstance(offset, str):
        try:
            offset = json.loads(offset)
        except json.JSONDecodeError:
            return None
    if isinstance(offset, dict) and offset.get("v") == 1 and isinstance(offset.get("queue"), str):
        return str(offset["queue"])
    return None


def describe_progress(progress: Any) -> str:
    """One line for a ``StreamingQueryProgress`` (name, batch, rows, rows/s, lag per queue source)."""
    name = progress.name or str(progress.id)[:8]
    rate = progress.processedRowsPerSecond or 0.0
    parts = [
        f"{time.strftime('%H:%M:%S')} {name:<12} batch {progress.batchId:<5}",
        f"{progress.numInputRows:>9,} rows",
        f"{rate:>9,.0f} rows/s",
    ]
    lags = []
    for source in progress.sources or []:
        queue = _queue_of(source.endOffset) or _queue_of(source.latestOffset)
        if queue is not None:
            lags.append(f"{queue}={lag(source.endOffset, source.latestOffset):,}")
    if lags:
        parts.append("lag " + " ".join(lags))
    return "  ".join(parts)


class ProgressPrinter(StreamingQueryListener):
    """A listener printing :func:`describe_progress` lines to ``stream`` (stderr by default).

    Batches that read no rows are printed only when the lag changed (Spark reports idle queries every 10 s).
    """

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self._last_lag: dict[str, str] = {}
        self._names: dict[str, str] = {}

    def _print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def onQueryStarted(self, event: Any) -> None:
        name = event.name or str(event.id)[:8]
        self._names[str(event.id)] = name
        self._print(f"{time.strftime('%H:%M:%S')} {name:<12} started")

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        line = describe_progress(progress)
        key = str(progress.id)
        tail = line.split("lag ", 1)[-1] if "lag " in line else ""
        if progress.numInputRows or self._last_lag.get(key) != tail:
            self._print(line)
        self._last_lag[key] = tail

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        status = f"failed: {event.exception.splitlines()[0]}" if event.exception else "stopped"
        name = self._names.get(str(event.id), str(event.id)[:8])
        self._print(f"{time.strftime('%H:%M:%S')} {name:<12} {status}")
