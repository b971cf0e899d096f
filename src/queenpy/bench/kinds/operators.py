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
from typing import Any, Self

import httpx

from queenpy.bench.catalog import Scenario, payload
from queenpy.bench.core import Q_QUEUE_ROWS, Context, Kind
from queenpy.bench.load import Measured, measured_window, warm_up
from queenpy.bench.report import number
from queenpy.bench.wrk import render_script

__all__ = ["KIND", "ROUTES", "report_lines", "run"]

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
    SELECT q.id, 'p' || g, 1, queen.uuid_v7(), clock_timestamp()
    FROM queues q CROSS JOIN generate_series(1, $3::int) g
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


def _seed(context: Context, queues: int, partitions: int) -> dict[str, Any]:
    """The seeded queues and partitions (once per session: a later round finds them)."""
    have = int(
        context.sql.fetchval("SELECT count(*) FROM queen.queues WHERE name LIKE $1 || '%'", SEED_PREFIX)
    )
    if have >= queues:
        return {"seeded_now": False}
    started = time.monotonic()
    per_queue = max(1, partitions // queues)
    context.sql.execute(SEED, SEED_PREFIX, queues, per_queue)
    context.sql.execute(SEED_CURSORS, SEED_PREFIX)
    context.sql.execute("ANALYZE")
    # the status routes and the scrape read the stats: one full run now, as the stats job would do
    context.sql.fetchval("SELECT queen.stats_refresh_v4(true)::text")
    return {"seeded_now": True, "seed_s": round(time.monotonic() - started, 2)}


def _route_timings(url: str) -> dict[str, Any]:
    timings: dict[str, Any] = {}
    with httpx.Client(base_url=url, timeout=120) as client:
        for route in ROUTES:
            seconds, sizes, statuses = [], [], set()
            for _ in range(ROUTE_REQUESTS):
                started = time.perf_counter()
                response = client.get(route)
                seconds.append(time.perf_counter() - started)
                sizes.append(len(response.content))
                statuses.add(response.status_code)
            timings[route] = {
                "p50_ms": _ms(seconds, 0.5),
                "p99_ms": _ms(seconds, 0.99),
                "max_ms": _ms(seconds, 1.0),
                "bytes": int(statistics.median(sizes)),
                "status": sorted(statuses),
            }
    return timings


class _Scraper:
    """GET /metrics/prometheus every second in a thread, each scrape's latency recorded."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seconds: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._scrape, daemon=True)

    def _scrape(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self._stop.is_set():
                started = time.perf_counter()
                response = client.get("/metrics/prometheus")
                self.seconds.append(time.perf_counter() - started)
                if response.status_code != 200:
                    self.failures.append(f"scrape answered {response.status_code}")
                self._stop.wait(max(0.0, 1.0 - (time.perf_counter() - started)))

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def run(context: Context, scenario: Scenario, round_no: int) -> dict[str, Any]:
    """See the module docstring: the route timings, then a push window without and one with a scraper."""
    run = context.new_run(scenario, round_no)
    seeded = _seed(context, scenario.groups, scenario.partitions)
    run["notes"].append(
        f"{scenario.groups} queues, {scenario.partitions} partitions seeded by SQL"
        + (f" in {seeded['seed_s']} s" if seeded.get("seeded_now") else " (earlier)")
    )
    run["route_timings"] = _route_timings(context.broker_url)
    for route, timing in run["route_timings"].items():
        if timing["status"] != [200]:
            run["problems"].append(f"{route} answered {timing['status']}")
    queue = f"{scenario.name}-push-r{round_no}"
    context.precreate(queue, 100)
    script = render_script(
        "push",
        {
            "queue": queue,
            "partitions": 100,
            "per_request": scenario.per_request,
            "payload": payload(scenario.payload_bytes),
            "seed": 1000 * round_no + 23,
            "rate_per_thread": 0,
        },
        context.workdir,
    )
    clients = scenario.wrk_connections(context.options)
    warm_up(context, run, script, clients, scenario.threads)

    def rows() -> int:
        return int(context.sql.fetchval(Q_QUEUE_ROWS, queue))

    def push_window(label: str) -> Measured[int]:
        context.checkpoint()
        return measured_window(context, run, script, clients, rows, scenario.threads, label=label)

    without = push_window("without scraper")
    with _Scraper(context.broker_url) as scraper:
        with_scraper = push_window("with scraper")
    messages = with_scraper.after - with_scraper.before
    context.fill_window(run, messages, with_scraper.window, [with_scraper.wrk], with_scraper.wrk)
    run["problems"].extend(scraper.failures)
    if not scraper.seconds:
        run["problems"].append("no scrape completed during the window")
    rate_without = (without.after - without.before) / max(1e-9, without.window.seconds)
    rate_with = messages / max(1e-9, with_scraper.window.seconds)
    run["ground_truth"].update(
        {
            "push_msg_per_s_without_scraper": round(rate_without, 1),
            "push_msg_per_s_with_scraper": round(rate_with, 1),
            "with_scraper_ratio": round(rate_with / rate_without, 3) if rate_without else None,
            "scrapes_in_window": len(scraper.seconds),
            "scrape_p50_ms": _ms(scraper.seconds, 0.5),
            "scrape_max_ms": _ms(scraper.seconds, 1.0),
        }
    )
    return run


def report_lines(entry: dict[str, Any]) -> list[str]:
    """Per round: push with and without a scraper, and each route's timings."""
    lines = []
    for run in entry["runs"]:
        truth = run.get("ground_truth") or {}
        if "push_msg_per_s_without_scraper" not in truth:
            continue
        lines.append(
            f"{entry['scenario']} round {run['round']}: push "
            f"{number(truth['push_msg_per_s_without_scraper'])} msg/s without a scraper, "
            f"{number(truth['push_msg_per_s_with_scraper'])} with one scrape per second "
            f"({truth['with_scraper_ratio']:.3f}); scrapes under push: p50 "
            f"{number(truth['scrape_p50_ms'], 1)} ms, max {number(truth['scrape_max_ms'], 1)} ms "
            f"({truth['scrapes_in_window']} scrapes)"
        )
        for route, timing in (run.get("route_timings") or {}).items():
            lines.append(
                f"- {route}: p50 {number(timing['p50_ms'], 1)} ms, max {number(timing['max_ms'], 1)} ms, "
                f"{number(timing['bytes'])} bytes"
            )
    return lines


KIND = Kind("operators", run, report_lines=report_lines)
