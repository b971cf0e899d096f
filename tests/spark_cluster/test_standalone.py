"""``queenpy spark run --master spark://...`` on a real standalone cluster (a master and two workers on
loopback): the seed pipeline with its exact counts, and the windows example equal to its Python computation.
The executors run on the workers, so the ``queen`` source and sink run in the executors' Python workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cluster_helpers import StandaloneCluster

from helpers import unique

ROOT = Path(__file__).resolve().parents[2]
# one executor per worker (1 core, 512 MiB each); stateful operators with as many shuffle partitions as cores
CONF = [
    "--conf",
    "spark.executor.memory=512m",
    "--conf",
    "spark.sql.shuffle.partitions=2",
    "--conf",
    "spark.default.parallelism=2",
]


def spark_run(
    cluster: StandaloneCluster,
    broker_url: str,
    script: str,
    tmp_path: Path,
    *args: str,
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QUEEN_URL": broker_url, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "queenpy",
            "spark",
            "run",
            str(ROOT / "examples" / script),
            "--master",
            cluster.master,
            "--url",
            broker_url,
            *CONF,
            *args,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=tmp_path,
    )


def apps(cluster: StandaloneCluster, name: str) -> list[dict[str, object]]:
    state = cluster.state()
    found = [*state.get("completedapps", []), *state.get("activeapps", [])]  # type: ignore[misc]
    return [a for a in found if a.get("name") == name]


def test_seed_pipeline_on_the_cluster_prints_the_expected_counts(
    cluster: StandaloneCluster, broker, tmp_path: Path
) -> None:
    result = spark_run(
        cluster,
        broker.url,
        "spark_pipeline.py",
        tmp_path,
        "--suffix",
        "." + unique("cl"),
        "--workdir",
        str(tmp_path / "work"),
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr[-4000:]
    for line in (
        "produced: 100 ok",
        "poisoned: 14 ok",
        "spark translate attempts: 100 ok",
        "retry path attempts: 42 ok",
        "routed: 86 ok",
        "notified: 86 ok",
        "dead letters: 14 ok",
        "duplicates: 0 ok",
        "pipeline ok",
    ):
        assert line in out, out
    ran = apps(cluster, "spark_pipeline")
    assert ran and all(app["cores"] == 2 for app in ran), ran  # both workers' cores served the application


def test_windows_example_on_the_cluster_equals_python(
    cluster: StandaloneCluster, broker, tmp_path: Path
) -> None:
    result = spark_run(
        cluster,
        broker.url,
        "spark_windows.py",
        tmp_path,
        "--no-progress",
        "--",
        "--suffix",
        "." + unique("clw"),
        "--events",
        "1600",
        "--keys",
        "4",
        "--max-per-trigger",
        "700",
    )
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert "windows ok" in result.stdout and "duplicates: 0" in result.stdout, result.stdout
    assert apps(cluster, "spark_windows")
