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

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs import faults
from jobs.delta_writes import append_once, dml_transaction
from jobs.runtime import JobContext, StreamResult, checkpoint_query_id, run_job, run_stream
from jobs.tables import ensure_table
from jobs.transforms import latest_per_key, newer_condition, with_state_columns
from jobs.validation import VALID_COL, with_validation
from lakehouse.errors import InvalidRunParams
from lakehouse.specs import PipelineSpec, TableSpec

log = logging.getLogger("lakehouse.silver")


def to_quarantine(validated_df: DataFrame, quarantine: TableSpec) -> DataFrame:
    invalid_df = validated_df.where(~F.col(VALID_COL)).withColumn("event_id", F.col("raw_event_id"))
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


def body(ctx: JobContext) -> StreamResult:
    if ctx.args.params.mode != "incremental":
        raise InvalidRunParams(f"mode={ctx.args.params.mode} is not available yet.")
    source = ctx.pipeline.table(ctx.stream.source_table or "")
    for spec in (source, *(ctx.pipeline.table(t) for t in ctx.stream.targets)):
        ensure_table(ctx.spark, ctx.settings, spec)
    app_id = checkpoint_query_id(ctx.spark, ctx.checkpoint)
    bronze_df = ctx.spark.readStream.format("delta").load(ctx.path(source.name))
    writer = bronze_df.writeStream.foreachBatch(make_batch_writer(ctx, app_id))
    result = run_stream(ctx, writer)
    result.rows_quarantined = ctx.counters.rows_quarantined
    return result


def main(argv: Sequence[str] | None = None) -> int:
    return run_job(argv, "silver", body)


if __name__ == "__main__":
    sys.exit(main())
