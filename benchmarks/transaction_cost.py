"""One-off: what a client transaction of 100 acks + 100 pushes costs PostgreSQL inside the procedure,
against one ``push_items_v3`` of the 100 items plus one ``ack_v2`` of the 100 acks (issue 40, item 3).

    .venv/bin/python benchmarks/transaction_cost.py --repetitions 200 [--payload-bytes 40] [--before 7501f68]

Starts a private PostgreSQL (the ``pgserver`` wheel, as the tests do; ``synchronous_commit = off``), applies
the migrations, and per repetition pops two leased batches of 100 from a source partition, then times, in
rotating order, server-side (``clock_timestamp()`` around the call inside PostgreSQL, so neither the round
trip nor the commit counts):
  * ``transaction_v2`` of one client transaction: the 100 acks of the first batch + a push of 100 items;
  * ``push_items_v3`` of 100 items, and ``ack_v2`` of the 100 acks of the second batch;
  * with ``--before REV``: that revision's ``queen.transaction_v1`` (loaded from git under another name) on
    a third batch;
  * a group of 50 client transactions of 1 ack + 1 push each, all pushing to one partition or each to its
    own, against 50 calls of ``transaction_v2`` with one each (per client transaction), and the same group
    through ``transaction_v3``'s set-based path (the acks under their lease, as a consumer sends them);
  * the MultiXacts a group of 20 and of 60 creates when all its members ack under one lease and push to one
    partition (PostgreSQL's counters around a checkpoint).
Prints medians and the 10th-90th percentile spread in microseconds.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

import orjson
import pgserver
import psycopg

from queenpy.server.process import migrate

TIMED = """
CREATE FUNCTION pg_temp.timed(p_sql text, p_arg jsonb) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE t timestamptz;
BEGIN
    t := clock_timestamp();
    EXECUTE p_sql USING p_arg;
    RETURN extract(epoch FROM clock_timestamp() - t) * 1e6;
END $$;
"""


def call(conn: psycopg.Connection[Any], sql: str, arg: Any) -> Any:
    row = conn.execute(sql, (orjson.dumps(arg).decode(),)).fetchone()
    assert row is not None
    return row[0]


def timed(conn: psycopg.Connection[Any], sql: str, arg: Any) -> float:
    """Microseconds that ``sql`` (one ``$1`` jsonb argument) took inside PostgreSQL."""
    row = conn.execute("SELECT pg_temp.timed(%s, %s::jsonb)", (sql, orjson.dumps(arg).decode())).fetchone()
    assert row is not None
    return float(row[0])


def leased_acks(conn: psycopg.Connection[Any], partition: str, n: int, payload: str) -> list[dict[str, Any]]:
    items = [{"queue": "src", "partition": partition, "payload": {"p": payload}} for _ in range(n)]
    call(conn, "SELECT queen.push_items_v3(%s::jsonb, false, false)", items)
    popped = orjson.loads(
        call(
            conn,
            "SELECT queen.pop_v1(%s::jsonb)::text",
            [
                {
                    "index": 0,
                    "queue": "src",
                    "partition": partition,
                    "consumerGroup": "__QUEUE_MODE__",
                    "batch": n,
                    "autoAck": False,
                }
            ],
        )
    )[0]["messages"]
    assert len(popped) == n
    return [
        {
            "transactionId": m["transactionId"],
            "partitionId": m["partitionId"],
            "status": "completed",
            "leaseId": m["leaseId"],
            "consumerGroup": "__QUEUE_MODE__",
        }
        for m in popped
    ]


def pushes(partition: str, n: int, payload: str) -> list[dict[str, Any]]:
    return [
        {"queue": "dst", "partition": partition, "payload": {"p": payload}, "transactionId": uuid.uuid4().hex}
        for _ in range(n)
    ]


def spread(samples: list[float]) -> str:
    deciles = statistics.quantiles(samples, n=10)
    return f"median {statistics.median(samples):8.0f} us   p10-p90 {deciles[0]:7.0f} - {deciles[-1]:7.0f}"


def load_before(conn: psycopg.Connection[Any], revision: str) -> None:
    """``queen.transaction_v1`` as it was at ``revision``, created as ``queen.transaction_before``."""
    text = subprocess.run(
        ["git", "show", f"{revision}:src/queenpy/sql/procedures/040_ack.sql"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    match = re.search(r"CREATE OR REPLACE FUNCTION queen\.transaction_v1\(.*?\n\$\$;", text, re.DOTALL)
    assert match, "no transaction_v1 in that revision"
    conn.execute(match.group(0).replace("queen.transaction_v1(", "queen.transaction_before("))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=200)
    parser.add_argument("--payload-bytes", type=int, default=40)
    parser.add_argument("--before", help="a git revision whose transaction_v1 to time too")
    args = parser.parse_args()
    payload = "x" * max(0, args.payload_bytes - 8)
    with tempfile.TemporaryDirectory(prefix="queenpy-txcost-") as directory:
        server = pgserver.get_server(Path(directory) / "pgdata", cleanup_mode="stop")
        url = server.get_uri()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET synchronous_commit = off")
            conn.execute("SELECT pg_reload_conf()")
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(TIMED)
            if args.before:
                load_before(conn, args.before)
            samples: dict[str, list[float]] = {
                "transaction_v2 (100 acks + 100 pushes)": [],
                "push_items_v3 (100)": [],
                "ack_v2 (100)": [],
                "push_items_v3 + ack_v2": [],
            }
            if args.before:
                samples[f"transaction_v1 at {args.before}"] = []
            for rep in range(args.repetitions):
                partition = f"p{rep % 4}"
                tx_acks = leased_acks(conn, partition + "a", 100, payload)
                plain_acks = leased_acks(conn, partition + "b", 100, payload)
                before_acks = leased_acks(conn, partition + "c", 100, payload) if args.before else []
                runs = {
                    "transaction_v2 (100 acks + 100 pushes)": (
                        "SELECT queen.transaction_v2($1)",
                        [
                            {
                                "operations": [{"type": "ack", **a} for a in tx_acks]
                                + [{"type": "push", "items": pushes(partition, 100, payload)}]
                            }
                        ],
                    ),
                    "push_items_v3 (100)": (
                        "SELECT queen.push_items_v3($1, false, false)",
                        pushes(partition, 100, payload),
                    ),
                    "ack_v2 (100)": (
                        "SELECT queen.ack_v2($1)",
                        [{**a, "index": i} for i, a in enumerate(plain_acks)],
                    ),
                }
                if args.before:
                    runs[f"transaction_v1 at {args.before}"] = (
                        "SELECT queen.transaction_before($1)",
                        {
                            "operations": [{"type": "ack", **a} for a in before_acks]
                            + [{"type": "push", "items": pushes(partition, 100, payload)}]
                        },
                    )
                names = list(runs)
                for name in names[rep % len(names) :] + names[: rep % len(names)]:
                    sql, arg = runs[name]
                    samples[name].append(timed(conn, sql, arg))
                samples["push_items_v3 + ack_v2"].append(
                    samples["push_items_v3 (100)"][-1] + samples["ack_v2 (100)"][-1]
                )
            for name, values in samples.items():
                print(f"{name:42s} {spread(values)}")
            ratios = [
                t / s
                for t, s in zip(
                    samples["transaction_v2 (100 acks + 100 pushes)"], samples["push_items_v3 + ack_v2"]
                )
            ]
            print(
                f"{'ratio transaction / (push + ack)':42s} median {statistics.median(ratios):.2f}   p10-p90 "
                f"{statistics.quantiles(ratios, n=10)[0]:.2f} - {statistics.quantiles(ratios, n=10)[-1]:.2f}"
            )

            # group commit: 50 client transactions of 1 ack + 1 push, fused or one call each
            group_samples: dict[str, list[float]] = {
                "group of 50, one target partition": [],
                "group of 50, 50 target partitions": [],
                "50 calls of one": [],
                "group of 50, 50 target partitions, transaction_v3 (acks under their lease)": [],
            }
            for rep in range(max(1, args.repetitions // 10)):
                for name, values in group_samples.items():
                    acks = leased_acks(conn, f"g{rep}", 50, payload)
                    v3 = "transaction_v3" in name
                    if not v3:  # each ack ends the lease: acknowledged without it, member by member
                        conn.execute("UPDATE queen.partition_consumers SET batch_size = 1")
                    members = [
                        {
                            "operations": [
                                {"type": "ack", **{k: v for k, v in a.items() if v3 or k != "leaseId"}},
                                {
                                    "type": "push",
                                    "items": pushes("one" if "one target" in name else f"t{k}", 1, payload),
                                },
                            ]
                        }
                        for k, a in enumerate(acks)
                    ]
                    if name == "50 calls of one":
                        values.append(
                            sum(timed(conn, "SELECT queen.transaction_v2($1)", [m]) for m in members) / 50
                        )
                    else:
                        procedure = "transaction_v3" if v3 else "transaction_v2"
                        values.append(timed(conn, f"SELECT queen.{procedure}($1)", members) / 50)
            for name, values in group_samples.items():
                print(
                    f"{name + ' (per transaction)':42s} median {statistics.median(values):8.0f} us   "
                    f"min-max {min(values):7.0f} - {max(values):7.0f}"
                )

            # MultiXacts: members of one group that lock the same row (one consumer row acked under one lease,
            # one target partition) each lock a version another subtransaction of the group made
            for size in (20, 60):
                acks = leased_acks(conn, f"m{size}", size, payload)
                members = [
                    {
                        "operations": [
                            {"type": "ack", **a},
                            {"type": "push", "items": pushes("shared", 1, payload)},
                        ],
                        "requiredLeases": [a["leaseId"]],
                    }
                    for a in acks
                ]
                before = multixact_counters(conn)
                call(conn, "SELECT queen.transaction_v2(%s::jsonb)::text", members)
                after = multixact_counters(conn)
                print(
                    f"group of {size} on one consumer row and one target partition: {after[0] - before[0]} "
                    f"MultiXacts, {after[1] - before[1]} MultiXact members"
                )
        server.cleanup()


def multixact_counters(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """PostgreSQL's next MultiXact id and member offset, as of a checkpoint taken now."""
    conn.execute("CHECKPOINT")
    row = conn.execute(
        "SELECT next_multixact_id::text::bigint, next_multi_offset::text::bigint FROM pg_control_checkpoint()"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


if __name__ == "__main__":
    main()
