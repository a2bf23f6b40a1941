"""Silver: validate every bronze record; quarantine the invalid, merge the valid into state.

Reads bronze as a Delta stream. Each micro-batch is parsed and validated once (and cached),
then:

* invalid records are appended to ``silver/<pipeline>_quarantine`` with the rules they broke;
* valid events are reduced to one winner per key (the greatest ``(event_ts, event_id)``, ties
  broken by a hash of the record) and MERGEd into ``silver/<pipeline>``, replacing a row only
  when the incoming event is newer: a late or repeated event never overwrites a newer one.

Both writes carry the batch's transaction id, so a retried batch changes nothing more.

Run by ``spark-submit jobs/silver.py --pipeline orders``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs import faults
from jobs.delta_writes import append_once, dml_transaction, last_commit_metrics, match_on
from jobs.runtime import JobContext, StreamResult, checkpoint_query_id, run_layer, run_stream
from jobs.tables import ensure_table
from jobs.transforms import latest_per_key, newer_condition, with_state_columns
from jobs.validation import (
    EVENT_TS_HINT,
    ORDER_ID_HINT,
    VALID_COL,
    with_hints,
    with_validation,
)
from lakehouse.params import Mode
from lakehouse.specs import Layer, PipelineSpec, TableSpec

log = logging.getLogger("lakehouse.silver")


def to_quarantine(validated_df: DataFrame, quarantine: TableSpec) -> DataFrame:
    invalid_df = validated_df.where(~F.col(VALID_COL)).withColumn("event_id", F.col("raw_event_id"))
    if EVENT_TS_HINT not in invalid_df.columns:
        invalid_df = with_hints(invalid_df)
    invalid_df = invalid_df.withColumn("quarantined_at", F.current_timestamp())
    return invalid_df.select(*quarantine.columns)


def merge_state(
    ctx: JobContext, winners_df: DataFrame, location: str, app_id: str, batch_id: int
) -> None:
    from delta.tables import DeltaTable

    upsert = ctx.pipeline.upsert
    spark = winners_df.sparkSession
    with dml_transaction(spark, app_id, batch_id):
        (
            DeltaTable.forPath(spark, location)
            .alias("t")
            .merge(winners_df.alias("s"), f"t.{upsert.key} = s.{upsert.key}")
            .whenMatchedUpdateAll(condition=newer_condition(upsert))
            .whenNotMatchedInsertAll()
            .execute()
        )


def make_batch_writer(ctx: JobContext, app_id: str) -> Callable[[DataFrame, int], None]:
    pipeline: PipelineSpec = ctx.pipeline
    state_table, quarantine_table = (pipeline.table(t) for t in ctx.stream.targets)
    state_location = ctx.path(state_table.name)
    quarantine_location = ctx.path(quarantine_table.name)

    def write_batch(bronze_df: DataFrame, batch_id: int) -> None:
        validated_df = with_validation(bronze_df, pipeline.record).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        try:
            counts = {
                bool(row[VALID_COL]): int(row["count"])
                for row in validated_df.groupBy(VALID_COL).count().collect()
            }
            valid, invalid = counts.get(True, 0), counts.get(False, 0)
            if invalid:
                append_once(
                    to_quarantine(validated_df, quarantine_table),
                    quarantine_location,
                    app_id,
                    batch_id,
                )
            faults.inject("silver.after_quarantine")
            if valid:
                state_df = with_state_columns(
                    validated_df.where(F.col(VALID_COL)), pipeline.record, pipeline.upsert
                )
                merge_state(
                    ctx, latest_per_key(state_df, pipeline.upsert), state_location, app_id, batch_id
                )
                faults.inject("silver.after_merge")
            ctx.counters.rows_out += valid
            ctx.counters.rows_quarantined += invalid
            ctx.counters.batches_written += 1
            log.info("batch %d: %d valid, %d quarantined", batch_id, valid, invalid)
        finally:
            validated_df.unpersist()

    return write_batch


def reprocess_window(ctx: JobContext, start: datetime, end: datetime) -> dict[str, int]:
    """Re-derive silver for the ``event_ts`` window ``[start, end)`` from all of bronze.

    The orders a window touches are recomputed from every one of their events (a winner
    outside the window still wins), quarantine rows of the window are replaced by the current
    verdicts, and nothing else changes. Run after the stream caught up, with bronze locked,
    so every bronze record is either in silver's state or in quarantine exactly once.
    """
    from delta.tables import DeltaTable

    pipeline, upsert = ctx.pipeline, ctx.pipeline.upsert
    state_table, quarantine_table = (pipeline.table(t) for t in ctx.stream.targets)
    key = upsert.key
    bronze_df = with_hints(ctx.spark.read.format("delta").load(ctx.path(ctx.stream.sources[0])))
    in_window = (F.col(EVENT_TS_HINT) >= F.lit(start)) & (F.col(EVENT_TS_HINT) < F.lit(end))
    affected_df = (
        bronze_df.where(in_window & F.col(ORDER_ID_HINT).isNotNull())
        .select(F.col(ORDER_ID_HINT).alias(key))
        .distinct()
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    marked_df = affected_df.select(F.col(key).alias(ORDER_ID_HINT), F.lit(True).alias("_affected"))
    candidates_df = bronze_df.join(marked_df, ORDER_ID_HINT, "left").where(
        in_window | F.col("_affected").isNotNull()
    )
    validated_df = with_validation(candidates_df.drop("_affected"), pipeline.record).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    try:
        state_df = latest_per_key(
            with_state_columns(validated_df.where(F.col(VALID_COL)), pipeline.record, upsert),
            upsert,
        )
        columns = state_table.columns
        source_df = affected_df.join(state_df, key, "left").select(
            *columns, F.col("last_event_id").isNull().alias("_deleted")
        )
        (
            DeltaTable.forPath(ctx.spark, ctx.path(state_table.name))
            .alias("t")
            .merge(source_df.alias("s"), f"t.{key} = s.{key}")
            .whenMatchedDelete(condition="s._deleted")
            .whenMatchedUpdate(
                condition=f"NOT ({match_on(columns, null_safe=True)})",
                set={c: f"s.{c}" for c in columns},
            )
            .whenNotMatchedInsert(condition="NOT s._deleted", values={c: f"s.{c}" for c in columns})
            .execute()
        )
        merged = last_commit_metrics(ctx.spark, ctx.path(state_table.name))
        quarantine_df = to_quarantine(validated_df.where(in_window), quarantine_table)
        window = (
            f"{EVENT_TS_HINT} >= '{start.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}' AND "
            f"{EVENT_TS_HINT} < '{end.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}'"
        )
        (
            quarantine_df.write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", window)
            .save(ctx.path(quarantine_table.name))
        )
        stats = {
            "orders_in_window": affected_df.count(),
            "orders_updated": int(merged.get("numTargetRowsUpdated", 0)),
            "orders_inserted": int(merged.get("numTargetRowsInserted", 0)),
            "orders_deleted": int(merged.get("numTargetRowsDeleted", 0)),
            "quarantine_rows_in_window": quarantine_df.count(),
        }
    finally:
        validated_df.unpersist()
        affected_df.unpersist()
    log.info("reprocessed [%s, %s): %s", start.isoformat(), end.isoformat(), stats)
    return stats


def rebuild(ctx: JobContext) -> dict[str, int]:
    """Rebuild silver and its quarantine from all of bronze, one atomic overwrite each, so
    readers see the old table or the new one, never an empty or half-built one."""
    pipeline = ctx.pipeline
    state_table, quarantine_table = (pipeline.table(t) for t in ctx.stream.targets)
    bronze_df = ctx.spark.read.format("delta").load(ctx.path(ctx.stream.sources[0]))
    validated_df = with_validation(bronze_df, pipeline.record).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        state_df = latest_per_key(
            with_state_columns(
                validated_df.where(F.col(VALID_COL)), pipeline.record, pipeline.upsert
            ),
            pipeline.upsert,
        ).select(*state_table.columns)
        state_df.write.format("delta").mode("overwrite").save(ctx.path(state_table.name))
        quarantine_df = to_quarantine(validated_df, quarantine_table)
        quarantine_df.write.format("delta").mode("overwrite").save(ctx.path(quarantine_table.name))
        stats = {
            "bronze_rows": validated_df.count(),
            "orders": ctx.spark.read.format("delta").load(ctx.path(state_table.name)).count(),
            "quarantined": quarantine_df.count(),
        }
    finally:
        validated_df.unpersist()
    log.info("rebuilt silver from all of bronze: %s", stats)
    return stats


def body(ctx: JobContext) -> StreamResult:
    source = ctx.pipeline.table(ctx.stream.sources[0])
    for spec in (source, *(ctx.pipeline.table(t) for t in ctx.stream.targets)):
        ensure_table(ctx.spark, ctx.settings, spec)
    app_id = checkpoint_query_id(ctx.spark, ctx.checkpoint)
    bronze_df = ctx.spark.readStream.format("delta").load(ctx.path(source.name))
    writer = bronze_df.writeStream.foreachBatch(make_batch_writer(ctx, app_id))
    # Every mode first catches the stream up: afterwards each bronze record is in silver or
    # in quarantine exactly once, and the checkpoint stays the only thing that moves it.
    result = run_stream(ctx, writer)
    result.rows_quarantined = ctx.counters.rows_quarantined
    params = ctx.params
    if params.mode == Mode.REPROCESS:
        assert params.reprocess_from and params.reprocess_to
        result.details["reprocess"] = reprocess_window(
            ctx, params.reprocess_from, params.reprocess_to
        )
    elif params.mode == Mode.FULL_REFRESH:
        result.details["full_refresh"] = rebuild(ctx)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    return run_layer(argv, Layer.SILVER, body)


if __name__ == "__main__":
    sys.exit(main())
