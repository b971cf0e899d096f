"""Standalone-cluster tier: a Spark master and two workers on loopback, started with the pyspark
installation's own ``sbin/spark-daemon.sh`` (the script ``start-master.sh`` and ``start-worker.sh`` wrap; the
pip package ships spark-daemon.sh but not those two wrappers), for the whole pytest session.

Every test here is marked ``spark_cluster`` (the default run excludes it): ``.venv/bin/python -m pytest -m
spark_cluster tests/spark_cluster``. Each worker offers 1 core and 1 GiB; the cluster's logs, pid files and
work directories live in a temporary directory, and the fixture stops the three daemons at the end.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import StandaloneCluster

from helpers import free_port

if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("pyarrow") is None:
    collect_ignore_glob = ["test_*.py"]

WORKERS = 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark_cluster/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.spark_cluster)


def spark_home() -> Path:
    """SPARK_HOME of the pyspark installation, as pyspark's own find_spark_home.py finds it."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    if shutil.which("java") is None:
        pytest.skip("no java on PATH (Spark needs Java 17 or 21)")
    home = spark_home()
    base = tmp_path_factory.mktemp("standalone")
    port, ui_port = free_port(), free_port()
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOG_DIR": str(base / "logs"),
        "SPARK_PID_DIR": str(base / "pids"),
        "SPARK_WORKER_DIR": str(base / "work"),
        "SPARK_IDENT_STRING": f"queenpy-{port}",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    env.pop("SPARK_NO_DAEMONIZE", None)  # set (even empty) it keeps spark-daemon.sh in the foreground
    running = StandaloneCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}", home, env)
    started: list[tuple[str, int]] = []
    try:
        running.daemon(
            "start",
            "master.Master",
            1,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui_port),
        )
        started.append(("master.Master", 1))
        for n in range(1, WORKERS + 1):
            running.daemon(
                "start",
                "worker.Worker",
                n,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                "0",
                running.master,
            )
            started.append(("worker.Worker", n))
        deadline = time.monotonic() + 120
        alive = 0
        while time.monotonic() < deadline:
            try:
                alive = int(running.state().get("aliveworkers", 0))  # type: ignore[call-overload]
            except OSError:
                alive = 0
            if alive == WORKERS:
                break
            time.sleep(0.5)
        if alive != WORKERS:
            logs = "\n".join(p.read_text(errors="replace")[-1500:] for p in (base / "logs").glob("*.out"))
            pytest.fail(f"the standalone cluster has {alive} of {WORKERS} workers after 120 s:\n{logs}")
        yield running
    finally:
        for role, n in reversed(started):
            running.daemon("stop", role, n)
