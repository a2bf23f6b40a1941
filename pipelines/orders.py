"""Orders: order events into current order state and hourly sales per region.

Holds ``../shared/contract.md``: JSON Lines in ``landing/orders/`` or the Kafka topic
``orders.events`` into ``bronze/orders_events``; validated into ``silver/orders`` (the state of
each order from its winning event, the greatest ``(event_ts, event_id)``) and
``silver/orders_quarantine``; aggregated into ``gold/sales_hourly`` per hour of ``order_ts``
and region.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lakehouse.specs import (
    FieldSpec,
    Gold,
    GoldInput,
    LatestState,
    PipelineSpec,
    RecordSpec,
    Source,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def sales_hourly(inputs: Mapping[str, DataFrame]) -> DataFrame:
    """Orders (not cancelled), cancellations and revenue per hour of ``order_ts`` and region;
    the average order value is null for an hour of cancelled orders only."""
    from pyspark.sql import functions as F

    orders_df = inputs["orders"].where(F.col("order_ts").isNotNull() & F.col("region").isNotNull())
    live = F.col("status") != F.lit("cancelled")
    hourly_df = orders_df.groupBy(
        F.date_trunc("hour", F.col("order_ts")).alias("hour_start"), "region"
    ).agg(
        F.count(F.when(live, 1)).alias("orders"),
        F.count(F.when(~live, 1)).alias("cancelled"),
        F.coalesce(F.sum(F.when(live, F.col("total"))), F.lit(0))
        .cast("decimal(18,2)")
        .alias("revenue"),
    )
    return hourly_df.withColumn(
        "avg_order_value",
        F.when(F.col("orders") > 0, F.round(F.col("revenue") / F.col("orders"), 2)).cast(
            "decimal(18,2)"
        ),
    )


PIPELINE = PipelineSpec(
    name="orders",
    description="Order events into current order state and hourly sales per region.",
    source=Source(
        landing="landing/orders", bronze="bronze/orders_events", kafka_topics=("orders.events",)
    ),
    record=RecordSpec(
        fields=(
            FieldSpec("event_id", "id"),
            FieldSpec("order_id", "id"),
            FieldSpec("customer_id", "id"),
            FieldSpec("event_type", "enum", allowed=("placed", "updated", "cancelled")),
            FieldSpec("order_ts", "timestamp"),
            FieldSpec("event_ts", "timestamp"),
            FieldSpec("region", "text"),
            FieldSpec(
                "total",
                "decimal",
                optional_when=("event_type", ("cancelled",)),
                minimum="0",
                maximum="1000000000000",
                precision=18,
                scale=2,
            ),
            FieldSpec("items_count", "count", required=False),
            FieldSpec("currency", "string", required=False),
            FieldSpec("product_category", "string", required=False),
        ),
        key="order_id",
        time="event_ts",
    ),
    silver=LatestState(
        table="silver/orders",
        quarantine="silver/orders_quarantine",
        rename={"event_type": "status", "event_id": "last_event_id", "event_ts": "last_event_ts"},
    ),
    gold=Gold(
        table="gold/sales_hourly",
        description="Orders, cancellations and revenue per hour of order_ts and region.",
        schema=(
            "hour_start TIMESTAMP NOT NULL, region STRING NOT NULL, orders BIGINT, "
            "cancelled BIGINT, revenue DECIMAL(18,2), avg_order_value DECIMAL(18,2)"
        ),
        key=("hour_start", "region"),
        function=sales_hourly,
        inputs=(
            GoldInput(
                "orders",
                "silver/orders",
                # An order that moves to another hour or region changes both (the change
                # feed has the row before and after).
                touches=(
                    "SELECT DISTINCT date_trunc('hour', order_ts) AS hour_start, region "
                    "FROM {changes} WHERE order_ts IS NOT NULL AND region IS NOT NULL"
                ),
            ),
        ),
    ),
    schedule="0 */3 * * *",
)
