"""Spark's auto-discovery hook for the ``queen`` data source.

PySpark imports every top-level ``pyspark_*`` module on the Python path and registers its ``DefaultSource``
under ``DefaultSource.name()``, so with ``queenpy[spark]`` installed ``spark.readStream.format("queen")``
works without ``spark.dataSource.register``. Importing this module only imports the data source class (no
connections, no reader or writer code).
"""

from __future__ import annotations

from queenpy.spark.source import QueenDataSource as DefaultSource

__all__ = ["DefaultSource"]
