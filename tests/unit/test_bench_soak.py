"""The soak's figures: when its table has settled, which backlog a growing table comes from (consumers behind,
or retention behind), its plan of off/on slices, the producer's rate, and its chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from queenpy.bench.kinds import soak
from queenpy.bench.kinds.soak import PIPELINE_SHARE, indexes_settled, slice_plan, soak_load


def _samples(unconsumed_per_s: float, retained_per_s: float) -> list[dict[str, Any]]:
    """A sample every 5 s for 10 minutes at 20,000 msg/s produced; the table grows 400 bytes a stored
    message."""
    samples = []
    for n in range(121):
        t = 5.0 * n
        produced = 20_000 * t
        unconsumed = 50_000 + unconsumed_per_s * t
        retained = 30_000 + retained_per_s * t
        samples.append(
            {
                "t": t,
                "services": "on",
                "produced": produced,
                "cursor": produced - unconsumed,
                "stored": unconsumed + retained,
                "table_bytes": 400.0 * (unconsumed + retained) + 2**29,
                "rss_bytes": 180.0 * 2**20,
            }
        )
    return samples


def _flatness(samples: list[dict[str, Any]]) -> dict[str, Any]:
    figures = soak.figures(samples, [], 600.0, 20_000.0, 40_000.0, "a probe", 1.2e7, 1.2e7, 600.0)
    return figures["flatness"]  # type: ignore[no-any-return]


def test_a_table_grown_by_the_consumers_backlog_shows_in_unconsumed_not_in_retained() -> None:
    flatness = _flatness(_samples(unconsumed_per_s=100.0, retained_per_s=0.0))
    assert flatness["table_mb"]["flat"] is False and flatness["stored_messages"]["flat"] is False
    assert flatness["unconsumed_messages"]["slope_per_min"] == pytest.approx(6_000.0)
    assert flatness["unconsumed_messages"]["flat"] is False
    assert flatness["retained_messages"]["slope_per_min"] == pytest.approx(0.0, abs=1e-6)
    assert flatness["retained_messages"]["flat"] is True and flatness["broker_rss_mb"]["flat"] is True


def test_retention_falling_behind_shows_in_retained() -> None:
    flatness = _flatness(_samples(unconsumed_per_s=0.0, retained_per_s=100.0))
    assert flatness["unconsumed_messages"]["flat"] is True
    assert flatness["retained_messages"]["slope_per_min"] == pytest.approx(6_000.0)
    assert flatness["retained_messages"]["flat"] is False


def test_the_table_is_flat_within_8_mb_of_fitted_change() -> None:
    """The 8 MB limit is in the samples' unit (bytes): it once was compared in MB with a change in bytes, and
    a table that moved 1.5 MB in 17 minutes was called "not flat"."""

    def table(change_bytes: float) -> dict[str, Any]:
        samples = _samples(unconsumed_per_s=0.0, retained_per_s=0.0)
        for sample in samples:
            sample["table_bytes"] += change_bytes * sample["t"] / 600.0
        return _flatness(samples)["table_mb"]  # type: ignore[no-any-return]

    assert table(2 * 2**20)["flat"] is True  # 2 MB over the window
    assert table(-2 * 2**20)["flat"] is True
    assert table(20 * 2**20)["flat"] is False


@pytest.mark.parametrize(
    ("duration_s", "plan"),
    [(60, (6.0, 2)), (600, (60.0, 2)), (1200, (60.0, 2)), (1800, (60.0, 3)), (3600, (60.0, 6))],
)
def test_longer_runs_compare_more_pairs_of_slices(duration_s: float, plan: tuple[float, int]) -> None:
    """Pairs of 60 s slices (each "off" slice with a wait of up to one slice before it, each "on" slice up to
    two), fill 40% of the run, waits aside: a checkpoint inside one slice moves the ratio less when there are
    more of them. The flatness window keeps the rest, at least half the run."""
    assert slice_plan(duration_s) == plan
    slice_s, pairs = plan
    assert duration_s - 2 * pairs * slice_s >= 0.5 * duration_s


def test_the_flatness_window_is_compared_with_the_off_slices_too() -> None:
    """The "on" slices follow a pause (its deletions and their vacuum are caught up with first); the flatness
    window runs the services without pauses. Both are reported against the mean of the "off" slices."""

    def piece(services: str, push: float, consume: float) -> dict[str, Any]:
        return {"services": services, "seconds": 60.0, "push_msg_per_s": push, "consume_msg_per_s": consume}

    slices = [
        piece("on", 26_000, 25_900),
        piece("off", 27_000, 27_100),
        piece("on", 25_000, 24_800),
        piece("off", 26_000, 26_100),
        piece("on", 24_000, 24_400),
    ]
    figures = soak.figures(
        _samples(0.0, 0.0), slices, 600.0, 27_000.0, 54_000.0, "a probe", 1.6e7, 1.6e7, 600.0
    )
    assert figures["throughput_on_vs_off"]["push"] == pytest.approx(24_500 / 26_500)
    assert figures["throughput_on_vs_off"]["consume"] == pytest.approx(24_600 / 26_600)
    assert figures["throughput_window_vs_off"]["push"] == pytest.approx(26_000 / 26_500)
    assert figures["throughput_window_vs_off"]["consume"] == pytest.approx(25_900 / 26_600)


def test_the_producer_runs_at_half_the_push_capacity_when_the_consumers_can_follow_it() -> None:
    """Push 20,000 and consume 100,000 msg/s: the estimate together is 16,667, 70% of it 11,667, more than
    half of push (10,000)."""
    load = soak_load(20_000.0, 100_000.0, 0.5)
    assert load["rate"] == pytest.approx(10_000.0) and load["bound"] == "push"
    assert load["pipeline_estimate"] == pytest.approx(1 / (1 / 20_000 + 1 / 100_000))


def test_the_producer_is_capped_by_what_push_and_consume_allow_together() -> None:
    """The 2-core figures of 2026-11-27: push 58,000 and consume 45,000 msg/s; half of push (29,000) is more
    than the consumers held beside the producer (about 22,000); the cap is 70% of 25,340."""
    load = soak_load(58_000.0, 45_000.0, 0.5)
    assert load["bound"] == "pipeline"
    assert load["pipeline_estimate"] == pytest.approx(25_339.8, abs=0.1)
    assert load["rate"] == pytest.approx(PIPELINE_SHARE * 25_339.8, abs=0.1)
    assert load["rate"] < 22_000


def test_a_capacity_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="capacities must be positive"):
        soak_load(0.0, 45_000.0, 0.5)


def _parts(grown_at: list[float], until: float, heap_swing: bool = True) -> list[dict[str, Any]]:
    """Samples every 5 s up to ``until``: the heap swinging by 20 MB (vacuum's truncation), the primary key
    growing by a page at each time in ``grown_at``."""
    return [
        {
            "t": t,
            "table_parts_bytes": {
                "heap": 40 * 2**20 + (20 * 2**20 if heap_swing and n % 3 else 0),
                "messages_pkey": 20 * 2**20 + 8192 * sum(1 for g in grown_at if g <= t),
                "messages_partition_seq_idx": 35 * 2**20,
            },
        }
        for n, t in enumerate(5.0 * k for k in range(int(until // 5) + 1))
    ]


def test_the_table_has_settled_once_no_index_grew_for_the_quiet_time() -> None:
    assert indexes_settled(_parts([10.0, 200.0], until=320.0), 120.0) is True  # quiet since 200 s
    assert indexes_settled(_parts([10.0, 200.0, 250.0], until=320.0), 120.0) is False  # one page at 250 s
    assert indexes_settled(_parts([10.0, 200.0], until=315.0), 120.0) is False  # quiet for 115 s only


def test_settling_ignores_the_heap_and_needs_samples_covering_the_quiet_time() -> None:
    assert indexes_settled(_parts([], until=120.0, heap_swing=True), 120.0) is True
    assert indexes_settled(_parts([], until=115.0), 120.0) is False
    assert indexes_settled([], 120.0) is False


def test_a_soak_run_gets_a_chart_of_its_table_rss_and_rates_over_time(tmp_path: Path) -> None:
    """The chart reads the run's samples as the JSON has them: the settling's and the soak's, states
    on/off."""
    image = pytest.importorskip("matplotlib.image", reason="matplotlib (queenpy[bench]) draws the charts")
    samples = _samples(unconsumed_per_s=0.0, retained_per_s=0.0)
    for n, sample in enumerate(samples):
        sample["services"] = "off" if 60 <= n < 72 else "on"
        sample["table_parts_bytes"] = {"heap": 60 * 2**20, "messages_pkey": 20 * 2**20}
    figures = soak.figures(samples, [], 300.0, 20_000.0, 40_000.0, "a probe", 1.2e7, 1.2e7, 600.0)
    figures["settle"] = {"seconds": 130.0, "samples": _parts([10.0], until=130.0)}
    for sample in figures["settle"]["samples"]:
        sample.update(services="settle", rss_bytes=170.0 * 2**20, produced=0.0, cursor=0.0)
    document = {
        "started_at": "2026-11-27T19:30:00",
        "git": {"commit": "abc1234"},
        "scenarios": [{"scenario": "soak", "runs": [{"round": 1, "soak": figures}, {"round": 2}]}],
    }
    written = soak.charts(document, tmp_path / "bench.png")
    assert written == [tmp_path / "bench-soak-r1.png"]
    width, height = image.imread(written[0]).shape[1::-1]
    assert (width, height) == (11 * 110, 10 * 110)
    assert (
        soak.charts(
            {**document, "scenarios": [{"scenario": "push-10", "runs": [{"round": 1}]}]},
            tmp_path / "other.png",
        )
        == []
    )
