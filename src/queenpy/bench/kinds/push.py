"""Push scenarios: wrk pushes N messages per request; PostgreSQL's offsets are the ground truth."""

from __future__ import annotations

from typing import Any

from queenpy.bench.catalog import Scenario, payload
from queenpy.bench.core import (
    Q_CHECKPOINTS,
    Q_QUEUE_COUNT,
    Q_QUEUE_ROWS,
    BenchCore,
)
from queenpy.bench.wrk import WrkRun, render_script, run_wrk

__all__ = ["PushRuns"]


class PushRuns(BenchCore):
    def _run_push(self, scenario: Scenario, round_no: int) -> dict[str, Any]:
        run = self._new_run(scenario, round_no)
        options = self.options
        queue = f"{self.queue_prefix}{scenario.name}-r{round_no}"
        connections = options.connections if scenario.connections == 50 else scenario.connections
        self._precreate(queue, scenario.partitions)
        params = {"queue": queue, "partitions": scenario.partitions, "per_request": scenario.per_request,
                  "payload": payload(scenario.payload_bytes), "seed": 1000 * round_no + 17, "rate_per_thread": 0}
        script = render_script("push", params, self.workdir)
        self._checkpoint()

        def rows() -> int:
            return int(self.sql.fetchval(Q_QUEUE_ROWS, queue))

        initial = rows()  # the precreated rows; nothing in flight yet
        runs: list[WrkRun] = []
        if options.warmup > 0:
            warm = run_wrk(self.broker.url, script, connections, options.warmup, scenario.threads)
            self._check_wrk(run, warm, "warm-up")
            runs.append(warm)
        before = self._settled(rows)
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS))
        self.memory.mark()
        self.waits.mark()
        start = self._mark()
        measured = run_wrk(self.broker.url, script, connections, options.seconds, scenario.threads)
        runs.append(measured)
        at_end = rows()
        end = self._mark()
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS)) - checkpoints
        self._check_wrk(run, measured, "measured")
        self._fill_window(run, at_end - before, start, end, [measured], measured, checkpoints)
        settled = self._settled(rows)
        stored = int(self.sql.fetchval(Q_QUEUE_COUNT, queue))
        # The ledger of the whole run, warm-up included: every message stored was answered "queued" to wrk,
        # or was in a request still in flight when one of the wrk runs stopped (wrk abandons those; the
        # broker stores them, possibly after the window began when PostgreSQL stalls)
        queued = sum(int(w.result.counters.get("queued", 0)) for w in runs)
        in_flight = len(runs) * connections * scenario.per_request
        run["ground_truth"].update({"rows_in_window": at_end - before, "rows_after_settle": settled - before,
                                    "client_queued": int(measured.result.counters.get("queued", 0)),
                                    "run_stored": settled - initial, "run_client_queued": queued,
                                    "queue_rows_counted": stored, "queue_last_seq_sum": settled})
        if settled - initial < queued:
            run["problems"].append(f"lost: the client saw {queued} queued, PostgreSQL stored {settled - initial}")
        if settled - initial > queued + in_flight:
            run["problems"].append(f"duplicated: PostgreSQL stored {settled - initial}, the client saw {queued} "
                                   f"queued (+{in_flight} in flight at most when wrk stopped)")
        if stored != settled:
            run["problems"].append(f"queue rows counted {stored} != sum of partition offsets {settled}")
        return run
