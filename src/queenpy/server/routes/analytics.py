"""Analytics (API.md section 11): the metrics every worker writes (``services/metrics.py``) and the database's
own statistics, by time range. All READ_ONLY.

Time ranges: ``from``/``to`` ISO-8601 (default: the last hour), bucketed by 1, 5, 15, 60 or 360 minutes for
ranges up to 1 h, 6 h, 24 h, 7 d, longer (``bucketMinutes`` in every answer). A bad timestamp or
``from`` after ``to`` is a 400 naming the parameter.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from queenpy.errors import InvalidRequest
from queenpy.server import validation as v
from queenpy.server.routes._base import Endpoint, Level, json_response, worker_of

__all__ = ["ENDPOINTS", "bucket_minutes", "time_range"]


MAX_BUCKETS = 10_000


def bucket_minutes(start: datetime, end: datetime) -> int:
    """1, 5, 15, 60 or 360 for ranges up to 1 h, 6 h, 24 h, 7 d, longer (as ``queen.bucket_minutes_v1``)."""
    span = end - start
    for limit, minutes in (
        (timedelta(hours=1), 1),
        (timedelta(hours=6), 5),
        (timedelta(hours=24), 15),
        (timedelta(days=7), 60),
    ):
        if span <= limit:
            return minutes
    return 360


def time_range(request: Request, default: timedelta = timedelta(hours=1)) -> tuple[datetime, datetime, int]:
    """``(from, to, bucket minutes)`` of the query; 400 on a bad ``from``/``to``, and on a range of more than
    ``MAX_BUCKETS`` buckets (about 6.8 years of 6-hour buckets: every bucket is a row of the answer)."""
    start, end = v.query_window(request.query_params)
    end = end or datetime.now(UTC)
    start = start or end - default
    if start > end:
        start = end - default
    minutes = bucket_minutes(start, end)
    if end - start > timedelta(minutes=minutes * MAX_BUCKETS):
        raise InvalidRequest(
            f"query parameters from and to span {(end - start).days} days; at most "
            f"{minutes * MAX_BUCKETS // (24 * 60)} days can be asked for at once"
        )
    return start, end, minutes


def _iso(ts: datetime) -> str:
    """UTC, milliseconds, ``Z``; the year always four digits (``strftime("%Y")`` writes year 97 as ``97``)."""
    return ts.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _bucket_of(iso: str, minutes: int) -> str:
    ts = datetime.fromisoformat(iso)
    epoch_min = int(ts.timestamp() // 60)
    return _iso(datetime.fromtimestamp((epoch_min - epoch_min % minutes) * 60, tz=UTC))


def _merge(aggs: list[tuple[int, dict[str, float]]]) -> dict[str, float]:
    """Fold minute aggregates ``(samples, {avg, min, max, last})`` (oldest first) into one."""
    total = sum(n for n, _ in aggs)
    if not aggs or not total:
        return {"avg": 0, "min": 0, "max": 0, "last": aggs[-1][1].get("last", 0) if aggs else 0}
    return {
        "avg": round(sum(n * a.get("avg", 0) for n, a in aggs) / total, 3),
        "min": min(a.get("min", 0) for n, a in aggs if n),
        "max": max(a.get("max", 0) for n, a in aggs if n),
        "last": aggs[-1][1].get("last", 0),
    }


async def _process_rows(request: Request, table: str) -> tuple[datetime, datetime, int, list[dict[str, Any]]]:
    q = request.query_params
    start, end, minutes = time_range(request)
    hostname = v.query_name(q, "hostname")
    worker_id = v.query_name(q, "workerId")
    rows = orjson.loads(
        await worker_of(request).database.fetchval(
            "SELECT queen.process_metrics_v1($1, $2, $3, $4, $5)::text",
            table,
            start,
            end,
            hostname,
            worker_id,
        )
    )
    return start, end, minutes, rows


_SYSTEM_GROUPS = {
    "cpu": {"percent": "cpuPercent"},
    "memory": {"rssBytes": "rssBytes"},
    "database": {"poolSize": "poolSize", "poolIdle": "poolIdle", "poolActive": "poolActive"},
    "eventLoop": {"lagMs": "eventLoopLagMs"},
    "longPoll": {"parked": "parked"},
}


async def system_metrics(request: Request) -> Response:
    """``{timeRange, bucketMinutes, pointCount, series: [{timestamp, hostname, workerId, pid, sampleCount,
    cpu: {percent: {avg, min, max, last}}, memory: {rssBytes}, database: {poolSize, poolIdle, poolActive},
    eventLoop: {lagMs}, longPoll: {parked}}], replicas: [{hostname, workerId, pid, lastSeen}]}``."""
    start, end, minutes, rows = await _process_rows(request, "system")
    grouped: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    replicas: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        grouped[(_bucket_of(row["bucket"], minutes), row["hostname"], row["workerId"])].append(row)
        replicas[(row["hostname"], row["workerId"])] = {
            "hostname": row["hostname"],
            "workerId": row["workerId"],
            "pid": row["pid"],
            "lastSeen": row["bucket"],
        }
    series = []
    for (bucket, hostname, worker_id), minute_rows in sorted(grouped.items()):
        point: dict[str, Any] = {
            "timestamp": bucket,
            "hostname": hostname,
            "workerId": worker_id,
            "pid": minute_rows[-1]["pid"],
            "sampleCount": sum(r["sampleCount"] for r in minute_rows),
        }
        for group, keys in _SYSTEM_GROUPS.items():
            point[group] = {
                out: _merge([(r["sampleCount"], r["metrics"].get(key, {})) for r in minute_rows])
                for out, key in keys.items()
            }
        series.append(point)
    return json_response(
        {
            "timeRange": {"from": _iso(start), "to": _iso(end)},
            "bucketMinutes": minutes,
            "pointCount": len(series),
            "series": series,
            "replicas": sorted(replicas.values(), key=lambda r: (r["hostname"], r["workerId"])),
        },
        empty_as_body=True,
    )


async def _queue_ops(
    request: Request, start: datetime, end: datetime, minutes: int, queue: str | None
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = orjson.loads(
        await worker_of(request).database.fetchval(
            "SELECT queen.queue_ops_v1($1, $2, $3, $4)::text", start, end, queue, minutes
        )
    )
    return rows


_OP_KEYS = ("pushRequests", "pushMessages", "popCount", "popMessages", "ackMessages", "ackFailed")


def _sum_ops(rows: list[dict[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {key: sum(r[key] for r in rows) for key in _OP_KEYS}
    samples = sum(r["lagSamples"] for r in rows)
    total["lagSamples"] = samples
    total["avgLagMs"] = (
        round(sum(r["avgLagMs"] * r["lagSamples"] for r in rows) / samples, 3) if samples else 0
    )
    total["maxLagMs"] = max((r["maxLagMs"] for r in rows), default=0)
    return total


async def worker_metrics(request: Request) -> Response:
    """``{timeRange, bucketMinutes, pointCount, timeSeries: [{timestamp, requests, errors, pushMessages,
    popCount, popMessages, ackMessages, ackFailed, avgLagMs, maxLagMs, fusion: {op: {calls, items, avgBatch,
    avgCallMs, maxBatch}}}], workers: [{hostname, workerId, pid, requests, errors, lastSeen}], queues:
    [{queueName, ...totals}], summary: {...totals, workers, queues}}``."""
    start, end, minutes, rows = await _process_rows(request, "worker")
    ops = await _queue_ops(request, start, end, minutes, None)
    points: dict[str, dict[str, Any]] = defaultdict(
        lambda: {
            "requests": 0,
            "errors": 0,
            "fusion": defaultdict(lambda: {"calls": 0.0, "items": 0.0, "busyMs": 0.0, "maxBatch": 0.0}),
        }
    )
    workers: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        point = points[_bucket_of(row["bucket"], minutes)]
        metrics = row["metrics"]
        point["requests"] += metrics.get("requests", 0)
        point["errors"] += metrics.get("errors", 0)
        for op, f in (metrics.get("fusion") or {}).items():
            acc = point["fusion"][op]
            for key in ("calls", "items", "busyMs"):
                acc[key] += f.get(key, 0)
            acc["maxBatch"] = max(acc["maxBatch"], f.get("maxBatch", 0))
        worker = workers.setdefault(
            (row["hostname"], row["workerId"]),
            {
                "hostname": row["hostname"],
                "workerId": row["workerId"],
                "pid": row["pid"],
                "requests": 0,
                "errors": 0,
            },
        )
        # int(): the rows written before the counts were whole numbers hold them as floats (12.0)
        worker["requests"] += int(metrics.get("requests", 0))
        worker["errors"] += int(metrics.get("errors", 0))
        worker["lastSeen"], worker["pid"] = row["bucket"], row["pid"]
    by_bucket: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_queue: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in ops:
        by_bucket[row["bucketTime"]].append(row)
        by_queue[row["queueName"]].append(row)
    series = []
    for bucket in sorted(set(points) | set(by_bucket)):
        point = points[bucket]
        fusion = {
            op: {
                "calls": int(f["calls"]),
                "items": int(f["items"]),
                "avgBatch": round(f["items"] / f["calls"], 2) if f["calls"] else 0,
                "avgCallMs": round(f["busyMs"] / f["calls"], 3) if f["calls"] else 0,
                "maxBatch": int(f["maxBatch"]),
            }
            for op, f in point["fusion"].items()
        }
        series.append(
            {
                "timestamp": bucket,
                "requests": int(point["requests"]),
                "errors": int(point["errors"]),
                **_sum_ops(by_bucket.get(bucket, [])),
                "fusion": fusion,
            }
        )
    queues = [{"queueName": name, **_sum_ops(queue_rows)} for name, queue_rows in sorted(by_queue.items())]
    summary = {
        "requests": sum(p["requests"] for p in series),
        "errors": sum(p["errors"] for p in series),
        **_sum_ops(ops),
        "workers": len(workers),
        "queues": len(queues),
    }
    return json_response(
        {
            "timeRange": {"from": _iso(start), "to": _iso(end)},
            "bucketMinutes": minutes,
            "pointCount": len(series),
            "timeSeries": series,
            "workers": sorted(workers.values(), key=lambda w: (w["hostname"], w["workerId"])),
            "queues": queues,
            "summary": summary,
        },
        empty_as_body=True,
    )


async def queue_lag(request: Request) -> Response:
    """An array ``[{queueName, popCount, avgLagMs, maxLagMs, bucketTime}]`` by queue, then time."""
    start, end, minutes = time_range(request)
    rows = await _queue_ops(request, start, end, minutes, v.query_name(request.query_params, "queue"))
    return json_response(
        [
            {
                "queueName": r["queueName"],
                "popCount": r["popCount"],
                "avgLagMs": r["avgLagMs"],
                "maxLagMs": r["maxLagMs"],
                "bucketTime": r["bucketTime"],
            }
            for r in rows
            if r["popCount"]
        ],
        empty_as_body=True,
    )


async def queue_ops(request: Request) -> Response:
    """``{timeRange, bucketMinutes, queues: [{queueName, series: [{bucketTime, pushMessages, popCount,
    popMessages, ackMessages, ackFailed, avgLagMs, maxLagMs}], totals: {...}}], totals: {...}}``."""
    start, end, minutes = time_range(request)
    rows = await _queue_ops(request, start, end, minutes, v.query_name(request.query_params, "queue"))
    by_queue: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_queue[row["queueName"]].append(row)
    queues = [
        {
            "queueName": name,
            "series": [{k: r[k] for k in r if k not in ("queueName", "parkedMax")} for r in queue_rows],
            "totals": _sum_ops(queue_rows),
        }
        for name, queue_rows in sorted(by_queue.items())
    ]
    return json_response(
        {
            "timeRange": {"from": _iso(start), "to": _iso(end)},
            "bucketMinutes": minutes,
            "queues": queues,
            "totals": _sum_ops(rows),
        },
        empty_as_body=True,
    )


async def parked_replicas(request: Request) -> Response:
    """``{timeRange, bucketMinutes, series: [{bucketTime, queueName, parked}], replicas: [{hostname,
    workerId, pid, lastSeen}]}``: long polls parked per queue (the most seen at once in a bucket)."""
    start, end, minutes = time_range(request)
    rows = await _queue_ops(request, start, end, minutes, v.query_name(request.query_params, "queue"))
    _, _, _, processes = await _process_rows(request, "system")
    replicas = {
        (r["hostname"], r["workerId"]): {
            "hostname": r["hostname"],
            "workerId": r["workerId"],
            "pid": r["pid"],
            "lastSeen": r["bucket"],
        }
        for r in processes
    }
    series = [
        {"bucketTime": r["bucketTime"], "queueName": r["queueName"], "parked": r["parkedMax"]}
        for r in rows
        if r["parkedMax"]
    ]
    return json_response(
        {
            "timeRange": {"from": _iso(start), "to": _iso(end)},
            "bucketMinutes": minutes,
            "series": series,
            "replicas": sorted(replicas.values(), key=lambda r: (r["hostname"], r["workerId"])),
        },
        empty_as_body=True,
    )


async def retention(request: Request) -> Response:
    """``{timeRange, bucketMinutes, series: [{bucketTime, retentionType, messagesDeleted, runs}], totals:
    {retentionType: messages}}`` from ``queen.retention_history`` (written by the retention services)."""
    start, end, minutes = time_range(request, timedelta(hours=24))
    result = orjson.loads(
        await worker_of(request).database.fetchval(
            "SELECT queen.retention_series_v1($1, $2, $3, $4)::text",
            start,
            end,
            v.query_name(request.query_params, "queue"),
            minutes,
        )
    )
    return json_response(
        {"timeRange": {"from": _iso(start), "to": _iso(end)}, "bucketMinutes": minutes, **result},
        empty_as_body=True,
    )


async def postgres_stats(request: Request) -> Response:
    return json_response(
        (await worker_of(request).database.fetchval("SELECT queen.postgres_stats_v1()::text")).encode()
    )


ENDPOINTS = [
    Endpoint("/api/v1/analytics/system-metrics", "GET", system_metrics, Level.READ_ONLY),
    Endpoint("/api/v1/analytics/worker-metrics", "GET", worker_metrics, Level.READ_ONLY),
    Endpoint("/api/v1/analytics/queue-lag", "GET", queue_lag, Level.READ_ONLY),
    Endpoint("/api/v1/analytics/queue-ops", "GET", queue_ops, Level.READ_ONLY),
    Endpoint("/api/v1/analytics/queue-parked-replicas", "GET", parked_replicas, Level.READ_ONLY),
    Endpoint("/api/v1/analytics/retention", "GET", retention, Level.READ_ONLY),
    Endpoint("/api/v1/analytics/postgres-stats", "GET", postgres_stats, Level.READ_ONLY),
]
