"""Gold: recompute exactly the gold rows that changes to its inputs touch.

Reads the change data feed of every input (silver tables, of this pipeline or others) as one
stream: one checkpoint, one micro-batch over all of them. For each micro-batch, each input's
declared ``touches`` SQL maps its changed rows (before and after each change) to the
``recompute_by`` values they touch; those rows are computed again from the current inputs,
with the gold's SQL or function, and MERGEd in: changed rows updated, new ones inserted,
rows with nothing left deleted, the rest untouched. No watermark: a change that arrives a
week late still changes its rows. The MERGE carries the batch's transaction id, so a
retried batch changes nothing more.

A new gold on existing tables starts from their current snapshot (the change feed's first
batch holds it as inserts) and then follows their changes: it never replays the history of
versions. ``reprocess`` and ``full_refresh`` recompute every row once the stream has caught
up (whose micro-batches then only move the checkpoint); a marker holds that promise until it
is kept, so a run that dies in between leaves it to the next run.

Run by ``spark-submit jobs/gold.py --pipeline orders``.
"""

from __future__ import annotations

import jobs  # noqa: F401  first: a spark-submit driver then imports the installed pyspark

# isort: split
import base64
import logging
import sys
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    NumericType,
    StringType,
    TimestampNTZType,
    TimestampType,
)

from jobs import faults, storage
from jobs.delta_writes import last_commit_metrics, replace_scope
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
from lakehouse.checkpoints import Checkpoint, DeltaPosition
from lakehouse.locks import check_held
from lakehouse.params import Mode
from lakehouse.registry import registry
from lakehouse.specs import Gold, Layer

log = logging.getLogger("lakehouse.gold")

_INPUT = "_input"
# The change feed's own columns: what happened to a row, and in which version.
_CHANGE_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")


def _row_column(name: str) -> str:
    return f"_row_{name}"


def current_inputs(spark: SparkSession, ctx: JobContext, gold: Gold) -> dict[str, Any]:
    """Each input as it is now, by its name in the declaration."""
    return {i.name: spark.read.format("delta").load(ctx.path(i.table)) for i in gold.inputs}


def compute(gold: Gold, inputs: dict[str, Any]) -> DataFrame:
    """Gold rows from ``inputs`` (current tables), by the declared SQL or function."""
    spark = next(iter(inputs.values())).sparkSession
    if gold.sql is not None:
        return spark.sql(gold.sql, **inputs)
    assert gold.function is not None
    result: DataFrame = gold.function(inputs)
    return result


def change_stream(ctx: JobContext, gold: Gold) -> DataFrame:
    """The change feeds of every input as one stream: a row per change, its input's name and
    the changed row in that input's own column (typed as the input; the others null)."""
    feeds = {
        i.name: read_delta_stream(ctx, index, readChangeFeed="true")
        for index, i in enumerate(gold.inputs)
    }
    columns = {name: F.struct(*df.columns) for name, df in feeds.items()}
    types = {
        name: df.select(columns[name].alias("r")).schema["r"].dataType for name, df in feeds.items()
    }
    projected = [
        df.select(
            F.lit(name).alias(_INPUT),
            *[
                (columns[other] if other == name else F.lit(None).cast(types[other])).alias(
                    _row_column(other)
                )
                for other in feeds
            ],
        )
        for name, df in feeds.items()
    ]
    stream_df = projected[0]
    for more_df in projected[1:]:
        stream_df = stream_df.unionByName(more_df)
    return stream_df


def touched(batch_df: DataFrame, gold: Gold, inputs: dict[str, Any]) -> DataFrame:
    """The ``recompute_by`` values the batch's changes touch, from each input's ``touches``."""
    spark = batch_df.sparkSession
    keys_df: DataFrame | None = None
    for item in gold.inputs:
        changes_df = batch_df.where(F.col(_INPUT) == item.name).select(
            f"{_row_column(item.name)}.*"
        )
        found_df = spark.sql(item.touches, changes=changes_df, **inputs).select(
            *gold.recompute_columns
        )
        keys_df = found_df if keys_df is None else keys_df.unionByName(found_df)
    assert keys_df is not None
    return keys_df.distinct()


# Up to this many touched keys, a batch's recompute names them as literals (``only_keys``).
LITERAL_KEYS_MAX = 1_000


def _literal_safe(data_type: DataType) -> bool:
    """Whether a value of this type comes back the same from its text (the session's time
    zone is UTC, which has no ambiguous hours)."""
    return isinstance(
        data_type,
        NumericType | StringType | BooleanType | DateType | TimestampType | TimestampNTZType,
    )


def _quoted(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"


def _named(column: str) -> str:
    return "'" + column.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _value_sql(text: str, data_type: DataType) -> str:
    """A SQL expression of the value whose text is ``text``: carried as base64, so no value
    can end the literal early, and folded into a constant when the query is optimized."""
    encoded = base64.b64encode(text.encode("utf-8")).decode("ascii")
    return f"CAST(CAST(unbase64('{encoded}') AS STRING) AS {data_type.simpleString()})"


def key_texts(keys_df: DataFrame, scope: Sequence[str]) -> list[Row] | None:
    """The distinct touched keys as text, when there are at most ``LITERAL_KEYS_MAX`` of them
    and their values come back the same from text (None: too many, or of another type)."""
    if not all(_literal_safe(keys_df.schema[c].dataType) for c in scope):
        return None
    rows = (
        keys_df.select(*[F.col(c).cast("string").alias(c) for c in scope])
        .limit(LITERAL_KEYS_MAX + 1)
        .collect()
    )
    return rows if len(rows) <= LITERAL_KEYS_MAX else None


def restricted(
    gold_df: DataFrame, keys_df: DataFrame, scope: Sequence[str], texts: list[Row] | None
) -> DataFrame:
    """``only_keys`` with the keys' ``texts`` (``key_texts``) already collected."""
    if texts is None:
        return gold_df.join(F.broadcast(keys_df), list(scope), "left_semi")
    types = {c: keys_df.schema[c].dataType for c in scope}
    # A key with a null value matches nothing, as in the join.
    texts = [r for r in texts if all(r[c] is not None for c in scope)]
    if not texts:
        return gold_df.where(F.lit(False))
    if len(scope) == 1:
        (column,) = scope
        subject = _quoted(column)
        values = [_value_sql(r[column], types[column]) for r in texts]
    else:
        subject = f"struct({', '.join(_quoted(c) for c in scope)})"
        values = [
            "named_struct("
            + ", ".join(f"{_named(c)}, {_value_sql(r[c], types[c])}" for c in scope)
            + ")"
            for r in texts
        ]
    return gold_df.where(F.expr(f"{subject} IN ({', '.join(values)})"))


def only_keys(gold_df: DataFrame, keys_df: DataFrame, scope: Sequence[str]) -> DataFrame:
    """The rows of ``gold_df`` (a gold computed from all of its inputs) whose ``scope`` values
    are among ``keys_df``'s (distinct), computed from only the input rows that can make them.

    Up to ``LITERAL_KEYS_MAX`` keys, a filter on their literal values: Spark moves a filter
    below projections and aggregations and to the side of a join it concerns, so the inputs
    are filtered before they are joined and aggregated (``date_trunc('hour', order_ts) IN
    (...)`` right on silver's scan; an outer join's preserved side before the join), whatever
    the gold's last step is. A join with the keys goes below an aggregation only when nothing
    follows it, and never into a join: every input row was aggregated, or joined, before the
    touched keys were picked. The filter is one SQL expression (a Column per value cost the
    driver 3 ms each). More keys (a first load), or a key column whose values do not come
    back the same from text: the join."""
    return restricted(gold_df, keys_df, scope, key_texts(keys_df, scope))


def make_batch_writer(ctx: JobContext, gold: Gold, app_id: str) -> Callable[[DataFrame, int], None]:
    """What each micro-batch does: recompute the rows its changes touch."""
    gold_location = ctx.path(gold.table)
    columns = ctx.pipeline.table(gold.table).columns
    scope = list(gold.recompute_columns)

    def write_batch(batch_df: DataFrame, batch_id: int) -> None:
        spark = batch_df.sparkSession
        batch_df = batch_df.persist(StorageLevel.MEMORY_AND_DISK)
        inputs = current_inputs(spark, ctx, gold)
        keys_df = touched(batch_df, gold, inputs).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            # One Spark job gives both the keys (when few) and their count.
            texts = key_texts(keys_df, scope)
            n_keys = len(texts) if texts is not None else keys_df.count()
            if n_keys == 0:
                return
            recomputed_df = restricted(compute(gold, inputs), keys_df, scope, texts)
            recomputed_df = recomputed_df.select(*columns)
            replace_scope(
                recomputed_df,
                gold_location,
                keys_df,
                scope,
                gold.key,
                app_id=app_id,
                batch_id=batch_id,
            )
            faults.inject("gold.after_merge")
            ctx.counters.rows_out += n_keys
            ctx.counters.batches_written += 1
            log.info("batch %d: recomputed %d %s value(s)", batch_id, n_keys, "/".join(scope))
        finally:
            keys_df.unpersist()
            batch_df.unpersist()

    return write_batch


def recompute_all(ctx: JobContext, gold: Gold, *, overwrite: bool) -> dict[str, int]:
    """Gold from all of its current inputs: an atomic overwrite (``full_refresh``) or a MERGE
    of only the rows that differ, deleting keys with nothing left (``reprocess``; nothing
    differs, nothing is committed)."""
    location = ctx.path(gold.table)
    columns = ctx.pipeline.table(gold.table).columns
    recomputed_df = compute(gold, current_inputs(ctx.spark, ctx, gold)).select(*columns)
    if overwrite:
        check_held()
        recomputed_df.write.format("delta").mode("overwrite").save(location)
    elif not replace_scope(recomputed_df, location, None, gold.recompute_columns, gold.key):
        return {}
    metrics = last_commit_metrics(ctx.spark, location)
    return {k: int(v) for k, v in metrics.items() if k.startswith("num")}


def input_versions(ctx: JobContext, gold: Gold) -> dict[str, int | None]:
    """The last version of each input the gold has read (from its checkpoint)."""
    checkpoint = Checkpoint(storage.HadoopStorage(ctx.spark), ctx.checkpoint)
    committed = checkpoint.committed_offsets()
    versions: dict[str, int | None] = {}
    for index, item in enumerate(gold.inputs):
        position = DeltaPosition.from_offset(committed.source(index) if committed else None)
        versions[item.table] = position.next_unread_version - 1 if position else None
    return versions


def body(ctx: JobContext) -> StreamResult:
    gold = ctx.pipeline.gold
    assert gold is not None
    tables = registry(ctx.settings)
    for item in gold.inputs:
        ensure_table(ctx.spark, ctx.settings, tables.table(item.table))
    ensure_table(ctx.spark, ctx.settings, ctx.pipeline.table(gold.table))
    app_id = checkpoint_query_id(ctx.spark, ctx.checkpoint)
    mode = ctx.params.mode
    # Gold is a function of its inputs: re-deriving it (this run's mode, or a re-derivation
    # an earlier run left unfinished) means recomputing every row from them once the stream
    # has caught up. The marker goes down before the catch-up, whose micro-batches then only
    # move the checkpoint, and comes off when every row is recomputed.
    earlier = unfinished_rederive_spec(ctx)
    if earlier is not None:
        log.warning("an earlier re-derivation did not finish; doing it again in this run")
    rederive = mode != Mode.INCREMENTAL or earlier is not None
    full_refresh = mode == Mode.FULL_REFRESH or (earlier or {}).get("mode") == Mode.FULL_REFRESH
    spec = {"mode": str(Mode.FULL_REFRESH if full_refresh else Mode.REPROCESS)}
    with under_rederive_marker(ctx, spec) if rederive else nullcontext():
        result = run_stream(
            ctx,
            lambda: change_stream(ctx, gold).writeStream.foreachBatch(
                ctx.guarded(
                    left_to_rederivation if rederive else make_batch_writer(ctx, gold, app_id)
                )
            ),
        )
        details: dict[str, Any] = result.details
        details["keys_recomputed"] = ctx.counters.rows_out
        details["input_versions"] = input_versions(ctx, gold)
        if rederive:
            faults.inject("gold.rederive.after_catch_up")
            figures: dict[str, Any] = {}
            with rederiving(ctx, [i.table for i in gold.inputs], figures):
                figures.update(recompute_all(ctx, gold, overwrite=full_refresh))
            details[str(mode) if mode != Mode.INCREMENTAL else "completed_rederive"] = figures
    return result


def main(argv: Sequence[str] | None = None) -> int:
    return run_layer(argv, Layer.GOLD, body)


if __name__ == "__main__":
    sys.exit(main())
