"""History (SCD type 2): every valid event once in a changes table, and the versions of each
key derived again from all of its events whenever one of them arrives."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs import faults
from jobs.delta_writes import replace_scope, upsert_newer
from jobs.runtime import JobContext
from jobs.transforms import NEWER_HASH, distinct_events, history_of, with_event_columns
from lakehouse.specs import History


class HistoryKind:
    def __init__(self, ctx: JobContext, app_id: str) -> None:
        assert ctx.pipeline.record is not None and isinstance(ctx.pipeline.silver, History)
        self.ctx, self.app_id = ctx, app_id
        self.record = ctx.pipeline.record
        self.history = ctx.pipeline.silver
        self.changes_location = ctx.path(self.history.changes)
        self.history_location = ctx.path(self.history.table)

    def events(self, events_df: DataFrame) -> DataFrame:
        return distinct_events(with_event_columns(events_df, self.record), self.record)

    def versions(self, keys_df: DataFrame) -> DataFrame:
        """The versions of ``keys_df``'s keys, from every event the changes table holds."""
        key = self.record.key
        changes_df = self.ctx.spark.read.format("delta").load(self.changes_location)
        return history_of(
            changes_df.join(F.broadcast(keys_df), key, "left_semi"), self.record, self.history
        )

    def merge_batch(self, events_df: DataFrame, batch_id: int) -> None:
        key, event_id = self.record.key, self.record.event_id
        batch_df = self.events(events_df)
        on = f"t.{event_id} = s.{event_id}"
        upsert_newer(batch_df, self.changes_location, on, NEWER_HASH, self.app_id, batch_id)
        faults.inject("silver.after_changes")
        # The keys come from the batch, not from what the MERGE added: a replay after a crash
        # between the two writes derives them again.
        keys_df = batch_df.select(key).distinct()
        replace_scope(
            self.versions(keys_df),
            self.history_location,
            keys_df,
            (key,),
            (key, "valid_from"),
            app_id=self.app_id,
            batch_id=batch_id,
        )

    def rederive(self, events_df: DataFrame, keys_df: DataFrame | None) -> dict[str, int]:
        key = self.record.key
        rows_df = self.events(events_df)
        if keys_df is None:
            rows_df.write.format("delta").mode("overwrite").save(self.changes_location)
            history_of(rows_df, self.record, self.history).write.format("delta").mode(
                "overwrite"
            ).save(self.history_location)
            versions = self.ctx.spark.read.format("delta").load(self.history_location).count()
            return {"events": rows_df.count(), "versions": versions}
        keys_df = keys_df.select(F.col(keys_df.columns[0]).alias(key))
        replace_scope(rows_df, self.changes_location, keys_df, (key,), (self.record.event_id,))
        faults.inject("silver.rederive.after_changes")
        versions_df = history_of(rows_df, self.record, self.history)
        replace_scope(versions_df, self.history_location, keys_df, (key,), (key, "valid_from"))
        return {"keys_in_window": keys_df.count(), "versions_of_those_keys": versions_df.count()}
