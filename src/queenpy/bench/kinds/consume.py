"""Consumption scenarios (autoAck pops, pop + batch ack, fan-out, transactional handoff) over a shared
backlog; the consumer groups' cursors are the ground truth."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from queenpy.bench.catalog import Scenario, payload
from queenpy.bench.core import Q_QUEUE_ROWS, Context, Kind
from queenpy.bench.load import measured_window, warm_up
from queenpy.bench.wrk import render_script

__all__ = ["KIND", "run", "size_estimate"]

# the wrk counter a mode's client count is read from
_CLIENT_COUNTER = {"auto": "delivered", "ack": "acked", "handoff": "handed"}


def size_estimate(context: Context, scenario: Scenario, measured: float, lower_bound: bool) -> None:
    """Update the rate estimate that sizes the next round's backlog: doubled when the backlog drained during
    the window (the figure is then a lower bound), else at least 1.2 times the measured rate."""
    estimate = context.estimates.get(scenario.name, scenario.initial_rate)
    context.estimates[scenario.name] = estimate * 2 if lower_bound else max(estimate, measured * 1.2)


def run(context: Context, scenario: Scenario, round_no: int) -> dict[str, Any]:
    """Each run reads the shared backlog as consumer groups of its own (``scenario.groups`` of them) from the
    beginning; in ``handoff`` mode into a target queue of its own."""
    run = context.new_run(scenario, round_no)
    options = context.options
    estimate = context.estimates.get(scenario.name, scenario.initial_rate)
    per_group = estimate / scenario.groups
    need = int(per_group * max(options.seconds, options.warmup) * 1.3) + scenario.batch * scenario.connections
    queue = context.backlog(scenario, need).queue
    groups = [
        f"{scenario.name}-r{round_no}" + (f"-g{i}" if scenario.groups > 1 else "")
        for i in range(1, scenario.groups + 1)
    ]
    # a target queue per run: each run's group re-reads the same source messages, and the pushed copies'
    # transactionIds (h-<source id>) must not meet an earlier run's (that would fail the transaction)
    target = f"{queue}-{scenario.name}-r{round_no}-out" if scenario.mode == "handoff" else ""
    if target:
        context.precreate(target, scenario.partitions)
        context.precreate(target + "-warm", scenario.partitions)

    def script_for(group_names: list[str], target_queue: str) -> Path:
        return render_script(
            "consume",
            {
                "queue": queue,
                "groups": group_names,
                "batch": scenario.batch,
                "mode": scenario.mode,
                "timeout_ms": options.long_poll_ms,
                "target": target_queue,
                "payload": payload(40),
            },
            context.workdir,
        )

    def truth() -> tuple[dict[str, int], int]:
        return (
            context.cursors(queue, groups),
            int(context.sql.fetchval(Q_QUEUE_ROWS, target)) if target else 0,
        )

    timeout_s = options.long_poll_ms / 1000 + 10
    context.checkpoint()
    warm_up(
        context,
        run,
        script_for([f"warm-{g}" for g in groups], target and target + "-warm"),
        scenario.connections,
        scenario.threads,
        timeout_s,
    )
    available = int(context.sql.fetchval(Q_QUEUE_ROWS, queue))
    measured = measured_window(
        context, run, script_for(groups, target), scenario.connections, truth, scenario.threads, timeout_s
    )
    (cursors0, target0), (cursors1, target1) = measured.before, measured.after
    consumed = sum(cursors1.values()) - sum(cursors0.values())
    counted = (target1 - target0) if target else consumed
    context.fill_window(
        run, counted, measured.window, [measured.wrk], measured.wrk, requests=measured.wrk.result.requests
    )
    cursors2, target2 = context.settled(truth)
    advance = sum(cursors2.values()) - sum(cursors0.values())
    counters = measured.wrk.result.counters
    slack = scenario.connections * scenario.batch
    client = int(counters.get(_CLIENT_COUNTER[scenario.mode], 0))
    run["ground_truth"].update(
        {
            "consumed_in_window": consumed,
            "consumed_after_settle": advance,
            "client_count": client,
            "delivered": int(counters.get("delivered", 0)),
            "per_group_in_window": {g: cursors1[g] - cursors0[g] for g in groups},
            "backlog_rows": available,
        }
    )
    if advance < client:
        run["problems"].append(f"duplicated: the client counted {client}, cursors advanced {advance}")
    if advance > client + slack:
        run["problems"].append(
            f"lost: cursors advanced {advance}, the client counted {client} (+{slack} in flight at most)"
        )
    if target:
        handed = target2 - target0
        run["ground_truth"].update({"target_rows_after_settle": handed})
        if handed != advance:
            run["problems"].append(f"handoff not atomic: {advance} acked from A, {handed} pushed to B")
    drained = min(available - cursors1[g] for g in groups) <= slack
    if drained:
        run["notes"].append("backlog drained during the window: the rate is a lower bound")
    size_estimate(context, scenario, run["msg_per_s"], drained)
    return run


KIND = Kind("consume", run)
