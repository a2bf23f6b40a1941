"""Maintenance: OPTIMIZE when it pays, a VACUUM that cannot break a stream, checkpoint backups.

Works table by table from the pipeline's registry (its tables and ``ops/run_log``), holding
each table's write lock (``lakehouse.locks``) while it measures and changes it, so a layer
job writing the same table waits for it, or it for the layer job:

* ``optimize``: measures the snapshot (small files per partition) and the log (bytes written
  per partition since the last OPTIMIZE); compacts only the changed partitions that hold
  enough small files, Z-ordered by the table's ``zorder_by``; skips healthy tables.
* ``vacuum``: reads the checkpoint of every stream that reads the table, finds the oldest
  version each still needs, raises the retention so that VACUUM keeps what it needs (or
  skips the table), runs ``VACUUM ... DRY RUN`` and logs what would go, then VACUUMs with
  Delta's retention check left on.
* ``backup``: copies every checkpoint with a manifest (``jobs/checkpoint_backup.py``);
  ``--restore <layer>`` puts one back.

Every action appends a row to ``ops/run_log`` (``action`` optimize, vacuum, backup or
restore; ``details`` with the table, files and bytes removed and added, and why it ran or
was skipped). Exit code 0 when every action succeeded or was skipped, 2 when one was refused
(a named error), 1 when one failed.

Run by ``spark-submit jobs/maintenance.py --pipeline orders [--actions optimize,vacuum]``.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs import storage
from jobs.checkpoint_backup import backup_checkpoints, read_checkpoint_log, restore_checkpoint
from jobs.delta_state import (
    TableState,
    commit_actions,
    history,
    is_delta_table,
    logged_versions,
    table_state,
)
from jobs.runtime import (
    RunRecord,
    append_run_log,
    check_no_restore_in_progress,
    configure_logging,
    job_settings,
    refusal,
    start_spark,
    write_summary,
)
from jobs.tables import quote_path
from lakehouse.checkpoints import DeltaPosition, parse_offsets
from lakehouse.errors import ConfigurationError, InvalidRunParams, LakehouseError
from lakehouse.locks import table_locks
from lakehouse.maintenance import (
    DELTA_DEFAULT_RETENTION_HOURS,
    MIB,
    MaintenanceParams,
    OptimizePolicy,
    PartitionHealth,
    StreamNeed,
    human_bytes,
    parse_interval_hours,
    partition_predicate,
    plan_optimize,
    plan_vacuum,
)
from lakehouse.pipelines import get_pipeline
from lakehouse.settings import Settings
from lakehouse.specs import PipelineSpec, StreamSpec, TableSpec

log = logging.getLogger("lakehouse.maintenance")

RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"
# Delta 4.4 ignores VACUUM's RETAIN (unless 0) and uses the table's deletedFileRetentionDuration
# while this is on (its default). A retention raised for a lagging stream must count, so it is
# off for maintenance's own VACUUM statements; the retention is never below the table's.
RETENTION_WINDOW_IGNORE = "spark.databricks.delta.vacuum.retentionWindowIgnore.enabled"


@dataclass(frozen=True)
class MaintenanceArgs:
    pipeline: str
    root: str | None
    run_id: str
    summary_file: str | None
    raw_params: dict[str, Any]  # validated once the floor (a setting) is known
    policy: OptimizePolicy
    restore_layer: str | None = None
    backup_id: str | None = None


def parse_args(argv: Sequence[str]) -> MaintenanceArgs:
    parser = argparse.ArgumentParser(
        prog="jobs/maintenance.py", description="OPTIMIZE, VACUUM, back up or restore checkpoints."
    )
    parser.add_argument("--pipeline", required=True, help="pipeline name, e.g. orders")
    parser.add_argument("--root", help="lakehouse root (default: LAKEHOUSE_ROOT)")
    parser.add_argument("--run-id", default=None, help="the orchestrator's run id, for the run log")
    parser.add_argument("--summary-file", help="write the run summary here as JSON")
    parser.add_argument("--actions", default="optimize,vacuum,backup", help="comma separated")
    parser.add_argument("--tables", help="comma separated (default: every table)")
    parser.add_argument("--retention-hours", type=int, help="VACUUM retention (default 168)")
    parser.add_argument("--keep-backups", type=int, help="checkpoint backups to keep (default 7)")
    parser.add_argument("--dry-run", action="store_true", help="measure and report only")
    parser.add_argument("--small-file-mb", type=float, default=32.0)
    parser.add_argument("--min-small-files", type=int, default=10)
    parser.add_argument("--restore", metavar="LAYER", help="restore this layer's checkpoint")
    parser.add_argument("--backup-id", help="for --restore: a backup id, or latest")
    ns = parser.parse_args(list(argv))
    raw: dict[str, Any] = {"actions": ns.actions, "dry_run": ns.dry_run}
    for key in ("tables", "retention_hours", "keep_backups"):
        if getattr(ns, key) is not None:
            raw[key] = getattr(ns, key)
    if ns.restore and not ns.backup_id:
        raise InvalidRunParams("--restore needs --backup-id (an id, or latest).")
    try:
        policy = OptimizePolicy(round(ns.small_file_mb * MIB), ns.min_small_files)
    except ValueError as exc:
        raise InvalidRunParams(f"Refused to run: {exc}.") from None
    return MaintenanceArgs(
        pipeline=ns.pipeline,
        root=ns.root,
        run_id=ns.run_id or f"manual__{datetime.now(UTC):%Y%m%dT%H%M%S}_{uuid.uuid4().hex[:6]}",
        summary_file=ns.summary_file,
        raw_params=raw,
        policy=policy,
        restore_layer=ns.restore,
        backup_id=ns.backup_id,
    )


Outcome = tuple[str, dict[str, Any]]  # (status, details)


@dataclass
class Maintenance:
    """One maintenance run: its actions, each recorded in the run log as it ends."""

    spark: SparkSession
    settings: Settings
    pipeline: PipelineSpec
    args: MaintenanceArgs
    params: MaintenanceParams
    records: list[RunRecord] = field(default_factory=list)
    # When the current action held which write locks (for its run-log row).
    lock_windows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def owner(self) -> str:
        return f"{self.pipeline.name}.maintenance run {self.args.run_id}"

    @contextmanager
    def locked(self, tables: Sequence[str]) -> Iterator[float]:
        """Hold the write locks of ``tables``; yields how long it waited for them."""
        t0 = time.monotonic()
        with table_locks(self.settings, tables, self.owner, self.settings.lock_wait_s):
            waited_s = round(time.monotonic() - t0, 3)
            since = datetime.now(UTC)
            try:
                yield waited_s
            finally:
                self.lock_windows.append(
                    {
                        "tables": sorted(tables),
                        "waited_s": waited_s,
                        "from": since.isoformat(),
                        "to": datetime.now(UTC).isoformat(),
                    }
                )

    def act(self, action: str, layer: str, what: str, work: Callable[[], Outcome]) -> RunRecord:
        """Run one action, log one line and one run-log row for it, whatever happens."""
        record = RunRecord(
            self.pipeline.name, layer, self.args.run_id, "started", datetime.now(UTC), action
        )
        self.lock_windows = []
        try:
            record.status, record.details = work()
        except LakehouseError as exc:
            record.status, record.error = "refused", refusal(exc)
        except Exception as exc:
            record.status = "failed"
            record.error = f"{type(exc).__name__}: {str(exc)[:2000]}"
            log.exception("%s of %s failed", action, what)
        record.ended_at = datetime.now(UTC)
        record.spark_master = self.spark.sparkContext.master
        record.details = {"target": what, **record.details, "locks": self.lock_windows}
        log.info(
            "%s %s: %s (%.1fs) %s",
            action,
            what,
            record.status,
            record.duration_s or 0.0,
            record.details.get("reason") or record.error or "",
        )
        append_run_log(self.spark, self.settings, record)
        self.records.append(record)
        return record

    # -- OPTIMIZE -----------------------------------------------------------------------------

    def optimize(self, spec: TableSpec) -> Outcome:
        location = self.settings.path(spec.name)
        if not is_delta_table(self.spark, location):
            return "skipped", {"table": spec.name, "reason": "not created yet"}
        with self.locked([spec.name]) as waited_s:
            state = table_state(self.spark, location)
            commits = history(self.spark, location)
            last = max((v for v, c in commits.items() if c.operation == "OPTIMIZE"), default=None)
            partitions = self.partition_health(spec, state, last)
            decision = plan_optimize(spec, partitions, self.args.policy, last)
            details: dict[str, Any] = {
                "table": spec.name,
                "reason": decision.reason,
                "lock_wait_s": waited_s,
                "version": state.version,
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
            if self.params.dry_run:
                return "dry_run", details
            statement = f"OPTIMIZE {quote_path(location)}"
            if predicate:
                statement += f" WHERE {predicate}"
            if decision.zorder_by:
                statement += f" ZORDER BY ({', '.join(f'`{c}`' for c in decision.zorder_by)})"
            metrics = self.spark.sql(statement).collect()[0]["metrics"]
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
        self, spec: TableSpec, state: TableState, last_optimize: int | None
    ) -> list[PartitionHealth]:
        """Files per partition of the snapshot, and bytes written to each since the last
        OPTIMIZE (None for all when the log no longer holds every commit since)."""
        small = self.args.policy.small_file_bytes
        columns = list(spec.partition_by)
        keys = [F.col("partitionValues")[c].alias(c) for c in columns]
        is_small = F.col("size") < F.lit(small)
        rows = (
            state.files(self.spark)
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
        if versions and set(versions) <= logged_versions(self.spark, state.location):
            adds_df = commit_actions(self.spark, state.location, versions).where(
                F.col("add.dataChange")
            )
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

    # -- VACUUM -------------------------------------------------------------------------------

    def vacuum(self, spec: TableSpec) -> Outcome:
        if (self.spark.conf.get(RETENTION_CHECK, "true") or "").lower() != "true":
            raise ConfigurationError(
                f"{RETENTION_CHECK} is off in this session; maintenance VACUUMs only with "
                "Delta's retention check on (remove it from LAKEHOUSE_SPARK_CONF)."
            )
        location = self.settings.path(spec.name)
        if not is_delta_table(self.spark, location):
            return "skipped", {"table": spec.name, "reason": "not created yet"}
        with self.locked([spec.name]) as waited_s:
            state = table_state(self.spark, location)
            commits = history(self.spark, location)
            raw_retention = state.properties.get(RETENTION_PROPERTY)
            table_hours = (
                parse_interval_hours(raw_retention)
                if raw_retention
                else DELTA_DEFAULT_RETENTION_HOURS
            )
            needs = [
                self.stream_need(stream, state, commits)
                for stream in self.pipeline.consumers_of(spec.name)
            ]
            now = datetime.now(UTC)
            decision = plan_vacuum(
                requested_hours=self.params.retention_hours,
                floor_hours=self.settings.vacuum_floor_hours,
                table_retention_hours=table_hours,
                needs=needs,
                now=now,
                margin_s=self.settings.vacuum_margin_s,
            )
            details: dict[str, Any] = {
                "table": spec.name,
                "reason": decision.reason,
                "lock_wait_s": waited_s,
                "version": state.version,
                "requested_hours": self.params.retention_hours,
                "table_retention_hours": table_hours,
                "streams": [n.describe(now) for n in needs],
            }
            if not decision.run or decision.cutoff is None:
                return "skipped", details
            details["retention_hours"] = decision.retention_hours
            doomed = self.vacuum_files(location, decision.retention_hours, dry_run=True)
            details["files_to_remove"] = len(doomed)
            details["bytes_to_remove"] = sum(doomed.values())
            if decision.raised_for:
                base_hours = math.ceil(max(float(self.params.retention_hours), table_hours))
                details["kept_for_streams"] = self.kept_for_streams(
                    location, base_hours, doomed, needs
                )
            log.info(
                "VACUUM %s dry run: %d files (%s) would go; retention %d h",
                spec.name,
                len(doomed),
                human_bytes(sum(doomed.values())),
                decision.retention_hours,
            )
            if self.params.dry_run:
                return "dry_run", details
            self.vacuum_files(location, decision.retention_hours, dry_run=False)
            details["files_removed"] = len(doomed)
            details["bytes_removed"] = sum(doomed.values())
            return "succeeded", details

    def stream_need(
        self, stream: StreamSpec, state: TableState, commits: dict[int, Any]
    ) -> StreamNeed:
        """The oldest version of the table ``stream`` will still read, from its checkpoint."""
        name = f"{self.pipeline.name}.{stream.layer}"
        checkpoint = self.settings.path(stream.checkpoint)
        batches = read_checkpoint_log(self.spark, checkpoint)
        batch = batches.resume_batch
        if batch is None:
            return StreamNeed(name, state.version)
        text = storage.read_text(self.spark, f"{checkpoint}/offsets/{batch}")
        entry = parse_offsets(batch, text or "")
        position = DeltaPosition.from_offset(entry.sources[0] if entry.sources else None)
        if position is None:
            return StreamNeed(name, state.version, problem="its checkpoint holds no Delta offset")
        if position.reservoir_id != state.table_id:
            return StreamNeed(
                name,
                state.version,
                problem=(
                    f"its checkpoint reads table id {position.reservoir_id}, not this table "
                    f"({state.table_id}): the table was recreated under it"
                ),
            )
        needed = position.reservoir_version
        if needed <= 0:
            return StreamNeed(
                name, state.version, needed, problem="it still reads from the first version"
            )
        before = commits.get(needed - 1)
        if before is None:
            return StreamNeed(
                name,
                state.version,
                needed,
                problem=(
                    f"it needs version {needed} but the log no longer holds version "
                    f"{needed - 1}: restore its checkpoint from a backup"
                ),
            )
        at = commits.get(needed)
        return StreamNeed(
            name,
            state.version,
            needed,
            needed_committed_at=at.committed_at if at else None,
            protect_since=before.committed_at,
        )

    def vacuum_files(self, location: str, hours: int, *, dry_run: bool) -> dict[str, int]:
        """VACUUM files removed (or written and never committed) more than ``hours`` ago;
        the dry run returns them with their sizes and deletes nothing."""
        statement = f"VACUUM {quote_path(location)} RETAIN {int(hours)} HOURS"
        previous = self.spark.conf.get(RETENTION_WINDOW_IGNORE, None)
        self.spark.conf.set(RETENTION_WINDOW_IGNORE, "false")
        try:
            if not dry_run:
                self.spark.sql(statement).collect()
                return {}
            paths = [str(r[0]) for r in self.spark.sql(statement + " DRY RUN").collect()]
        finally:
            if previous is None:
                self.spark.conf.unset(RETENTION_WINDOW_IGNORE)
            else:
                self.spark.conf.set(RETENTION_WINDOW_IGNORE, previous)
        sizes = {p: storage.file_size(self.spark, p) for p in paths}
        return {p: size for p, size in sizes.items() if size is not None}  # folders left out

    def kept_for_streams(
        self,
        location: str,
        base_hours: int,
        doomed: dict[str, int],
        needs: Sequence[StreamNeed],
    ) -> dict[str, Any]:
        """What the requested retention alone would have deleted and the lagging streams
        kept: a second dry run at the requested retention."""
        unprotected = self.vacuum_files(location, base_hours, dry_run=True)
        kept = {p: s for p, s in unprotected.items() if p not in doomed}
        lagging = [n for n in needs if n.needed_version is not None]
        return {
            "streams": [n.stream for n in lagging],
            "from_version": min((n.needed_version or 0) for n in lagging) if lagging else None,
            "to_version": lagging[0].latest_version if lagging else None,
            "files": len(kept),
            "bytes": sum(kept.values()),
            "change_data_files": sum(1 for p in kept if "/_change_data/" in p),
        }


def _exit_code(records: Sequence[RunRecord]) -> int:
    statuses = {r.status for r in records}
    return 1 if "failed" in statuses else 2 if "refused" in statuses else 0


def run(spark: SparkSession, settings: Settings, args: MaintenanceArgs) -> Maintenance:
    """Every action the arguments ask for; records are appended as they end."""
    pipeline = get_pipeline(args.pipeline)
    params = MaintenanceParams.parse(args.raw_params, pipeline, settings.vacuum_floor_hours)
    job = Maintenance(spark, settings, pipeline, args, params)
    if args.restore_layer:
        layer = args.restore_layer
        job.act(
            "restore",
            layer,
            f"{pipeline.name}.{layer}",
            lambda: restore_checkpoint(job, layer, args.backup_id or "latest"),
        )
        return job
    # A half-done restore must be finished first: maintenance would measure a half state.
    check_no_restore_in_progress(spark, settings, pipeline.name)
    log.info("maintenance of %s: %s", pipeline.name, params.describe())
    tables = params.selected(pipeline)
    for action in params.actions:
        if action == "backup":
            job.act(
                "backup", "all", f"{pipeline.name} checkpoints", lambda: backup_checkpoints(job)
            )
            continue
        work = job.optimize if action == "optimize" else job.vacuum
        for spec in tables:
            job.act(action, spec.layer, spec.name, lambda spec=spec, work=work: work(spec))  # type: ignore[misc]
    return job


def main(argv: Sequence[str] | None = None) -> int:
    """Run maintenance; returns the exit code (0 ok, 1 an action failed, 2 refused)."""
    configure_logging()
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except LakehouseError as exc:
        refusal(exc)
        return 2
    started = datetime.now(UTC)
    summary: dict[str, Any] = {"run_id": args.run_id, "pipeline": args.pipeline, "actions": []}
    exit_code = 0
    spark: SparkSession | None = None
    try:
        settings = job_settings(args.root)
        spark = start_spark(f"lakehouse-{args.pipeline}-maintenance", settings)
        job = run(spark, settings, args)
        summary["actions"] = [r.summary() for r in job.records]
        exit_code = _exit_code(job.records)
        errors = [r.error for r in job.records if r.error]
        summary["error"] = errors[0] if errors else None
    except Exception as exc:
        if isinstance(exc, LakehouseError):
            exit_code, summary["error"] = 2, refusal(exc)
        else:
            exit_code, summary["error"] = 1, f"{type(exc).__name__}: {str(exc)[:2000]}"
            log.exception("maintenance of %s failed", args.pipeline)
        if spark is not None:  # a refused run is an operation too: say so in the run log
            record = RunRecord(args.pipeline, "all", args.run_id, "refused", started, "maintenance")
            record.status = "refused" if exit_code == 2 else "failed"
            record.ended_at, record.error = datetime.now(UTC), summary["error"]
            record.spark_master = spark.sparkContext.master
            try:
                append_run_log(spark, settings, record)
            except Exception:
                log.exception("could not append to the run log")
    finally:
        summary["status"] = {0: "succeeded", 1: "failed", 2: "refused"}[exit_code]
        summary["started_at"] = started.isoformat()
        summary["duration_s"] = round((datetime.now(UTC) - started).total_seconds(), 3)
        write_summary(args.summary_file, summary)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
