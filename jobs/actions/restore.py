"""Restore one layer's checkpoint from a backup, with its tables as they were.

1. checks, changing nothing: the copy is complete, each table is the same table (same id),
   its backed-up version can still be read with every file, and the source still holds
   every version and file the restored checkpoint will read; else ``CheckpointInconsistent``
   with the reasons;
2. resets every stream downstream (their checkpoints are moved aside, their tables emptied):
   they read a table that goes back in time, so they rebuild from it on their next run;
3. ``RESTORE TABLE ... TO VERSION AS OF`` the manifest's versions;
4. installs the copy under a **new query id**. Delta keeps the newest transaction ids across
   a RESTORE (checked on this Delta version), so the old id would make the table skip every
   replayed batch; the new id starts clean, and a batch the table already held at backup
   time (``T == C + 1``) is recorded for the new id so its replay is skipped again.

A marker (``lakehouse.backups.restore_marker``) is written before step 2 and removed after
step 4; while it exists every layer job of the pipeline refuses to start, and running the
same restore again resumes it (each step is idempotent).
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs import faults, storage
from jobs.actions.context import ActionContext, Outcome
from jobs.delta_state import (
    absolute,
    commit_actions,
    is_delta_table,
    logged_versions,
    missing_files,
    table_state,
)
from jobs.storage import HadoopStorage
from jobs.tables import quote_path
from lakehouse.backups import (
    MANIFEST,
    BackupManifest,
    SinkState,
    SourceState,
    StreamBackup,
    backup_dir,
    backups_root,
    is_backup_id,
    new_backup_id,
    restore_marker,
)
from lakehouse.checkpoints import Checkpoint, DeltaPosition, parse_query_id, txn_problem
from lakehouse.errors import CheckpointInconsistent, InvalidRunParams, RestoreInProgress
from lakehouse.kafka.access import KafkaAccess
from lakehouse.kafka.brokers import broker_offsets
from lakehouse.kafka.offsets import lost_offsets, parse_kafka_offsets
from lakehouse.locks import check_held
from lakehouse.specs import PipelineSpec, StreamSpec
from lakehouse.submit import running_code_version

log = logging.getLogger("lakehouse.restore")


# -- restore ----------------------------------------------------------------------------------


def load_manifest(ctx: ActionContext, pipeline: PipelineSpec, backup_id: str) -> BackupManifest:
    spark = ctx.spark
    root = ctx.path(backups_root(pipeline.name))
    ids = sorted(n for n in storage.list_names(spark, root) if is_backup_id(n))
    if backup_id == "latest":
        if not ids:
            raise InvalidRunParams(f"there is no backup of {pipeline.name} yet.")
        backup_id = ids[-1]
    if backup_id not in ids:
        known = ", ".join(ids[-5:]) or "none"
        raise InvalidRunParams(f"no backup {backup_id!r}; the newest are: {known}.")
    text = storage.read_text(spark, f"{root}/{backup_id}/{MANIFEST}")
    if text is None:
        raise CheckpointInconsistent(f"backup {backup_id} has no manifest.")
    return BackupManifest.from_json(text)


@dataclass(frozen=True)
class RestorePlan:
    restore_id: str
    backup_id: str
    layer: str
    query_id: str  # the restored checkpoint's new query id
    started_at: str

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)


def restore_problems(
    ctx: ActionContext, manifest: BackupManifest, entry: StreamBackup, stream: StreamSpec
) -> list[str]:
    """Why the backup cannot be put back in agreement with its tables and source."""
    spark = ctx.spark
    problems: list[str] = []
    copy = ctx.path(f"{backup_dir(manifest.pipeline, manifest.backup_id)}/{entry.checkpoint}")
    found = storage.list_tree(spark, copy)
    if found != dict(entry.files):
        damaged = sorted(set(found.items()) ^ set(entry.files.items()))
        problems.append(f"the backup's copy of {entry.checkpoint} is damaged ({damaged[:3]} ...)")
    for sink in entry.sinks:
        problem = txn_problem(sink.table, sink.txn_version, entry.last_commit, entry.last_offsets)
        if problem:
            problems.append(problem)
        location = ctx.path(sink.table)
        if not is_delta_table(spark, location):
            problems.append(f"{sink.table} no longer exists")
            continue
        state = table_state(spark, location)
        if state.table_id != sink.table_id:
            problems.append(f"{sink.table} was recreated since the backup (new table id)")
            continue
        if state.version < sink.version:
            problems.append(f"{sink.table} is at version {state.version}, before {sink.version}")
            continue
        try:
            files = (
                spark.read.format("delta")
                .option("versionAsOf", sink.version)
                .load(location)
                .inputFiles()
            )
        except Exception as exc:
            problems.append(f"version {sink.version} of {sink.table} cannot be read: {exc}"[:500])
            continue
        missing = missing_files(spark, files)
        if missing:
            problems.append(
                f"version {sink.version} of {sink.table} needs {len(missing)} file(s) that "
                "VACUUM removed since the backup"
            )
    for source in entry.sources:
        if source.kind == "file":
            problems += landing_problems(ctx, copy, stream)
        elif source.kind == "kafka":
            problems += kafka_problems(ctx, source, stream)
        else:
            problems += source_problems(ctx, source, stream)
    return problems


def landing_problems(ctx: ActionContext, copy: str, stream: StreamSpec) -> list[str]:
    """Landing files bronze read after the backup: the restored checkpoint reads them again,
    so each must still be there (else its records would be lost from bronze)."""
    storage_ = HadoopStorage(ctx.spark)
    live = Checkpoint(storage_, ctx.path(stream.checkpoint)).files_read()
    restored = Checkpoint(storage_, copy).files_read()
    gone = sorted(f for f in live - restored if not storage.exists(ctx.spark, f))
    if gone:
        return [
            f"{len(gone)} landing file(s) bronze read after the backup are gone (e.g. "
            f"{gone[0]}): the restored {stream.name} would lose their records"
        ]
    return []


def kafka_problems(ctx: ActionContext, source: SourceState, stream: StreamSpec) -> list[str]:
    """Kafka records the restored checkpoint would read again that the brokers no longer
    hold (retention, a topic recreated)."""
    if not source.position:
        return []
    pipeline = ctx.registry.get(stream.pipeline)
    access = KafkaAccess.for_job(ctx.settings)
    topics = ctx.settings.pipeline(pipeline).subscription
    start = parse_kafka_offsets(source.position, "the backup's offsets")
    lost = lost_offsets(start, broker_offsets(access, topics))
    return [f"Kafka no longer holds what the restored {stream.name} would read: {x}" for x in lost]


def source_problems(ctx: ActionContext, source: SourceState, stream: StreamSpec) -> list[str]:
    """Versions and files of a Delta source the restored checkpoint would read but are gone."""
    position = DeltaPosition.from_offset(source.position)
    if source.kind != "delta" or position is None or source.table is None:
        return []
    spark = ctx.spark
    location = ctx.path(source.table)
    if not is_delta_table(spark, location):
        return [f"the source {source.table} no longer exists"]
    state = table_state(spark, location)
    if state.table_id != position.reservoir_id:
        return [f"the source {source.table} was recreated since the backup"]
    versions = list(range(position.reservoir_version, state.version + 1))
    gone = sorted(set(versions) - logged_versions(spark, location))
    if gone:
        return [
            f"the log of {source.table} no longer holds versions {gone[0]}..{gone[-1]} that "
            f"{stream.layer} would read"
        ]
    needed: list[str] = []
    if versions:
        actions_df = commit_actions(spark, location, versions)
        columns = [F.when(F.col("add.dataChange"), F.col("add.path")), F.col("cdc.path")]
        if stream.read_change_feed:  # a change feed reads removed files for deletes
            columns.append(F.when(F.col("remove.dataChange"), F.col("remove.path")))
        for row in actions_df.select(F.explode(F.array(*columns)).alias("path")).collect():
            if row["path"]:
                needed.append(absolute(location, row["path"]))
    if position.is_starting_version:
        needed += (
            spark.read.format("delta")
            .option("versionAsOf", position.reservoir_version)
            .load(location)
            .inputFiles()
        )
    missing = missing_files(spark, sorted(set(needed)))
    if missing:
        return [
            f"{len(missing)} file(s) of {source.table} from version "
            f"{position.reservoir_version} on, which {stream.layer} would read, were removed"
        ]
    return []


def restore_checkpoint(
    ctx: ActionContext, pipeline: PipelineSpec, layer: str, backup_id: str
) -> Outcome:
    """Restore ``layer``'s checkpoint and tables from a backup, resetting what is downstream
    (in this pipeline and in the pipelines that read its tables)."""
    spark, settings = ctx.spark, ctx.settings
    if layer not in pipeline.layers:
        raise InvalidRunParams(f"layer {layer!r} is not one of {', '.join(pipeline.layers)}.")
    stream = pipeline.stream(layer)
    manifest = load_manifest(ctx, pipeline, backup_id)
    entry = manifest.streams.get(layer)
    if entry is None:
        raise CheckpointInconsistent(
            f"backup {manifest.backup_id} holds no {layer} checkpoint (it had not run)."
        )
    downstream = ctx.registry.downstream_of(stream)
    frozen = [
        t for s in downstream for t in s.targets if not ctx.registry.table(t).allow_full_refresh
    ]
    if frozen:
        raise CheckpointInconsistent(
            f"restoring {layer} would reset {frozen}, which may not be rebuilt "
            "(allow_full_refresh is off)."
        )
    tables = [*stream.targets, *(t for s in downstream for t in s.targets)]
    what = f"{pipeline.name}.{layer} from backup {manifest.backup_id}"
    with ctx.locked(tables) as waited_s:
        marker = settings.path(restore_marker(pipeline.name))
        pending = storage.read_text(spark, marker)
        plan = RestorePlan(
            restore_id=new_backup_id(),
            backup_id=manifest.backup_id,
            layer=layer,
            query_id=str(uuid.uuid4()),
            started_at=datetime.now(UTC).isoformat(),
        )
        if pending is not None:
            previous = RestorePlan(**json.loads(pending))
            if (previous.backup_id, previous.layer) != (plan.backup_id, plan.layer):
                raise RestoreInProgress(
                    f"the restore of {pipeline.name}.{previous.layer} from backup "
                    f"{previous.backup_id} is unfinished; finish it before {what}."
                )
            plan = previous  # resume it: every step below is idempotent
        problems = restore_problems(ctx, manifest, entry, stream)
        if problems:
            raise CheckpointInconsistent(
                f"refused to restore {what}; nothing was changed: " + "; ".join(problems) + "."
            )
        details: dict[str, Any] = {
            "backup_id": manifest.backup_id,
            "restore_id": plan.restore_id,
            "lock_wait_s": waited_s,
            "resumed": pending is not None,
            "tables": {
                s.table: {
                    "from_version": table_state(spark, settings.path(s.table)).version,
                    "to_version": s.version,
                }
                for s in entry.sinks
            },
            "reset": [s.name for s in downstream],
            "query_id": plan.query_id,
            "backup_query_id": entry.query_id,
            "backup_code_version": manifest.code_version,
            "code_version": running_code_version(),
            "reason": f"{what}: checks passed",
        }
        if ctx.dry_run:
            return "dry_run", details
        # Fenced step by step: a restore that lost its lease stops where it is (and is
        # resumed by running it again).
        check_held()
        if pending is None:
            storage.write_text(spark, marker, plan.to_json())
        replaced = settings.path(f"{backups_root(pipeline.name)}/replaced/{plan.restore_id}")
        for consumer in downstream:
            check_held()
            reset_stream(ctx, consumer, replaced)
        for sink in entry.sinks:
            check_held()
            restore_table(spark, settings.path(sink.table), sink.version)
        for sink in entry.sinks:
            check_held()
            seed_transaction(spark, settings.path(sink.table), sink, entry, plan.query_id)
        faults.inject("restore.before_checkpoint")
        check_held()
        install_checkpoint(ctx, manifest, entry, plan, replaced)
        storage.delete(spark, marker)
        details["reason"] = (
            f"restored {what}"
            + (f"; reset {', '.join(s.name for s in downstream)}" if downstream else "")
            + "; the next pipeline run catches up"
        )
        return "succeeded", details


def reset_stream(ctx: ActionContext, stream: StreamSpec, replaced: str) -> None:
    """Move ``stream``'s checkpoint aside and empty its tables: it rebuilds from its source."""
    spark, settings = ctx.spark, ctx.settings
    checkpoint = settings.path(stream.checkpoint)
    if storage.has_files(spark, checkpoint):
        storage.rename(spark, checkpoint, f"{replaced}/{stream.checkpoint}")
    for table in stream.targets:
        location = settings.path(table)
        if is_delta_table(spark, location):
            spark.sql(f"DELETE FROM {quote_path(location)}")
    log.info("reset %s: checkpoint moved to %s, tables emptied", stream.layer, replaced)


def restore_table(spark: SparkSession, location: str, to_version: int) -> None:
    if table_state(spark, location).version != to_version:
        spark.sql(f"RESTORE TABLE {quote_path(location)} TO VERSION AS OF {to_version}")


def seed_transaction(
    spark: SparkSession, location: str, sink: SinkState, entry: StreamBackup, query_id: str
) -> None:
    """Make the new query id a known writer of the table, at the batch the checkpoint goes
    on from: its last committed batch, or a batch the table held at backup time but the
    checkpoint had not committed (``T == C + 1``), so that its replay is skipped as it would
    have been. The next run's consistency guard then recognises the checkpoint."""
    committed = -1 if entry.last_commit is None else entry.last_commit
    version = max(committed, -1 if sink.txn_version is None else sink.txn_version)
    state = table_state(spark, location)
    if version < 0 or state.txn_versions.get(query_id, -1) >= version:
        return
    # An empty append is the one public way to commit a transaction id alone.
    empty_df = spark.read.format("delta").load(location).limit(0)
    (
        empty_df.write.format("delta")
        .mode("append")
        .option("txnAppId", query_id)
        .option("txnVersion", version)
        .save(location)
    )


def install_checkpoint(
    ctx: ActionContext,
    manifest: BackupManifest,
    entry: StreamBackup,
    plan: RestorePlan,
    replaced: str,
) -> None:
    """Put the backup's copy in place of the live checkpoint, under the new query id."""
    spark, settings = ctx.spark, ctx.settings
    live = settings.path(entry.checkpoint)
    current = storage.read_text(spark, f"{live}/metadata")
    if current is not None and parse_query_id(current) == plan.query_id:
        return  # installed by an earlier attempt of this restore
    staged = settings.path(
        f"{backups_root(manifest.pipeline)}/staging/{plan.restore_id}/{entry.checkpoint}"
    )
    if not storage.has_files(spark, staged):
        copy = settings.path(
            f"{backup_dir(manifest.pipeline, manifest.backup_id)}/{entry.checkpoint}"
        )
        storage.copy_tree(spark, copy, staged)
    storage.write_text(
        spark, f"{staged}/metadata", json.dumps({"id": plan.query_id}), overwrite=True
    )
    if storage.has_files(spark, live):
        storage.rename(spark, live, f"{replaced}/{entry.checkpoint}")
    storage.rename(spark, staged, live)
    storage.delete(
        spark, settings.path(f"{backups_root(manifest.pipeline)}/staging/{plan.restore_id}")
    )
