"""A SparkSession set up for queue pipelines on a small machine (SPARK-NOTES.md sections 1, 6 and 7).

:func:`prepare_environment` must run before the JVM starts (the environment is frozen at JVM start): it points
the Python workers at this interpreter (``PYSPARK_PYTHON``), binds to loopback for local masters, and quiets
Spark's logs with a log4j2 configuration in a ``SPARK_CONF_DIR`` of our own. :func:`get_session` returns the
active session if there is one (``queenpy spark run`` builds it before running a pipeline script), else builds
one with :func:`build_session`.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_MASTER",
    "LOG4J2_PROPERTIES",
    "build_session",
    "get_session",
    "prepare_environment",
    "register",
]

DEFAULT_MASTER = "local[*]"
MASTER_ENV = "QUEENPY_SPARK_MASTER"

LOG4J2_PROPERTIES = """\
rootLogger.level = error
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _is_local(master: str) -> bool:
    return master.startswith("local")


def prepare_environment(master: str = DEFAULT_MASTER, *, quiet: bool = True) -> None:
    """Set the process environment Spark's JVM and Python workers inherit. Call before the first session.

    Sets ``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` to this interpreter (unless set), ``SPARK_LOCAL_IP``
    to 127.0.0.1 for local masters, and, with ``quiet``, ``SPARK_CONF_DIR`` to a directory holding
    :data:`LOG4J2_PROPERTIES` (unless ``SPARK_CONF_DIR`` is set already).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if _is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if quiet and not os.environ.get("SPARK_CONF_DIR"):
        conf_dir = Path(tempfile.gettempdir()) / f"queenpy-spark-conf-{os.getuid()}"
        conf_dir.mkdir(exist_ok=True)
        target = conf_dir / "log4j2.properties"
        if not target.exists() or target.read_text() != LOG4J2_PROPERTIES:
            target.write_text(LOG4J2_PROPERTIES)
        os.environ["SPARK_CONF_DIR"] = str(conf_dir)


def build_session(
    master: str | None = None,
    app_name: str = "queenpy",
    *,
    config: Mapping[str, Any] | None = None,
    quiet: bool = True,
) -> SparkSession:
    """A SparkSession tuned for queue pipelines, with the ``queen`` source registered.

    Args:
        master: ``local[*]`` (default, or ``$QUEENPY_SPARK_MASTER``), ``local[2]``, ``spark://host:7077``, ...
        app_name: the Spark application name.
        config: extra Spark settings, applied last (they win).
        quiet: Spark logs at ERROR only (see :func:`prepare_environment`).

    Local masters bind to 127.0.0.1; shuffles use as many partitions as local cores; the UI and console progress
    bars are off; state stores use RocksDB; queries share the cores with the FAIR scheduler.
    """
    master = master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
    prepare_environment(master, quiet=quiet)
    from pyspark.sql import SparkSession

    cores = os.cpu_count() or 2
    settings: dict[str, Any] = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(min(cores, 8) if _is_local(master) else 16),
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.streaming.stopTimeout": "30s",
        "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.scheduler.mode": "FAIR",
        "spark.driver.memory": "2g",
        "spark.sql.session.timeZone": "UTC",
        # how long the JVM waits for a new Python worker to connect back (default 15 s): a worker imports
        # pyspark, pyarrow and pandas first, which took longer than that on a loaded 2-core machine
        # ("Python worker failed to connect back" in the standalone-cluster tier)
        "spark.python.authenticate.socketTimeout": "120s",
    }
    if _is_local(master):
        settings.update(
            {
                "spark.default.parallelism": str(min(cores, 8)),
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.host": "127.0.0.1",
            }
        )
    settings.update({k: str(v) for k, v in (config or {}).items()})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR" if quiet else "WARN")
    register(spark)
    return spark


def get_session(app_name: str = "queenpy", **kwargs: Any) -> SparkSession:
    """The active SparkSession (e.g. the one ``queenpy spark run`` made), else a new one from :func:`build_session`."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)
        return active
    return build_session(app_name=app_name, **kwargs)


def register(spark: SparkSession) -> None:
    """Register the ``queen`` data source on ``spark`` explicitly.

    Auto-discovery through ``pyspark_queen`` normally makes this unnecessary; registering covers setups where
    Spark's lookup does not see that module (e.g. queenpy on ``sys.path`` of the driver only through a path
    hack). The class is pickled by reference, so the Python workers must still be able to import queenpy.
    """
    from .source import QueenDataSource

    spark.dataSource.register(QueenDataSource)
