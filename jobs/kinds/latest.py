"""Latest state: one row per key from its winning event (the greatest ordering tuple)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.delta_writes import last_commit_metrics, replace_scope, upsert_newer
from jobs.runtime import JobContext
from jobs.transforms import StateShape, latest_per_key, newer_condition, with_state_columns


class LatestKind:
    def __init__(self, ctx: JobContext, app_id: str) -> None:
        assert ctx.pipeline.record is not None and ctx.pipeline.silver is not None
        self.ctx, self.app_id = ctx, app_id
        self.record = ctx.pipeline.record
        self.shape = StateShape.of(ctx.pipeline)
        self.location = ctx.path(ctx.pipeline.silver.table)

    def winners(self, events_df: DataFrame) -> DataFrame:
        return latest_per_key(with_state_columns(events_df, self.record, self.shape), self.shape)

    def merge_batch(self, events_df: DataFrame, batch_id: int) -> None:
        """MERGE the batch's winners, replacing a row only when the incoming event is newer:
        a late or repeated event never overwrites a newer one."""
        key = self.shape.key
        upsert_newer(
            self.winners(events_df),
            self.location,
            f"t.{key} = s.{key}",
            newer_condition(self.shape),
            self.app_id,
            batch_id,
        )

    def rederive(self, events_df: DataFrame, keys_df: DataFrame | None) -> dict[str, int]:
        state_df = self.winners(events_df)
        if keys_df is None:
            state_df.write.format("delta").mode("overwrite").save(self.location)
            return {"rows": self.ctx.spark.read.format("delta").load(self.location).count()}
        keys_df = keys_df.select(F.col(keys_df.columns[0]).alias(self.shape.key))
        changed = replace_scope(
            state_df, self.location, keys_df, (self.shape.key,), (self.shape.key,)
        )
        merged = last_commit_metrics(self.ctx.spark, self.location) if changed else {}
        # A MERGE's figures; into an empty table the rows were appended (``numOutputRows``).
        inserted = merged.get("numTargetRowsInserted", merged.get("numOutputRows", 0))
        return {
            "keys_in_window": keys_df.count(),
            "rows_updated": int(merged.get("numTargetRowsUpdated", 0)),
            "rows_inserted": int(inserted),
            "rows_deleted": int(merged.get("numTargetRowsDeleted", 0)),
        }
