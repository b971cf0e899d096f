"""Push scenarios: wrk pushes N messages per request; PostgreSQL's offsets are the ground truth."""

from __future__ import annotations

from typing import Any

from queenpy.bench.catalog import Scenario, payload
from queenpy.bench.core import Q_QUEUE_COUNT, Q_QUEUE_ROWS, Context, Kind
from queenpy.bench.load import measured_window, warm_up
from queenpy.bench.wrk import render_script

__all__ = ["KIND", "run"]


def run(context: Context, scenario: Scenario, round_no: int) -> dict[str, Any]:
    """A new queue of ``scenario.partitions`` partitions, a warm-up, then the measured window; the ledger of
    the whole run (every message stored was answered ``queued`` or was in flight) decides lost and
    duplicated."""
    run = context.new_run(scenario, round_no)
    queue = f"{context.queue_prefix}{scenario.name}-r{round_no}"
    clients = scenario.wrk_connections(context.options)
    context.precreate(queue, scenario.partitions)
    script = render_script(
        "push",
        {
            "queue": queue,
            "partitions": scenario.partitions,
            "per_request": scenario.per_request,
            "payload": payload(scenario.payload_bytes),
            "seed": 1000 * round_no + 17,
            "rate_per_thread": 0,
        },
        context.workdir,
    )
    context.checkpoint()

    def rows() -> int:
        return int(context.sql.fetchval(Q_QUEUE_ROWS, queue))

    initial = rows()  # the precreated rows; nothing in flight yet
    warm = warm_up(context, run, script, clients, scenario.threads)
    measured = measured_window(context, run, script, clients, rows, scenario.threads)
    context.fill_window(
        run,
        measured.after - measured.before,
        measured.window,
        [measured.wrk],
        measured.wrk,
        requests=measured.wrk.result.requests,
    )
    settled = context.settled(rows)
    stored = int(context.sql.fetchval(Q_QUEUE_COUNT, queue))
    # The ledger of the whole run, warm-up included: every message stored was answered "queued" to wrk,
    # or was in a request still in flight when one of the wrk runs stopped (wrk abandons those; the
    # broker stores them, possibly after the window began when PostgreSQL stalls)
    runs = [w for w in (warm, measured.wrk) if w is not None]
    queued = sum(int(w.result.counters.get("queued", 0)) for w in runs)
    in_flight = len(runs) * clients * scenario.per_request
    run["ground_truth"].update(
        {
            "rows_in_window": measured.after - measured.before,
            "rows_after_settle": settled - measured.before,
            "client_queued": int(measured.wrk.result.counters.get("queued", 0)),
            "run_stored": settled - initial,
            "run_client_queued": queued,
            "queue_rows_counted": stored,
            "queue_last_seq_sum": settled,
        }
    )
    if settled - initial < queued:
        run["problems"].append(f"lost: the client saw {queued} queued, PostgreSQL stored {settled - initial}")
    if settled - initial > queued + in_flight:
        run["problems"].append(
            f"duplicated: PostgreSQL stored {settled - initial}, the client saw {queued} "
            f"queued (+{in_flight} in flight at most when wrk stopped)"
        )
    if stored != settled:
        run["problems"].append(f"queue rows counted {stored} != sum of partition offsets {settled}")
    return run


KIND = Kind("push", run)
