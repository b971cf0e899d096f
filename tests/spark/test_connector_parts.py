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
from queenpy.spark.writer import (
    ROW_OVERHEAD_BYTES,
    RowEncoder,
    check_sink_schema,
    derive_transaction_id,
    first_non_json,
    rows_that_fit,
)

pytestmark = pytest.mark.spark

PID = "3f1c0a52-0000-4000-8000-000000000001"


class PagedBroker:
    """Answers ``read()`` from a fixed list of offsets of one partition, as the broker would (ranges, order)."""

    def __init__(self, offsets: list[int]) -> None:
        self.offsets = offsets
        self.calls: list[list[tuple[str, int, int]]] = []

    def read(self, ranges: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
        self.calls.append(list(ranges))
        blocks = []
        for index, (partition_id, after, upto) in enumerate(ranges):
            chosen = [o for o in self.offsets if after < o <= upto]
            blocks.append({
                "index": index, "partitionId": partition_id, "partition": "p", "queue": "q", "offsets": chosen,
                "transactionIds": [f"t-{o}" for o in chosen], "data": [json.dumps({"o": o}) for o in chosen],
                "createdAtUs": [1_795_000_000_000_000 + o for o in chosen], "traceIds": [None] * len(chosen),
                "producerSubs": [None] * len(chosen)})
        return blocks


def offsets_read(broker: PagedBroker, after: int, upto: int, fail: bool) -> list[int]:
    batches = read_range(
        broker,  # type: ignore[arg-type]
        QueenInputPartition([(PID, after, upto)]),
        page_size=4,
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
    assert broker.calls == [[(PID, 2, 6)], [(PID, 6, 10)], [(PID, 10, 13)]]  # pages of 4, last one short


def test_a_task_reads_several_partitions_per_request_in_order() -> None:
    broker = PagedBroker(list(range(1, 21)))
    other = "3f1c0a52-0000-4000-8000-000000000002"
    part = QueenInputPartition([(PID, 0, 3), (other, 5, 8), (PID, 3, 4)])
    batches = list(read_range(broker, part, page_size=5, fail_on_data_loss=True))  # type: ignore[arg-type]
    assert broker.calls == [[(PID, 0, 3), (other, 5, 7)], [(other, 7, 8), (PID, 3, 4)]]
    rows = [(r["partitionId"], r["offset"], r["data"]) for b in batches for r in b.to_pylist()]
    assert rows == [(PID, 1, '{"o": 1}'), (PID, 2, '{"o": 2}'), (PID, 3, '{"o": 3}'), (other, 6, '{"o": 6}'),
                    (other, 7, '{"o": 7}'), (other, 8, '{"o": 8}'), (PID, 4, '{"o": 4}')]


@pytest.mark.parametrize(
    "offsets, missing", [([1, 2, 3, 5, 6], "4"), ([1, 2, 3], "4"), ([3, 4, 5, 6], "1..2")]  # the first page (0, 4] fails
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


def test_sink_rows_become_staging_columns() -> None:
    options = SinkOptions.parse({"queue": "out"})
    batch = rows(
        data=[json.dumps({"a": 1}), "[1, 2]", None],
        partition=["p1", None, "p2"],
        partitionId=[PID, PID, PID],
        offset=[5, 5, 6],
        traceId=[None, "0b9f6e2e-0000-4000-8000-00000000000a", None],
    )
    first = RowEncoder(options, "q", 2, task=0).encode(batch)
    assert first["data"] == ['{"a": 1}', "[1, 2]", None]  # JSON text passes through untouched
    assert first["partitions"] == ["p1", None, "p2"]
    assert first["traceIds"] == [None, "0b9f6e2e-0000-4000-8000-00000000000a", None]
    # two output rows of one input message get different ids; a replay gets the same ids
    ids = first["transactionIds"]
    assert len(set(ids)) == 3
    assert RowEncoder(options, "q", 2, task=1).encode(batch)["transactionIds"] == ids
    assert RowEncoder(options, "q", 3, task=0).encode(batch)["transactionIds"] != ids
    # the derivation is the documented pure function of (query id, batch id, source identity)
    assert ids[0] == derive_transaction_id("q", 2, f"src:{PID}:5:0")
    assert ids[1] == derive_transaction_id("q", 2, f"src:{PID}:5:1")
    structs = pa.RecordBatch.from_pydict({"data": [{"a": 1, "b": [2]}]})
    assert RowEncoder(options, "q", 0, 0).encode(structs)["data"] == ['{"a":1,"b":[2]}']


def test_sink_options_and_schema_checks() -> None:
    with pytest.raises(ValueError, match='option\\("queue"'):
        SinkOptions.parse({})
    with pytest.raises(ValueError, match="data"):
        check_sink_schema(["value"], SinkOptions.parse({"queue": "q"}))
    with pytest.raises(ValueError, match="key"):
        check_sink_schema(["data"], SinkOptions.parse({"queue": "q", "partitionColumn": "key"}))
    constant = SinkOptions.parse({"queue": "q", "partition": "all", "partitionColumn": "key"})
    check_sink_schema(["data"], constant)
    assert RowEncoder(constant, "q", 0, 0).encode(rows(data=["1"]))["partitions"] == ["all"]
    assert first_non_json(["1", None, '{"a": 2}', "{oops", "nope"]) is not None
    assert first_non_json(["1", None, '{"a": 2}', "{oops", "nope"])[0] == 3  # type: ignore[index]
    assert first_non_json(["1", None, "[]"]) is None
    source = SourceOptions.parse({"QUEUE": "q", "maxmessagespertrigger": "5", "failOnDataLoss": "false"})
    assert (source.queue, source.max_messages_per_trigger, source.fail_on_data_loss) == ("q", 5, False)
    with pytest.raises(ValueError, match="pageSize"):
        SourceOptions.parse({"queue": "q", "pageSize": "60000"})
    assert SinkOptions.parse({"queue": "q"}).commit_mode == "sync"
    assert SinkOptions.parse({"queue": "q", "COMMIT": "Pipelined"}).commit_mode == "pipelined"
    with pytest.raises(ValueError, match="commit"):
        SinkOptions.parse({"queue": "q", "commit": "later"})


def test_stage_requests_are_bounded_by_rows_and_by_bytes() -> None:
    one = 1000 + ROW_OVERHEAD_BYTES
    assert rows_that_fit(["a" * 1000] * 10, 4, 10**9) == 4
    assert rows_that_fit(["a" * 1000] * 10, 100, 3 * one) == 3
    assert rows_that_fit(['"' * 500] * 10, 100, 3 * one) == 3  # escaped quotes count twice
    assert rows_that_fit(["é" * 500] * 10, 100, 3 * one) == 3  # UTF-8 bytes, not characters
    assert rows_that_fit(["a" * 10**6], 100, 1024) == 1  # always at least one row
    assert rows_that_fit([None, "1"], 100, 10**6) == 2
