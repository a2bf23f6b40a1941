"""Idempotent Delta writes for ``foreachBatch``: a replayed micro-batch changes nothing.

``foreachBatch`` alone is at-least-once: after a crash between our write and Spark's
``commits/<batch>`` file, the batch runs again. Each write below records
``(txnAppId=query id, txnVersion=batch id)`` in the same atomic Delta commit as its data, and
Delta skips a write whose version is not above the one recorded, as its own streaming sink does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pyspark.sql import DataFrame, SparkSession

_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"


def append_once(df: DataFrame, location: str, app_id: str, batch_id: int) -> None:
    (
        df.write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", batch_id)
        .save(location)
    )


@contextmanager
def dml_transaction(spark: SparkSession, app_id: str, batch_id: int) -> Iterator[None]:
    """Make the DML (MERGE, UPDATE, DELETE) inside idempotent for ``(app_id, batch_id)``.

    Delta takes DML transaction ids from the session; they are cleared again on the way out so
    that no later write of this session is mistaken for a replay.
    """
    spark.conf.set(_TXN_APP_ID, app_id)
    spark.conf.set(_TXN_VERSION, str(batch_id))
    try:
        yield
    finally:
        spark.conf.unset(_TXN_APP_ID)
        spark.conf.unset(_TXN_VERSION)


def match_on(columns: Sequence[str], *, null_safe: bool = False) -> str:
    """A MERGE condition (target ``t``, source ``s``) equating ``columns``; ``null_safe``
    treats two nulls as equal (``<=>``)."""
    op = "<=>" if null_safe else "="
    return " AND ".join(f"t.{c} {op} s.{c}" for c in columns)


def last_commit_metrics(spark: SparkSession, location: str) -> dict[str, Any]:
    """Operation metrics of the table's latest commit (rows inserted, updated, ...)."""
    from delta.tables import DeltaTable

    rows = DeltaTable.forPath(spark, location).history(1).select("operationMetrics").collect()
    return dict(rows[0]["operationMetrics"] or {}) if rows else {}


def table_version(spark: SparkSession, location: str) -> int:
    from delta.tables import DeltaTable

    return int(DeltaTable.forPath(spark, location).history(1).collect()[0]["version"])


def rows_written_since(
    spark: SparkSession, location: str, version: int, operations: tuple[str, ...]
) -> int:
    """Rows added by ``operations`` commits after ``version`` (from Delta's commit metrics)."""
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, location).history()
    rows = history.where(history.version > version).where(history.operation.isin(*operations))
    return sum(int((r["operationMetrics"] or {}).get("numOutputRows", 0)) for r in rows.collect())
