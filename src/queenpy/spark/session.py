"""A SparkSession set up for queue pipelines on a small machine (SPARK-NOTES.md sections 1, 6 and 7).

:func:`prepare_environment` must run before the JVM starts (the environment is frozen at JVM start): it points
the Python workers at this interpreter (``PYSPARK_PYTHON``), binds to loopback for local masters, quiets
Spark's logs with a log4j2 configuration in a ``SPARK_CONF_DIR`` of our own, and (for a pip-installed pyspark)
points ``SPARK_HOME`` at :func:`compiled_spark_home`. :func:`get_session` returns the active session if there
is one (``queenpy spark run`` builds it before running a pipeline script), else builds one with
:func:`build_session`.

Why the ``SPARK_HOME`` shim: Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's
``PYTHONPATH`` (``PythonUtils.sparkPythonPath``, unconditionally). The pip package's zip holds no bytecode and
zipimport never writes any, so every new worker compiles pyspark's modules from source: importing
``pyspark.sql.streaming.python_streaming_source_runner`` costs 0.9-1.0 s CPU from the zip against 0.3 s from
site-packages (measured here). A streaming query's source runner is such a worker
(``PythonStreamingSourceRunner.init`` → ``PythonWorkerFactory.createSimpleWorker``), and the JVM waits a
hard-coded 10 s for it to connect back (``Selector.select(10000)``, no setting governs it;
``spark.python.authenticate.socketTimeout`` does not). On a loaded 2-core machine the compile alone overran
that: "Python worker failed to connect back" at query start. Without the zip on the path, workers import the
same pyspark from this interpreter's site-packages, compiled once.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_MASTER",
    "LOCAL_JAVA_OPTIONS",
    "LOG4J2_PROPERTIES",
    "build_session",
    "compiled_spark_home",
    "get_session",
    "prepare_environment",
    "register",
    "session_settings",
]

DEFAULT_MASTER = "local[*]"
#: JVM options of a local master's driver (which runs the executors too): C1-compiled code only, see
#: :func:`build_session`
LOCAL_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
MASTER_ENV = "QUEENPY_SPARK_MASTER"
SHIM_ENV = "QUEENPY_SPARK_HOME_SHIM"  # "0" keeps SPARK_HOME as pyspark finds it

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
    to 127.0.0.1 for local masters, ``SPARK_HOME`` to :func:`compiled_spark_home` (unless ``SPARK_HOME`` is
    set, ``PYSPARK_PYTHON`` is another interpreter, or ``QUEENPY_SPARK_HOME_SHIM=0``), and, with ``quiet``,
    ``SPARK_CONF_DIR`` to a directory holding :data:`LOG4J2_PROPERTIES` (unless ``SPARK_CONF_DIR`` is set).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if _is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if (
        not os.environ.get("SPARK_HOME")
        and os.environ.get(SHIM_ENV, "1") != "0"
        and os.environ["PYSPARK_PYTHON"] == sys.executable
    ):
        home = compiled_spark_home()
        if home is not None:
            os.environ["SPARK_HOME"] = str(home)
    if quiet and not os.environ.get("SPARK_CONF_DIR"):
        conf_dir = _scratch()
        target = conf_dir / "log4j2.properties"
        if not target.exists() or target.read_text() != LOG4J2_PROPERTIES:
            target.write_text(LOG4J2_PROPERTIES)
        os.environ["SPARK_CONF_DIR"] = str(conf_dir)


def _scratch() -> Path:
    conf_dir = Path(tempfile.gettempdir()) / f"queenpy-spark-conf-{os.getuid()}"
    conf_dir.mkdir(exist_ok=True)
    return conf_dir


def compiled_spark_home() -> Path | None:
    """A ``SPARK_HOME`` for the pip-installed pyspark without its ``python/lib`` zips, or None if pyspark is
    not pip-installed here (then ``SPARK_HOME`` must stay what the user has).

    The directory (``$TMPDIR/queenpy-spark-conf-<uid>/spark-home-<hash of the pyspark path>``) holds a
    symbolic link to every top-level entry of the pyspark package (``bin``, ``jars``, ``sbin``...) except
    ``python``, so ``spark-submit`` and the JVM are the package's own while the workers' ``PYTHONPATH`` names
    a zip that does not exist and ``import pyspark`` resolves to this interpreter's compiled copy (see the
    module docstring). Built in a fresh directory and renamed into place, so concurrent processes never see a
    partial one.
    """
    import hashlib
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    package = Path(spec.origin).resolve().parent
    if not (package / "bin" / "spark-submit").is_file() or not (package / "jars").is_dir():
        return None  # not the pip layout (e.g. pyspark from a Spark distribution's python/ directory)
    target = _scratch() / f"spark-home-{hashlib.sha256(str(package).encode()).hexdigest()[:12]}"
    entries = sorted(e.name for e in package.iterdir() if e.name != "python")
    if target.is_dir() and sorted(e.name for e in target.iterdir()) == entries:
        return target
    partial = target.with_name(f"{target.name}.{uuid.uuid4().hex}")
    partial.mkdir()
    for name in entries:
        (partial / name).symlink_to(package / name)
    try:
        partial.rename(target)
    except OSError:  # another process made it first (or a stale one with other entries is in the way)
        shutil.rmtree(partial)
        if not (target.is_dir() and sorted(e.name for e in target.iterdir()) == entries):
            return None
    return target


def session_settings(master: str, config: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The Spark settings :func:`build_session` gives a session of ``master``: ours, then ``config``
    (its values win), all as text."""
    cores = os.cpu_count() or 2
    settings: dict[str, str] = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(min(cores, 8) if _is_local(master) else 16),
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.streaming.stopTimeout": "30s",
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.scheduler.mode": "FAIR",
        "spark.driver.memory": "2g",
        "spark.sql.session.timeZone": "UTC",
    }
    if _is_local(master):
        settings.update(
            {
                "spark.default.parallelism": str(min(cores, 8)),
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.extraJavaOptions": LOCAL_JAVA_OPTIONS,
            }
        )
    settings.update({k: str(v) for k, v in (config or {}).items()})
    return settings


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

    Local masters bind to 127.0.0.1; shuffles use as many partitions as local cores; the UI and console
    progress bars are off; state stores use RocksDB; queries share the cores with the FAIR scheduler.

    A local master's JVM runs with :data:`LOCAL_JAVA_OPTIONS` (``spark.driver.extraJavaOptions``, honoured
    when this call starts the JVM; a ``config`` value replaces it): the C1 compiler only. A streaming query
    runs Spark's per-micro-batch code (planning, task and closure serialisation, offset and progress JSON)
    a few hundred times a minute, so its methods keep crossing the C2 compiler's thresholds for many minutes,
    and on a small machine the C2 compiler threads took more CPU than the executors (docs/spark.md,
    "Local"). Cluster masters keep the JVM's defaults.
    """
    master = master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
    prepare_environment(master, quiet=quiet)
    from pyspark.sql import SparkSession

    settings = session_settings(master, config)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR" if quiet else "WARN")
    register(spark)
    return spark


def get_session(app_name: str = "queenpy", **kwargs: Any) -> SparkSession:
    """The active SparkSession (e.g. the one ``queenpy spark run`` made), else a new one from
    :func:`build_session`."""
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
