"""The ``queen`` Python Data Source (PySpark 4 ``pyspark.sql.datasource``).

::

    spark.readStream.format("queen").option("url", url).option("queue", "orders").load()
    df.writeStream.format("queen").option("queue", "orders.out").option("checkpointLocation", path).start()
    spark.read.format("queen").option("queue", "orders").load()
    df.write.format("queen").option("queue", "orders.out").mode("append").save()

Found by name through the ``pyspark_queen`` module (Spark's auto-discovery of ``pyspark_*`` modules) or
registered with :func:`queenpy.spark.register`. Options: :mod:`queenpy.spark.options`; rows:
:mod:`queenpy.spark.schema`. The reader and writer modules are imported only when Spark asks for them,
so importing this module costs little more than ``pyspark.sql.datasource``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

from .schema import SCHEMA_DDL

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType

__all__ = ["QueenDataSource"]


class QueenDataSource(DataSource):
    """Queues of a queenpy (or Queen) broker as a Spark source and sink; format name ``queen``."""

    @classmethod
    def name(cls) -> str:
        return "queen"

    def schema(self) -> str:
        """The fixed message schema (DDL), see :mod:`queenpy.spark.schema`."""
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        from .options import SourceOptions
        from .reader import QueenBatchReader

        return QueenBatchReader(SourceOptions.parse(self.options), _columns(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A reader of the columns of ``schema``: this source's, or a subset the query gave with
        ``.schema(...)`` (:func:`queenpy.spark.schema.columns_of`; raises ValueError on a column it lacks)."""
        from .options import SourceOptions
        from .reader import QueenStreamReader

        return QueenStreamReader(SourceOptions.parse(self.options), _columns(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .writer import QueenBatchWriter, sink_options

        _append_only(overwrite)
        return QueenBatchWriter(sink_options(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .writer import QueenStreamWriter, plan_commit, sink_options

        _append_only(overwrite)
        options = sink_options(self.options, schema)
        return QueenStreamWriter(options, plan_commit(schema.fieldNames(), options))


def _columns(schema: StructType) -> tuple[str, ...] | None:
    """The columns of a schema the query gave (checked), or None for this source's own (all)."""
    from .schema import COLUMNS, columns_of

    columns = columns_of([(field.name, field.dataType.simpleString()) for field in schema.fields])
    return None if columns == tuple(name for name, _ in COLUMNS) else columns


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise ValueError('a queue only appends: use mode("append") (outputMode "append" or "update")')
