"""Pure ``DataFrame -> DataFrame`` transforms of the medallion layers (no I/O here)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from lakehouse.specs import History, LatestState, PipelineSpec, RecordSpec

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


@dataclass(frozen=True)
class StateShape:
    """How events become the state of a key (``LatestState``): the state's key column, the
    columns that order events (the declared order, then the tie-break hash) and the
    renaming of event fields to state columns."""

    key: str
    ordering: tuple[str, ...]
    rename: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, pipeline: PipelineSpec) -> StateShape:
        assert isinstance(pipeline.silver, LatestState) and pipeline.record is not None
        rename = dict(pipeline.silver.rename)
        ordering = tuple(rename.get(n, n) for n in pipeline.order_by)
        return cls(rename.get(pipeline.record.key, pipeline.record.key), ordering, rename)

    @property
    def order_columns(self) -> list[str]:
        """State columns that order events: the declared order, then the tie-break hash."""
        return [*self.ordering, "last_event_hash"]


def with_state_columns(valid_df: DataFrame, record: RecordSpec, shape: StateShape) -> DataFrame:
    """Event fields renamed to state columns (the key first), plus the hash that breaks exact
    ties."""
    renamed = [(shape.rename.get(f.name, f.name), f.name) for f in record.fields]
    renamed.sort(key=lambda pair: pair[0] != shape.key)
    columns = [F.col(name).alias(column) for column, name in renamed]
    return valid_df.select(*columns, _tiebreak(F.col("raw_value")).alias("last_event_hash"))


def latest_per_key(state_df: DataFrame, shape: StateShape) -> DataFrame:
    """One row per key: the one with the greatest ordering tuple (no sort, one aggregate)."""
    ordering = shape.order_columns
    others = [c for c in state_df.columns if c != shape.key and c not in ordering]
    winner = F.max(F.struct(*[F.col(c) for c in ordering], *[F.col(c) for c in others]))
    return (
        state_df.groupBy(shape.key)
        .agg(winner.alias("w"))
        .select(shape.key, *[F.col(f"w.{c}").alias(c) for c in ordering + others])
        .select(*state_df.columns)
    )


def newer_condition(shape: StateShape, source: str = "s", target: str = "t") -> str:
    """SQL: the source row's ordering tuple is greater than the target's."""
    ordering = shape.order_columns
    condition = f"{source}.{ordering[-1]} > {target}.{ordering[-1]}"
    for column in reversed(ordering[:-1]):
        condition = (
            f"{source}.{column} > {target}.{column} OR "
            f"({source}.{column} = {target}.{column} AND ({condition}))"
        )
    return condition


def with_event_columns(valid_df: DataFrame, record: RecordSpec) -> DataFrame:
    """Valid events as rows of an events table: the event id first, every field, a hash."""
    names = [record.event_id, *(n for n in record.names if n != record.event_id)]
    return valid_df.select(*names, _tiebreak(F.col("raw_value")).alias("event_hash"))


# The choice of ``distinct_events`` across micro-batches: a stored event is replaced only by
# a row of the same event id with a greater hash.
NEWER_HASH = "s.event_hash > t.event_hash"


def distinct_events(events_df: DataFrame, record: RecordSpec) -> DataFrame:
    """Each event once: of the rows with one event id, the one with the greatest hash (so
    the choice does not depend on the order they arrived in)."""
    winner = F.max(F.struct("event_hash", *[c for c in events_df.columns if c != "event_hash"]))
    return (
        events_df.groupBy(record.event_id)
        .agg(winner.alias("w"))
        .select("w.*")
        .select(*events_df.columns)
    )


def history_of(events_df: DataFrame, record: RecordSpec, history: History) -> DataFrame:
    """The versions of each key from all of its events (each event once).

    Events are walked in order of (time, event id). The state after an event is its tracked
    values, or absent after a delete. An event that changes the state is a boundary: an
    upsert whose values differ from the state before it starts a version, a delete after a
    present state ends one. Each version runs from its boundary to the next one; a version
    of zero length is not a row.
    """
    key, time, event_id = record.key, record.time, record.event_id
    order = Window.partitionBy(key).orderBy(time, event_id)
    is_delete = F.col(history.op).isin(*history.deletes)
    before = F.lag(F.struct(is_delete.alias("deleted"), *history.tracked)).over(order)
    same_values = F.lit(True)
    for column in history.tracked:
        same_values = same_values & F.col(column).eqNullSafe(before[column])
    state_before = before.isNotNull() & ~before["deleted"]
    boundary = F.when(is_delete, state_before).otherwise(~state_before | ~same_values)
    boundaries_df = events_df.withColumn("_boundary", boundary).where("_boundary")
    following = Window.partitionBy(key).orderBy(time, event_id)
    versions_df = boundaries_df.select(
        key,
        *history.tracked,
        F.col(time).alias("valid_from"),
        F.lead(time).over(following).alias("valid_to"),
        is_delete.alias("_deleted"),
        F.col(event_id).alias("started_by_event_id"),
    )
    return versions_df.where(
        ~F.col("_deleted")
        & (F.col("valid_to").isNull() | (F.col("valid_to") > F.col("valid_from")))
    ).select(
        key,
        *history.tracked,
        "valid_from",
        "valid_to",
        F.col("valid_to").isNull().alias("is_current"),
        "started_by_event_id",
    )
