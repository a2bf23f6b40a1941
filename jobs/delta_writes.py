"""Idempotent Delta writes for ``foreachBatch``: a replayed micro-batch changes nothing.

``foreachBatch`` alone is at-least-once: after a crash between our write and Spark's
``commits/<batch>`` file, the batch runs again. Each write below records
``(txnAppId=query id, txnVersion=batch id)`` in the same atomic Delta commit as its data, and
Delta skips a write whose version is not above the one recorded, as its own streaming sink does.
Every write first checks that the job still holds its tables' write leases
(``lakehouse.locks.check_held``): a writer that lost its lease commits nothing.

A MERGE into a table that holds no file yet (a first load, a new pipeline on a backlog)
matches nothing and inserts every row: it is written as the append it amounts to, with the
same transaction id, which skips the MERGE's search for matches and its rewrite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import reduce
from operator import and_
from typing import TYPE_CHECKING, Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.delta_state import commit_info, has_no_files, table_version
from jobs.session import session_conf
from lakehouse.locks import check_held

if TYPE_CHECKING:
    from delta.tables import DeltaMergeBuilder

_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"


def append_once(df: DataFrame, location: str, app_id: str | None, batch_id: int | None) -> None:
    """Append ``df``: once for ``(app_id, batch_id)`` when they are given (a replay of the
    same batch commits nothing), a plain append when not (a re-derivation)."""
    check_held()
    writer = df.write.format("delta").mode("append")
    if app_id is not None and batch_id is not None:
        writer = writer.option("txnAppId", app_id).option("txnVersion", batch_id)
    writer.save(location)


@contextmanager
def alongside(work: Callable[[], None], name: str) -> Iterator[None]:
    """Run ``work`` in a thread of its own (with the job's Spark properties) while the body
    runs, and wait for it on the way out. Two writes of a micro-batch to different tables,
    each committed once for the batch's transaction id, so that a retry skips whichever had
    committed, need no order, and a 2-core driver overlaps their planning and commits; the
    state of the tables a stream will write is reconstructed beside the stream
    (``delta_state.prefetch_state``). The body's error, if it fails, is the one
    raised; else the work's."""
    from pyspark import InheritableThread

    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # raised in the body's thread below
            errors.append(exc)

    thread = InheritableThread(target=run, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()
    if errors:
        raise errors[0]


# Delta copies a MERGE's source before it runs (``materializeSource``), so that a source that
# could change between the MERGE's two passes over it (files, then rows) cannot make it
# wrong. Every MERGE below merges rows this run already holds: a micro-batch kept as local
# checkpoint blocks, and what deterministic functions (an aggregate, a comparison, a hash)
# make of it, itself kept that way where it reads a table. A second copy is work done twice.
_SOURCE_KEPT = {"spark.databricks.delta.merge.materializeSource": "none"}


def execute_merge(
    spark: SparkSession, merge: DeltaMergeBuilder, app_id: str | None, batch_id: int | None
) -> None:
    """Run ``merge`` (its source held by the run, see above), idempotently for ``(app_id,
    batch_id)`` when they are given.

    Delta takes DML transaction ids from the session; they are set for this MERGE alone and
    cleared again on the way out, so that no later write of this session is mistaken for a
    replay."""
    check_held()
    values = dict(_SOURCE_KEPT)
    if app_id is not None and batch_id is not None:
        values |= {_TXN_APP_ID: app_id, _TXN_VERSION: str(batch_id)}
    with session_conf(spark, values):
        merge.execute()


def upsert_newer(
    source_df: DataFrame, location: str, on: str, newer: str, app_id: str, batch_id: int
) -> None:
    """MERGE ``source_df`` into the table at ``location`` once for ``(app_id, batch_id)``:
    rows matching on ``on`` are replaced only where ``newer`` holds, the others inserted."""
    from delta.tables import DeltaTable

    spark = source_df.sparkSession
    if has_no_files(spark, location):
        append_once(source_df, location, app_id, batch_id)
        return
    merge = (
        DeltaTable.forPath(spark, location)
        .alias("t")
        .merge(source_df.alias("s"), on)
        .whenMatchedUpdateAll(condition=newer)
        .whenNotMatchedInsertAll()
    )
    execute_merge(spark, merge, app_id, batch_id)


def match_on(columns: Sequence[str], *, null_safe: bool = False) -> str:
    """A MERGE condition (target ``t``, source ``s``) equating ``columns``; ``null_safe``
    treats two nulls as equal (``<=>``)."""
    op = "<=>" if null_safe else "="
    return " AND ".join(f"t.{c} {op} s.{c}" for c in columns)


def last_commit_metrics(spark: SparkSession, location: str) -> dict[str, Any]:
    """Operation metrics of the table's latest commit (rows inserted, updated, ...)."""
    found = commits_metrics(spark, location, table_version(spark, location) - 1)
    return found[-1][1] if found else {}


def commits_metrics(
    spark: SparkSession, location: str, version: int
) -> list[tuple[str, dict[str, Any]]]:
    """The operation and operation metrics of each commit after ``version``, oldest first,
    from the commit files (``delta_state.commit_info``), or from the table's history where
    a commit file is gone."""
    from delta.tables import DeltaTable

    latest = table_version(spark, location)
    infos = [commit_info(spark, location, v) for v in range(version + 1, latest + 1)]
    if all(info is not None for info in infos):
        return [(str(i["operation"]), dict(i.get("operationMetrics") or {})) for i in infos if i]
    rows = (
        DeltaTable.forPath(spark, location)
        .history()
        .where(f"version > {version}")
        .orderBy("version")
        .select("operation", "operationMetrics")
        .collect()
    )
    return [(str(r["operation"]), dict(r["operationMetrics"] or {})) for r in rows]


def rows_written_since(
    spark: SparkSession, location: str, version: int, operations: tuple[str, ...]
) -> int:
    """Rows added by ``operations`` commits after ``version`` (from Delta's commit metrics)."""
    return sum(
        int(metrics.get("numOutputRows", 0))
        for operation, metrics in commits_metrics(spark, location, version)
        if operation in operations
    )


PRESENT = "_present"
_NEW, _HELD = "_new", "_held"


def _held_name(column: str) -> str:
    return f"_held_{column}"


def replace_scope(
    new_df: DataFrame,
    location: str,
    scope_df: DataFrame | None,
    scope: Sequence[str],
    row_key: Sequence[str],
    *,
    app_id: str | None = None,
    batch_id: int | None = None,
) -> bool:
    """Make the rows of the table at ``location`` whose ``scope`` columns are in ``scope_df``
    (with ``scope_df`` None: all of its rows) exactly ``new_df`` (rows identified by
    ``row_key``), in one MERGE that touches nothing else: rows that are gone are deleted,
    rows that changed are updated, new rows inserted, and rows that are the same are left out
    of it. Nothing to change commits nothing. Returns whether it committed.

    Gold recomputes the keys a change touched this way, and a reprocess all of its rows; a
    history the versions of the keys whose events arrived. With ``app_id`` and ``batch_id``
    the MERGE is idempotent for that micro-batch.
    """
    from delta.tables import DeltaTable

    spark = new_df.sparkSession
    if has_no_files(spark, location):
        return _insert_all(new_df, location, app_id, batch_id)
    target = DeltaTable.forPath(spark, location)
    columns = list(new_df.columns)
    values = [c for c in columns if c not in row_key]
    in_scope_df = target.toDF()
    if scope_df is not None:
        in_scope_df = in_scope_df.join(
            F.broadcast(scope_df.select(*scope).distinct()), list(scope), "left_semi"
        )
    # One join of the new rows with the held ones on the row key (two nulls are equal, as
    # no MERGE would match them, so such a row is never both inserted and deleted): each
    # side is computed once. A new row with no held row, or one that differs in any column,
    # goes in; a held row with no new row goes out; a row the same on both sides is left out.
    new_side = new_df.select(*columns, F.lit(True).alias(_NEW))
    held_side = in_scope_df.select(
        *[F.col(c).alias(_held_name(c)) for c in columns], F.lit(True).alias(_HELD)
    )

    def equal(names: Sequence[str]) -> Column:
        return reduce(and_, [F.col(c).eqNullSafe(F.col(_held_name(c))) for c in names], F.lit(True))

    joined_df = new_side.join(held_side, equal(row_key), "full_outer")
    is_new, is_held = F.col(_NEW).isNotNull(), F.col(_HELD).isNotNull()
    same = equal(values)
    # Computed once and kept in the block stores with its lineage cut, not cached: a cached
    # plan reads the target, and after its commit the MERGE re-caches every cached plan that
    # reads the target, planning it again against the new version (a whole reconstruction
    # of the table's state, a second or more, for a cache nobody reads again). The blocks go
    # when the DataFrame does; an executor lost before the MERGE fails the batch, and the
    # run's retry does it again (the MERGE is idempotent).
    source_df = (
        joined_df.where(~(is_new & is_held & same))
        .select(
            *[
                F.when(is_new, F.col(c)).otherwise(F.col(_held_name(c))).alias(c)
                if c in row_key
                else F.col(c)
                for c in columns
            ],
            is_new.alias(PRESENT),
        )
        .localCheckpoint(eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK)
    )
    if source_df.isEmpty():
        return False
    merge = (
        target.alias("t")
        .merge(source_df.alias("s"), match_on(row_key))
        .whenMatchedDelete(condition=f"NOT s.{PRESENT}")
        .whenMatchedUpdate(set={c: f"s.{c}" for c in values})
        .whenNotMatchedInsert(condition=f"s.{PRESENT}", values={c: f"s.{c}" for c in columns})
    )
    execute_merge(spark, merge, app_id, batch_id)
    return True


def _insert_all(new_df: DataFrame, location: str, app_id: str | None, batch_id: int | None) -> bool:
    """``replace_scope`` into a table with no file: the new rows, appended (computed once);
    nothing to write commits nothing."""
    rows_df = new_df.localCheckpoint(eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK)
    if rows_df.isEmpty():
        return False
    append_once(rows_df, location, app_id, batch_id)
    return True
