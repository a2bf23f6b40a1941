"""Gold: recompute exactly the aggregate rows that silver's changes touch.

Reads silver's change data feed as a stream. For each micro-batch it takes the keys the
changed rows had before and after the change (an order that moves to another hour or region
changes both), recomputes those keys from the current silver table and MERGEs them into gold:
changed keys are updated, new ones inserted, keys with no order left deleted. No watermark:
an event that arrives a week late still changes its hour. The MERGE carries the batch's
transaction id, so a retried batch changes nothing more.

Run by ``spark-submit jobs/gold.py --pipeline orders``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs import faults
from jobs.delta_writes import dml_transaction, last_commit_metrics, match_on
from jobs.runtime import JobContext, StreamResult, checkpoint_query_id, run_layer, run_stream
from jobs.tables import ensure_table
from jobs.transforms import GOLD_TRANSFORMS, GoldTransform
from lakehouse.params import Mode
from lakehouse.specs import Layer

log = logging.getLogger("lakehouse.gold")

_PRESENT = "_present"


def touched_keys(changes_df: DataFrame, transform: GoldTransform) -> DataFrame:
    """Keys of the changed rows, before and after the change (CDF pre- and post-images)."""
    return transform.with_keys(changes_df).select(*transform.key_columns).distinct()


def recompute_keys(silver_df: DataFrame, keys_df: DataFrame, transform: GoldTransform) -> DataFrame:
    """Gold rows for ``keys_df`` from current silver; a key with no rows left comes back
    with ``_present`` false, to be deleted."""
    keys = list(transform.key_columns)
    keyed_df = transform.with_keys(silver_df).join(F.broadcast(keys_df), keys, "left_semi")
    aggregated_df = transform.aggregate(keyed_df).withColumn(_PRESENT, F.lit(True))
    return keys_df.join(aggregated_df, keys, "left").fillna({_PRESENT: False})


def make_batch_writer(
    ctx: JobContext, app_id: str, silver_location: str, gold_location: str
) -> Callable[[DataFrame, int], None]:
    transform = GOLD_TRANSFORMS[ctx.pipeline.gold_transform]
    gold_columns = ctx.pipeline.table(ctx.stream.targets[0]).columns
    values = [c for c in gold_columns if c not in transform.key_columns]
    on = match_on(transform.key_columns)

    def write_batch(changes_df: DataFrame, batch_id: int) -> None:
        from delta.tables import DeltaTable

        spark = changes_df.sparkSession
        keys_df = touched_keys(changes_df, transform).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            n_keys = keys_df.count()
            if n_keys == 0:
                return
            silver_df = spark.read.format("delta").load(silver_location)
            source_df = recompute_keys(silver_df, keys_df, transform)
            with dml_transaction(spark, app_id, batch_id):
                (
                    DeltaTable.forPath(spark, gold_location)
                    .alias("t")
                    .merge(source_df.alias("s"), on)
                    .whenMatchedDelete(condition=f"NOT s.{_PRESENT}")
                    .whenMatchedUpdate(set={c: f"s.{c}" for c in values})
                    .whenNotMatchedInsert(
                        condition=f"s.{_PRESENT}", values={c: f"s.{c}" for c in gold_columns}
                    )
                    .execute()
                )
            faults.inject("gold.after_merge")
            ctx.counters.rows_out += n_keys
            ctx.counters.batches_written += 1
            log.info("batch %d: recomputed %d keys", batch_id, n_keys)
        finally:
            keys_df.unpersist()

    return write_batch


def recompute_all(
    ctx: JobContext, silver_location: str, gold_location: str, *, overwrite: bool
) -> dict[str, int]:
    """Gold from all of current silver: an atomic overwrite (``full_refresh``) or a MERGE that
    touches only the rows that differ and deletes keys with no order left (``reprocess``)."""
    from delta.tables import DeltaTable

    transform = GOLD_TRANSFORMS[ctx.pipeline.gold_transform]
    gold_columns = ctx.pipeline.table(ctx.stream.targets[0]).columns
    recomputed_df = transform.full(ctx.spark.read.format("delta").load(silver_location)).select(
        *gold_columns
    )
    if overwrite:
        recomputed_df.write.format("delta").mode("overwrite").save(gold_location)
    else:
        keys = match_on(transform.key_columns)
        values = [c for c in gold_columns if c not in transform.key_columns]
        same = match_on(values, null_safe=True)
        (
            DeltaTable.forPath(ctx.spark, gold_location)
            .alias("t")
            .merge(recomputed_df.alias("s"), keys)
            .whenMatchedUpdate(condition=f"NOT ({same})", set={c: f"s.{c}" for c in values})
            .whenNotMatchedInsertAll()
            .whenNotMatchedBySourceDelete()
            .execute()
        )
    metrics = last_commit_metrics(ctx.spark, gold_location)
    return {k: int(v) for k, v in metrics.items() if k.startswith("num")}


def body(ctx: JobContext) -> StreamResult:
    silver = ctx.pipeline.table(ctx.stream.sources[0])
    gold = ctx.pipeline.table(ctx.stream.targets[0])
    silver_location = ensure_table(ctx.spark, ctx.settings, silver)
    gold_location = ensure_table(ctx.spark, ctx.settings, gold)
    app_id = checkpoint_query_id(ctx.spark, ctx.checkpoint)
    changes_df = (
        ctx.spark.readStream.format("delta").option("readChangeFeed", "true").load(silver_location)
    )
    writer = changes_df.writeStream.foreachBatch(
        make_batch_writer(ctx, app_id, silver_location, gold_location)
    )
    result = run_stream(ctx, writer)
    result.details["keys_recomputed"] = ctx.counters.rows_out
    mode = ctx.params.mode
    if mode != Mode.INCREMENTAL:
        # Gold is a function of silver: re-deriving it means recomputing it from silver.
        result.details[str(mode)] = recompute_all(
            ctx, silver_location, gold_location, overwrite=mode == Mode.FULL_REFRESH
        )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    return run_layer(argv, Layer.GOLD, body)


if __name__ == "__main__":
    sys.exit(main())
