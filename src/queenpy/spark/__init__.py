"""queenpy on Apache Spark: the ``queen`` Python Data Source and the ``queenpy spark run`` command.

::

    from queenpy.spark import get_session

    spark = get_session()                     # local[*], quiet logs, ``queen`` registered
    events = (spark.readStream.format("queen")
              .option("url", "http://localhost:6632").option("queue", "events")
              .option("consumerGroup", "spark-totals").option("maxMessagesPerTrigger", "50000").load())
    (events.writeStream.format("queen").option("queue", "events.copy")
           .option("checkpointLocation", "/var/lib/pipelines/copy").start())

Modules: :mod:`.offsets` (pure offset arithmetic), :mod:`.options`, :mod:`.schema`, :mod:`.api` (the
HTTP calls to the broker), :mod:`.reader`, :mod:`.writer`, :mod:`.source` (the DataSource), :mod:`.session`,
:mod:`.progress` (the ``queenpy spark run`` command is :mod:`queenpy.cli.spark`). Needs the ``spark`` extra
(``pip install 'queenpy[spark]'``); without it, names that need PySpark
raise ImportError with that one-line hint.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["QueenDataSource", "build_session", "flush_sink", "get_session", "register"]

_EXPORTS = {
    "QueenDataSource": ".source",
    "build_session": ".session",
    "flush_sink": ".api",
    "get_session": ".session",
    "register": ".session",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return getattr(import_module(module, __name__), name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("pyspark", "pyarrow", "pandas", "py4j"):
            raise ImportError(
                "the Spark connector needs the spark extra: pip install 'queenpy[spark]'"
            ) from exc
        raise
