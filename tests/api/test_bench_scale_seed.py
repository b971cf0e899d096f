"""The scale bench's bulk seed (``queenpy.bench.kinds.scale``, issue 44) against a real broker: three
partitions pushed, popped and acked through the broker and three seeded by SQL leave the same rows in every
table (the check the scenario runs before it measures), and a seed that differs is caught."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import httpx

from queenpy.bench.kinds import scale
from queenpy.bench.postgres import Sql

from helpers import unique


def test_the_bulk_seed_leaves_what_pushes_pops_and_acks_leave(broker: Any) -> None:
    sql = Sql(broker.database_url)
    context: Any = SimpleNamespace(sql=sql, log=lambda line: None)
    prefix = unique("scale") + "-"
    try:
        with httpx.Client(base_url=broker.url, timeout=30) as http:
            assert scale._check_seed(context, http, prefix) == {}
        scale._seed(context, f"{prefix}short", 3, scale.STORED - 1)  # one message fewer per partition
        short, pushed = (
            scale._fingerprint(context, f"{prefix}short"),
            scale._fingerprint(context, f"{prefix}ref-pushed"),
        )
        assert short["partitions"] != pushed["partitions"] and short["cursors"] != pushed["cursors"]
    finally:
        sql.close()
