"""The pure transforms on small DataFrames, compared with chispa: each ``DataFrame ->
DataFrame`` function alone, before any job wires it to a stream."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from chispa import assert_df_equality
from pyspark.sql import SparkSession

from jobs.transforms import (
    filter_not_blank,
    latest_per_key,
    newer_condition,
    orders_sales_hourly,
    with_hour_region,
    with_raw_record,
)
from lakehouse.specs import UpsertSpec

UPSERT = UpsertSpec(key="k", order_by=("ts", "id"), rename={"id": "last_id"})


def test_raw_records_keep_their_text_and_bad_bytes(spark: SparkSession) -> None:
    lines_df = spark.createDataFrame(
        [(b'{"a":1}\r',), (b"ok\xff",), (b"  ",), (b"x\ry",)], "value BINARY"
    )
    records_df = filter_not_blank(with_raw_record(lines_df)).select("raw_value", "raw_bytes")
    expected_df = spark.createDataFrame(
        [('{"a":1}', None), ("ok\ufffd", bytearray(b"ok\xff")), ("x\ry", None)],
        "raw_value STRING, raw_bytes BINARY",
    )
    assert_df_equality(records_df, expected_df, ignore_row_order=True)


def test_the_greatest_ordering_tuple_wins_per_key(spark: SparkSession) -> None:
    schema = "k STRING, ts TIMESTAMP, last_id STRING, last_event_hash BIGINT, v STRING"
    t1, t2 = datetime(2026, 11, 2, 8), datetime(2026, 11, 2, 9)
    events_df = spark.createDataFrame(
        [
            ("a", t1, "e1", 5, "first"),
            ("a", t2, "e2", 1, "latest"),
            ("a", t2, "e0", 9, "same time, smaller id"),
            ("b", t1, "e7", 3, "tie, smaller hash"),
            ("b", t1, "e7", 4, "tie, greater hash"),
        ],
        schema,
    )
    expected_df = spark.createDataFrame(
        [("a", t2, "e2", 1, "latest"), ("b", t1, "e7", 4, "tie, greater hash")], schema
    )
    assert_df_equality(latest_per_key(events_df, UPSERT), expected_df, ignore_row_order=True)
    # The MERGE condition orders the same way: time, then id, then the hash.
    assert newer_condition(UPSERT) == (
        "s.ts > t.ts OR (s.ts = t.ts AND (s.last_id > t.last_id OR "
        "(s.last_id = t.last_id AND (s.last_event_hash > t.last_event_hash))))"
    )


def test_sales_per_hour_and_region_count_cancellations_apart(spark: SparkSession) -> None:
    orders_df = spark.createDataFrame(
        [
            ("o1", "placed", datetime(2026, 11, 2, 8, 5), "eu", Decimal("10.00")),
            ("o2", "updated", datetime(2026, 11, 2, 8, 55), "eu", Decimal("5.50")),
            ("o3", "cancelled", datetime(2026, 11, 2, 8, 30), "eu", None),
            ("o4", "cancelled", datetime(2026, 11, 2, 9, 0), "us", Decimal("7.00")),
            ("o5", "placed", None, "us", Decimal("1.00")),  # no time: no hour
        ],
        "order_id STRING, status STRING, order_ts TIMESTAMP, region STRING, total DECIMAL(18,2)",
    )
    hourly_df = orders_sales_hourly(with_hour_region(orders_df))
    expected_df = spark.createDataFrame(
        [
            (datetime(2026, 11, 2, 8), "eu", 2, 1, Decimal("15.50"), Decimal("7.75")),
            (datetime(2026, 11, 2, 9), "us", 0, 1, Decimal("0.00"), None),
        ],
        "hour_start TIMESTAMP, region STRING, orders BIGINT, cancelled BIGINT, "
        "revenue DECIMAL(18,2), avg_order_value DECIMAL(18,2)",
    )
    assert_df_equality(
        hourly_df,
        expected_df,
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_column_order=True,
    )
