"""A VACUUM that cannot break a stream.

Reads the checkpoint of every stream that reads the table, finds the oldest version each
still needs, and asks ``lakehouse.maintenance.plan_vacuum`` for a retention that keeps it (or
to skip the table); runs ``VACUUM ... DRY RUN`` and logs what would go, then VACUUMs with
Delta's retention check left on.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from jobs import storage
from jobs.actions.context import ActionContext, Outcome
from jobs.delta_state import Commit, TableState
from jobs.session import session_conf
from jobs.tables import quote_path
from lakehouse.checkpoints import DeltaPosition
from lakehouse.errors import ConfigurationError
from lakehouse.locks import check_held
from lakehouse.maintenance import (
    DELTA_DEFAULT_RETENTION_HOURS,
    StreamNeed,
    human_bytes,
    parse_interval_hours,
    plan_vacuum,
)
from lakehouse.specs import StreamSpec, TableSpec

log = logging.getLogger("lakehouse.maintenance")

RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"
# Delta 4.4 ignores VACUUM's RETAIN (unless 0) and uses the table's deletedFileRetentionDuration
# while this is on (its default). A retention raised for a lagging stream must count, so it is
# off for maintenance's own VACUUM statements; the retention is never below the table's.
RETENTION_WINDOW_IGNORE = "spark.databricks.delta.vacuum.retentionWindowIgnore.enabled"


def vacuum(ctx: ActionContext, spec: TableSpec, retention_hours: int) -> Outcome:
    if (ctx.spark.conf.get(RETENTION_CHECK, "true") or "").lower() != "true":
        raise ConfigurationError(
            f"{RETENTION_CHECK} is off in this session; maintenance VACUUMs only with "
            "Delta's retention check on (remove it from LAKEHOUSE_SPARK_CONF)."
        )
    with ctx.locked_table(spec) as table:
        if table is None:
            return "skipped", {"table": spec.name, "reason": "not created yet"}
        state, location = table.state, table.location
        raw_retention = state.properties.get(RETENTION_PROPERTY)
        table_hours = (
            parse_interval_hours(raw_retention) if raw_retention else DELTA_DEFAULT_RETENTION_HOURS
        )
        needs = [
            stream_need(ctx, stream, spec.name, state, table.commits)
            for stream in ctx.registry.consumers_of(spec.name)
        ]
        now = datetime.now(UTC)
        decision = plan_vacuum(
            requested_hours=retention_hours,
            floor_hours=ctx.settings.vacuum_floor_hours,
            table_retention_hours=table_hours,
            needs=needs,
            now=now,
            margin_s=ctx.settings.vacuum_margin_s,
        )
        details = table.details(spec, decision.reason)
        details |= {
            "requested_hours": retention_hours,
            "table_retention_hours": table_hours,
            "streams": [n.describe(now) for n in needs],
        }
        if not decision.run or decision.cutoff is None:
            return "skipped", details
        details["retention_hours"] = decision.retention_hours
        doomed = vacuum_files(ctx, location, decision.retention_hours, dry_run=True)
        details["files_to_remove"] = len(doomed)
        details["bytes_to_remove"] = sum(doomed.values())
        if decision.raised_for:
            base_hours = math.ceil(max(float(retention_hours), table_hours))
            details["kept_for_streams"] = kept_for_streams(ctx, location, base_hours, doomed, needs)
        log.info(
            "VACUUM %s dry run: %d files (%s) would go; retention %d h",
            spec.name,
            len(doomed),
            human_bytes(sum(doomed.values())),
            decision.retention_hours,
        )
        if ctx.dry_run:
            return "dry_run", details
        vacuum_files(ctx, location, decision.retention_hours, dry_run=False)
        details["files_removed"] = len(doomed)
        details["bytes_removed"] = sum(doomed.values())
        return "succeeded", details


def stream_need(
    ctx: ActionContext,
    stream: StreamSpec,
    table: str,
    state: TableState,
    commits: dict[int, Commit],
) -> StreamNeed:
    """The oldest version of ``table`` that ``stream`` will still read, from its checkpoint
    (its offsets hold one position per source, in the order of ``stream.sources``)."""
    name = stream.name
    entry = ctx.checkpoint(stream).resume_offsets()
    if entry is None:
        return StreamNeed(name, state.version)
    position = DeltaPosition.from_offset(entry.source(stream.sources.index(table)))
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


def vacuum_files(ctx: ActionContext, location: str, hours: int, *, dry_run: bool) -> dict[str, int]:
    """VACUUM files removed (or written and never committed) more than ``hours`` ago;
    the dry run returns them with their sizes and deletes nothing."""
    statement = f"VACUUM {quote_path(location)} RETAIN {int(hours)} HOURS"
    with session_conf(ctx.spark, {RETENTION_WINDOW_IGNORE: "false"}):
        if not dry_run:
            check_held()
            ctx.spark.sql(statement).collect()
            return {}
        paths = [str(r[0]) for r in ctx.spark.sql(statement + " DRY RUN").collect()]
    sizes = {p: storage.file_size(ctx.spark, p) for p in paths}
    return {p: size for p, size in sizes.items() if size is not None}  # folders left out


def kept_for_streams(
    ctx: ActionContext,
    location: str,
    base_hours: int,
    doomed: dict[str, int],
    needs: Sequence[StreamNeed],
) -> dict[str, Any]:
    """What the requested retention alone would have deleted and the lagging streams
    kept: a second dry run at the requested retention."""
    unprotected = vacuum_files(ctx, location, base_hours, dry_run=True)
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
