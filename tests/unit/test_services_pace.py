"""The background jobs' duty cycle (``queenpy.services.jobs.Pace``, ``SERVICES_DUTY_CYCLE``): the rest after a
step, and a paced sequence of steps whose busy share of the wall time is the duty asked for."""

from __future__ import annotations

import asyncio
import time

import pytest

from queenpy.services.jobs import HOLD_POLL_S, Pace, keep_up_duty, rest_after
from queenpy.settings import Settings


def test_rest_after_makes_the_busy_share_the_duty() -> None:
    for duty in (0.1, 0.25, 0.5, 0.9):
        rest = rest_after(2.0, duty)
        assert rest > 0
        assert 2.0 / (2.0 + rest) == pytest.approx(duty)
    assert rest_after(2.0, 1.0) == 0.0  # flat out
    with pytest.raises(ValueError, match="positive"):
        rest_after(1.0, 0.0)


async def test_paced_steps_take_the_duty_share_of_the_wall_time() -> None:
    async def step() -> str:
        await asyncio.sleep(0.05)  # a database step of 50 ms
        return "done"

    pace = Pace(0.25)
    started = time.monotonic()
    results = [await pace.step(step()) for _ in range(4)]
    wall = time.monotonic() - started
    assert results == ["done"] * 4
    assert pace.busy_s >= 0.2
    assert pace.rested_s == pytest.approx(3 * pace.busy_s)
    assert wall >= pace.busy_s + pace.rested_s
    assert pace.busy_s / wall == pytest.approx(0.25, abs=0.03)
    assert pace.details()["duty"] == 0.25


async def test_a_failed_step_raises_without_resting() -> None:
    async def failing() -> None:
        await asyncio.sleep(0.05)
        raise RuntimeError("lost the connection")

    pace = Pace(0.1)
    with pytest.raises(RuntimeError, match="lost the connection"):
        await pace.step(failing())
    assert pace.rested_s == 0.0


def test_the_duty_cycle_setting_is_clamped_to_a_positive_share() -> None:
    assert Settings.from_env({}).services.duty_cycle == 0.25
    assert Settings.from_env({"SERVICES_DUTY_CYCLE": "0.5"}).services.duty_cycle == 0.5
    assert Settings.from_env({"SERVICES_DUTY_CYCLE": "3"}).services.duty_cycle == 1.0
    assert Settings.from_env({"SERVICES_DUTY_CYCLE": "0"}).services.duty_cycle == 0.01


def test_keep_up_duty_stays_at_the_base_for_a_one_off_backlog() -> None:
    # one run of 65 s busy at 0.25 (260 s of wall time), the next 300 s later: its busy share of the cycle is
    # 65 / 560 = 0.116, twice that below the base
    assert keep_up_duty(0.25, busy_s=65.0, run_s=260.0, interval_s=300.0) == 0.25
    assert keep_up_duty(0.25, busy_s=0.0, run_s=0.01, interval_s=1.0) == 0.25  # nothing to do


def test_keep_up_duty_rises_when_a_run_cannot_keep_up_and_settles_at_twice_the_need() -> None:
    # arrivals need u = 0.25 of the wall time (14 us a row at 18,000 rows/s, a saturated machine); a run
    # every second after the last (interval 1 s). Simulate the cycles: W = rows x cost / duty
    cost_s, rate, interval = 14e-6, 18_000.0, 1.0
    duty, backlog = 0.25, 0.0
    for _ in range(30):
        arrived = rate * interval + backlog  # what the run finds
        busy = arrived * cost_s
        run_s = busy / duty
        backlog = rate * run_s  # arrives while it runs, for the next
        duty = keep_up_duty(0.25, busy, run_s, interval)
    assert duty == pytest.approx(0.5, abs=0.01)  # twice u
    assert run_s == pytest.approx(1.0, rel=0.05)  # u x I / (d - u): bounded


def test_keep_up_duty_is_at_most_one_and_validates_the_base() -> None:
    assert keep_up_duty(0.25, busy_s=10.0, run_s=10.0, interval_s=0.0) == 1.0
    with pytest.raises(ValueError, match="positive"):
        keep_up_duty(0.0, 1.0, 1.0, 1.0)


async def test_a_held_pace_waits_before_the_step_and_counts_the_hold() -> None:
    looks: list[float] = []

    async def held() -> bool:  # paused for the first 0.6 s
        looks.append(time.monotonic())
        return looks[-1] - looks[0] < 0.6

    started: list[float] = []

    async def step() -> str:
        started.append(time.monotonic())
        return "done"

    pace = Pace(1.0, held=held)
    assert await pace.step(step()) == "done"
    assert started[0] - looks[0] >= 0.6  # the step began only once the hold ended
    assert 0.6 <= pace.held_s < 0.6 + 2 * HOLD_POLL_S
    assert pace.details()["heldMs"] == pytest.approx(pace.held_s * 1000, abs=0.1)
    assert await pace.step(step()) == "done"  # within HOLD_POLL_S of the last look: not asked, no wait
    assert pace.held_s < 0.6 + 2 * HOLD_POLL_S


async def test_a_step_cancelled_while_held_never_starts() -> None:
    async def held() -> bool:
        return True

    started: list[str] = []

    async def step() -> None:
        started.append("step")

    work = step()
    task = asyncio.ensure_future(Pace(0.5, held=held).step(work))
    await asyncio.sleep(2 * HOLD_POLL_S)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert started == []
    assert work.cr_frame is None  # closed, not left to warn "never awaited"
