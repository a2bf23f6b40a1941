"""OPTIMIZE when it pays: compact only the changed partitions that hold many small files.

Measures the snapshot (files per partition) and the log (bytes written per partition since
the last OPTIMIZE), asks ``lakehouse.maintenance.plan_optimize`` what to do, and compacts those
partitions, Z-ordered by the table's ``zorder_by``. A healthy table is skipped with the
reason. OPTIMIZE commits change no data, so the streams reading the table skip them.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from jobs.actions.context import ActionContext, Outcome
from jobs.delta_state import TableState, commit_actions, logged_versions
from jobs.tables import quote_path
from lakehouse.locks import check_held
from lakehouse.maintenance import (
    OptimizePolicy,
    PartitionHealth,
    partition_predicate,
    plan_optimize,
)
from lakehouse.specs import TableSpec


def optimize(ctx: ActionContext, spec: TableSpec, policy: OptimizePolicy) -> Outcome:
    with ctx.locked_table(spec) as table:
        if table is None:
            return "skipped", {"table": spec.name, "reason": "not created yet"}
        state = table.state
        last = max((v for v, c in table.commits.items() if c.operation == "OPTIMIZE"), default=None)
        partitions = partition_health(ctx, spec, state, last, policy)
        decision = plan_optimize(spec, partitions, policy, last)
        details = table.details(spec, decision.reason)
        details |= {
            "files_before": sum(p.files for p in partitions),
            "bytes_before": sum(p.bytes for p in partitions),
            "small_files_before": sum(p.small_files for p in partitions),
            "bytes_written_since_optimize": sum(p.bytes_written or 0 for p in partitions),
            "last_optimize_version": last,
        }
        if not decision.run:
            return "skipped", details
        predicate = partition_predicate(spec, decision.partitions)
        details["partitions"] = [p.label for p in decision.partitions]
        details["zorder_by"] = list(decision.zorder_by)
        if ctx.dry_run:
            return "dry_run", details
        statement = f"OPTIMIZE {quote_path(table.location)}"
        if predicate:
            statement += f" WHERE {predicate}"
        if decision.zorder_by:
            statement += f" ZORDER BY ({', '.join(f'`{c}`' for c in decision.zorder_by)})"
        check_held()
        metrics = ctx.spark.sql(statement).collect()[0]["metrics"]
        details.update(
            files_added=int(metrics["numFilesAdded"]),
            files_removed=int(metrics["numFilesRemoved"]),
            bytes_added=int(metrics["filesAdded"]["totalSize"] or 0),
            bytes_removed=int(metrics["filesRemoved"]["totalSize"] or 0),
        )
        details["files_after"] = (
            details["files_before"] - details["files_removed"] + details["files_added"]
        )
        return "succeeded", details


def partition_health(
    ctx: ActionContext,
    spec: TableSpec,
    state: TableState,
    last_optimize: int | None,
    policy: OptimizePolicy,
) -> list[PartitionHealth]:
    """Files per partition of the snapshot, and bytes written to each since the last
    OPTIMIZE (None for all when the log no longer holds every commit since)."""
    columns = list(spec.partition_by)
    keys = [F.col("partitionValues")[c].alias(c) for c in columns]
    is_small = F.col("size") < F.lit(policy.small_file_bytes)
    rows = (
        state.files(ctx.spark)
        .select(*keys, "size")
        .groupBy(*columns)
        .agg(
            F.count(F.lit(1)).alias("files"),
            F.sum("size").alias("bytes"),
            F.sum(F.when(is_small, 1).otherwise(0)).alias("small_files"),
            F.sum(F.when(is_small, F.col("size")).otherwise(0)).alias("small_bytes"),
        )
        .collect()
    )
    first = 0 if last_optimize is None else last_optimize + 1
    versions = list(range(first, state.version + 1))
    written: dict[tuple[str | None, ...], int] | None = {}
    if versions and set(versions) <= logged_versions(ctx.spark, state.location):
        adds_df = commit_actions(ctx.spark, state.location, versions).where(F.col("add.dataChange"))
        written = {
            tuple(r[c] for c in columns): int(r["bytes"] or 0)
            for r in adds_df.select(
                *[F.col("add.partitionValues")[c].alias(c) for c in columns],
                F.col("add.size").alias("size"),
            )
            .groupBy(*columns)
            .agg(F.sum("size").alias("bytes"))
            .collect()
        }
    elif versions:
        written = None  # commits since were cleaned from the log: assume all changed
    health = []
    for row in rows:
        if not row["files"]:
            continue
        values = tuple(row[c] for c in columns)
        health.append(
            PartitionHealth(
                values=tuple(zip(columns, values, strict=True)),
                files=int(row["files"]),
                bytes=int(row["bytes"] or 0),
                small_files=int(row["small_files"] or 0),
                small_bytes=int(row["small_bytes"] or 0),
                bytes_written=None if written is None else written.get(values, 0),
            )
        )
    return health
