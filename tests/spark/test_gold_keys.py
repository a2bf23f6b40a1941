"""``only_keys``: a gold micro-batch recomputes its touched keys from only the input rows that
can make them, filtered before the gold's joins and aggregations, and gets exactly the rows
a join with the keys gives."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

ORDERS = (
    "order_id STRING, customer_id STRING, status STRING, order_ts TIMESTAMP, region STRING, "
    "total DECIMAL(18,2)"
)
CUSTOMERS = "customer_id STRING, segment STRING, valid_from TIMESTAMP, valid_to TIMESTAMP"


def orders(spark: SparkSession) -> DataFrame:
    at = datetime(2026, 11, 2, 10, 15, 0, 123456)
    return spark.createDataFrame(
        [
            ("o1", "c1", "placed", at, "eu-west", Decimal("10.00")),
            ("o2", "c1", "placed", at.replace(minute=59), "eu-west", Decimal("5.50")),
            ("o3", "c2", "cancelled", at, "eu-west", None),
            ("o4", "c2", "placed", at, "us-east", Decimal("7.00")),
            ("o5", "c1", "placed", at.replace(hour=11), "eu-west", Decimal("1.00")),
            ("o6", "c3", "placed", at.replace(day=3), "us-east", Decimal("2.00")),
        ],
        ORDERS,
    )


def plan_lines(df: DataFrame) -> list[str]:
    return str(df._jdf.queryExecution().optimizedPlan().toString()).splitlines()


def line_of(lines: list[str], *texts: str) -> int:
    """The first line of the plan with one of ``texts``."""
    return next(i for i, line in enumerate(lines) if any(t in line for t in texts))


# A filter on literal values (Spark writes a long list as a set).
IN_LIST = (" IN (", " INSET ")


def rows(df: DataFrame) -> set[tuple[Any, ...]]:
    return {tuple(r) for r in df.collect()}


def test_the_hours_a_change_touches_are_picked_from_silver_before_it_is_aggregated(
    spark: SparkSession,
) -> None:
    from jobs.gold import only_keys
    from pipelines.orders import sales_hourly

    gold_df = sales_hourly({"orders": orders(spark)})
    scope = ("hour_start", "region")
    keys_df = spark.createDataFrame(
        [(datetime(2026, 11, 2, 10), "eu-west"), (datetime(2026, 11, 3, 10), "us-east"),
         (datetime(2026, 11, 2, 10), None)],
        "hour_start TIMESTAMP, region STRING",
    )  # fmt: skip
    recomputed_df = only_keys(gold_df, keys_df, scope)

    # The two keys' rows, all of them (the null key matches nothing, as in a join), and
    # exactly what a join with the keys gives.
    assert rows(recomputed_df) == {
        (datetime(2026, 11, 2, 10), "eu-west", 2, 1, Decimal("15.50"), Decimal("7.75")),
        (datetime(2026, 11, 3, 10), "us-east", 1, 0, Decimal("2.00"), Decimal("2.00")),
    }
    assert rows(recomputed_df) == rows(gold_df.join(keys_df, list(scope), "left_semi"))
    # The keys filter silver's rows below the aggregation (the gold adds a column after it,
    # which a join with the keys does not pass).
    lines = plan_lines(recomputed_df)
    assert line_of(lines, "Aggregate") < line_of(lines, *IN_LIST)
    assert not any("LeftSemi" in line for line in lines)


def test_the_days_a_change_touches_filter_the_orders_before_the_as_of_join(
    spark: SparkSession,
) -> None:
    from jobs.gold import compute, only_keys
    from pipelines.segment_sales import PIPELINE

    gold = PIPELINE.gold
    assert gold is not None
    customers = spark.createDataFrame(
        [
            ("c1", "retail", datetime(2026, 1, 1), datetime(2026, 11, 2, 11)),
            ("c1", "wholesale", datetime(2026, 11, 2, 11), None),
            ("c2", "retail", datetime(2026, 1, 1), None),
        ],
        CUSTOMERS,
    )
    gold_df = compute(gold, {"orders": orders(spark), "customers": customers})
    keys_df = spark.createDataFrame([(date(2026, 11, 2),), (date(2026, 11, 5),)], "order_date DATE")
    recomputed_df = only_keys(gold_df, keys_df, ("order_date",))

    assert rows(recomputed_df) == {
        (date(2026, 11, 2), "retail", 3, Decimal("22.50")),
        (date(2026, 11, 2), "wholesale", 1, Decimal("1.00")),
    }
    assert rows(recomputed_df) == rows(gold_df.join(keys_df, ["order_date"], "left_semi"))
    lines = plan_lines(recomputed_df)
    assert line_of(lines, "Join LeftOuter") < line_of(lines, *IN_LIST)


def test_more_keys_than_it_names_are_joined_with_the_same_rows(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jobs.gold
    from pipelines.orders import sales_hourly

    gold_df = sales_hourly({"orders": orders(spark)})
    keys_df = gold_df.select("hour_start", "region")
    named = jobs.gold.only_keys(gold_df, keys_df, ("hour_start", "region"))
    monkeypatch.setattr(jobs.gold, "LITERAL_KEYS_MAX", 3)
    joined = jobs.gold.only_keys(gold_df, keys_df, ("hour_start", "region"))

    assert any("LeftSemi" in line for line in plan_lines(joined))
    assert rows(joined) == rows(named) == rows(gold_df)
    assert len(rows(gold_df)) == 4


def test_any_text_in_a_key_is_only_a_value(spark: SparkSession) -> None:
    """Keys with quotes, backslashes and SQL in them select their own rows and nothing else."""
    from jobs.gold import only_keys

    texts = ["it's", "back\\slash", "') OR TRUE OR ('", "ünï ✓", "x"]
    gold_df = spark.createDataFrame(
        [(t, i) for i, t in enumerate(texts)] + [("other", 9)], "k STRING, n INT"
    )
    keys_df = spark.createDataFrame([(t,) for t in texts[:4]], "k STRING")
    picked = only_keys(gold_df, keys_df, ("k",))

    assert rows(picked) == {(t, i) for i, t in enumerate(texts[:4])}
    assert any(t in line for line in plan_lines(picked) for t in IN_LIST)
