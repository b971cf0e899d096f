"""The keep-up scenario: a paced producer and acking consumers together; does the backlog stay steady?"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from queenpy.bench import procfs
from queenpy.bench.catalog import Scenario, payload
from queenpy.bench.core import (
    BULK_LOAD,
    Q_CHECKPOINTS,
    Q_QUEUE_ROWS,
    BenchCore,
)
from queenpy.bench.wrk import WrkRun, render_script, run_wrk

__all__ = ["KeepupRuns"]


class KeepupRuns(BenchCore):
    def _run_keepup(self, scenario: Scenario, round_no: int) -> dict[str, Any]:
        """A paced producer (push, 10 msg/request, 50 connections) and 10 consumers that pop + ack batches
        of 100, together for warm-up + window; does the backlog stay steady?"""
        run = self._new_run(scenario, round_no)
        options = self.options
        queue = f"{self.queue_prefix}{scenario.name}-r{round_no}"
        push = self.scenario_results.get((round_no, "push-10-40B"), {})
        push_figure = push.get("msg_per_s")
        target_rate = options.keepup_fraction * (push_figure or scenario.initial_rate)
        # each wrk thread sends on a schedule of target_rate / per_request / threads requests per second
        # (push.lua), whatever the latency, as long as some of its connections are free
        producers, producer_threads = 100, 2
        rate_per_thread = target_rate / scenario.per_request / producer_threads
        self._precreate(queue, scenario.partitions)
        self.sql.execute(BULK_LOAD, queue, 20, payload(40))  # a small standing backlog
        producer = render_script("push", {"queue": queue, "partitions": scenario.partitions,
                                          "per_request": scenario.per_request, "payload": payload(40),
                                          "seed": 1000 * round_no + 29, "rate_per_thread": rate_per_thread},
                                 self.workdir)
        consumer = render_script("consume", {"queue": queue, "groups": [""], "batch": scenario.batch,
                                             "mode": "ack", "timeout_ms": options.long_poll_ms, "target": "",
                                             "payload": payload(40)}, self.workdir)
        def rows() -> int:
            return int(self.sql.fetchval(Q_QUEUE_ROWS, queue))

        def cursor() -> int:
            return self._cursors(queue, ["__QUEUE_MODE__"])["__QUEUE_MODE__"]

        self._checkpoint()
        total = options.warmup + options.seconds
        results: dict[str, WrkRun] = {}

        def drive(name: str, script: Path, connections: int, wrk_threads: int) -> None:
            results[name] = run_wrk(self.broker.url, script, connections, total, wrk_threads,
                                    options.long_poll_ms / 1000 + 10)

        threads = [threading.Thread(target=drive, args=("producer", producer, producers, producer_threads)),
                   threading.Thread(target=drive, args=("consumer", consumer, scenario.connections, 2))]
        for thread in threads:
            thread.start()
        procfs.sleep_until(time.monotonic() + options.warmup)
        rows0, cursor0 = rows(), cursor()
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS))
        self.memory.mark()
        self.waits.mark()
        start = self._mark()
        procfs.sleep_until(start.at + options.seconds)
        rows1, cursor1 = rows(), cursor()
        end = self._mark()
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS)) - checkpoints
        for thread in threads:
            thread.join()
        for name, wrk in results.items():
            self._check_wrk(run, wrk, name)
        window = end.at - start.at
        # wrk's CPU over its whole run, scaled to the window
        wrk_share = options.seconds / total
        scaled = [WrkRun(w.result, w.wall_s, w.cpu_s * wrk_share, w.output) for w in results.values()]
        self._fill_window(run, cursor1 - cursor0, start, end, scaled, results["consumer"], checkpoints)
        run["notes"].append("latency is the consumer's (pop and ack requests), warm-up included")
        produced, consumed = rows1 - rows0, cursor1 - cursor0
        backlog0, backlog1 = rows0 - cursor0, rows1 - cursor1
        growth = (backlog1 - backlog0) / window
        keeps_up = backlog1 - backlog0 <= max(2 * scenario.batch * scenario.connections, 0.05 * produced)
        run["keepup"] = {"target_producer_msg_per_s": target_rate, "producer_msg_per_s": produced / window,
                         "producer_share_of_push": produced / window / push_figure if push_figure else None,
                         "consumer_msg_per_s": consumed / window, "backlog_start": backlog0,
                         "backlog_end": backlog1, "backlog_growth_per_s": growth, "keeps_up": keeps_up,
                         "push_figure": push_figure, "rate_per_thread": rate_per_thread}
        if not keeps_up:
            run["notes"].append(f"consumers fall behind: backlog grew {growth:,.0f} msg/s")
        settled_rows = self._settled(rows)
        settled_cursor = self._settled(cursor)
        acked = int(results["consumer"].result.counters.get("acked", 0))
        queued = int(results["producer"].result.counters.get("queued", 0))
        advance = settled_cursor  # the queue is new: its cursor started at 0, as the consumer's counts did
        run["ground_truth"].update({"produced_in_window": produced, "consumed_in_window": consumed,
                                    "client_acked": acked, "client_queued": queued})
        prefilled = 20 * scenario.partitions + scenario.partitions
        if settled_rows - prefilled < queued or settled_rows - prefilled > queued + producers * scenario.per_request:
            run["problems"].append(f"producer: client queued {queued}, PostgreSQL stored {settled_rows - prefilled}")
        if advance < acked or advance > acked + scenario.connections * scenario.batch:
            run["problems"].append(f"consumer: client acked {acked}, cursor advanced {advance}")
        return run
