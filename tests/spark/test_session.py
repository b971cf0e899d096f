"""The session's environment: Python workers import the compiled pyspark of this interpreter, not the source
zip Spark puts first on their PYTHONPATH (compiling it in every new worker overran Spark's hard-coded 10 s for
a streaming source runner to connect back on a loaded machine)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from queenpy.spark.session import compiled_spark_home

pytestmark = pytest.mark.spark


def where_from() -> type[DataSource]:
    """A batch source whose one row per side names the file ``pyspark`` was imported from: the planner runner
    (``partitions``) and an executor worker (``read``). Made in a function so cloudpickle ships the classes by
    value (the workers cannot import this test module)."""

    class WhereFromReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            import pyspark

            return [InputPartition(pyspark.__file__)]

        def read(self, partition: InputPartition) -> Iterator[tuple[str, str]]:
            import pyspark

            yield ("planner", str(partition.value))
            yield ("executor", str(pyspark.__file__))

    class WhereFrom(DataSource):
        @classmethod
        def name(cls) -> str:
            return "queenpy_where_from"

        def schema(self) -> str:
            return "side STRING, file STRING"

        def reader(self, schema: Any) -> DataSourceReader:
            return WhereFromReader()

    return WhereFrom


def test_the_shim_home_has_the_package_but_not_its_zips(spark: Any) -> None:
    home = compiled_spark_home()
    assert home is not None
    assert (home / "bin" / "spark-submit").is_file() and (home / "jars").is_dir()
    assert not (home / "python").exists()
    assert os.environ["SPARK_HOME"] == str(home)  # the session fixture's build_session set it


def test_python_workers_import_the_compiled_pyspark(spark: Any) -> None:
    spark.dataSource.register(where_from())
    rows = {r.side: r.file for r in spark.read.format("queenpy_where_from").load().collect()}
    import pyspark

    installed = str(Path(pyspark.__file__).resolve())
    assert set(rows) == {"planner", "executor"}
    for side, file in rows.items():
        assert ".zip" not in file, (side, file)
        assert str(Path(file).resolve()) == installed, (side, file)
