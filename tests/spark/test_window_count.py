"""The same window count on both pipeline engines (docs/pipelines.md): ``examples/streams_window_count.py``
(Queen Streams, on the broker) and ``examples/spark_window_count.py`` (Spark Structured Streaming through
``format("queen")``) read the same source queue and emit identical windows, equal to the plain Python
computation."""

from __future__ import annotations

import asyncio
import importlib
import signal
import sys
from pathlib import Path
from types import ModuleType

import pytest

from helpers import unique

pytestmark = pytest.mark.spark

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))  # as `python examples/...` and `queenpy spark run` do
    return importlib.import_module(name)


def test_streams_and_spark_emit_identical_windows(spark, broker, tmp_path: Path) -> None:
    data, streams, on_spark = (
        load("window_count_data"),
        load("streams_window_count"),
        load("spark_window_count"),
    )
    events = data.make_events(1500, keys=4, minutes=6, seed=21)
    source = unique("clicks")
    produced = data.produce(broker.url, source, events)

    saved = {
        sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)
    }  # Queen() installs its own
    try:
        by_streams = asyncio.run(
            streams.run_window_count(broker.url, source, f"{source}.streams", unique("wc"), produced)
        )
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    by_spark = on_spark.run_window_count(spark, broker.url, source, f"{source}.spark", str(tmp_path / "ck"))

    expected = data.expected_windows(events)
    assert len(expected) >= 4 * 6 - 2
    assert by_streams == expected
    assert by_spark == expected
