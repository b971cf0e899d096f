"""Lock order inside one fused pop call (queen.pop_v2, 030_pop.sql; queen.pop_group_v1, 022_group_commit.sql).

A fused call runs many clients' pops in one transaction. Pops of a named partition wait for the group's cursor
row when another transaction holds it; wildcard pops skip such rows. pop_v2 runs the named pops first, in
(queue, partition, group) order, and the wildcard pops after them, so a call never holds a wildcard pop's
lease while it waits: two calls cannot wait for each other. Results still come back in request order.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from helpers import call_procedure

GROUP = "lock-order"


def pop_request(partition: str | None) -> dict[str, Any]:
    return {"queue": "order", "partition": partition, "consumerGroup": GROUP, "batch": 1, "autoAck": False}


@pytest.mark.parametrize("procedure", ["pop_v1", "pop_group_v1"])
def test_two_calls_mixing_wildcard_and_named_pops_do_not_deadlock(db_url: str, procedure: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        call_procedure(
            conn,
            "push_items_v1",
            [
                {"queue": "order", "partition": "A", "payload": 1},
                {"queue": "order", "partition": "B", "payload": 2},
            ],
        )
        with psycopg.connect(db_url) as other:  # its leases stay uncommitted until the end
            assert [
                m["data"] for m in call_procedure(other, "pop_v1", [pop_request("B")])[0]["messages"]
            ] == [2]

            box: dict[str, Any] = {}

            def fused() -> None:  # a wildcard pop (A is free) and a named pop of B, which `other` holds
                try:
                    box["result"] = call_procedure(conn, procedure, [pop_request(None), pop_request("B")])
                except psycopg.Error as exc:
                    box["error"] = exc

            thread = threading.Thread(target=fused, daemon=True)
            thread.start()
            thread.join(0.5)
            assert thread.is_alive(), "the named pop of B waits for the transaction holding B"
            # had the fused call's wildcard pop leased A before waiting for B, this would wait for the fused
            # call while the fused call waits for this transaction: a deadlock, and one of the two aborted
            taken = call_procedure(other, "pop_v1", [pop_request("A")])[0]
            assert [m["data"] for m in taken["messages"]] == [1]
            other.commit()
            thread.join(10)
    assert "error" not in box, box.get("error")
    wildcard, named = box["result"]
    assert (named["success"], named.get("error")) == (False, "lease_held")
    assert (wildcard["success"], wildcard.get("error")) == (False, "no_available_partition")
