"""Checkpoint backups: a copy of every checkpoint and what it must agree with.

While it holds the write locks of every table the pipeline's streams write (no layer job
runs), the action copies each checkpoint to ``<root>/_backups/<pipeline>/<id>/`` and writes a
manifest (``lakehouse.backups.BackupManifest``): the query id, the last planned and committed
batches, for each table the stream writes its id, version and transaction version for the
query, where the stream stood in its sources, and the code, Spark and Delta versions. A
checkpoint older than its table (``T > O``, see ``lakehouse.checkpoints``) is refused, not
backed up. The newest N are kept.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version

from jobs import storage
from jobs.actions.context import ActionContext, Outcome
from jobs.delta_state import is_delta_table, table_state
from lakehouse import backups
from lakehouse.backups import BackupManifest, SinkState, SourceState, StreamBackup
from lakehouse.checkpoints import DeltaPosition, txn_problem
from lakehouse.errors import CheckpointInconsistent
from lakehouse.locks import check_held
from lakehouse.specs import PipelineSpec, StreamSpec
from lakehouse.submit import running_code_version


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def stream_state(ctx: ActionContext, pipeline: PipelineSpec, stream: StreamSpec) -> StreamBackup:
    """What ``stream``'s checkpoint must agree with, checked against the invariant."""
    checkpoint = ctx.checkpoint(stream)
    batches = checkpoint.log()
    if batches.query_id is None:
        raise CheckpointInconsistent(f"{checkpoint.location} has no metadata (no query id).")
    sinks = []
    for table in stream.targets:
        location = ctx.path(table)
        if not is_delta_table(ctx.spark, location):
            raise CheckpointInconsistent(f"{table} is missing but its writer's checkpoint exists.")
        state = table_state(ctx.spark, location)
        txn = state.txn_versions.get(batches.query_id)
        problem = txn_problem(table, txn, batches.last_commit, batches.last_offsets)
        if problem:
            raise CheckpointInconsistent(f"{stream.name}: {problem}.")
        sinks.append(SinkState(table, state.table_id, state.version, txn))
    entry = checkpoint.resume_offsets(batches)
    sources: list[SourceState] = []
    for index, table in enumerate(stream.sources):
        offset = entry.source(index) if entry else None
        source = table_state(ctx.spark, ctx.path(table))
        position = DeltaPosition.from_offset(offset)
        if position and position.reservoir_id != source.table_id:
            raise CheckpointInconsistent(
                f"{stream.name} reads table id {position.reservoir_id}, "
                f"but {table} is now {source.table_id}: it was recreated."
            )
        sources.append(
            SourceState("delta", table, source.table_id, source.version, position=offset)
        )
    if not stream.sources:
        kind = str(ctx.settings.pipeline(pipeline).source)
        sources.append(SourceState(kind, position=entry.source(0) if entry else None))
    return StreamBackup(
        layer=stream.layer,
        checkpoint=stream.checkpoint,
        query_id=batches.query_id,
        last_offsets=batches.last_offsets,
        last_commit=batches.last_commit,
        files={},
        sources=tuple(sources),
        sinks=tuple(sinks),
    )


def is_partial(name: str) -> bool:
    """A backup's hidden working copy (``.<backup id>.partial``)."""
    return name.startswith(".") and name.endswith(".partial")


def backup_checkpoints(ctx: ActionContext, pipeline: PipelineSpec, keep_backups: int) -> Outcome:
    """Copy every checkpoint of ``pipeline`` with its manifest; keep the newest N backups."""
    spark = ctx.spark
    root = ctx.path(backups.backups_root(pipeline.name))
    targets = [t for stream in pipeline.streams for t in stream.targets]
    with ctx.locked(targets) as waited_s:
        # A backup killed part-way leaves its hidden copy; under these locks none is running.
        stale = [n for n in storage.list_names(spark, root) if is_partial(n)]
        for name in stale:
            storage.delete(spark, f"{root}/{name}")
        backup_id = backups.new_backup_id()
        final = ctx.path(backups.backup_dir(pipeline.name, backup_id))
        partial = f"{root}/.{backup_id}.partial"  # a hidden name until it is complete
        streams: dict[str, StreamBackup] = {}
        for stream in pipeline.streams:
            checkpoint = ctx.path(stream.checkpoint)
            if ctx.checkpoint(stream).query_id() is None:
                continue  # never ran: nothing to back up
            state = stream_state(ctx, pipeline, stream)
            copy = f"{partial}/{stream.checkpoint}"
            storage.copy_tree(spark, checkpoint, copy)
            files = storage.list_tree(spark, copy)
            if files != storage.list_tree(spark, checkpoint):
                raise OSError(f"the copy of {stream.checkpoint} differs from the original")
            streams[stream.layer] = replace(state, files=files)
        if not streams:
            return "skipped", {
                "reason": "no stream has run yet: nothing to back up",
                "removed_partial": stale,
            }
        manifest = BackupManifest(
            backup_id=backup_id,
            pipeline=pipeline.name,
            created_at=datetime.now(UTC).isoformat(),
            code_version=running_code_version(),
            spark_version=spark.version,
            delta_version=_package_version("delta-spark"),
            streams=streams,
        )
        storage.write_text(spark, f"{partial}/{backups.MANIFEST}", manifest.to_json())
        check_held()
        storage.rename(spark, partial, final)
    existing = [n for n in storage.list_names(spark, root) if backups.is_backup_id(n)]
    dropped = backups.backups_to_drop(existing, keep_backups)
    for old in dropped:
        storage.delete(spark, f"{root}/{old}")
    details = {
        "backup_id": backup_id,
        "location": final,
        "lock_wait_s": waited_s,
        "streams": {
            layer: {
                "query_id": s.query_id,
                "last_commit": s.last_commit,
                "files": len(s.files),
                "bytes": sum(s.files.values()),
                "tables": {k.table: {"version": k.version, "txn": k.txn_version} for k in s.sinks},
            }
            for layer, s in streams.items()
        },
        "dropped_backups": dropped,
        "removed_partial": stale,
        "reason": f"backed up {', '.join(streams)} as {backup_id}; kept the newest {keep_backups}",
    }
    return "succeeded", details
