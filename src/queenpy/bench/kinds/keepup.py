"""The keep-up scenario: a paced producer and acking consumers together; does the backlog stay steady?"""

from __future__ import annotations

import time
from typing import Any

from queenpy.bench import procfs
from queenpy.bench.catalog import Scenario, payload
from queenpy.bench.core import BULK_LOAD, Q_QUEUE_ROWS, Context, Kind
from queenpy.bench.load import BackgroundLoad
from queenpy.bench.parsing import median
from queenpy.bench.report import number
from queenpy.bench.wrk import render_script

__all__ = ["KIND", "report_lines", "run", "summarize"]

PRODUCERS, PRODUCER_THREADS = 100, 2  # connections and wrk threads of the paced producer
STANDING_BACKLOG = 20  # messages per partition loaded before the run


def run(context: Context, scenario: Scenario, round_no: int) -> dict[str, Any]:
    """A producer paced at ``--keepup-share`` of the same round's push-10-40B (``per_request`` messages a
    request) and ``scenario.connections`` consumers that pop + ack batches of ``scenario.batch``, together
    for warm-up + window."""
    run = context.new_run(scenario, round_no)
    options = context.options
    queue = f"{context.queue_prefix}{scenario.name}-r{round_no}"
    push_figure = context.scenario_results.get((round_no, "push-10-40B"), {}).get("msg_per_s")
    target_rate = options.keepup_fraction * (push_figure or scenario.initial_rate)
    # each wrk thread sends on a schedule of target_rate / per_request / threads requests per second
    # (push.lua), whatever the latency, as long as some of its connections are free
    rate_per_thread = target_rate / scenario.per_request / PRODUCER_THREADS
    context.precreate(queue, scenario.partitions)
    context.sql.execute(BULK_LOAD, queue, STANDING_BACKLOG, payload(40))
    producer = render_script(
        "push",
        {
            "queue": queue,
            "partitions": scenario.partitions,
            "per_request": scenario.per_request,
            "payload": payload(40),
            "seed": 1000 * round_no + 29,
            "rate_per_thread": rate_per_thread,
        },
        context.workdir,
    )
    consumer = render_script(
        "consume",
        {
            "queue": queue,
            "groups": [""],
            "batch": scenario.batch,
            "mode": "ack",
            "timeout_ms": options.long_poll_ms,
            "target": "",
            "payload": payload(40),
        },
        context.workdir,
    )

    def rows() -> int:
        return int(context.sql.fetchval(Q_QUEUE_ROWS, queue))

    def cursor() -> int:
        return context.cursors(queue, ["__QUEUE_MODE__"])["__QUEUE_MODE__"]

    context.checkpoint()
    load = BackgroundLoad(context, options.warmup + options.seconds, options.long_poll_ms / 1000 + 10)
    load.start("producer", producer, PRODUCERS, PRODUCER_THREADS)
    load.start("consumer", consumer, scenario.connections)
    procfs.sleep_until(time.monotonic() + options.warmup)
    rows0, cursor0 = rows(), cursor()
    window = context.open_window()
    procfs.sleep_until(window.start.at + options.seconds)
    rows1, cursor1 = rows(), cursor()
    context.close_window(window)
    load.join()
    load.check(run)
    context.fill_window(
        run, cursor1 - cursor0, window, load.scaled_to(window.seconds), load.results["consumer"]
    )
    run["notes"].append("latency is the consumer's (pop and ack requests), warm-up included")
    produced, consumed = rows1 - rows0, cursor1 - cursor0
    backlog0, backlog1 = rows0 - cursor0, rows1 - cursor1
    growth = (backlog1 - backlog0) / window.seconds
    keeps_up = backlog1 - backlog0 <= max(2 * scenario.batch * scenario.connections, 0.05 * produced)
    run["keepup"] = {
        "target_producer_msg_per_s": target_rate,
        "producer_msg_per_s": produced / window.seconds,
        "producer_share_of_push": produced / window.seconds / push_figure if push_figure else None,
        "consumer_msg_per_s": consumed / window.seconds,
        "backlog_start": backlog0,
        "backlog_end": backlog1,
        "backlog_growth_per_s": growth,
        "keeps_up": keeps_up,
        "push_figure": push_figure,
        "rate_per_thread": rate_per_thread,
    }
    if not keeps_up:
        run["notes"].append(f"consumers fall behind: backlog grew {growth:,.0f} msg/s")
    settled_rows, advance = (
        context.settled(rows),
        context.settled(cursor),
    )  # a new queue: its cursor began at 0
    acked, queued = load.counter("consumer", "acked"), load.counter("producer", "queued")
    run["ground_truth"].update(
        {
            "produced_in_window": produced,
            "consumed_in_window": consumed,
            "client_acked": acked,
            "client_queued": queued,
        }
    )
    stored = settled_rows - (
        STANDING_BACKLOG * scenario.partitions + scenario.partitions
    )  # minus the prefill
    if stored < queued or stored > queued + PRODUCERS * scenario.per_request:
        run["problems"].append(f"producer: client queued {queued}, PostgreSQL stored {stored}")
    if advance < acked or advance > acked + scenario.connections * scenario.batch:
        run["problems"].append(f"consumer: client acked {acked}, cursor advanced {advance}")
    return run


def summarize(measured: list[dict[str, Any]]) -> dict[str, Any]:
    keepup = {
        k: median(r["keepup"][k] for r in measured)
        for k in (
            "target_producer_msg_per_s",
            "producer_msg_per_s",
            "producer_share_of_push",
            "consumer_msg_per_s",
            "backlog_growth_per_s",
        )
    }
    keepup["keeps_up_runs"] = sum(bool(r["keepup"]["keeps_up"]) for r in measured)
    return {"keepup": keepup}


def report_lines(entry: dict[str, Any]) -> list[str]:
    keepup = (entry.get("median") or {}).get("keepup")
    if not keepup:
        return []
    share = keepup.get("producer_share_of_push")
    return [
        f"{entry['scenario']}: producer {number(keepup['producer_msg_per_s'])} msg/s (target "
        f"{number(keepup['target_producer_msg_per_s'])}"
        + (f", {share * 100:.0f}% of push-10-40B" if share else "")
        + "), consumers "
        f"{number(keepup['consumer_msg_per_s'])} msg/s, backlog growth "
        f"{number(keepup['backlog_growth_per_s'])} msg/s; kept up in {keepup['keeps_up_runs']} of "
        f"{len(entry['runs'])} run(s)"
    ]


KIND = Kind("keepup", run, summarize, report_lines)
