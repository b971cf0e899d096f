"""What PostgreSQL spends per message on the Spark copy's own calls (the source's read and the direct push),
by version and by column: the CPU time of the backend (``/proc/<pid>/schedstat``, so other load on the
machine counts less than in wall time) around single calls on a private PostgreSQL (embedded, the broker's
procedures applied), no broker and no Spark.

Measuring script for issue 42 (it replaced ``benchmarks/spark_sql_cost.py``, in git history, which timed the
same calls by wall time only and could print their plans). It loads
``--partitions`` partitions of ``--per-partition`` messages of ``--size`` bytes (the bench's payload, by the
bench's bulk SQL), then, in ``--rounds`` rounds, each variant once, in turn:

- the read of a page as one task of the bench's copy asks for it: half of the partitions, ``--range``
  offsets each (the next ranges each round): ``spark_read_v4`` (every column) when the database still has
  it, and ``spark_read_v5`` with every column, with the copy's (``data`` and ``traceIds``: the bench's schema
  is ``data, partition, partitionId, offset, traceId``), with ``data`` only and with none (offsets only);
- a direct push chunk of ``--chunk`` rows over the same number of partitions, in partition order, with the
  sink's derived transaction ids (``spark-`` + 24 hex digits + ``-`` + offset): ``spark_push_direct_v3``
  when the database still has it, and ``spark_push_direct_v4``; next to ``push_items_v3`` of 100 rows
  without transaction ids (what push-100-1KB asks of PostgreSQL), each variant into a queue of its own.

Prints the median and the best of the rounds per variant, in µs per message, of CPU time and of wall time.

    .venv/bin/python benchmarks/spark_pg_cost.py --rounds 20
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import orjson

from queenpy.bench.catalog import payload
from queenpy.bench.core import BULK_LOAD
from queenpy.harness import PrivatePostgres
from queenpy.store.migrate import apply_migrations

EVERY = ["data", "transactionIds", "createdAtUs", "traceIds", "producerSubs"]
READ_V4 = "SELECT * FROM queen.spark_read_v4($1::uuid[], $2::bigint[], $3::bigint[])"
READ_V5 = "SELECT * FROM queen.spark_read_v5($1::uuid[], $2::bigint[], $3::bigint[], $4::text[])"
READS: list[tuple[str, str, str, list[str] | None]] = [
    ("spark_read_v4 (every column)", "spark_read_v4", READ_V4, None),
    ("spark_read_v5, every column", "spark_read_v5", READ_V5, EVERY),
    ("spark_read_v5, the copy's (data, traceIds)", "spark_read_v5", READ_V5, ["data", "traceIds"]),
    ("spark_read_v5, data only", "spark_read_v5", READ_V5, ["data"]),
    ("spark_read_v5, none (offsets only)", "spark_read_v5", READ_V5, []),
]
PUSH = (
    "SELECT queen.{}($1, $2, 0, 't', $3, $4::text[], $5::integer[], $6::text[], $7::uuid[], $8::bytea, "
    "$9::integer[], NULL, false, false)::text"
)
PUSHES = ["spark_push_direct_v3", "spark_push_direct_v4"]


class BackendClock:
    """CPU seconds a backend has run (``/proc/<pid>/schedstat``, Linux), and wall seconds."""

    def __init__(self, pid: int) -> None:
        self.path = Path(f"/proc/{pid}/schedstat")

    def cpu(self) -> float:
        return int(self.path.read_text().split()[0]) / 1e9


async def measure(pg: PrivatePostgres, args: argparse.Namespace) -> None:
    conn = await asyncpg.connect(pg.database_url(pg.create_database("pgcost")))
    await apply_migrations(conn)
    clock = BackendClock(await conn.fetchval("SELECT pg_backend_pid()"))
    text = payload(args.size)
    names = [f"p{i}" for i in range(args.partitions)]
    await conn.execute("SELECT queen.create_partitions_v1($1, $2)", ["src"] * len(names), names)
    step = max(1, 20_000 // args.partitions)
    for done in range(0, args.per_partition, step):
        await conn.execute(BULK_LOAD, "src", min(step, args.per_partition - done), text)
    await conn.execute("VACUUM ANALYZE queen.messages")
    ids = [
        str(r["id"])
        for r in await conn.fetch(
            "SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
            "WHERE q.name = 'src' ORDER BY p.id"
        )
    ][: args.partitions // 2]
    present = {r["proname"] for r in await conn.fetch("SELECT proname FROM pg_proc")}
    page = len(ids) * args.range
    n = args.chunk
    blob = (text * n).encode()
    lengths = [len(text.encode())] * n
    targets = names[: len(ids)]
    indexes = [i * len(targets) // n for i in range(n)]
    reference = [
        {"queue": "ref", "partition": names[i % len(ids)], "payload": orjson.loads(text)} for i in range(100)
    ]
    reference_text = orjson.dumps(reference).decode()
    cpu: dict[str, list[float]] = {}
    wall: dict[str, list[float]] = {}
    counts: dict[str, int] = {}

    async def timed(name: str, count: int, call: Callable[[], Awaitable[Any]]) -> Any:
        counts[name] = count
        started_cpu, started = clock.cpu(), time.perf_counter()
        result = await call()
        wall.setdefault(name, []).append(time.perf_counter() - started)
        cpu.setdefault(name, []).append(clock.cpu() - started_cpu)
        return result

    for r in range(args.rounds):
        after = r * args.range % max(args.per_partition - args.range + 1, 1)
        ranges = (ids, [after] * len(ids), [after + args.range] * len(ids))
        for name, function, sql, columns in READS:
            if function in present:
                extra = () if columns is None else (columns,)
                rows = await timed(name, page, lambda: conn.fetch(sql, *ranges, *extra))  # noqa: B023
                assert sum(len(row["offsets"]) for row in rows) == page
        for function in PUSHES:
            if function in present:
                prefix = f"spark-{uuid.uuid4().hex[:24]}-"
                transaction_ids = [prefix + str(after + i) for i in range(n)]
                answer = await timed(
                    function,
                    n,
                    lambda: conn.fetchval(
                        PUSH.format(function),  # noqa: B023
                        "q",
                        r,  # noqa: B023
                        f"dst-{function}",  # noqa: B023
                        targets,
                        indexes,
                        transaction_ids,  # noqa: B023
                        [None] * n,
                        blob,
                        lengths,
                    ),
                )
                assert orjson.loads(answer)["pushed"] == n
        for _ in range(args.chunk // 100):
            await timed(
                "push_items_v3, 100 rows (push-100-1KB)",
                100,
                lambda: conn.fetchval("SELECT queen.push_items_v3($1::jsonb, false, false)", reference_text),
            )
    print(
        f"read: a page of {page:,} messages of {args.size} B over {len(ids)} ranges "
        f"({args.partitions * args.per_partition:,} stored); "
        f"push: {n:,} rows over {len(targets)} partitions; {args.rounds} rounds"
    )
    print(
        f"{'µs per message':46s} {'CPU median':>10s} {'CPU best':>9s} {'wall median':>11s} {'wall best':>9s}"
    )
    for name, c in cpu.items():
        w, count = wall[name], counts[name]
        print(
            f"{name:46s} {statistics.median(c) * 1e6 / count:10.2f} {min(c) * 1e6 / count:9.2f} "
            f"{statistics.median(w) * 1e6 / count:11.2f} {min(w) * 1e6 / count:9.2f}"
        )
    await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--per-partition", type=int, default=2000)
    parser.add_argument("--range", type=int, default=200, help="offsets read per partition (per range)")
    parser.add_argument("--chunk", type=int, default=3700, help="rows per direct push chunk")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        pg = PrivatePostgres(Path(scratch) / "pg")
        try:
            asyncio.run(measure(pg, args))
        finally:
            pg.stop()


if __name__ == "__main__":
    main()
