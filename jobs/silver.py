"""Silver: validate every bronze record, apply the expectations, fold the rest into silver.

Reads bronze as a Delta stream. Each micro-batch is parsed and validated once (and kept);
one pass counts the valid and invalid records and every expectation's breaches. Then:

* a ``fail`` expectation that some records break stops the run with ``ExpectationFailed``
  (naming the rule and the count) before anything of the batch is written; the batch is
  run again, under the declaration as it is then, by the next run;
* invalid records are appended to the quarantine table with the rules they broke;
* valid records that no ``drop`` expectation removes go to the pipeline's silver kind
  (``jobs/kinds``: latest state, history, or append-only);
* the counts per rule go to the run log (``details.expectations``).

Every write carries the batch's transaction id, so a retried batch changes nothing more.
``reprocess`` and ``full_refresh`` first catch the stream up, then re-derive silver from
bronze: for the keys with an event in the window (the declared ``record.time``), or for all
(whose catch-up then only moves the checkpoint: everything is rewritten after it).

Run by ``spark-submit jobs/silver.py --pipeline orders``.
"""

from __future__ import annotations

import jobs  # noqa: F401  first: a spark-submit driver then imports the installed pyspark

# isort: split
import logging
import sys
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from jobs import faults
from jobs.delta_writes import alongside, append_once
from jobs.kinds import SilverKind, kind_for
from jobs.runtime import (
    JobContext,
    StreamResult,
    checkpoint_query_id,
    left_to_rederivation,
    read_delta_stream,
    rederiving,
    run_layer,
    run_stream,
    under_rederive_marker,
    unfinished_rederive_spec,
)
from jobs.tables import ensure_table
from jobs.validation import (
    KEY_HINT,
    STORED_KEY_HINT,
    STORED_TIME_HINT,
    VALID_COL,
    time_hint,
    with_hints,
    with_validation,
)
from lakehouse.errors import ExpectationFailed
from lakehouse.locks import check_held
from lakehouse.params import Mode
from lakehouse.specs import Expectation, Layer, PipelineSpec, TableSpec

log = logging.getLogger("lakehouse.silver")

_DROPPED = "_dropped"


def to_quarantine(validated_df: DataFrame, pipeline: PipelineSpec) -> DataFrame:
    assert pipeline.record is not None and pipeline.silver is not None
    quarantine: TableSpec = pipeline.table(pipeline.silver.quarantine)
    invalid_df = validated_df.where(~F.col(VALID_COL)).withColumn("event_id", F.col("raw_event_id"))
    if time_hint(pipeline.record) not in invalid_df.columns:
        invalid_df = with_hints(invalid_df, pipeline.record)
    invalid_df = invalid_df.withColumn("quarantined_at", F.current_timestamp())
    return invalid_df.select(*quarantine.columns)


def broken(rule: Expectation) -> Column:
    """True for a valid record that breaks ``rule`` (a condition that is null does not)."""
    return F.coalesce(F.expr(rule.when), F.lit(False))


def with_expectations(validated_df: DataFrame, pipeline: PipelineSpec) -> DataFrame:
    """Mark the valid records a ``drop`` expectation removes."""
    drops = [broken(r) for r in pipeline.expectations if r.action == "drop"]
    dropped = F.lit(False)
    for condition in drops:
        dropped = dropped | condition
    return validated_df.withColumn(_DROPPED, F.col(VALID_COL) & dropped)


def judged(records_df: DataFrame, pipeline: PipelineSpec) -> DataFrame:
    """Records validated and marked by the ``drop`` expectations, computed once (by the first
    action on them) for the counts and writes that follow.

    Kept as local checkpoint blocks, not as a cached DataFrame: Spark's compressed columnar
    cache of every column cost 0.5-1 s more per 100,000 records in a warm driver, and 4-5 s
    in a fresh one. The blocks go with the DataFrame; an executor lost before the last write
    fails the batch, and the run's retry does it again (every write is idempotent)."""
    assert pipeline.record is not None
    return with_expectations(
        with_validation(records_df, pipeline.record), pipeline
    ).localCheckpoint(eager=False, storageLevel=StorageLevel.MEMORY_AND_DISK)


def kept_records(marked_df: DataFrame) -> DataFrame:
    """The valid records of a judged batch that no ``drop`` expectation removes: silver's."""
    return marked_df.where(F.col(VALID_COL) & ~F.col(_DROPPED))


def measure(
    marked_df: DataFrame, pipeline: PipelineSpec, quarantined: Column | None = None
) -> dict[str, int]:
    """One pass over the batch: valid and invalid records, and each rule's breaches (drop
    rules over the valid records, the others over the valid records not dropped); with
    ``quarantined``, also the invalid records for which it holds (``quarantined``)."""
    valid, kept = F.col(VALID_COL), F.col(VALID_COL) & ~F.col(_DROPPED)
    figures = [F.count_if(valid).alias("valid"), F.count_if(~valid).alias("invalid")]
    if quarantined is not None:
        figures.append(F.count_if(~valid & quarantined).alias("quarantined"))
    if "replayed_at" in marked_df.columns:
        figures.append(F.count_if(~valid & F.col("replayed_at").isNotNull()).alias("replayed"))
    for rule in pipeline.expectations:
        scope = valid if rule.action == "drop" else kept
        figures.append(F.count_if(scope & broken(rule)).alias(rule.name))
    row = marked_df.agg(*figures).collect()[0]
    return {name: int(row[name] or 0) for name in row.asDict()}


def check_failures(counts: dict[str, int], pipeline: PipelineSpec, where: str) -> None:
    failing = [(r, counts[r.name]) for r in pipeline.expectations if r.action == "fail"]
    failing = [(r, n) for r, n in failing if n]
    if failing:
        what = "; ".join(f"{r.name} ({r.when}): {n} record(s)" for r, n in failing)
        raise ExpectationFailed(
            f"{pipeline.name}: the fail expectation(s) {what} broken in {where}; nothing of it "
            "was written."
        )


_LINEAGE = ("kafka_topic", "kafka_partition", "kafka_offset")


def not_quarantined_yet(ctx: JobContext, quarantine_df: DataFrame) -> DataFrame:
    """Invalid records without those the quarantine already holds (by Kafka lineage): a
    Kafka replay adds back records a manual DELETE took out of bronze, which silver had
    already judged."""
    assert ctx.pipeline.silver is not None
    held_df = (
        ctx.spark.read.format("delta")
        .load(ctx.path(ctx.pipeline.silver.quarantine))
        .where(F.col("kafka_offset").isNotNull())
        .select(*_LINEAGE)
    )
    return quarantine_df.join(held_df, list(_LINEAGE), "left_anti")


def make_batch_writer(
    ctx: JobContext, kind: SilverKind, app_id: str
) -> Callable[[DataFrame, int], None]:
    """What each micro-batch does: judge its records, quarantine the invalid ones and fold
    the rest into silver."""
    pipeline = ctx.pipeline
    assert pipeline.record is not None and pipeline.silver is not None
    quarantine_location = ctx.path(pipeline.silver.quarantine)

    def write_batch(bronze_df: DataFrame, batch_id: int) -> None:
        marked_df = judged(bronze_df, pipeline)
        counts = measure(marked_df, pipeline)
        check_failures(counts, pipeline, f"micro-batch {batch_id}")
        valid, invalid = counts["valid"], counts["invalid"]
        quarantine_df = to_quarantine(marked_df, pipeline)
        if counts.get("replayed"):
            # Some were judged before a manual DELETE took them out of bronze: once is enough.
            quarantine_df = not_quarantined_yet(ctx, quarantine_df)
            invalid = quarantine_df.count()

        def quarantine() -> None:
            if invalid:
                append_once(quarantine_df, quarantine_location, app_id, batch_id)
            faults.inject("silver.after_quarantine")

        kept = valid - sum(counts[r.name] for r in pipeline.expectations if r.action == "drop")
        # The quarantine's append beside silver's writes (README, Performance).
        with alongside(quarantine, "silver-quarantine"):
            if valid:
                kind.merge_batch(kept_records(marked_df), batch_id)
                faults.inject("silver.after_merge")
        ctx.counters.rows_out += kept
        ctx.counters.rows_quarantined += invalid
        ctx.counters.batches_written += 1
        for rule in pipeline.expectations:
            ctx.counters.expectations[rule.name] += counts[rule.name]
        log.info("batch %d: %d valid (%d kept), %d quarantined", batch_id, valid, kept, invalid)

    return write_batch


def same_verdicts(new_df: DataFrame, held_df: DataFrame) -> bool:
    """Whether two sets of quarantine rows are the same records with the same verdicts (as
    multisets, whenever they were quarantined), so that a window whose verdicts did not
    change is not written again."""
    columns = [c for c in new_df.columns if c != "quarantined_at"]
    # One aggregation: each distinct row's count in the new rows less its count in the held.
    tagged_df = new_df.select(*columns, F.lit(1).alias("_n")).unionByName(
        held_df.select(*columns, F.lit(-1).alias("_n"))
    )
    return tagged_df.groupBy(*columns).agg(F.sum("_n").alias("_n")).where("_n != 0").isEmpty()


def rederive(
    ctx: JobContext, kind: SilverKind, window: tuple[datetime, datetime] | None
) -> dict[str, Any]:
    """Re-derive silver from all of bronze: for the keys with an event in ``window`` (their
    every event, so a winner outside the window still wins), or for every key.

    Quarantine rows of the window (or all) are replaced by the current verdicts (a window
    whose verdicts are the same is left as it is), and nothing else changes. Run after the
    stream caught up, with bronze locked, so every bronze record is in silver, in quarantine
    or dropped, exactly once. A record that breaks a ``fail`` expectation refuses the whole
    re-derivation before anything is written.
    """
    pipeline = ctx.pipeline
    assert pipeline.record is not None and pipeline.silver is not None
    record = pipeline.record
    stored_df = ctx.spark.read.format("delta").load(ctx.path(ctx.stream.sources[0]))
    bronze_df = with_hints(stored_df, record)
    keys_df = None
    candidates_df = bronze_df
    hint = F.col(time_hint(record))
    # The records whose quarantine rows are re-derived: the window's, or all of them.
    in_window: Column = F.lit(True)
    if window is not None:
        start, end = window
        in_window = (hint >= F.lit(start)) & (hint < F.lit(end))
        # The records of the window, found from bronze's stored hints (files whose hints
        # all fall outside the window are skipped by Delta's statistics); rows older than
        # the hints are parsed.
        stored = F.col(STORED_TIME_HINT)
        maybe = ((stored >= F.lit(start)) & (stored < F.lit(end))) | (
            stored.isNull() & F.col(STORED_KEY_HINT).isNull()
        )
        keys_df = (
            with_hints(stored_df.where(maybe), record)
            .where(in_window & F.col(KEY_HINT).isNotNull())
            .select(F.col(KEY_HINT).alias(record.key))
            .distinct()
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        marked_keys = keys_df.select(
            F.col(record.key).alias(KEY_HINT), F.lit(True).alias("_affected")
        )
        candidates_df = (
            bronze_df.join(marked_keys, KEY_HINT, "left")
            .where(in_window | F.col("_affected").isNotNull())
            .drop("_affected")
        )
    marked_df = judged(candidates_df, pipeline)
    try:
        # The quarantine's new rows are counted in the same pass as the rest.
        counts = measure(marked_df, pipeline, in_window)
        what = "the window" if window else "bronze"
        check_failures(counts, pipeline, what)
        check_held()
        stats: dict[str, Any] = dict(kind.rederive(kept_records(marked_df), keys_df))
        faults.inject("silver.rederive.after_silver")
        quarantine_df = to_quarantine(marked_df.where(in_window), pipeline)
        location = ctx.path(pipeline.silver.quarantine)
        writer = quarantine_df.write.format("delta").mode("overwrite")
        rewrite = True
        if window is not None:
            column = time_hint(record)
            scope = (
                f"{column} >= '{start.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}' AND "
                f"{column} < '{end.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}'"
            )
            writer = writer.option("replaceWhere", scope)
            held_df = ctx.spark.read.format("delta").load(location).where(scope)
            rewrite = not same_verdicts(quarantine_df, held_df)
        if rewrite:
            check_held()
            writer.save(location)
        stats["quarantine_rewritten"] = rewrite
        stats["quarantine_rows"] = counts["quarantined"]
        stats["expectations"] = {r.name: counts[r.name] for r in pipeline.expectations}
    finally:
        if keys_df is not None:
            keys_df.unpersist()
    log.info("re-derived silver from %s: %s", what, stats)
    return stats


def rederived(
    ctx: JobContext, kind: SilverKind, window: tuple[datetime, datetime] | None
) -> dict[str, Any]:
    """``rederive``, with its run-log figures saying how it was evaluated."""
    stats: dict[str, Any] = {}
    with rederiving(ctx, ctx.stream.sources, stats):
        stats.update(rederive(ctx, kind, window))
    return stats


def marker_spec(window: tuple[datetime, datetime] | None) -> dict[str, Any]:
    return {"window": [t.isoformat() for t in window] if window else None}


def rederive_marked(
    ctx: JobContext, kind: SilverKind, window: tuple[datetime, datetime]
) -> dict[str, Any]:
    """``rederive`` of a window under the layer's marker: its writes (the kind's tables,
    then the quarantine) are not one commit."""
    with under_rederive_marker(ctx, marker_spec(window)):
        return rederived(ctx, kind, window)


def unfinished_window(ctx: JobContext) -> tuple[bool, tuple[datetime, datetime] | None]:
    """Whether a re-derivation was left unfinished, and its window (None: all of bronze)."""
    spec = unfinished_rederive_spec(ctx)
    if spec is None or spec["window"] is None:
        return spec is not None, None
    start, end = (datetime.fromisoformat(t) for t in spec["window"])
    return True, (start, end)


def body(ctx: JobContext) -> StreamResult:
    pipeline = ctx.pipeline
    source = pipeline.table(ctx.stream.sources[0])
    for spec in (source, *(pipeline.table(t) for t in ctx.stream.targets)):
        ensure_table(ctx.spark, ctx.settings, spec)
    app_id = checkpoint_query_id(ctx.spark, ctx.checkpoint)
    kind = kind_for(ctx, app_id)
    params = ctx.params
    unfinished, earlier = unfinished_window(ctx)
    if unfinished:
        log.warning("an earlier re-derivation did not finish; doing it again in this run")
    # A re-derivation of all of bronze (this run's full refresh, or one an earlier run left
    # unfinished) rewrites silver and the quarantine once the stream has caught up. Its
    # marker goes down before the catch-up, whose micro-batches then only move the
    # checkpoint, and comes off when everything is rewritten. It covers any window too.
    everything = params.mode == Mode.FULL_REFRESH or (unfinished and earlier is None)

    # Bronze is append-only: its own writes only add files (a Kafka replay too: an insert-only
    # MERGE). A commit that removes rows is a manual DELETE, UPDATE or RESTORE: silver keeps
    # what it derived from those rows instead of failing, and a replay that adds them back is
    # not quarantined twice (see write_batch).
    def writer() -> DataStreamWriter:
        bronze_df = read_delta_stream(ctx, 0, skipChangeCommits="true")
        write_batch = left_to_rederivation if everything else make_batch_writer(ctx, kind, app_id)
        return bronze_df.writeStream.foreachBatch(ctx.guarded(write_batch))

    with under_rederive_marker(ctx, marker_spec(None)) if everything else nullcontext():
        # Every mode first catches the stream up: afterwards each bronze record is in silver,
        # in quarantine or dropped exactly once (or left to the re-derivation of everything),
        # and the checkpoint stays the only thing that moves it.
        result = run_stream(ctx, writer)
        result.rows_quarantined = ctx.counters.rows_quarantined
        result.details["expectations"] = {
            r.name: {"action": r.action, "records": ctx.counters.expectations[r.name]}
            for r in pipeline.expectations
        }
        if everything:
            faults.inject("silver.rederive.after_catch_up")
            what = "full_refresh" if params.mode == Mode.FULL_REFRESH else "completed_rederive"
            result.details[what] = rederived(ctx, kind, None)
    if unfinished and not everything:
        assert earlier is not None
        result.details["completed_rederive"] = rederive_marked(ctx, kind, earlier)
    if params.mode == Mode.REPROCESS:
        assert params.reprocess_from and params.reprocess_to
        window = (params.reprocess_from, params.reprocess_to)
        result.details["reprocess"] = rederive_marked(ctx, kind, window)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    return run_layer(argv, Layer.SILVER, body)


if __name__ == "__main__":
    sys.exit(main())
