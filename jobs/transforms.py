"""Pure ``DataFrame -> DataFrame`` transforms of the medallion layers (no I/O here)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakehouse.specs import RecordSpec, UpsertSpec

# ---------------------------------------------------------------------------------- bronze


def with_raw_record(
    lines_df: DataFrame, value_col: str = "value", *, strip_line_end: bool = True
) -> DataFrame:
    """Turn raw lines into records: strip the ``\\r`` of ``\\r\\n``, keep invalid UTF-8 bytes.

    ``raw_value`` is always valid UTF-8 (invalid bytes become U+FFFD) so that every Delta
    reader can open the table; ``raw_bytes`` keeps the original bytes of such a line. The
    work happens on bytes: a string function would replace invalid bytes before we see them.
    ``strip_line_end=False`` keeps a final ``\\r``: a Kafka message is framed by the broker,
    so every byte of its value is data. A null value stays null in both columns.
    """
    line = F.col(value_col).cast("binary")
    if strip_line_end:
        ends_with_cr = F.substring(line, -1, 1) == F.unhex(F.lit("0D"))
        line = F.when(
            ends_with_cr, F.substring(line, F.lit(1), F.octet_length(line) - 1)
        ).otherwise(line)
    valid = F.is_valid_utf8(F.col(value_col))
    return lines_df.select(
        "*",
        F.make_valid_utf8(line.cast("string")).alias("raw_value"),
        F.when(~valid, line).alias("raw_bytes"),
    )


def with_kafka_lineage(records_df: DataFrame) -> DataFrame:
    """Kafka records (Spark's Kafka source columns plus ``with_raw_record``) in bronze's
    lineage columns. The key is lineage only: kept as text, invalid UTF-8 replaced."""
    return records_df.select(
        "raw_value",
        "raw_bytes",
        F.lit("kafka").alias("source"),
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.make_valid_utf8(F.col("key").cast("string")).alias("kafka_key"),
    )


def filter_not_blank(records_df: DataFrame) -> DataFrame:
    """Blank lines (empty or whitespace only) are not records."""
    return records_df.where(~F.col("raw_value").rlike(r"^\s*$"))


# ---------------------------------------------------------------------------------- silver


def _tiebreak(raw: Column) -> Column:
    return F.xxhash64(raw)


def with_state_columns(valid_df: DataFrame, record: RecordSpec, upsert: UpsertSpec) -> DataFrame:
    """Event fields renamed to state columns, plus the hash that breaks exact ties."""
    columns = [F.col(f.name).alias(upsert.rename.get(f.name, f.name)) for f in record.fields]
    return valid_df.select(*columns, _tiebreak(F.col("raw_value")).alias("last_event_hash"))


def order_columns(upsert: UpsertSpec) -> list[str]:
    """State columns that order events: the declared ``order_by`` then the tie-break hash."""
    return [upsert.rename.get(name, name) for name in upsert.order_by] + ["last_event_hash"]


def latest_per_key(state_df: DataFrame, upsert: UpsertSpec) -> DataFrame:
    """One row per key: the one with the greatest ordering tuple (no sort, one aggregate)."""
    ordering = order_columns(upsert)
    others = [c for c in state_df.columns if c != upsert.key and c not in ordering]
    winner = F.max(F.struct(*[F.col(c) for c in ordering], *[F.col(c) for c in others]))
    return (
        state_df.groupBy(upsert.key)
        .agg(winner.alias("w"))
        .select(upsert.key, *[F.col(f"w.{c}").alias(c) for c in ordering + others])
        .select(*state_df.columns)
    )


def newer_condition(upsert: UpsertSpec, source: str = "s", target: str = "t") -> str:
    """SQL: the source row's ordering tuple is greater than the target's."""
    ordering = order_columns(upsert)
    condition = f"{source}.{ordering[-1]} > {target}.{ordering[-1]}"
    for column in reversed(ordering[:-1]):
        condition = (
            f"{source}.{column} > {target}.{column} OR "
            f"({source}.{column} = {target}.{column} AND ({condition}))"
        )
    return condition


# ------------------------------------------------------------------------------------ gold


def with_hour_region(rows_df: DataFrame) -> DataFrame:
    """Order rows keyed by ``hour_start`` (``order_ts`` truncated to the hour) and region."""
    return rows_df.where(F.col("order_ts").isNotNull() & F.col("region").isNotNull()).withColumn(
        "hour_start", F.date_trunc("hour", F.col("order_ts"))
    )


def orders_sales_hourly(keyed_df: DataFrame) -> DataFrame:
    """``gold/sales_hourly`` from current order state keyed by ``with_hour_region``."""
    live = F.col("status") != F.lit("cancelled")
    hourly_df = keyed_df.groupBy("hour_start", "region").agg(
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


@dataclass(frozen=True)
class GoldTransform:
    """An aggregate that can be recomputed per key: ``with_keys`` adds the key columns to
    any silver row (current or changed), ``aggregate`` folds keyed rows into gold rows."""

    with_keys: Callable[[DataFrame], DataFrame]
    aggregate: Callable[[DataFrame], DataFrame]
    key_columns: tuple[str, ...]

    def full(self, silver_df: DataFrame) -> DataFrame:
        return self.aggregate(self.with_keys(silver_df))


GOLD_TRANSFORMS: dict[str, GoldTransform] = {
    "orders_sales_hourly": GoldTransform(
        with_hour_region, orders_sales_hourly, ("hour_start", "region")
    ),
}
