"""The Spark settings build_session gives a session (queenpy.spark.session.session_settings): no Spark."""

from __future__ import annotations

import pytest

from queenpy.spark.session import LOCAL_JAVA_OPTIONS, session_settings

JAVA = "spark.driver.extraJavaOptions"


@pytest.mark.parametrize("master", ["local[*]", "local[2]", "local[2,3]"])
def test_a_local_masters_jvm_compiles_with_c1_only(master: str) -> None:
    settings = session_settings(master)
    assert settings[JAVA] == LOCAL_JAVA_OPTIONS == "-XX:TieredStopAtLevel=1"
    assert settings["spark.driver.host"] == "127.0.0.1"


def test_a_cluster_master_keeps_the_jvms_defaults() -> None:
    settings = session_settings("spark://10.0.0.5:7077")
    assert JAVA not in settings
    assert "spark.driver.host" not in settings


def test_given_settings_win_and_become_text() -> None:
    settings = session_settings(
        "local[2]", {JAVA: "-XX:+UseSerialGC", "spark.sql.shuffle.partitions": 4, "spark.x": True}
    )
    assert settings[JAVA] == "-XX:+UseSerialGC"
    assert settings["spark.sql.shuffle.partitions"] == "4"
    assert settings["spark.x"] == "True"
    assert settings["spark.driver.memory"] == "2g"
