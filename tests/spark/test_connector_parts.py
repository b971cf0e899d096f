"""Connector pieces without a SparkSession: gap detection of range reads, derived transaction ids, sink rows.
(In the spark tier because they import pyarrow and pyspark.)"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from queenpy.spark.options import SinkOptions, SourceOptions
from queenpy.spark.reader import DataLossError, QueenInputPartition, read_range
from queenpy.spark.schema import arrow_schema
from queenpy.spark.writer import RowEncoder, check_sink_schema, derive_transaction_id

pytestmark = pytest.mark.spark

PID = "3f1c0a52-0000-4000-8000-000000000001"


class PagedBroker:
    """Answers ``messages()`` from a fixed list of offsets, as the broker would (range, limit, order)."""

    def __init__(self, offsets: list[int]) -> None:
        self.offsets = offsets
        self.calls: list[tuple[int, int, int]] = []

    def messages(self, partition_id: str, after: int, upto: int, limit: int) -> dict[str, Any]:
        self.calls.append((after, upto, limit))
        chosen = [o for o in self.offsets if after < o <= upto][:limit]
        return {
            "partitionId": partition_id,
            "partition": "p",
            "queue": "q",
            "messages": [
                {
                    "offset": o,
                    "id": f"id-{o}",
                    "transactionId": f"t-{o}",
                    "data": {"o": o},
                    "createdAt": "2026-11-21T11:08:40.903082Z",
                    "traceId": None,
                    "producerSub": None,
                }
                for o in chosen
            ],
        }


def offsets_read(broker: PagedBroker, after: int, upto: int, fail: bool) -> list[int]:
    batches = read_range(
        broker,
        QueenInputPartition(PID, after, upto),
        page_size=4,  # type: ignore[arg-type]
        fail_on_data_loss=fail,
    )
    out: list[int] = []
    for batch in batches:
        assert batch.schema == arrow_schema()
        out.extend(batch.column(batch.schema.names.index("offset")).to_pylist())
    return out


def test_range_read_pages_through_the_range_in_order() -> None:
    broker = PagedBroker(list(range(1, 21)))
    assert offsets_read(broker, 2, 13, fail=True) == list(range(3, 14))
    assert [c[0] for c in broker.calls] == [2, 6, 10]  # pages of 4, last one short


@pytest.mark.parametrize(
    "offsets, missing", [([1, 2, 3, 5, 6], "4"), ([1, 2, 3], "4..6"), ([3, 4, 5, 6], "1..2")]
)
def test_gaps_fail_the_read_or_are_skipped(offsets: list[int], missing: str) -> None:
    with pytest.raises(DataLossError, match=f"offsets {missing} of queue 'q'"):
        offsets_read(PagedBroker(offsets), 0, 6, fail=True)
    assert offsets_read(PagedBroker(offsets), 0, 6, fail=False) == offsets


def test_derived_transaction_ids_are_a_pure_function() -> None:
    a = derive_transaction_id("query-1", 3, "src:p:7:0")
    assert a == derive_transaction_id("query-1", 3, "src:p:7:0")
    assert a.startswith("spark-") and len(a) == 38
    assert (
        len(
            {
                a,
                derive_transaction_id("query-1", 4, "src:p:7:0"),
                derive_transaction_id("query-2", 3, "src:p:7:0"),
                derive_transaction_id("query-1", 3, "src:p:7:1"),
            }
        )
        == 4
    )


def rows(**columns: list[Any]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns)


def test_sink_rows_become_push_items() -> None:
    options = SinkOptions.parse({"queue": "out"})
    batch = rows(
        data=[json.dumps({"a": 1}), "[1, 2]", None],
        partition=["p1", None, "p2"],
        partitionId=[PID, PID, PID],
        offset=[5, 5, 6],
        traceId=[None, "0b9f6e2e-0000-4000-8000-00000000000a", None],
    )
    first = RowEncoder(options, "q", 2, task=0).encode(batch)
    assert [(i["queue"], i["partition"], i["payload"]) for i in first] == [
        ("out", "p1", {"a": 1}),
        ("out", "Default", [1, 2]),
        ("out", "p2", None),
    ]
    assert first[1]["traceId"] == "0b9f6e2e-0000-4000-8000-00000000000a" and "traceId" not in first[0]
    # two output rows of one input message get different ids; a replay gets the same ids
    ids = [i["transactionId"] for i in first]
    assert len(set(ids)) == 3
    assert [i["transactionId"] for i in RowEncoder(options, "q", 2, task=1).encode(batch)] == ids
    assert [i["transactionId"] for i in RowEncoder(options, "q", 3, task=0).encode(batch)] != ids


def test_sink_options_and_schema_checks() -> None:
    with pytest.raises(ValueError, match='option\\("queue"'):
        SinkOptions.parse({})
    with pytest.raises(ValueError, match="data"):
        check_sink_schema(["value"], SinkOptions.parse({"queue": "q"}))
    with pytest.raises(ValueError, match="key"):
        check_sink_schema(["data"], SinkOptions.parse({"queue": "q", "partitionColumn": "key"}))
    constant = SinkOptions.parse({"queue": "q", "partition": "all", "partitionColumn": "key"})
    check_sink_schema(["data"], constant)
    assert RowEncoder(constant, "q", 0, 0).encode(rows(data=["1"]))[0]["partition"] == "all"
    with pytest.raises(ValueError, match="not JSON"):
        RowEncoder(SinkOptions.parse({"queue": "q"}), "q", 0, 0).encode(rows(data=["{oops"]))
    source = SourceOptions.parse({"QUEUE": "q", "maxmessagespertrigger": "5", "failOnDataLoss": "false"})
    assert (source.queue, source.max_messages_per_trigger, source.fail_on_data_loss) == ("q", 5, False)
    with pytest.raises(ValueError, match="pageSize"):
        SourceOptions.parse({"queue": "q", "pageSize": "60000"})
