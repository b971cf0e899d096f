"""Consumption scenarios (autoAck pops, pop + batch ack, fan-out, transactional handoff) over a shared
backlog; the consumer groups' cursors are the ground truth."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from queenpy.bench.catalog import Scenario, payload
from queenpy.bench.core import (
    Q_CHECKPOINTS,
    Q_QUEUE_ROWS,
    Backlog,
    BenchCore,
)
from queenpy.bench.wrk import render_script, run_wrk

__all__ = ["ConsumeRuns"]


class ConsumeRuns(BenchCore):
    # consumption ----------------------------------------------------------------------------------
    def _backlog(self, scenario: Scenario, need_per_group: int) -> Backlog:
        """The shared backlog of ``scenario.partitions`` partitions, topped up to ``need_per_group`` rows,
        in whole batches per partition (at least one): a partition whose tail is a partial batch would make
        every other pop a short one."""
        backlog = self.backlogs.get(scenario.partitions)
        if backlog is None:
            backlog = Backlog(f"{self.queue_prefix}backlog-p{scenario.partitions}", scenario.partitions)
            self._precreate(backlog.queue, scenario.partitions)
            backlog.per_partition = 1
            self.backlogs[scenario.partitions] = backlog
        wanted = scenario.batch * max(1, math.ceil(need_per_group / scenario.partitions / scenario.batch))
        if wanted > backlog.per_partition:
            self._load_backlog(backlog.queue, scenario.partitions, wanted - backlog.per_partition, 40, 200_000)
            backlog.per_partition = wanted
        return backlog

    def _run_consume(self, scenario: Scenario, round_no: int) -> dict[str, Any]:
        run = self._new_run(scenario, round_no)
        options = self.options
        estimate = self.estimates.get(scenario.name, scenario.initial_rate)
        per_group = estimate / scenario.groups
        need = int(per_group * max(options.seconds, options.warmup) * 1.3) + scenario.batch * scenario.connections
        backlog = self._backlog(scenario, need)
        queue = backlog.queue
        groups = [f"{scenario.name}-r{round_no}" + (f"-g{i}" if scenario.groups > 1 else "")
                  for i in range(1, scenario.groups + 1)]
        warm_groups = [f"warm-{g}" for g in groups]
        # a target queue per run: each run's group re-reads the same source messages, and the pushed copies'
        # transactionIds (h-<source id>) must not meet an earlier run's (that would fail the transaction)
        target = f"{queue}-{scenario.name}-r{round_no}-out" if scenario.mode == "handoff" else ""
        if target:
            self._precreate(target, scenario.partitions)
            self._precreate(target + "-warm", scenario.partitions)

        def script_for(group_names: list[str], target_queue: str) -> Path:
            return render_script("consume", {
                "queue": queue, "groups": group_names, "batch": scenario.batch, "mode": scenario.mode,
                "timeout_ms": options.long_poll_ms, "target": target_queue, "payload": payload(40)},
                self.workdir)

        timeout_s = options.long_poll_ms / 1000 + 10
        self._checkpoint()
        if options.warmup > 0:
            warm = run_wrk(self.broker.url, script_for(warm_groups, target and target + "-warm"),
                           scenario.connections, options.warmup, scenario.threads, timeout_s)
            self._check_wrk(run, warm, "warm-up")

        def truth() -> tuple[dict[str, int], int]:
            cursors = self._cursors(queue, groups)
            return cursors, (int(self.sql.fetchval(Q_QUEUE_ROWS, target)) if target else 0)

        cursors0, target0 = truth()
        available = int(self.sql.fetchval(Q_QUEUE_ROWS, queue))
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS))
        self.memory.mark()
        self.waits.mark()
        start = self._mark()
        measured = run_wrk(self.broker.url, script_for(groups, target), scenario.connections, options.seconds,
                           scenario.threads, timeout_s)
        cursors1, target1 = truth()
        end = self._mark()
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS)) - checkpoints
        self._check_wrk(run, measured, "measured")
        consumed = sum(cursors1.values()) - sum(cursors0.values())
        counted = (target1 - target0) if target else consumed
        self._fill_window(run, counted, start, end, [measured], measured, checkpoints)
        cursors2, target2 = self._settled(truth)
        advance = sum(cursors2.values()) - sum(cursors0.values())
        counters = measured.result.counters
        slack = scenario.connections * scenario.batch
        client = int(counters.get({"auto": "delivered", "ack": "acked", "handoff": "handed"}[scenario.mode], 0))
        run["ground_truth"].update({
            "consumed_in_window": consumed, "consumed_after_settle": advance, "client_count": client,
            "delivered": int(counters.get("delivered", 0)), "per_group_in_window":
                {g: cursors1[g] - cursors0[g] for g in groups}, "backlog_rows": available})
        if advance < client:
            run["problems"].append(f"duplicated: the client counted {client}, cursors advanced {advance}")
        if advance > client + slack:
            run["problems"].append(f"lost: cursors advanced {advance}, the client counted {client} "
                                   f"(+{slack} in flight at most)")
        if target:
            handed = target2 - target0
            run["ground_truth"].update({"target_rows_after_settle": handed})
            if handed != advance:
                run["problems"].append(f"handoff not atomic: {advance} acked from A, {handed} pushed to B")
        left = min(available - cursors1[g] for g in groups)
        if left <= slack:
            run["notes"].append("backlog drained during the window: the rate is a lower bound")
            self.estimates[scenario.name] = estimate * 2
        else:
            self.estimates[scenario.name] = max(estimate, run["msg_per_s"] * 1.2)
        return run
