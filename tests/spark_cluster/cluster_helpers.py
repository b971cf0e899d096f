"""The standalone cluster the spark_cluster tier runs on (started by its conftest)."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path


@dataclass
class StandaloneCluster:
    """A running standalone cluster: ``master`` is its ``spark://`` URL, ``ui`` the master's web UI."""

    master: str
    ui: str
    home: Path
    env: dict[str, str]

    def state(self) -> dict[str, object]:
        """The master's JSON status (``aliveworkers``, ``workers``, ``activeapps``, ``completedapps``...)."""
        with urllib.request.urlopen(self.ui + "/json/", timeout=5) as response:
            return dict(json.load(response))

    def daemon(self, action: str, role: str, instance: int, *args: str) -> None:
        script = self.home / "sbin" / "spark-daemon.sh"
        subprocess.run(
            ["bash", str(script), action, f"org.apache.spark.deploy.{role}", str(instance), *args],
            env=self.env,
            check=True,
            capture_output=True,
            timeout=120,
        )
