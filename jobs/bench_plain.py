"""The baseline of issue 11's first comparison: the orders pipeline's four tables written by a
plain PySpark batch job, as one would write it without this project.

One pass over the landing files: bronze (each line's text and file), the records parsed with a
schema (``from_json`` with string fields: it cannot tell ``12`` from ``"12"``, which the
pipeline's validation does), the contract's rules as column expressions, the invalid records
to the quarantine with the first rule they break, the latest event per order to silver and the
hourly sales to gold (the pipeline's own ``sales_hourly``), each table a Delta overwrite. No
checkpoint, no exactly-once, no run log: what the pipeline costs beyond this is what those
cost.

    python -m jobs.bench_plain <landing folder> <output folder>
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pyspark.sql import Window
from pyspark.sql import functions as F

RECORD = (
    "event_id STRING, order_id STRING, customer_id STRING, event_type STRING, "
    "order_ts STRING, event_ts STRING, region STRING, total STRING, items_count STRING, "
    "currency STRING, product_category STRING"
)
TIMESTAMP = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$"


def main(argv: Sequence[str] | None = None) -> int:
    landing, out = sys.argv[1:3] if argv is None else argv
    from jobs.session import build_spark
    from lakehouse.settings import Settings
    from pipelines.orders import sales_hourly

    spark = build_spark("plain-batch", Settings.from_env())
    lines = spark.read.text(landing).where(F.trim("value") != "")
    bronze = lines.select(
        F.col("value").alias("raw_value"),
        F.col("_metadata.file_path").alias("source_file"),
        F.current_timestamp().alias("ingested_at"),
    )
    bronze.write.format("delta").mode("overwrite").save(f"{out}/bronze/orders_events")

    parsed = spark.read.format("delta").load(f"{out}/bronze/orders_events")
    r = F.from_json("raw_value", RECORD).alias("r")
    records = parsed.select("raw_value", r)
    order_ts = F.try_to_timestamp(F.col("r.order_ts"))
    event_ts = F.try_to_timestamp(F.col("r.event_ts"))
    total = F.col("r.total").try_cast("decimal(18,2)")
    rules = [
        ("not_json", F.col("r").isNull()),
        *[
            (f"missing:{c}", F.coalesce(F.col(f"r.{c}"), F.lit("")) == "")
            for c in ("event_id", "order_id", "customer_id", "region")
        ],
        ("bad_event_type", ~F.col("r.event_type").isin("placed", "updated", "cancelled")),
        ("bad_order_ts", ~F.col("r.order_ts").rlike(TIMESTAMP) | order_ts.isNull()),
        ("bad_event_ts", ~F.col("r.event_ts").rlike(TIMESTAMP) | event_ts.isNull()),
        (
            "bad_total",
            F.when(F.col("r.total").isNull(), F.col("r.event_type") != "cancelled").otherwise(
                total.isNull() | (total < 0) | (total > 10**12)
            ),
        ),
        (
            "bad_items_count",
            F.col("r.items_count").isNotNull() & ~F.col("r.items_count").rlike(r"^\d+$"),
        ),
    ]
    reason = F.coalesce(
        *[F.when(F.coalesce(test, F.lit(True)), F.lit(name)) for name, test in rules]
    )
    judged = records.select("*", reason.alias("reason")).cache()
    judged.where(F.col("reason").isNotNull()).select(
        "raw_value", "reason", F.current_timestamp().alias("quarantined_at")
    ).write.format("delta").mode("overwrite").save(f"{out}/silver/orders_quarantine")

    valid = judged.where(F.col("reason").isNull()).select(
        F.col("r.order_id").alias("order_id"),
        F.col("r.customer_id").alias("customer_id"),
        F.col("r.event_type").alias("status"),
        order_ts.alias("order_ts"),
        F.col("r.region").alias("region"),
        F.col("r.product_category").alias("product_category"),
        total.alias("total"),
        F.col("r.currency").alias("currency"),
        F.col("r.items_count").try_cast("bigint").alias("items_count"),
        F.col("r.event_id").alias("last_event_id"),
        event_ts.alias("last_event_ts"),
    )
    latest = Window.partitionBy("order_id").orderBy(
        F.desc("last_event_ts"), F.desc("last_event_id")
    )
    silver = valid.withColumn("_n", F.row_number().over(latest)).where("_n = 1").drop("_n")
    silver.write.format("delta").mode("overwrite").save(f"{out}/silver/orders")

    # The hours as the pipeline declares them: the same aggregate a hand-written job carries.
    orders = spark.read.format("delta").load(f"{out}/silver/orders")
    gold = sales_hourly({"orders": orders})
    gold.write.format("delta").mode("overwrite").save(f"{out}/gold/sales_hourly")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
