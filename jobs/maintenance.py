"""Maintenance: OPTIMIZE when it pays, a VACUUM that cannot break a stream, checkpoint backups
and restores.

Works table by table over every pipeline of the registry (their tables and ``ops/run_log``;
``--pipeline`` narrows it to one), holding
each table's write lock (``lakehouse.locks``) while it measures and changes it, so a layer
job writing the same table waits for it, or it for the layer job. One module per action
under ``jobs/actions/``: ``optimize``, ``vacuum``, ``backup`` and ``restore``.

Every action appends a row to ``ops/run_log`` (``action`` optimize, vacuum, backup or
restore; ``details`` with the table, files and bytes removed and added, and why it ran or
was skipped). Exit code 0 when every action succeeded or was skipped, 2 when one was refused
(a named error), 1 when one failed.

Run by ``spark-submit jobs/maintenance.py [--pipeline orders] [--actions optimize,vacuum]``,
or ``... --pipeline orders --restore <layer> --backup-id <id|latest> [--dry-run]``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from functools import partial

from jobs.actions.backup import backup_checkpoints
from jobs.actions.context import ActionContext
from jobs.actions.optimize import optimize
from jobs.actions.restore import restore_checkpoint
from jobs.actions.vacuum import vacuum
from jobs.runtime import JobRun, check_no_restore_in_progress, run_main
from lakehouse.authz import RESTORE, require_grant
from lakehouse.errors import InvalidRunParams
from lakehouse.maintenance import OptimizePolicy
from lakehouse.params import Action, MaintenanceParams, RestoreParams
from lakehouse.registry import registry

log = logging.getLogger("lakehouse.maintenance")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    MaintenanceParams.add_arguments(parser)
    parser.add_argument("--restore", metavar="LAYER", help="restore this layer's checkpoint")
    parser.add_argument("--backup-id", help="for --restore: a backup id, or latest")


def parse(namespace: argparse.Namespace) -> MaintenanceParams | RestoreParams:
    if namespace.restore is None:
        params: MaintenanceParams = MaintenanceParams.from_namespace(namespace)
        return params
    if not namespace.backup_id or namespace.pipeline == "all":
        raise InvalidRunParams("--restore needs --pipeline and --backup-id (an id, or latest).")
    restore: RestoreParams = RestoreParams.parse(
        {
            "pipeline": namespace.pipeline,
            "layer": namespace.restore,
            "backup_id": namespace.backup_id,
            "dry_run": bool(namespace.dry_run),
        }
    )
    return restore


def run(job: JobRun, params: MaintenanceParams | RestoreParams) -> None:
    """Every action the params ask for; each records its own run-log row as it ends."""
    if isinstance(params, RestoreParams) and not params.dry_run:
        require_grant(RESTORE, job.args.run_id)  # given by Airflow, or refused
    settings = job.load_settings()
    pipelines = registry(settings)
    chosen = [pipelines.get(job.args.pipeline)] if job.args.pipeline != "all" else None
    spark = job.start_spark("lakehouse-maintenance")
    ctx = ActionContext(spark, settings, pipelines, job, params.dry_run)
    if isinstance(params, RestoreParams):
        pipeline, layer = pipelines.get(params.pipeline), params.layer
        ctx.act(
            "restore",
            pipeline.name,
            layer,
            f"{pipeline.name}.{layer}",
            partial(restore_checkpoint, ctx, pipeline, layer, params.backup_id),
        )
        return
    params.check_against(pipelines.tables, settings.vacuum_floor_hours)
    selected = list(chosen or pipelines.pipelines.values())
    # A half-done restore must be finished first: maintenance would measure a half state.
    for pipeline in selected:
        check_no_restore_in_progress(spark, settings, pipeline.name)
    log.info("maintenance of %s: %s", ", ".join(p.name for p in selected), params.describe())
    tables = [t for p in selected for t in p.tables] + ([] if chosen else [pipelines.tables[-1]])
    policy = OptimizePolicy.of(params.small_file_mb, params.min_small_files)
    for action in params.actions:
        if action == Action.BACKUP:
            for pipeline in selected:
                ctx.act(
                    action,
                    pipeline.name,
                    "all",
                    f"{pipeline.name} checkpoints",
                    partial(backup_checkpoints, ctx, pipeline, params.keep_backups),
                )
            continue
        for spec in params.selected(tables):
            owner = pipelines.owner(spec.name)
            work = (
                partial(optimize, ctx, spec, policy)
                if action == Action.OPTIMIZE
                else partial(vacuum, ctx, spec, params.retention_hours)
            )
            ctx.act(action, owner.name if owner else "lakehouse", spec.layer, spec.name, work)


def main(argv: Sequence[str] | None = None) -> int:
    """Run maintenance; returns the exit code (0 ok, 1 an action failed, 2 refused)."""
    return run_main(
        argv,
        prog="jobs/maintenance.py",
        description="OPTIMIZE, VACUUM, back up or restore checkpoints.",
        layer="all",
        action="maintenance",
        add_arguments=add_arguments,
        parse=parse,
        body=run,
        one_pipeline=False,
    )


if __name__ == "__main__":
    sys.exit(main())
