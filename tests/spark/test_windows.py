"""Windowed aggregation (examples/spark_windows.py) equals the plain Python computation of the same windows."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from helpers import unique

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_windows.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spark_windows_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up (the example ships no UDF to workers)
    spec.loader.exec_module(module)
    return module


def test_tumbling_minute_sums_equal_python(spark, broker, tmp_path: Path) -> None:
    example = load_example()
    result = example.run_windows(
        spark,
        broker.url,
        "." + unique("w"),
        events=3000,
        keys=4,
        minutes=8,
        max_per_trigger=400,
        checkpoint=str(tmp_path / "ck"),
    )
    assert result.readings == 3000 + 4
    assert len(result.python) >= 4 * 8 - 2  # every key has readings in (nearly) every minute
    assert result.duplicates == 0
    assert sorted(result.spark) == sorted(result.python)
