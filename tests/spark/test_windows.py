"""Windowed aggregations (examples/spark_windows.py): tumbling, sliding and session windows with a watermark
equal a plain Python computation on the same readings, and the late readings land in the late queue exactly
(Python finds them by simulating the micro-batches with the connector's admission and Spark's watermark rule:
a stateful operator drops the rows of micro-batch N at or below the watermark of batch N-1)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

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


@pytest.fixture(scope="module")
def example() -> ModuleType:
    return load_example()


@pytest.fixture(scope="module")
def prepared(example: ModuleType, broker: Any) -> Any:
    found = example.prepare(broker.url, "." + unique("w"), events=2400, keys=4, max_per_trigger=700)
    assert len(found.late) >= 20  # the input has late readings, found by the watermark rule
    # and readings as far behind that Spark aggregates all the same: they come in micro-batch 1, whose late
    # rows meet batch 0's watermark (none), not batch 1's
    assert found.behind >= 8
    return found


def test_late_readings_go_to_the_late_queue(
    example: ModuleType, prepared: Any, spark: Any, tmp_path: Path
) -> None:
    result = example.run_windows(spark, prepared, (), checkpoint=str(tmp_path))
    assert sorted(result.late_spark) == sorted(prepared.late)
    assert len(result.late_spark) == len(set(result.late_spark))


@pytest.mark.parametrize("kind", ["tumbling", "sliding", "session"])
def test_windows_equal_python(
    example: ModuleType, prepared: Any, spark: Any, kind: str, tmp_path: Path
) -> None:
    result = example.run_windows(spark, prepared, (kind,), checkpoint=str(tmp_path), route=False)
    python = result.python[kind]
    assert len(python) > 50
    assert result.duplicates(kind) == 0
    assert sorted(result.spark[kind]) == python
