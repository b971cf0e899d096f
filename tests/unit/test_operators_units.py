"""Pure parts of the operators' API: analytics bucket widths and folds, query validation, the failover
buffer's pause (no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from queenpy.engine.failover import FailoverBuffer
from queenpy.errors import InvalidRequest
from queenpy.server import validation as v
from queenpy.server.routes.analytics import _bucket_of, _merge, bucket_minutes

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("span", "minutes"),
    [
        (timedelta(minutes=5), 1),
        (timedelta(hours=1), 1),
        (timedelta(hours=1, seconds=1), 5),
        (timedelta(hours=6), 5),
        (timedelta(hours=7), 15),
        (timedelta(days=1), 15),
        (timedelta(days=2), 60),
        (timedelta(days=7), 60),
        (timedelta(days=30), 360),
    ],
)
def test_bucket_minutes_follow_queen(span: timedelta, minutes: int) -> None:
    assert bucket_minutes(T0, T0 + span) == minutes


def test_minutes_fold_into_buckets() -> None:
    assert _bucket_of("2026-01-01T10:07:00.000Z", 5) == "2026-01-01T10:05:00.000Z"
    assert _bucket_of("2026-01-01T10:07:00.000Z", 60) == "2026-01-01T10:00:00.000Z"
    folded = _merge(
        [(2, {"avg": 10, "min": 5, "max": 20, "last": 7}), (6, {"avg": 2, "min": 1, "max": 3, "last": 4})]
    )
    assert folded == {"avg": 4.0, "min": 1, "max": 20, "last": 4}  # weighted by samples, last of the newest


@pytest.mark.parametrize("raw", ["yesterday", "2024-13-01", "99999-01-01", "0001-01-01T00:00:00"])
def test_bad_timestamps_name_the_parameter(raw: str) -> None:
    with pytest.raises(InvalidRequest, match="query parameter from"):
        v.query_window({"from": raw})


def test_window_order_and_choices() -> None:
    start, end = v.query_window({"from": "2024-01-01T00:00:00Z", "to": "2024-01-02T00:00:00+01:00"})
    assert start is not None and end is not None and start < end
    assert v.query_time({"to": "2024-01-01T00:00:00"}, "to") == datetime(
        2024, 1, 1, tzinfo=UTC
    )  # naive is UTC
    with pytest.raises(InvalidRequest, match="from must not be after to"):
        v.query_window({"from": "2024-02-01", "to": "2024-01-01"})
    assert v.query_choice({}, "status", ("a", "b"), default="a") == "a"
    with pytest.raises(InvalidRequest, match="status must be one of a, b"):
        v.query_choice({"status": "c"}, "status", ("a", "b"))


async def test_a_paused_buffer_keeps_its_files_until_resumed(tmp_path: Path) -> None:
    stored: list[dict[str, Any]] = []

    async def push(items: list[dict[str, Any]]) -> list[Any]:
        stored.extend(items)
        return [{"status": "queued"} for _ in items]

    buffer = FailoverBuffer(tmp_path, push, flush_ms=10)
    buffer.pause()
    answers = await buffer.append([{"queue": "q", "partition": "p", "payload": 1}], database_failed=False)
    assert [a["status"] for a in answers] == ["buffered"] and buffer.db_healthy
    assert await buffer.drain_once() == 0 and stored == []
    assert buffer.stats()["events"] == 1
    buffer.resume()
    assert await buffer.drain_once() == 1 and [item["payload"] for item in stored] == [1]
    assert buffer.stats() == {"files": 0, "events": 0, "bytes": 0, "failedFiles": 0}
