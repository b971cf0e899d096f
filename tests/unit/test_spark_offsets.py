"""Offset arithmetic of the Spark source (queenpy.spark.offsets): no Spark, no broker."""

from __future__ import annotations

import json
import random

import pytest

from queenpy.spark.offsets import (
    OffsetRange,
    QueueOffset,
    StartingOffsets,
    admit,
    backlog,
    cap,
    lag,
    missing_offsets,
    parse_starting_offsets,
    resolve_starting_offsets,
    split_ranges,
)

A, B, C = "0000-a", "0000-b", "0000-c"


# -- QueueOffset ---------------------------------------------------------------------------------------------


def test_offset_json_has_version_queue_and_sorted_keys() -> None:
    offset = QueueOffset("orders", {C: 3, A: 1, B: 2})
    data = offset.to_json()
    assert data == {"v": 1, "queue": "orders", "p": {A: 1, B: 2, C: 3}}
    assert list(data["p"]) == [A, B, C]
    assert json.dumps(data) == json.dumps(QueueOffset("orders", {A: 1, B: 2, C: 3}).to_json())


def test_offset_round_trips_through_json_text() -> None:
    offset = QueueOffset("orders", {A: 7, B: 0})
    assert QueueOffset.from_json(json.dumps(offset.to_json()), "orders") == offset
    assert offset.get(A) == 7 and offset.get("unknown") == 0


@pytest.mark.parametrize(
    "value, message",
    [
        ({"v": 2, "queue": "orders", "p": {}}, "version"),
        ({"v": 1, "p": {}}, "queue name"),
        ({"v": 1, "queue": "orders", "p": {A: -1}}, "negative"),
        ({"v": 1, "queue": "orders", "p": {A: "3"}}, "integer"),
        ({"v": 1, "queue": "orders", "p": {A: True}}, "integer"),
        ({"v": 1, "queue": "orders", "p": [1]}, "object"),
    ],
)
def test_bad_offsets_are_rejected(value: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        QueueOffset.from_json(value)


def test_a_checkpoint_of_another_queue_is_rejected() -> None:
    with pytest.raises(ValueError, match="'orders'.*'payments'"):
        QueueOffset.from_json({"v": 1, "queue": "orders", "p": {}}, "payments")


# -- startingOffsets -----------------------------------------------------------------------------------------


def test_starting_offsets_default_to_group_or_earliest() -> None:
    assert parse_starting_offsets(None, "q", has_group=True).kind == "group"
    assert parse_starting_offsets("", "q", has_group=False).kind == "earliest"
    assert parse_starting_offsets("LATEST", "q", has_group=False).kind == "latest"
    with pytest.raises(ValueError, match="consumerGroup"):
        parse_starting_offsets("group", "q", has_group=False)


def test_starting_offsets_json_forms() -> None:
    spec = parse_starting_offsets(json.dumps({A: 5, B: -1, C: -2}), "q", has_group=False)
    assert spec == StartingOffsets("json", {A: 5, B: -1, C: -2})
    full = parse_starting_offsets(json.dumps({"v": 1, "queue": "q", "p": {A: 4}}), "q", has_group=False)
    assert full == StartingOffsets("json", {A: 4})
    for bad in ("[1]", "{nope", json.dumps({A: -3}), json.dumps({A: 1.5})):
        with pytest.raises(ValueError):
            parse_starting_offsets(bad, "q", has_group=False)


def test_resolve_starting_offsets() -> None:
    heads = {A: 10, B: 20, C: 0}
    assert resolve_starting_offsets(StartingOffsets("earliest"), heads) == {A: 0, B: 0, C: 0}
    assert resolve_starting_offsets(StartingOffsets("latest"), heads) == heads
    assert resolve_starting_offsets(StartingOffsets("group"), heads, {A: 4, B: None}) == {A: 4, B: 0, C: 0}
    # JSON: explicit, latest (-1), earliest (-2), clamped to the head, unknown partitions kept as given
    spec = StartingOffsets("json", {A: 99, B: -1, "0000-z": 3})
    assert resolve_starting_offsets(spec, heads) == {A: 10, B: 20, C: 0, "0000-z": 3}


# -- admission control ---------------------------------------------------------------------------------------


def test_everything_is_admitted_under_the_budget_or_without_one() -> None:
    start, heads = {A: 5}, {A: 10, B: 3}
    assert admit(start, heads, None) == {A: 10, B: 3}
    assert admit(start, heads, 0) == {A: 10, B: 3}
    assert admit(start, heads, 8) == {A: 10, B: 3}


def test_budget_is_proportional_to_backlog() -> None:
    start = {A: 0, B: 0, C: 0}
    heads = {A: 600, B: 300, C: 100}
    assert admit(start, heads, 100) == {A: 60, B: 30, C: 10}


def test_rounding_leftovers_go_to_the_largest_remainders() -> None:
    heads = {A: 1, B: 1, C: 1}
    assert admit({}, heads, 2) == {A: 1, B: 1, C: 0}  # ties: smaller partition id first
    heads = {A: 5, B: 3, C: 2}
    end = admit({}, heads, 7)  # exact shares 3.5, 2.1, 1.4 -> 3, 2, 1 + leftover 1 to A (.5)
    assert end == {A: 4, B: 2, C: 1}


def test_partitions_known_only_to_start_are_kept() -> None:
    assert admit({A: 4, "gone": 9}, {A: 6}, None) == {A: 6, "gone": 9}


def test_admission_properties_hold_on_random_inputs() -> None:
    rng = random.Random(4)
    for _ in range(2000):
        pids = [f"p{i:02d}" for i in range(rng.randint(1, 12))]
        start = {p: rng.randint(0, 50) for p in pids if rng.random() < 0.8}
        heads = {p: start.get(p, 0) + rng.choice([0, 0, 1, 2, rng.randint(0, 1000)]) for p in pids}
        budget = rng.choice([None, 1, 2, 3, 7, 100, rng.randint(1, 5000)])
        end = admit(start, heads, budget)
        waiting = backlog(start, heads)
        total = sum(waiting.values())
        taken = {p: end[p] - start.get(p, 0) for p in heads}
        assert all(0 <= taken[p] <= waiting[p] for p in heads)
        assert sum(taken.values()) == (total if budget is None else min(budget, total))
        if budget is not None and total > budget:
            for p in heads:  # within one message of the exact proportional share
                assert abs(taken[p] - budget * waiting[p] / total) < 1


def test_proportional_admission_keeps_partitions_in_step() -> None:
    """A watermark is global: with a greedy budget one partition would run ahead (SPARK-NOTES pitfall 9)."""
    heads = {A: 10_000, B: 10_000, C: 10_000}
    end: dict[str, int] = {}
    for _ in range(9):
        end = admit(end, heads, 3_000)
        assert max(end.values()) - min(end.values()) <= 1
    assert admit(end, heads, 3_000) == heads


def test_cap_limits_heads_to_the_available_now_target() -> None:
    heads = {A: 10, B: 20, C: 5}
    assert cap(heads, None) == heads
    assert cap(heads, {A: 7, B: 25}) == {A: 7, B: 20}  # C appeared after the target was taken
    end = admit({A: 7}, cap(heads, {A: 7}), None)
    assert end == {A: 7}  # availableNow reaches its target and then returns the start: the run can end


# -- ranges --------------------------------------------------------------------------------------------------


def test_split_ranges() -> None:
    assert split_ranges({A: 3}, {A: 3, B: 0}) == []
    assert split_ranges({A: 3}, {B: 4, A: 10}) == [OffsetRange(A, 3, 10), OffsetRange(B, 0, 4)]
    assert split_ranges({}, {A: 10}, 4) == [OffsetRange(A, 0, 4), OffsetRange(A, 4, 8), OffsetRange(A, 8, 10)]
    assert sum(r.count for r in split_ranges({}, {A: 10, B: 7}, 3)) == 17
    with pytest.raises(ValueError, match="below"):
        split_ranges({A: 5}, {A: 4})


def test_missing_offsets() -> None:
    assert missing_offsets(0, 5, [1, 2, 3, 4, 5]) == []
    assert missing_offsets(0, 5, [1, 2, 4, 5]) == [(3, 3)]
    assert missing_offsets(10, 20, []) == [(11, 20)]
    assert missing_offsets(0, 6, [3, 4]) == [(1, 2), (5, 6)]


def test_lag_between_two_reported_offsets() -> None:
    end = {"v": 1, "queue": "q", "p": {A: 5, B: 10}}
    heads = {"v": 1, "queue": "q", "p": {A: 8, B: 10, C: 4}}
    assert lag(end, heads) == 3 + 0 + 4
    assert lag(json.dumps(end), json.dumps(heads)) == 7
    assert lag(None, heads) == 22
    assert lag(end, None) == 0
    assert lag("not json", heads) == 22


def test_earliest_starts_after_what_retention_removed() -> None:
    """``earliest`` (and JSON -2, and partitions a JSON spec leaves out) start at each partition's earliest
    offset as /spark/offsets reports it, so a fresh query reads no gap that retention made; a group's cursor
    and explicit offsets are taken as they are (below the earliest offset they are data loss)."""
    heads, earliests = {A: 10, B: 20, C: 0}, {A: 4, B: 0}
    assert resolve_starting_offsets(StartingOffsets("earliest"), heads, None, earliests) == {A: 4, B: 0, C: 0}
    assert resolve_starting_offsets(StartingOffsets("json", {A: -2, B: 2}), heads, None, earliests) == {
        A: 4,
        B: 2,
        C: 0,
    }
    assert resolve_starting_offsets(StartingOffsets("json", {B: 2}), heads, None, earliests) == {
        A: 4,
        B: 2,
        C: 0,
    }
    assert resolve_starting_offsets(StartingOffsets("group"), heads, {A: 1}, earliests) == {A: 1, B: 0, C: 0}
