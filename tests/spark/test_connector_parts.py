"""Connector pieces without a SparkSession: gap detection of range reads, derived transaction ids, sink rows.
(In the spark tier because they import pyarrow and pyspark.)"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from queenpy.spark.offsets import OffsetRange, plan_tasks
from queenpy.spark.options import SinkOptions, SourceOptions
from queenpy.spark.reader import DataLossError, QueenInputPartition, read_range
from queenpy.spark.schema import arrow_schema
from queenpy.spark.writer import (
    ROW_OVERHEAD_BYTES,
    RowEncoder,
    check_sink_schema,
    chunk_bounds,
    derive_prefix,
    first_non_json,
    plan_commit,
)

pytestmark = pytest.mark.spark

PID = "3f1c0a52-0000-4000-8000-000000000001"


class PagedBroker:
    """Answers ``read()`` from a fixed list of offsets of one partition, as the broker would (ranges,
    order)."""

    def __init__(self, offsets: list[int]) -> None:
        self.offsets = offsets
        self.calls: list[list[tuple[str, int, int]]] = []

    def read(
        self, ranges: list[tuple[str, int, int]], fields: list[str] | None = None
    ) -> list[dict[str, Any]]:
        self.calls.append(list(ranges))
        self.fields = fields
        blocks = []
        for index, (partition_id, after, upto) in enumerate(ranges):
            chosen = [o for o in self.offsets if after < o <= upto]
            blocks.append(
                {
                    "index": index,
                    "partitionId": partition_id,
                    "partition": "p",
                    "queue": "q",
                    "offsets": chosen,
                    "transactionIds": [f"t-{o}" for o in chosen],
                    "data": [json.dumps({"o": o}) for o in chosen],
                    "createdAtUs": [1_795_000_000_000_000 + o for o in chosen],
                    "traceIds": [None] * len(chosen),
                    "producerSubs": [None] * len(chosen),
                }
            )
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


def test_a_task_asks_the_broker_for_the_fields_of_its_columns_only() -> None:
    broker = PagedBroker([1, 2, 3])
    part = QueenInputPartition([(PID, 0, 3)])
    copy = ("data", "partition", "partitionId", "offset", "traceId")
    batches = list(read_range(broker, part, page_size=5, fail_on_data_loss=True, columns=copy))  # type: ignore[arg-type]
    assert broker.fields == ["data", "traceIds"] and batches[0].schema.names == list(copy)
    list(read_range(broker, part, page_size=5, fail_on_data_loss=True))  # type: ignore[arg-type]
    assert broker.fields is None  # every column: every field


def test_a_task_reads_several_partitions_per_request_in_order() -> None:
    broker = PagedBroker(list(range(1, 21)))
    other = "3f1c0a52-0000-4000-8000-000000000002"
    part = QueenInputPartition([(PID, 0, 3), (other, 5, 8), (PID, 3, 4)])
    batches = list(read_range(broker, part, page_size=5, fail_on_data_loss=True))  # type: ignore[arg-type]
    assert broker.calls == [[(PID, 0, 3), (other, 5, 7)], [(other, 7, 8), (PID, 3, 4)]]
    rows = [(r["partitionId"], r["offset"], r["data"]) for b in batches for r in b.to_pylist()]
    assert rows == [
        (PID, 1, '{"o": 1}'),
        (PID, 2, '{"o": 2}'),
        (PID, 3, '{"o": 3}'),
        (other, 6, '{"o": 6}'),
        (other, 7, '{"o": 7}'),
        (other, 8, '{"o": 8}'),
        (PID, 4, '{"o": 4}'),
    ]


@pytest.mark.parametrize(
    "offsets, missing",
    [([1, 2, 3, 5, 6], "4"), ([1, 2, 3], "4"), ([3, 4, 5, 6], "1..2")],  # the first page (0, 4] fails
)
def test_gaps_fail_the_read_or_are_skipped(offsets: list[int], missing: str) -> None:
    with pytest.raises(DataLossError, match=f"offsets {missing} of queue 'q'"):
        offsets_read(PagedBroker(offsets), 0, 6, fail=True)
    assert offsets_read(PagedBroker(offsets), 0, 6, fail=False) == offsets


def test_derived_transaction_id_prefixes_are_a_pure_function() -> None:
    a = derive_prefix("query-1", 3, "src:p")
    assert a == derive_prefix("query-1", 3, "src:p")
    assert a.startswith("spark-") and a.endswith("-") and len(a) == 31
    others = {
        derive_prefix("query-1", 4, "src:p"),
        derive_prefix("query-2", 3, "src:p"),
        derive_prefix("query-1", 3, "src:q"),
    }
    assert len({a, *others}) == 4


def rows(**columns: list[Any]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns)


def test_sink_rows_become_request_columns() -> None:
    options = SinkOptions.parse({"queue": "out"})
    batch = rows(
        data=[json.dumps({"a": 1}), "[1, 2]", None],
        partition=["p1", None, "p2"],
        partitionId=[PID, PID, PID],
        offset=[5, 5, 6],
        traceId=[None, "0b9f6e2e-0000-4000-8000-00000000000a", None],
    )
    first = RowEncoder(options, "q", 2, task=0, identity="source").encode(batch)
    staged = first.staging_columns(0, 3)
    assert staged["data"] == ['{"a": 1}', "[1, 2]", None]  # JSON text passes through untouched
    assert staged["partitions"] == ["p1", None, "p2"]
    assert staged["traceIds"] == [None, "0b9f6e2e-0000-4000-8000-00000000000a", None]
    # two output rows of one input message get different ids; a replay, in any task, gets the same ids
    ids = staged["transactionIds"]
    assert len(set(ids)) == 3
    prefix = derive_prefix("q", 2, f"src:{PID}")
    assert ids == [prefix + "5", prefix + "5.1", prefix + "6"]
    assert (
        RowEncoder(options, "q", 2, task=1, identity="source")
        .encode(batch)
        .staging_columns(0, 3)["transactionIds"]
        == ids
    )
    assert (
        RowEncoder(options, "q", 3, task=0, identity="source")
        .encode(batch)
        .staging_columns(0, 3)["transactionIds"]
        != ids
    )
    pushed, payloads = first.push_columns(1, 3)
    assert pushed["partitions"] == ["Default", "p2"] and list(pushed["partitionIndexes"]) == [0, 1]
    assert pushed["transactionIds"] == ids[1:]
    assert list(pushed["dataBytes"]) == [6, -1] and bytes(payloads) == b"[1, 2]"  # the column's own bytes
    whole, everything = first.push_columns(0, 3)
    assert list(whole["dataBytes"]) == [8, 6, -1] and bytes(everything) == b'{"a": 1}[1, 2]'
    structs = pa.RecordBatch.from_pydict({"data": [{"a": 1, "b": [2]}]})
    encoded = RowEncoder(options, "q", 0, 0, identity="position").encode(structs)
    assert encoded.staging_columns(0, 1)["data"] == ['{"a":1,"b":[2]}']


def test_source_identities_continue_across_record_batches_and_must_be_adjacent() -> None:
    options = SinkOptions.parse({"queue": "out"})
    other = "3f1c0a52-0000-4000-8000-000000000002"
    encoder = RowEncoder(options, "q", 0, task=0, identity="source")

    def ids(pids: list[str], offsets: list[int]) -> list[str]:
        batch = rows(data=["1"] * len(offsets), partitionId=pids, offset=offsets)
        return list(encoder.encode(batch).staging_columns(0, len(offsets))["transactionIds"])

    p, o = derive_prefix("q", 0, f"src:{PID}"), derive_prefix("q", 0, f"src:{other}")
    assert ids([PID, PID, other], [1, 2, 7]) == [p + "1", p + "2", o + "7"]
    # an exploded message split over two record batches keeps counting
    assert ids([other, other, PID], [7, 7, 3]) == [o + "7.1", o + "7.2", p + "3"]
    with pytest.raises(ValueError, match="not adjacent"):
        ids([PID], [2])  # offset 2 of PID came before, with other rows in between
    with pytest.raises(ValueError, match="not adjacent"):
        RowEncoder(options, "q", 0, 0, identity="source").encode(
            rows(data=["1"] * 3, partitionId=[PID] * 3, offset=[4, 5, 4])
        )
    shuffled = RowEncoder(options, "q", 0, 0, identity="source").encode(
        rows(data=["1"] * 3, partitionId=[PID] * 3, offset=[9, 4, 6])
    )  # any order, each message once
    assert shuffled.staging_columns(0, 3)["transactionIds"] == [p + "9", p + "4", p + "6"]
    with pytest.raises(ValueError, match="no partitionId or offset"):
        RowEncoder(options, "q", 0, 0, identity="source").encode(
            rows(data=["1"], partitionId=[None], offset=[4])
        )


def test_id_columns_and_position_identities() -> None:
    options = SinkOptions.parse({"queue": "out", "idColumns": "window, key"})
    batch = rows(data=["1", "2", "3"], window=["w1", "w1", "w2"], key=["a", "b", "a"])
    first = RowEncoder(options, "q", 4, 0, identity="columns").encode(batch).staging_columns(0, 3)
    again = (
        RowEncoder(options, "q", 4, 1, identity="columns")
        .encode(rows(data=["3", "1", "2"], window=["w2", "w1", "w1"], key=["a", "a", "b"]))
        .staging_columns(0, 3)
    )
    assert len(set(first["transactionIds"])) == 3
    assert sorted(again["transactionIds"]) == sorted(first["transactionIds"])  # the same rows, in any order
    assert again["transactionIds"][0] == first["transactionIds"][2]
    staged = RowEncoder(SinkOptions.parse({"queue": "out"}), "q", 4, 2, identity="position")
    one = staged.encode(rows(data=["1", "2"])).staging_columns(0, 2)["transactionIds"]
    two = staged.encode(rows(data=["3"])).staging_columns(0, 1)["transactionIds"]
    prefix = derive_prefix("q", 4, "task:2")
    assert one + two == [prefix + "0", prefix + "1", prefix + "2"]


def test_commit_plan_is_direct_when_rows_have_a_stable_identity() -> None:
    def plan(names: list[str], **options: str) -> tuple[str, str, bool]:
        result = plan_commit(names, SinkOptions.parse({"queue": "q", **options}))
        return result.mode, result.identity, result.fallback is not None

    assert plan(["data", "partitionId", "offset"]) == ("direct", "source", False)
    assert plan(["data", "window"], idColumns="window") == ("direct", "columns", False)
    assert plan(["data", "id"], transactionIdColumn="id") == ("direct", "given", False)
    assert plan(["data", "partition"]) == ("sync", "position", True)  # the fallback, with its reason
    assert plan(["data", "partitionId", "offset"], commit="staged") == ("sync", "position", False)
    assert plan(["data", "partitionId", "offset"], commit="pipelined") == ("pipelined", "position", False)


def test_sink_options_and_schema_checks() -> None:
    with pytest.raises(ValueError, match='option\\("queue"'):
        SinkOptions.parse({})
    with pytest.raises(ValueError, match="data"):
        check_sink_schema(["value"], SinkOptions.parse({"queue": "q"}))
    with pytest.raises(ValueError, match="key"):
        check_sink_schema(["data"], SinkOptions.parse({"queue": "q", "partitionColumn": "key"}))
    with pytest.raises(ValueError, match="window"):
        check_sink_schema(["data"], SinkOptions.parse({"queue": "q", "idColumns": "window"}))
    constant = SinkOptions.parse({"queue": "q", "partition": "all", "partitionColumn": "key"})
    check_sink_schema(["data"], constant)
    encoded = RowEncoder(constant, "q", 0, 0, identity="position").encode(rows(data=["1"]))
    assert encoded.staging_columns(0, 1)["partitions"] == ["all"]
    assert first_non_json(["1", None, '{"a": 2}', "{oops", "nope"]) is not None
    assert first_non_json(["1", None, '{"a": 2}', "{oops", "nope"])[0] == 3  # type: ignore[index]
    assert first_non_json(["1", None, "[]"]) is None
    source = SourceOptions.parse({"QUEUE": "q", "maxmessagespertrigger": "5", "failOnDataLoss": "false"})
    assert (source.queue, source.max_messages_per_trigger, source.fail_on_data_loss) == ("q", 5, False)
    with pytest.raises(ValueError, match="pageSize"):
        SourceOptions.parse({"queue": "q", "pageSize": "60000"})
    assert SinkOptions.parse({"queue": "q"}).commit_mode == "direct"
    assert SinkOptions.parse({"queue": "q", "commit": "staged"}).commit_mode == "sync"
    assert SinkOptions.parse({"queue": "q", "COMMIT": "Pipelined"}).commit_mode == "pipelined"
    with pytest.raises(ValueError, match="commit"):
        SinkOptions.parse({"queue": "q", "commit": "later"})
    with pytest.raises(ValueError, match="staleReplay"):
        SinkOptions.parse({"queue": "q", "staleReplay": "maybe"})


def test_requests_are_bounded_by_rows_and_by_bytes() -> None:
    one = 1000 + ROW_OVERHEAD_BYTES

    def sizes(texts: list[str | None]) -> Any:
        return (
            RowEncoder(SinkOptions.parse({"queue": "q"}), "q", 0, 0, "position")
            .encode(rows(data=texts))
            .sizes
        )

    assert chunk_bounds(sizes(["a" * 1000] * 10), 4, 10**9) == [(0, 4), (4, 8), (8, 10)]
    assert chunk_bounds(sizes(["a" * 1000] * 7), 100, 3 * one) == [(0, 3), (3, 6), (6, 7)]
    assert chunk_bounds(sizes(["é" * 500] * 4), 100, 3 * one) == [
        (0, 3),
        (3, 4),
    ]  # UTF-8 bytes, not characters
    assert chunk_bounds(sizes(["a" * 10**6, "b"]), 100, 1024) == [(0, 1), (1, 2)]  # at least one row each
    assert chunk_bounds(sizes([None, "1"]), 100, 10**6) == [(0, 2)]


def test_each_partition_is_read_by_one_task_in_offset_order() -> None:
    ranges = [
        OffsetRange("a", 0, 100),
        OffsetRange("b", 0, 10),
        OffsetRange("c", 5, 65),
        OffsetRange("a", 100, 130),
    ]
    tasks = plan_tasks(ranges, 2)
    assert [[(r.partition_id, r.after, r.upto) for r in task] for task in tasks] == [
        [("a", 0, 100), ("a", 100, 130)],
        [("b", 0, 10), ("c", 5, 65)],
    ]
    assert plan_tasks(ranges, 8) == [
        [ranges[0], ranges[3]],
        [ranges[1]],
        [ranges[2]],
    ]  # no more tasks than partitions
    assert plan_tasks([OffsetRange("a", 3, 3)], 2) == []
    assert plan_tasks(ranges, 2) == tasks  # deterministic: a replayed batch reads the same tasks


def test_binary_blocks_become_the_same_arrow_batch_as_json_blocks() -> None:
    from queenpy.spark.schema import blocks_to_arrow

    texts = [['{"a": 1}', '"é"'], [], ["[1, 2, 3]"]]
    blob = memoryview("".join(t for block in texts for t in block).encode())
    common = [
        {
            "partitionId": f"{PID[:-1]}{i}",
            "partition": f"p{i}",
            "queue": "q",
            "offsets": list(range(len(t))),
            "transactionIds": [f"t{j}" for j in range(len(t))],
            "createdAtUs": [1_795_000_000_000_000] * len(t),
            "traceIds": [None] * len(t),
            "producerSubs": ["sub"] * len(t),
        }
        for i, t in enumerate(texts)
    ]
    as_json = blocks_to_arrow([{**c, "data": t} for c, t in zip(common, texts, strict=True)])
    as_bytes = blocks_to_arrow(
        [
            {**c, "dataBytes": [len(x.encode()) for x in t], "blob": blob}
            for c, t in zip(common, texts, strict=True)
        ]
    )
    assert as_bytes.schema == as_json.schema == arrow_schema()
    assert as_bytes.to_pylist() == as_json.to_pylist()
    assert [r["data"] for r in as_bytes.to_pylist()] == ['{"a": 1}', '"é"', "[1, 2, 3]"]
    assert [r["partition"] for r in as_bytes.to_pylist()] == ["p0", "p0", "p2"]


def test_a_given_schema_selects_columns_and_a_bad_one_is_refused() -> None:
    from queenpy.spark.schema import blocks_to_arrow, columns_of

    assert columns_of([("offset", "bigint"), ("data", "string")]) == ("offset", "data")
    for fields, error in (
        ([("payload", "string")], "no column 'payload'"),
        ([("offset", "string")], "'offset' of the queen source is BIGINT, not STRING"),
        ([("data", "string"), ("data", "string")], "named twice"),
        ([], "names no column"),
    ):
        with pytest.raises(ValueError, match=error):
            columns_of(fields)
    blocks = PagedBroker([1, 2, 3]).read([(PID, 0, 3)])
    whole = blocks_to_arrow(blocks)
    some = blocks_to_arrow(blocks, ("offset", "partitionId", "data"))
    assert some.schema == arrow_schema(("offset", "partitionId", "data"))
    assert some.to_pydict() == {name: whole.column(name).to_pylist() for name in some.schema.names}
