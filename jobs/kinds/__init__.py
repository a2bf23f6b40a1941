"""Silver kinds: how valid events become a silver table, one module each.

Every kind does two things with a DataFrame of valid events (typed record fields and
``raw_value``): ``merge_batch`` folds one micro-batch in, idempotently for its batch id, and
``rederive`` makes the rows of some keys (a reprocess) or of every key (a full refresh)
exactly what all of their events say. ``jobs/silver.py`` does the rest: validation,
quarantine, expectations.
"""

from __future__ import annotations

from typing import Protocol

from pyspark.sql import DataFrame

from jobs.runtime import JobContext
from lakehouse.specs import AppendOnly, History, LatestState


class SilverKind(Protocol):
    def merge_batch(self, events_df: DataFrame, batch_id: int) -> None:
        """Fold one micro-batch of valid events in (a replay of ``batch_id`` changes nothing)."""
        ...

    def rederive(self, events_df: DataFrame, keys_df: DataFrame | None) -> dict[str, int]:
        """Make the rows of ``keys_df`` (every key when None) what ``events_df`` (all of their
        events) says; returns figures for the run log."""
        ...


def kind_for(ctx: JobContext, app_id: str) -> SilverKind:
    from jobs.kinds.append import AppendKind
    from jobs.kinds.history import HistoryKind
    from jobs.kinds.latest import LatestKind

    silver = ctx.pipeline.silver
    if isinstance(silver, LatestState):
        return LatestKind(ctx, app_id)
    if isinstance(silver, History):
        return HistoryKind(ctx, app_id)
    if isinstance(silver, AppendOnly):
        return AppendKind(ctx, app_id)
    raise TypeError(f"{ctx.pipeline.name} declares no silver")
