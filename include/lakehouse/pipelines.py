"""The pipelines this project runs, declared as data, and the shared operations table.

``orders`` holds ``../shared/contract.md``: landing JSON lines or the ``orders.events``
topic into ``bronze/orders_events``, validated into ``silver/orders`` (current state per
order) and ``silver/orders_quarantine``, aggregated into ``gold/sales_hourly``.
"""

from __future__ import annotations

from lakehouse.errors import ConfigurationError
from lakehouse.specs import (
    FieldSpec,
    Layer,
    PipelineSpec,
    RecordSpec,
    StreamSpec,
    TableSpec,
    UpsertSpec,
)

# Columns every bronze table has, whatever the source: the record's text exactly as
# delivered, and where it came from. A line that is not valid UTF-8 keeps its bytes.
BRONZE_SCHEMA = (
    "raw_value STRING, raw_bytes BINARY, source STRING, source_file STRING, "
    "source_file_modified_at TIMESTAMP, kafka_topic STRING, kafka_partition INT, "
    "kafka_offset BIGINT, kafka_timestamp TIMESTAMP, kafka_key STRING, "
    "ingested_at TIMESTAMP, ingest_date DATE"
)

# event_ts_hint: the record's event_ts as far as it can be read (null if it cannot), so that
# a reprocess of an event_ts window can replace exactly the quarantine rows of that window.
QUARANTINE_SCHEMA = (
    "raw_value STRING, raw_bytes BINARY, reason STRING, reasons ARRAY<STRING>, "
    "event_id STRING, source STRING, source_file STRING, kafka_topic STRING, "
    "kafka_partition INT, kafka_offset BIGINT, ingested_at TIMESTAMP, quarantined_at TIMESTAMP, "
    "event_ts_hint TIMESTAMP"
)

RUN_LOG = TableSpec(
    name="ops/run_log",
    description="One row per layer run and per maintenance action: what ran and what it did.",
    schema=(
        "pipeline STRING, layer STRING, action STRING, run_id STRING, query_id STRING, "
        "status STRING, started_at TIMESTAMP, ended_at TIMESTAMP, duration_s DOUBLE, "
        "rows_in BIGINT, rows_out BIGINT, rows_quarantined BIGINT, batches INT, "
        "source_start STRING, source_end STRING, spark_master STRING, error STRING, "
        "details STRING"
    ),
)

ORDERS = PipelineSpec(
    name="orders",
    description="Order events into current order state and hourly sales per region.",
    landing="landing/orders",
    kafka_topics=("orders.events",),
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
        )
    ),
    upsert=UpsertSpec(
        key="order_id",
        order_by=("event_ts", "event_id"),
        rename={"event_type": "status", "event_id": "last_event_id", "event_ts": "last_event_ts"},
    ),
    tables=(
        TableSpec(
            name="bronze/orders_events",
            description="Every delivered record, valid or not, exactly once, as raw text.",
            schema=BRONZE_SCHEMA,
            partition_by=("ingest_date",),
            allow_full_refresh=False,
        ),
        TableSpec(
            name="silver/orders",
            description="Current state per order from its winning event.",
            schema=(
                "order_id STRING NOT NULL, customer_id STRING, status STRING, "
                "order_ts TIMESTAMP, region STRING, product_category STRING, "
                "total DECIMAL(18,2), currency STRING, items_count BIGINT, "
                "last_event_id STRING, last_event_ts TIMESTAMP, last_event_hash BIGINT"
            ),
            zorder_by=("order_id",),
            # Gold recomputes exactly the hours that silver's changes touch.
            properties={"delta.enableChangeDataFeed": "true"},
        ),
        TableSpec(
            name="silver/orders_quarantine",
            description="Every invalid record with the rule it broke.",
            schema=QUARANTINE_SCHEMA,
        ),
        TableSpec(
            name="gold/sales_hourly",
            description="Orders, cancellations and revenue per hour of order_ts and region.",
            schema=(
                "hour_start TIMESTAMP NOT NULL, region STRING NOT NULL, orders BIGINT, "
                "cancelled BIGINT, revenue DECIMAL(18,2), avg_order_value DECIMAL(18,2)"
            ),
        ),
    ),
    streams=(
        StreamSpec(layer=Layer.BRONZE, targets=("bronze/orders_events",)),
        StreamSpec(
            layer=Layer.SILVER,
            targets=("silver/orders", "silver/orders_quarantine"),
            sources=("bronze/orders_events",),
        ),
        StreamSpec(
            layer=Layer.GOLD,
            targets=("gold/sales_hourly",),
            sources=("silver/orders",),
            read_change_feed=True,
        ),
    ),
    gold_transform="orders_sales_hourly",
    schedule="0 */3 * * *",
)

PIPELINES: dict[str, PipelineSpec] = {ORDERS.name: ORDERS}


def get_pipeline(name: str) -> PipelineSpec:
    try:
        return PIPELINES[name]
    except KeyError:
        raise ConfigurationError(
            f"unknown pipeline {name!r}; known: {', '.join(sorted(PIPELINES))}."
        ) from None
