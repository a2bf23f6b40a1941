"""Maintenance policies: when OPTIMIZE pays, how long VACUUM keeps files, what a run does.

Plain Python, no Spark: the maintenance actions (``jobs/actions/``) measure a table and ask
these functions what to do, and the tests check the rules without a JVM.

* **OPTIMIZE when it pays.** A partition is compacted when something was written to it since
  the last OPTIMIZE and it holds at least ``min_small_files`` files smaller than
  ``small_file_bytes``; only those partitions are rewritten, Z-ordered by the table's
  ``zorder_by``. A healthy table is skipped, with the reason.
* **VACUUM that cannot break a stream.** The retention is the largest of the requested
  ``retention_hours`` (never below the floor), the table's own
  ``delta.deletedFileRetentionDuration``, and what the slowest stream reading the table still
  needs: every file written or removed after the last version it fully read, plus a margin.
  A stream whose needs cannot be expressed as a retention (it would read from the first
  version, or its checkpoint belongs to another table) makes VACUUM skip the table.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from lakehouse.params import check_retention_floor
from lakehouse.specs import TableSpec, schema_fields

MIB = 1024 * 1024

# Delta's default for delta.deletedFileRetentionDuration ("interval 1 week").
DELTA_DEFAULT_RETENTION_HOURS = 168.0

_INTERVAL_UNITS_S = {
    "microsecond": 1e-6,
    "millisecond": 1e-3,
    "second": 1.0,
    "minute": 60.0,
    "hour": 3600.0,
    "day": 86400.0,
    "week": 604800.0,
}
_INTERVAL_PART = re.compile(r"(-?\d+(?:\.\d+)?)\s*([a-z]+?)s?\b")


def parse_interval_hours(text: str) -> float:
    """Hours in a Delta interval property such as ``interval 1 week`` or ``7 days``."""
    body = text.strip().lower().removeprefix("interval").strip()
    parts = _INTERVAL_PART.findall(body)
    if not parts or _INTERVAL_PART.sub("", body).strip():
        raise ValueError(f"not an interval: {text!r}")
    seconds = 0.0
    for number, unit in parts:
        unit = {"ms": "millisecond", "us": "microsecond"}.get(unit, unit)
        if unit not in _INTERVAL_UNITS_S:
            raise ValueError(f"unknown unit {unit!r} in {text!r}")
        seconds += float(number) * _INTERVAL_UNITS_S[unit]
    return seconds / 3600.0


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


# -- OPTIMIZE ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OptimizePolicy:
    """When compaction pays. A file below ``small_file_bytes`` is small; a changed partition
    with at least ``min_small_files`` of them is worth rewriting."""

    small_file_bytes: int = 32 * MIB
    min_small_files: int = 10

    def __post_init__(self) -> None:
        if self.small_file_bytes < 1 or self.min_small_files < 2:
            raise ValueError("small_file_bytes >= 1 and min_small_files >= 2")

    @classmethod
    def of(cls, small_file_mb: float, min_small_files: int) -> OptimizePolicy:
        return cls(round(small_file_mb * MIB), min_small_files)


@dataclass(frozen=True)
class PartitionHealth:
    """One partition (``values`` empty for an unpartitioned table) of a table's snapshot."""

    values: tuple[tuple[str, str | None], ...]
    files: int
    bytes: int
    small_files: int
    small_bytes: int
    bytes_written: int | None  # since the last OPTIMIZE; None when the log cannot tell

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.values) or "(table)"


@dataclass(frozen=True)
class OptimizeDecision:
    run: bool
    reason: str
    partitions: tuple[PartitionHealth, ...] = ()
    zorder_by: tuple[str, ...] = ()


def plan_optimize(
    spec: TableSpec,
    partitions: Sequence[PartitionHealth],
    policy: OptimizePolicy,
    last_optimize_version: int | None,
) -> OptimizeDecision:
    """Which partitions of ``spec`` to compact, and why; or why the table is healthy."""
    since = (
        f"since the last OPTIMIZE (version {last_optimize_version})"
        if last_optimize_version is not None
        else "since the table was created (never optimized)"
    )
    changed = [p for p in partitions if p.bytes_written is None or p.bytes_written > 0]
    if not changed:
        return OptimizeDecision(False, f"healthy: nothing written {since}")
    due = [p for p in changed if p.small_files >= policy.min_small_files]
    written = sum(p.bytes_written or 0 for p in changed)
    if not due:
        worst = max(changed, key=lambda p: p.small_files)
        return OptimizeDecision(
            False,
            f"healthy: {human_bytes(written)} written {since}, but no changed partition has "
            f"{policy.min_small_files} small files (< {human_bytes(policy.small_file_bytes)}); "
            f"the most is {worst.small_files} in {worst.label}",
        )
    small = sum(p.small_files for p in due)
    small_bytes = sum(p.small_bytes for p in due)
    where = f" of {len(changed)} changed" if spec.partition_by else ""
    reason = (
        f"{small} small files ({human_bytes(small_bytes)}) in {len(due)}{where} "
        f"partition(s) {', '.join(p.label for p in due[:5])}{' ...' if len(due) > 5 else ''}; "
        f"{human_bytes(written)} written {since}"
    )
    return OptimizeDecision(True, reason, tuple(due), spec.zorder_by)


def partition_predicate(spec: TableSpec, partitions: Sequence[PartitionHealth]) -> str | None:
    """A SQL predicate on partition columns selecting ``partitions`` (None: whole table)."""
    if not spec.partition_by:
        return None
    types = dict(schema_fields(spec.schema))
    clauses = []
    for partition in partitions:
        terms = []
        for column, value in partition.values:
            if value is None:
                terms.append(f"`{column}` IS NULL")
            else:
                literal = value.replace("\\", "\\\\").replace("'", "\\'")
                terms.append(f"`{column}` = CAST('{literal}' AS {types[column]})")
        clauses.append("(" + " AND ".join(terms) + ")")
    return " OR ".join(clauses)


# -- VACUUM -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamNeed:
    """What one stream reading a table still needs from it, read from its checkpoint."""

    stream: str  # e.g. "orders.gold"
    latest_version: int  # the table's current version
    needed_version: int | None = None  # the oldest version it will read; None: nothing
    needed_committed_at: datetime | None = None  # commit time of needed_version
    protect_since: datetime | None = None  # commit time of needed_version - 1
    problem: str | None = None  # why no retention can protect it: skip the table

    def describe(self, now: datetime) -> str:
        if self.problem:
            return f"{self.stream}: {self.problem}"
        if self.needed_version is None:
            return f"{self.stream} has not read this table yet"
        behind = max(0, self.latest_version - self.needed_version + 1)
        when = ""
        if self.needed_committed_at is not None:
            age = (now - self.needed_committed_at).total_seconds()
            when = f", committed {human_duration(age)} ago"
        elif self.protect_since is not None:
            age = (now - self.protect_since).total_seconds()
            when = f", after a commit {human_duration(age)} old"
        return (
            f"{self.stream} lags {behind} version(s): it still reads from version "
            f"{self.needed_version}{when}"
        )


@dataclass(frozen=True)
class VacuumDecision:
    run: bool
    reason: str
    retention_hours: int = 0  # whole hours: Delta rounds VACUUM's retention to hours
    requested_hours: float = 0.0
    cutoff: datetime | None = None  # files removed or written before this may go
    raised_for: tuple[str, ...] = ()  # streams that made the retention longer


def plan_vacuum(
    *,
    requested_hours: float,
    floor_hours: float,
    table_retention_hours: float,
    needs: Sequence[StreamNeed],
    now: datetime,
    margin_s: float,
) -> VacuumDecision:
    """The retention for one table's VACUUM, or why to skip it.

    Parameters
    ----------
    requested_hours
        The run's ``retention_hours``; refused below ``floor_hours``.
    table_retention_hours
        The table's ``delta.deletedFileRetentionDuration``: Delta refuses less (the check
        stays on), so the retention is raised to it.
    needs
        One entry per stream that reads the table (from its checkpoint).
    margin_s
        Kept before ``protect_since`` as well: clock skew between storage and driver, and
        the moments between this decision and VACUUM reading its clock.
    """
    check_retention_floor(requested_hours, floor_hours)
    problems = [n for n in needs if n.problem]
    if problems:
        return VacuumDecision(
            False,
            "skipped to keep every file: " + "; ".join(n.describe(now) for n in problems),
            requested_hours=requested_hours,
        )
    base = max(float(requested_hours), table_retention_hours)
    why = [f"requested {requested_hours:g} h"]
    if table_retention_hours > requested_hours:
        why.append(
            f"raised to the table's deletedFileRetentionDuration {table_retention_hours:g} h"
        )
    retention, raised_for = base, []
    for need in needs:
        if need.protect_since is None:
            continue
        needed_hours = (now - need.protect_since).total_seconds() / 3600 + margin_s / 3600
        if needed_hours > retention:
            retention = needed_hours
            raised_for.append(need.stream)
    # Delta rounds the retention to whole hours (half up); rounding up here means it never
    # keeps less than decided.
    hours = math.ceil(retention - 1e-9)
    lag_notes = [n.describe(now) for n in needs if n.needed_version is not None]
    if raised_for:
        why.append(f"raised to {hours} h for {', '.join(raised_for)} ({margin_s:g}s margin)")
    if lag_notes:
        why.append("; ".join(lag_notes))
    cutoff = now - timedelta(hours=hours)
    return VacuumDecision(
        True,
        "; ".join(why),
        retention_hours=hours,
        requested_hours=float(requested_hours),
        cutoff=cutoff,
        raised_for=tuple(raised_for),
    )
