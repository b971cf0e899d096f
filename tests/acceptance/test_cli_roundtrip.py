"""The CLI round trip of issue 3: ``queenpy push`` of 10,000 JSON lines from files, ``queenpy queues`` shows a
depth of 10,000, ``queenpy consume --ack`` reads every message back once and in order per partition, and
``queenpy queues`` then shows a depth of 0. Everything runs as ``python -m queenpy`` subprocesses against the
session broker (``QUEEN_URL``).

The 10,000 lines are split over 4 files, one per partition, each pushed with ``--partition``.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path
from typing import Any

import httpx

from helpers import run_queenpy, unique

queenpy = functools.partial(run_queenpy, timeout_s=60)

PARTITIONS = [f"part-{index}" for index in range(4)]
PER_PARTITION = 2_500
TOTAL = PER_PARTITION * len(PARTITIONS)


def refresh_stats(broker: Any) -> None:
    """Counts come from the stats job (every STATS_INTERVAL_MS): run it now."""
    assert httpx.post(f"{broker.url}/api/v1/stats/refresh", timeout=60).status_code == 200


def listed_counts(broker: Any, queue: str) -> dict[str, int]:
    """The ``messages`` counts of ``queue`` in ``queenpy queues --json``."""
    refresh_stats(broker)
    rows = [row for row in json.loads(queenpy(broker, "queues", "--json").stdout) if row["name"] == queue]
    assert len(rows) == 1, f"{queue} listed {len(rows)} times"
    return rows[0]["messages"]


def table_row(broker: Any, queue: str) -> list[str]:
    """The cells of ``queue``'s row in the human-readable ``queenpy queues`` table."""
    refresh_stats(broker)
    rows = [line for line in queenpy(broker, "queues").stdout.splitlines() if f" {queue} " in line]
    assert len(rows) == 1, f"{queue} not in the table exactly once: {rows}"
    return [cell.strip() for cell in rows[0].strip("│┃| \n").replace("┃", "│").split("│")]


def depths(broker: Any, queue: str) -> dict[str, Any]:
    """Per partition and in total, ``pending`` from ``queenpy queues describe <queue> --json``."""
    refresh_stats(broker)
    described = json.loads(queenpy(broker, "queues", "describe", "-q", queue, "--json").stdout)["queue"]
    per_partition = {p["name"]: p["stats"]["pending"] for p in described["partitions"]}
    return {"partitions": per_partition, "total": described["totals"]["pending"]}


def test_push_10000_json_lines_then_consume_them_all_in_order_per_partition(
    broker: Any, tmp_path: Path
) -> None:
    queue = unique("cli-roundtrip")
    started = time.monotonic()

    # -- push: 4 files × 2,500 JSON lines, each line {"data": {...}, "transactionId": ...} -------------------
    for partition in PARTITIONS:
        path = tmp_path / f"{partition}.jsonl"
        path.write_text(
            "".join(
                json.dumps(
                    {"data": {"partition": partition, "seq": seq}, "transactionId": f"{partition}-{seq}"}
                )
                + "\n"
                for seq in range(PER_PARTITION)
            )
        )
        pushed = queenpy(
            broker,
            "push",
            "--queue",
            queue,
            "--partition",
            partition,
            "--file",
            str(path),
            "--batch-size",
            "500",
        )
        assert (
            f"pushed {PER_PARTITION} message(s) to {queue}/{partition}: {PER_PARTITION} queued"
            in pushed.stdout
        )
    pushed_s = time.monotonic() - started

    # -- the depth is 10,000, in the list (JSON and table) and per partition --------------------------------
    assert listed_counts(broker, queue) == {"total": TOTAL, "pending": TOTAL, "processing": 0}
    row = table_row(broker, queue)
    # queue, namespace, task, partitions, then depth, pending, processing (retention settings follow)
    assert row[0] == queue and row[4:7] == [str(TOTAL), str(TOTAL), "0"], row
    assert depths(broker, queue) == {"partitions": dict.fromkeys(PARTITIONS, PER_PARTITION), "total": TOTAL}

    # -- consume --ack: every message once, in push order within its partition ----------------------------
    # --limit ends the run; --idle-millis is only a safety net, far above the time a batch takes to handle
    # (the client counts handling time as idle time, see test_consume_idle_millis_counts_only_idle_time)
    consume_started = time.monotonic()
    consumed = queenpy(
        broker,
        "consume",
        "--queue",
        queue,
        "--ack",
        "--batch",
        "100",
        "--concurrency",
        "2",
        "--limit",
        str(TOTAL),
        "--idle-millis",
        "15000",
        "--timeout-millis",
        "1000",
    )
    consume_s = time.monotonic() - consume_started
    messages = [json.loads(line) for line in consumed.stdout.splitlines() if line.strip()]
    assert f"consumed {TOTAL} message(s)" in consumed.stderr
    assert len(messages) == TOTAL
    by_partition: dict[str, list[int]] = {}
    for message in messages:
        data = message["data"]
        assert message["partition"] == data["partition"]
        assert message["transactionId"] == f"{data['partition']}-{data['seq']}"
        by_partition.setdefault(message["partition"], []).append(data["seq"])
    assert sorted(by_partition) == PARTITIONS
    for partition, seqs in by_partition.items():
        assert seqs == list(range(PER_PARTITION)), f"{partition} out of order or not exactly once"

    # -- the depth is 0; the acked messages are still counted in the total -----------------------------------
    assert listed_counts(broker, queue) == {"total": TOTAL, "pending": 0, "processing": 0}
    assert table_row(broker, queue)[4:7] == [str(TOTAL), "0", "0"]
    assert depths(broker, queue) == {"partitions": dict.fromkeys(PARTITIONS, 0), "total": 0}
    # nothing is left to deliver: the 10,000 read back were all there was
    again = queenpy(broker, "consume", "--queue", queue, "--ack", "--idle-millis", "300")
    assert again.stdout == "" and "consumed 0 message(s)" in again.stderr
    print(
        f"pushed {TOTAL} in {pushed_s:.1f}s, consumed in {consume_s:.1f}s, "
        f"total {time.monotonic() - started:.1f}s"
    )


def test_consume_idle_millis_counts_only_idle_time(broker: Any, tmp_path: Path) -> None:
    """``--idle-millis`` stops a consumer that received nothing for that long; time spent handling (printing
    and acking) a batch is not idle time, so a long batch must not end the run while messages remain."""
    queue = unique("cli-idle")
    path = tmp_path / "lines.jsonl"
    path.write_text("".join(json.dumps({"seq": seq}) + "\n" for seq in range(1000)))
    queenpy(
        broker, "push", "--queue", queue, "--partition", "only", "--file", str(path), "--batch-size", "1000"
    )
    # acking 500 messages one by one takes well over 300 ms, and the next batch is waiting
    consumed = queenpy(broker, "consume", "--queue", queue, "--ack", "--batch", "500", "--idle-millis", "300")
    seqs = [json.loads(line)["data"]["seq"] for line in consumed.stdout.splitlines() if line.strip()]
    assert seqs == list(range(1000)), f"consumed {len(seqs)} of 1000 before stopping as idle"
