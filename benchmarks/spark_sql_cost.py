"""What PostgreSQL spends on the Spark copy's own calls, next to a push: wall time of single calls on a
private PostgreSQL (embedded, the broker's procedures applied), no broker and no Spark.

One-off measuring script for issue 42 (``benchmarks/spark_cost.py`` measures the whole copy). It loads
``--partitions`` partitions of ``--per-partition`` messages of about 1 KB (the bench's bulk load), then, in
``--rounds`` interleaved rounds:

- the read of one task's page as the connector asks for it: half of the partitions, ``(0, per-partition]``
  each, in one call (``spark_read_v3`` before, ``spark_read_v5`` with every column now; ``spark_read_v4``, its
  predecessor, is in git history);
- one direct push chunk of ``--chunk`` rows spread over the partitions, with derived transaction ids
  (``spark_push_direct_v4``; versions 2 and 3, this script's earlier subjects, are in git history), next
  to ``push_items_v3`` of the same rows without and with client transaction ids (the broker's push).

Prints the best and the median of the rounds per call, in ms and µs per message. With ``--explain`` it
also prints ``EXPLAIN (ANALYZE, BUFFERS)`` of both reads' queries. The machine may be shared: compare the
calls of one run.

    .venv/bin/python benchmarks/spark_sql_cost.py --explain
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import asyncpg
import orjson

from queenpy.bench.core import BULK_LOAD
from queenpy.harness import PrivatePostgres
from queenpy.store.migrate import apply_migrations

READ = "SELECT * FROM queen.{}($1::uuid[], $2::bigint[], $3::bigint[]{})"
EVERY = ["data", "transactionIds", "createdAtUs", "traceIds", "producerSubs"]
PUSH_V4 = (
    "SELECT queen.spark_push_direct_v4($1, $2, $3, $4, $5, $6::text[], $7::integer[], $8::text[], "
    "$9::uuid[], $10::bytea, $11::integer[], NULL, false, false)::text"
)


async def timed(call: Awaitable[Any]) -> float:
    started = time.perf_counter()
    await call
    return time.perf_counter() - started


async def measure(pg: PrivatePostgres, args: argparse.Namespace) -> None:
    conn = await asyncpg.connect(pg.database_url(pg.create_database("sqlcost")))
    await apply_migrations(conn)
    payload = orjson.dumps({"k": "x" * (args.size - 10)}).decode()
    names = [f"p{i}" for i in range(args.partitions)]
    for queue in ("src", "dst", "ref"):
        await conn.execute("SELECT queen.create_partitions_v1($1, $2)", [queue] * len(names), names)
    await conn.execute(BULK_LOAD, "src", args.per_partition, payload)
    await conn.execute("VACUUM ANALYZE queen.messages")
    ids = [
        str(r["id"])
        for r in await conn.fetch(
            "SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
            "WHERE q.name = 'src' ORDER BY p.id"
        )
    ][: args.partitions // 2]
    ranges = (ids, [0] * len(ids), [args.per_partition] * len(ids))
    page = len(ids) * args.per_partition
    n = args.chunk
    blob = (payload * n).encode()
    lengths = [len(payload.encode())] * n
    indexes = [i * args.partitions // n for i in range(n)]
    times: dict[str, list[float]] = {}

    def push_direct(sql: str, batch: int) -> Awaitable[Any]:  # the arguments are made before the clock runs
        ids_ = [f"spark-{uuid.uuid4().hex[:24]}-{i}" for i in range(n)]
        return conn.fetchval(sql, "q", batch, 0, "t", "dst", names, indexes, ids_, [None] * n, blob, lengths)

    def push_items(client_ids: bool) -> Awaitable[Any]:
        items = [
            {"queue": "ref", "partition": names[indexes[i]], "payload": orjson.loads(payload)}
            | ({"transactionId": f"t{uuid.uuid4().hex}"} if client_ids else {})
            for i in range(n)
        ]
        return conn.fetchval(
            "SELECT queen.push_items_v3($1::jsonb, false, false)", orjson.dumps(items).decode()
        )

    for r in range(args.rounds):
        for name in ("spark_read_v3", "spark_read_v5"):
            extra = (EVERY,) if name == "spark_read_v5" else ()
            sql = READ.format(name, ", $4::text[]" if extra else "")
            times.setdefault(name, []).append(await timed(conn.fetch(sql, *ranges, *extra)))
        times.setdefault("push_items_v3", []).append(await timed(push_items(False)))
        times.setdefault("push_items_v3 (client ids)", []).append(await timed(push_items(True)))
        times.setdefault("spark_push_direct_v4", []).append(await timed(push_direct(PUSH_V4, r)))
    print(f"read: a page of {page:,} messages over {len(ids)} ranges; push: {n:,} rows; {args.rounds} rounds")
    for name, values in times.items():
        count = page if name.startswith("spark_read") else n
        best, median = min(values), statistics.median(values)
        print(
            f"{name:28s} best {best * 1e3:7.1f} ms {best * 1e6 / count:6.2f} µs/msg   "
            f"median {median * 1e3:7.1f} ms {median * 1e6 / count:6.2f} µs/msg"
        )
    if args.explain:
        await conn.execute("SET enable_seqscan = off")
        for name in ("spark_read_v3", "spark_read_v5"):
            body = await conn.fetchval("SELECT prosrc FROM pg_proc WHERE proname = $1", name)
            for old, new in (
                ("p_partition_ids", "$1::uuid[]"),
                ("p_after", "$2::bigint[]"),
                ("p_upto", "$3::bigint[]"),
                ("p_columns", "$4::text[]"),
            ):
                body = body.replace(old, new)
            print(f"-- {name}")
            extra = (EVERY,) if name == "spark_read_v5" else ()
            for row in await conn.fetch("EXPLAIN (ANALYZE, BUFFERS) " + body, *ranges, *extra):
                print(row[0])
    await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--per-partition", type=int, default=200)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--chunk", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        pg = PrivatePostgres(Path(scratch) / "pg")
        try:
            asyncio.run(measure(pg, args))
        finally:
            pg.stop()


if __name__ == "__main__":
    main()
