"""Append-only: every valid event once, de-duplicated by its event id."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.delta_writes import replace_scope, upsert_newer
from jobs.runtime import JobContext
from jobs.transforms import NEWER_HASH, distinct_events, with_event_columns


class AppendKind:
    def __init__(self, ctx: JobContext, app_id: str) -> None:
        assert ctx.pipeline.record is not None and ctx.pipeline.silver is not None
        self.ctx, self.app_id = ctx, app_id
        self.record = ctx.pipeline.record
        self.location = ctx.path(ctx.pipeline.silver.table)

    def events(self, events_df: DataFrame) -> DataFrame:
        return distinct_events(with_event_columns(events_df, self.record), self.record)

    def merge_batch(self, events_df: DataFrame, batch_id: int) -> None:
        event_id = self.record.event_id
        on = f"t.{event_id} = s.{event_id}"
        upsert_newer(self.events(events_df), self.location, on, NEWER_HASH, self.app_id, batch_id)

    def rederive(self, events_df: DataFrame, keys_df: DataFrame | None) -> dict[str, int]:
        rows_df = self.events(events_df)
        if keys_df is None:
            rows_df.write.format("delta").mode("overwrite").save(self.location)
            return {"events": self.ctx.spark.read.format("delta").load(self.location).count()}
        key = self.record.key
        keys_df = keys_df.select(F.col(keys_df.columns[0]).alias(key))
        replace_scope(rows_df, self.location, keys_df, (key,), (self.record.event_id,))
        return {"keys_in_window": keys_df.count()}
