"""The pure transforms on small DataFrames, compared with chispa: each ``DataFrame ->
DataFrame`` function alone, before any job wires it to a stream."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from chispa import assert_df_equality
from pyspark.sql import SparkSession

from jobs.transforms import (
    StateShape,
    distinct_events,
    filter_not_blank,
    history_of,
    latest_per_key,
    newer_condition,
    with_raw_record,
)
from lakehouse.registry import get_pipeline
from lakehouse.specs import FieldSpec, History, RecordSpec

SHAPE = StateShape(key="k", ordering=("ts", "last_id"))
T = [datetime(2026, 11, 2, h) for h in range(24)]


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
    events_df = spark.createDataFrame(
        [
            ("a", T[8], "e1", 5, "first"),
            ("a", T[9], "e2", 1, "latest"),
            ("a", T[9], "e0", 9, "same time, smaller id"),
            ("b", T[8], "e7", 3, "tie, smaller hash"),
            ("b", T[8], "e7", 4, "tie, greater hash"),
        ],
        schema,
    )
    expected_df = spark.createDataFrame(
        [("a", T[9], "e2", 1, "latest"), ("b", T[8], "e7", 4, "tie, greater hash")], schema
    )
    assert_df_equality(latest_per_key(events_df, SHAPE), expected_df, ignore_row_order=True)
    # The MERGE condition orders the same way: time, then id, then the hash.
    assert newer_condition(SHAPE) == (
        "s.ts > t.ts OR (s.ts = t.ts AND (s.last_id > t.last_id OR "
        "(s.last_id = t.last_id AND (s.last_event_hash > t.last_event_hash))))"
    )


def test_sales_per_hour_and_region_count_cancellations_apart(spark: SparkSession) -> None:
    gold = get_pipeline("orders").gold
    assert gold is not None and gold.function is not None
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
    expected_df = spark.createDataFrame(
        [
            (T[8], "eu", 2, 1, Decimal("15.50"), Decimal("7.75")),
            (T[9], "us", 0, 1, Decimal("0.00"), None),
        ],
        "hour_start TIMESTAMP, region STRING, orders BIGINT, cancelled BIGINT, "
        "revenue DECIMAL(18,2), avg_order_value DECIMAL(18,2)",
    )
    assert_df_equality(
        gold.function({"orders": orders_df}),
        expected_df,
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_column_order=True,
    )


RECORD = RecordSpec(
    fields=(
        *(FieldSpec(name, "id") for name in ("event_id", "k")),
        FieldSpec("op", "enum", allowed=("upsert", "delete")),
        FieldSpec("at", "timestamp"),
        FieldSpec("v", "string", required=False),
    ),
    key="k",
    time="at",
)
HISTORY = History(
    table="silver/h", quarantine="silver/q", changes="silver/c", op="op", tracked=("v",)
)
EVENTS = "event_id STRING, k STRING, op STRING, at TIMESTAMP, v STRING"
VERSIONS = "k STRING, v STRING, valid_from TIMESTAMP, valid_to TIMESTAMP, is_current BOOLEAN"


def test_history_walks_each_key_in_order_of_time_and_event_id(spark: SparkSession) -> None:
    events_df = spark.createDataFrame(
        [
            # a: a version, a no-op, a change, a delete, a new start.
            ("a1", "a", "upsert", T[1], "x"),
            ("a2", "a", "upsert", T[2], "x"),
            ("a3", "a", "upsert", T[3], "y"),
            ("a4", "a", "delete", T[4], None),
            ("a5", "a", "delete", T[5], None),  # deleting nothing changes nothing
            ("a6", "a", "upsert", T[6], "y"),
            # b: two events at one time; the second (by id) wins, the first is no row.
            ("b1", "b", "upsert", T[1], "p"),
            ("b2", "b", "upsert", T[2], "q"),
            ("b3", "b", "upsert", T[2], "r"),
            # c: a delete before anything, then a version with a missing value.
            ("c1", "c", "delete", T[1], None),
            ("c2", "c", "upsert", T[2], None),
        ],
        EVENTS,
    )
    expected_df = spark.createDataFrame(
        [
            ("a", "x", T[1], T[3], False),
            ("a", "y", T[3], T[4], False),
            ("a", "y", T[6], None, True),
            ("b", "p", T[1], T[2], False),
            ("b", "r", T[2], None, True),
            ("c", None, T[2], None, True),
        ],
        VERSIONS,
    )
    versions_df = history_of(events_df, RECORD, HISTORY).drop("started_by_event_id")
    assert_df_equality(versions_df, expected_df, ignore_row_order=True, ignore_nullable=True)


def test_a_late_event_splits_the_version_it_falls_in(spark: SparkSession) -> None:
    on_time = [("e1", "a", "upsert", T[1], "x"), ("e3", "a", "upsert", T[5], "z")]
    late = [("e2", "a", "upsert", T[3], "y")]
    versions_df = history_of(spark.createDataFrame(on_time + late, EVENTS), RECORD, HISTORY)
    expected_df = spark.createDataFrame(
        [
            ("a", "x", T[1], T[3], False),
            ("a", "y", T[3], T[5], False),
            ("a", "z", T[5], None, True),
        ],
        VERSIONS,
    )
    assert_df_equality(
        versions_df.drop("started_by_event_id"),
        expected_df,
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_an_event_id_delivered_twice_is_one_event(spark: SparkSession) -> None:
    rows_df = spark.createDataFrame(
        [("e1", "a", 5), ("e1", "a", 7), ("e2", "a", 1)],
        "event_id STRING, k STRING, event_hash BIGINT",
    )
    expected_df = spark.createDataFrame(
        [("e1", "a", 7), ("e2", "a", 1)], "event_id STRING, k STRING, event_hash BIGINT"
    )
    assert_df_equality(distinct_events(rows_df, RECORD), expected_df, ignore_row_order=True)
