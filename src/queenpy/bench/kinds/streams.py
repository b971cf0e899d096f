"""The Queen Streams scenario: a tumbling-window count per partition through ``/streams/v1/cycle``, driven
the way the Streams SDK's runner drives it (``lua/streams.lua``: pop, state/get, cycle), over the shared
backlog. PostgreSQL is the ground truth: the consumer group's cursors count the messages, its
``total_batches_consumed`` the cycles (each cycle acks its batch and releases the lease), and the sink's rows
the emitted windows. Exactly once is checked at the end: the emitted counts plus the open windows' counts in
``queen_streams.state`` equal the messages the cursors passed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from queenpy.bench.catalog import Scenario
from queenpy.bench.core import Q_QUEUE_ROWS, Context, Kind
from queenpy.bench.kinds.consume import size_estimate
from queenpy.bench.load import measured_window, warm_up
from queenpy.bench.parsing import median
from queenpy.bench.report import number
from queenpy.bench.wrk import render_script

__all__ = ["KIND", "report_lines", "run", "summarize"]

Q_CYCLES = (
    "SELECT coalesce(sum(pc.last_consumed_seq), 0)::bigint, "
    "coalesce(sum(pc.total_batches_consumed), 0)::bigint "
    "FROM queen.partition_consumers pc JOIN queen.partitions p ON p.id = pc.partition_id "
    "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 AND pc.consumer_group = $2"
)
Q_EMITTED = (
    "SELECT count(*), coalesce(sum((m.payload->>'count')::bigint), 0)::bigint FROM queen.messages m "
    "WHERE m.partition_id IN (SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
    "WHERE q.name = $1)"
)
Q_OPEN = (
    "SELECT coalesce(sum((s.value->>'acc')::bigint), 0)::bigint FROM queen_streams.state s "
    "JOIN queen_streams.queries q ON q.id = s.query_id WHERE q.name = $1 AND s.key LIKE 'tumb:%'"
)


def _register(context: Context, name: str, source: str, sink: str) -> str:
    """Register the query (as the SDK's runner does at start) and return its id."""
    result = json.loads(
        context.sql.fetchval(
            "SELECT queen.streams_register_v1($1::jsonb)::text",
            json.dumps(
                {"name": name, "source_queue": source, "sink_queue": sink, "config_hash": "bench-tumbling"}
            ),
        )
    )
    return str(result["query_id"])


def run(context: Context, scenario: Scenario, round_no: int) -> dict[str, Any]:
    """One query per run over the shared backlog, windows of ``scenario.batch`` messages (event time =
    offset)."""
    run = context.new_run(scenario, round_no)
    options = context.options
    estimate = context.estimates.get(scenario.name, scenario.initial_rate)
    need = int(estimate * max(options.seconds, options.warmup) * 1.3) + scenario.batch * scenario.connections
    queue = context.backlog(scenario, need).queue
    name = f"{scenario.name}-r{round_no}"
    sink = f"{queue}-{name}-sink"
    context.precreate(sink, scenario.partitions)
    sink_rows0 = int(context.sql.fetchval(Q_QUEUE_ROWS, sink))  # the precreated rows

    def script_for(query: str, target: str) -> Path:
        return render_script(
            "streams",
            {
                "queue": queue,
                "group": f"streams.{query}",
                "batch": scenario.batch,
                "timeout_ms": options.long_poll_ms,
                "query_id": _register(context, query, queue, target),
                "sink": target,
                "window_ms": scenario.batch,
            },
            context.workdir,
        )

    def truth() -> tuple[int, int, int]:
        consumed, cycles = context.sql.fetchrow(Q_CYCLES, queue, f"streams.{name}")
        return int(consumed), int(cycles), int(context.sql.fetchval(Q_QUEUE_ROWS, sink)) - sink_rows0

    timeout_s = options.long_poll_ms / 1000 + 10
    context.checkpoint()
    if options.warmup > 0:
        context.precreate(sink + "-warm", scenario.partitions)
        warm_up(
            context,
            run,
            script_for(f"warm-{name}", sink + "-warm"),
            scenario.connections,
            scenario.threads,
            timeout_s,
        )
    measured = measured_window(
        context, run, script_for(name, sink), scenario.connections, truth, scenario.threads, timeout_s
    )
    (consumed0, cycles0, emitted0), (consumed1, cycles1, emitted1) = measured.before, measured.after
    context.fill_window(
        run,
        consumed1 - consumed0,
        measured.window,
        [measured.wrk],
        measured.wrk,
        requests=measured.wrk.result.requests,
    )
    window = measured.window.seconds
    cycles, emitted = cycles1 - cycles0, emitted1 - emitted0
    run["streams"] = {
        "cycles_per_s": cycles / window if window > 0 else 0.0,
        "windows_emitted_per_s": emitted / window if window > 0 else 0.0,
        "messages_per_cycle": (consumed1 - consumed0) / cycles if cycles else None,
    }
    run["ground_truth"].update(
        {
            "consumed_in_window": consumed1 - consumed0,
            "cycles_in_window": cycles,
            "emitted_in_window": emitted,
        }
    )
    _check_exactly_once(
        context,
        run,
        scenario,
        measured.wrk.result.counters,
        measured.before,
        context.settled(truth),
        name,
        sink,
        sink_rows0,
    )
    drained = (
        int(context.sql.fetchval(Q_QUEUE_ROWS, queue)) - consumed1 <= scenario.batch * scenario.connections
    )
    if drained:
        run["notes"].append("backlog drained during the window: the rate is a lower bound")
    size_estimate(context, scenario, run["msg_per_s"], drained)
    return run


def _check_exactly_once(
    context: Context,
    run: dict[str, Any],
    scenario: Scenario,
    counters: dict[str, float],
    before: tuple[int, int, int],
    settled: tuple[int, int, int],
    name: str,
    sink: str,
    sink_rows0: int,
) -> None:
    """The client's counts against PostgreSQL's once settled, and every message the cursors passed in exactly
    one window (emitted or open)."""
    (consumed0, cycles0, emitted0), (consumed2, cycles2, emitted2) = before, settled
    client_cycles, client_acked = int(counters.get("cycles_ok", 0)), int(counters.get("acked", 0))
    client_emitted = int(counters.get("emitted", 0))
    emitted_rows, emitted_count = context.sql.fetchrow(Q_EMITTED, sink)
    open_count = int(context.sql.fetchval(Q_OPEN, name))
    run["ground_truth"].update(
        {
            "consumed_after_settle": consumed2 - consumed0,
            "cycles_after_settle": cycles2 - cycles0,
            "client_cycles": client_cycles,
            "client_acked": client_acked,
            "client_emitted": client_emitted,
            "sink_window_counts": int(emitted_count),
            "open_window_counts": open_count,
            "cursor_total": consumed2,
        }
    )
    slack = scenario.connections  # cycles in flight when wrk stops: committed, the answer never read
    if not client_cycles <= cycles2 - cycles0 <= client_cycles + slack:
        run["problems"].append(f"cycles: the client counted {client_cycles}, PostgreSQL {cycles2 - cycles0}")
    if not client_acked <= consumed2 - consumed0 <= client_acked + slack * scenario.batch:
        run["problems"].append(
            f"acks: the client counted {client_acked}, cursors advanced {consumed2 - consumed0}"
        )
    if not client_emitted <= emitted2 - emitted0 <= client_emitted + slack:
        run["problems"].append(
            f"emitted: the client counted {client_emitted}, the sink got {emitted2 - emitted0}"
        )
    # exactly once: every message the cursors passed is in one emitted window or in an open one (the
    # precreated message of each sink partition counts 0: its payload has no count)
    if int(emitted_count) + open_count != consumed2:
        run["problems"].append(
            f"not exactly once: {int(emitted_count)} in emitted windows + {open_count} in "
            f"open windows != {consumed2} consumed"
        )
    if int(emitted_rows) - sink_rows0 != emitted2:
        run["problems"].append(f"sink rows {int(emitted_rows) - sink_rows0} != {emitted2} by offsets")


def summarize(measured: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "streams": {
            k: median(r["streams"][k] for r in measured)
            for k in ("cycles_per_s", "windows_emitted_per_s", "messages_per_cycle")
        }
    }


def report_lines(entry: dict[str, Any]) -> list[str]:
    streams = (entry.get("median") or {}).get("streams")
    if not streams:
        return []
    return [
        (
            f"{entry['scenario']}: {number(streams['cycles_per_s'])} cycles/s, "
            f"{number(entry['median']['msg_per_s'])} msg/s ({number(streams['messages_per_cycle'], 1)} "
            f"msg/cycle), {number(streams['windows_emitted_per_s'])} windows emitted/s"
        )
    ]


KIND = Kind("streams", run, summarize, report_lines)
