"""Operators' scenarios: the status routes and a Prometheus scrape at scale, and what a scraper costs pushes.

The broker's database is seeded once per session with ``queues`` queues of ``partitions / queues``
partitions each (one message per partition; a queue-mode cursor on half of them, so depth and lag are not
all zero), by SQL, followed by one full stats run. Then, per round:

1. **timings**: each operators' route (:data:`ROUTES`) is requested ``ROUTE_REQUESTS`` times in a row
   (one connection); p50/p99/max latency in ms and the answer's size;
2. **push without a scraper**: wrk pushes ``per_request`` messages per request for ``--seconds`` (as the
   push scenarios do; PostgreSQL's offsets are the ground truth);
3. **push with a scraper**: the same, while a thread GETs ``/metrics/prometheus`` every second (each
   scrape's latency recorded). The run's ``msg_per_s`` is this window's; ``ground_truth`` holds both and
   their ratio (``with_scraper_ratio``).
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

import httpx

from queenpy.bench.catalog import Scenario, payload
from queenpy.bench.core import Q_CHECKPOINTS, Q_QUEUE_ROWS, BenchCore
from queenpy.bench.wrk import render_script, run_wrk

__all__ = ["ROUTES", "OperatorsRuns"]

ROUTES = [
    "/metrics/prometheus",
    "/api/v1/resources/queues",
    "/api/v1/resources/overview",
    "/api/v1/status",
    "/api/v1/status/queues",
    "/api/v1/messages?limit=50",
    "/api/v1/analytics/worker-metrics",
    "/api/v1/analytics/queue-ops",
    "/api/v1/analytics/system-metrics",
]
ROUTE_REQUESTS = 5
SEED_PREFIX = "ops-seed-"

SEED = """
WITH queues AS (
    INSERT INTO queen.queues (name, namespace, task)
    SELECT $1 || g, 'ns' || (g % 20), 'task' || (g % 7) FROM generate_series(1, $2::int) g
    RETURNING id, name
), parts AS (
    -- each partition is written once, with its one message's offset and id (an UPDATE of the partitions in
    -- the same statement would not see these rows: every part of a statement reads one snapshot)
    INSERT INTO queen.partitions (queue_id, name, last_seq, last_message_id, last_message_at)
    SELECT q.id, 'p' || g, 1, queen.uuid_v7(), clock_timestamp() FROM queues q CROSS JOIN generate_series(1, $3::int) g
    RETURNING id, last_message_id, last_message_at
)
INSERT INTO queen.messages (id, transaction_id, partition_id, seq, payload, created_at)
SELECT p.last_message_id, 'seed', p.id, 1, '{"seed": true}'::jsonb, p.last_message_at FROM parts p
"""
SEED_CURSORS = """
INSERT INTO queen.partition_consumers (partition_id, consumer_group)
SELECT p.id, '__QUEUE_MODE__' FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
WHERE q.name LIKE $1 || '%' AND right(q.name, 1) IN ('0', '2', '4', '6', '8')
ON CONFLICT DO NOTHING
"""


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2) if ordered else 0.0


class OperatorsRuns(BenchCore):
    def _seed_operators(self, queues: int, partitions: int) -> dict[str, Any]:
        have = int(self.sql.fetchval("SELECT count(*) FROM queen.queues WHERE name LIKE $1 || '%'", SEED_PREFIX))
        if have >= queues:
            return {"seeded_now": False}
        started = time.monotonic()
        per_queue = max(1, partitions // queues)
        self.sql.execute(SEED, SEED_PREFIX, queues, per_queue)
        self.sql.execute(SEED_CURSORS, SEED_PREFIX)
        self.sql.execute("ANALYZE")
        # the status routes and the scrape read the stats: one full run now, as the stats job would do
        self.sql.fetchval("SELECT queen.stats_refresh_v1(true)::text")
        return {"seeded_now": True, "seed_s": round(time.monotonic() - started, 2)}

    def _route_timings(self) -> dict[str, Any]:
        timings: dict[str, Any] = {}
        with httpx.Client(base_url=self.broker.url, timeout=120) as client:
            for route in ROUTES:
                seconds, sizes, statuses = [], [], set()
                for _ in range(ROUTE_REQUESTS):
                    started = time.perf_counter()
                    response = client.get(route)
                    seconds.append(time.perf_counter() - started)
                    sizes.append(len(response.content))
                    statuses.add(response.status_code)
                timings[route] = {"p50_ms": _ms(seconds, 0.5), "p99_ms": _ms(seconds, 0.99),
                                  "max_ms": _ms(seconds, 1.0), "bytes": int(statistics.median(sizes)),
                                  "status": sorted(statuses)}
        return timings

    def _push_window(self, scenario: Scenario, queue: str, script: Any, scrape: bool) -> dict[str, Any]:
        options = self.options
        connections = options.connections if scenario.connections == 50 else scenario.connections
        scrapes: list[float] = []
        failures: list[str] = []
        stop = threading.Event()

        def scraper() -> None:
            with httpx.Client(base_url=self.broker.url, timeout=30) as client:
                while not stop.is_set():
                    started = time.perf_counter()
                    response = client.get("/metrics/prometheus")
                    scrapes.append(time.perf_counter() - started)
                    if response.status_code != 200:
                        failures.append(f"scrape answered {response.status_code}")
                    stop.wait(max(0.0, 1.0 - (time.perf_counter() - started)))

        def rows() -> int:
            return int(self.sql.fetchval(Q_QUEUE_ROWS, queue))

        thread = threading.Thread(target=scraper, daemon=True) if scrape else None
        if thread is not None:
            thread.start()
        try:
            before = self._settled(rows)
            start = self._mark()
            measured = run_wrk(self.broker.url, script, connections, options.seconds, scenario.threads)
            at_end = rows()
            end = self._mark()
        finally:
            stop.set()
            if thread is not None:
                thread.join()
        return {"messages": at_end - before, "start": start, "end": end, "wrk": measured,
                "msg_per_s": (at_end - before) / max(1e-9, end.at - start.at),
                "scrapes": len(scrapes), "scrape_p50_ms": _ms(scrapes, 0.5), "scrape_max_ms": _ms(scrapes, 1.0),
                "failures": failures}

    def _run_operators(self, scenario: Scenario, round_no: int) -> dict[str, Any]:
        run = self._new_run(scenario, round_no)
        seeded = self._seed_operators(scenario.groups, scenario.partitions)
        run["notes"].append(f"{scenario.groups} queues, {scenario.partitions} partitions seeded by SQL"
                            + (f" in {seeded['seed_s']} s" if seeded.get("seeded_now") else " (earlier)"))
        run["route_timings"] = self._route_timings()
        for route, timing in run["route_timings"].items():
            if timing["status"] != [200]:
                run["problems"].append(f"{route} answered {timing['status']}")
        queue = f"{scenario.name}-push-r{round_no}"
        self._precreate(queue, 100)
        params = {"queue": queue, "partitions": 100, "per_request": scenario.per_request,
                  "payload": payload(scenario.payload_bytes), "seed": 1000 * round_no + 23, "rate_per_thread": 0}
        script = render_script("push", params, self.workdir)
        if self.options.warmup > 0:
            warm = run_wrk(self.broker.url, script, self.options.connections, self.options.warmup, scenario.threads)
            self._check_wrk(run, warm, "warm-up")
        self._checkpoint()
        without = self._push_window(scenario, queue, script, scrape=False)
        self._check_wrk(run, without["wrk"], "without scraper")
        self._checkpoint()
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS))
        self.memory.mark()
        self.waits.mark()
        with_scraper = self._push_window(scenario, queue, script, scrape=True)
        self._check_wrk(run, with_scraper["wrk"], "with scraper")
        checkpoints = int(self.sql.fetchval(Q_CHECKPOINTS)) - checkpoints
        self._fill_window(run, with_scraper["messages"], with_scraper["start"], with_scraper["end"],
                          [with_scraper["wrk"]], with_scraper["wrk"], checkpoints)
        run["problems"].extend(with_scraper["failures"])
        if not with_scraper["scrapes"]:
            run["problems"].append("no scrape completed during the window")
        run["ground_truth"].update({
            "push_msg_per_s_without_scraper": round(without["msg_per_s"], 1),
            "push_msg_per_s_with_scraper": round(with_scraper["msg_per_s"], 1),
            "with_scraper_ratio": round(with_scraper["msg_per_s"] / without["msg_per_s"], 3)
            if without["msg_per_s"] else None,
            "scrapes_in_window": with_scraper["scrapes"], "scrape_p50_ms": with_scraper["scrape_p50_ms"],
            "scrape_max_ms": with_scraper["scrape_max_ms"],
        })
        return run
