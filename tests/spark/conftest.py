"""Spark tier: one local[2] SparkSession for the whole pytest session (SPARK-NOTES.md section 6).

Every test here is marked ``spark`` (the default run excludes it): ``.venv/bin/python -m pytest -m spark
tests/spark -q``. Tests share the session-wide ``broker`` of tests/conftest.py and use unique queue names,
a ``tmp_path`` checkpoint each, and ``trigger(availableNow=True)`` where they can. Without the spark extra
(``pip install -e '.[spark,test]'``) the folder is not collected at all.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# Without the spark extra the default run must still collect cleanly: skip this folder's modules entirely.
if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("pyarrow") is None:
    collect_ignore_glob = ["test_*.py"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install -e '.[spark,test]')")
    if shutil.which("java") is None:
        pytest.skip("no java on PATH (Spark needs Java 17 or 21)")
    from queenpy.spark.session import build_session

    session = build_session(
        "local[2]",
        app_name="queenpy-tests",
        config={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.streaming.stopTimeout": "10s",
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        },
    )
    yield session
    session.stop()
