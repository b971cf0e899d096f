"""The benchmark's Spark kind (``queenpy bench --only 'spark-*'``) on the session broker with this tier's
SparkSession: a small queue → queue copy and a batch read of the same backlog, measured and checked as the
bench does (PostgreSQL's counts of the source and the target), at sizes a test can afford."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import pytest

from queenpy.bench.broker import Broker
from queenpy.bench.catalog import Options, Scenario
from queenpy.bench.core import Context
from queenpy.bench.kinds import KINDS
from queenpy.bench.kinds import spark as spark_kind
from queenpy.bench.postgres import ExternalPostgres, Sql

from helpers import unique

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture
def context(spark: SparkSession, broker: Any, tmp_path: Path) -> Iterator[Context]:
    """The bench's context on the session broker (its process and URL), its SparkSession the tier's own."""
    sql = Sql(broker.database_url)
    under_test = cast(Broker, SimpleNamespace(url=broker.url, pid=broker.process.pid))
    context = Context(
        ExternalPostgres(broker.database_url),
        under_test,
        sql,
        tmp_path,
        Options(seconds=1.0, warmup=0.0),
        lambda _: None,
    )
    context.queue_prefix = unique("bench") + "-"
    state = context.state("spark", spark_kind._Spark)
    state.session, state.start_s = spark, 0.0
    yield context
    context.close()
    sql.close()


def test_the_spark_kind_copies_and_reads_a_backlog_exactly(context: Context) -> None:
    spark = KINDS["spark"]
    # a backlog of 4 partitions: max(3 x 500, 1000 msg/s x 1 s) rounded to whole micro-batches, plus one more
    copy = spark.run(
        context,
        Scenario(
            "copy",
            "spark",
            "insert-100-1KB",
            "",
            payload_bytes=1024,
            partitions=4,
            batch=500,
            mode="sync",
            initial_rate=1000,
        ),
        1,
    )
    read = spark.run(
        context,
        Scenario(
            "read",
            "spark",
            "insert-100-1KB",
            "",
            payload_bytes=1024,
            partitions=4,
            mode="read",
            initial_rate=1000,
        ),
        1,
    )
    assert copy["problems"] == [] and read["problems"] == []
    truth = copy["ground_truth"]
    assert truth["source_messages"] >= 2000 and truth["target_messages"] == truth["source_messages"]
    assert (
        truth["target_distinct_transaction_ids"] == truth["source_messages"]
        and truth["staging_rows_left"] == 0
    )
    assert (
        copy["spark"]["batches"] >= 4 and copy["messages"] > 0 and copy["spark"]["whole_query_msg_per_s"] > 0
    )
    assert read["ground_truth"]["rows_counted_by_spark"] == read["ground_truth"]["source_messages"]
    assert read["ground_truth"]["source_messages"] == truth["source_messages"]  # the same backlog
    assert read["messages"] == truth["source_messages"] and read["cpu_us_per_msg"]["spark"] is not None
    summary = spark.summarize([copy])["spark"]
    assert summary["max_per_trigger"] == 500 and summary["batches"] == copy["spark"]["batches"]


def test_the_spark_kind_copies_exactly_with_direct_commits(context: Context) -> None:
    """Rows land while a direct micro-batch runs: its first batch ends at the batch record, and no task is
    left uncommitted."""
    direct = KINDS["spark"].run(
        context,
        Scenario(
            "direct",
            "spark",
            "insert-100-1KB",
            "",
            payload_bytes=1024,
            partitions=4,
            batch=500,
            mode="direct",
            initial_rate=1000,
        ),
        1,
    )
    assert direct["problems"] == []
    truth = direct["ground_truth"]
    assert truth["target_messages"] == truth["source_messages"] >= 2000
    assert truth["direct_tasks_left"] == 0 and truth["staging_rows_left"] == 0
    assert truth["sink_pushed"] == truth["target_messages"]
    assert direct["spark"]["commit"] == "direct" and direct["spark"]["batches"] >= 4
    assert 0 < direct["spark"]["first_batch_messages"] < truth["source_messages"]
