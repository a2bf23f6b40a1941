"""Checkpoint backups: where they live, how they are named, what their manifest holds.

A backup is a folder ``<root>/_backups/<pipeline>/<backup id>/`` holding a copy of every
checkpoint of the pipeline and ``manifest.json``: for each stream its query id, last planned
and committed batches, the tables it writes (id, version, the Delta transaction version
recorded for its query) and where it stood in its source. The manifest is what a restore
checks the copy against (see ``jobs/actions/restore.py``). Plain Python: the CLI lists
backups without a JVM.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from lakehouse.checkpoints import DeltaPosition

BACKUP_DIR = "_backups"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
BACKUP_ID_FORMAT = "%Y%m%dT%H%M%S%fZ"
# The shape of BACKUP_ID_FORMAT, for schemas and quick checks.
BACKUP_ID_PATTERN = r"\d{8}T\d{12}Z"


def backups_root(pipeline: str) -> str:
    """Backups of a pipeline's checkpoints, relative to the root; outside every table."""
    return f"{BACKUP_DIR}/{pipeline}"


def backup_dir(pipeline: str, backup_id: str) -> str:
    return f"{backups_root(pipeline)}/{backup_id}"


def restore_marker(pipeline: str) -> str:
    """Present while a restore of this pipeline runs (and after one that died): every layer
    job of the pipeline refuses to start until the restore is finished."""
    return f"{backups_root(pipeline)}/restore-in-progress.json"


def new_backup_id(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime(BACKUP_ID_FORMAT)


def is_backup_id(text: str) -> bool:
    if not re.fullmatch(BACKUP_ID_PATTERN, text):
        return False
    try:
        datetime.strptime(text, BACKUP_ID_FORMAT)
    except ValueError:
        return False
    return True


def backups_to_drop(backup_ids: Sequence[str], keep: int) -> list[str]:
    """The oldest backups beyond the newest ``keep`` (ids sort by time)."""
    ordered = sorted(b for b in backup_ids if is_backup_id(b))
    return ordered[: max(0, len(ordered) - keep)]


@dataclass(frozen=True)
class SinkState:
    """A table a stream writes, as it stood when the checkpoint was copied."""

    table: str
    table_id: str
    version: int
    txn_version: int | None  # the table's transaction version for the query id


@dataclass(frozen=True)
class SourceState:
    """Where the stream stood in its source (``kind`` delta, file or kafka)."""

    kind: str
    table: str | None = None
    table_id: str | None = None
    version_at_backup: int | None = None
    position: Mapping[str, Any] | None = None  # the raw offset the next run starts from


@dataclass(frozen=True)
class StreamBackup:
    layer: str
    checkpoint: str  # relative to the root
    query_id: str
    last_offsets: int | None
    last_commit: int | None
    files: Mapping[str, int]  # checkpoint file (relative) -> size in bytes
    sources: tuple[SourceState, ...]
    sinks: tuple[SinkState, ...]

    @property
    def resume_position(self) -> DeltaPosition | None:
        for source in self.sources:
            if source.kind == "delta":
                return DeltaPosition.from_offset(source.position)
        return None


@dataclass(frozen=True)
class BackupManifest:
    """What a backup's checkpoints must agree with, written next to the copies."""

    backup_id: str
    pipeline: str
    created_at: str
    code_version: str
    spark_version: str
    delta_version: str
    streams: Mapping[str, StreamBackup] = field(default_factory=dict)
    format: int = MANIFEST_FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BackupManifest:
        data = json.loads(text)
        if data.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"unknown manifest format {data.get('format')!r}")
        streams = {
            layer: StreamBackup(
                layer=s["layer"],
                checkpoint=s["checkpoint"],
                query_id=s["query_id"],
                last_offsets=s["last_offsets"],
                last_commit=s["last_commit"],
                files=dict(s["files"]),
                sources=tuple(SourceState(**src) for src in s["sources"]),
                sinks=tuple(SinkState(**sink) for sink in s["sinks"]),
            )
            for layer, s in data["streams"].items()
        }
        return cls(
            backup_id=data["backup_id"],
            pipeline=data["pipeline"],
            created_at=data["created_at"],
            code_version=data["code_version"],
            spark_version=data["spark_version"],
            delta_version=data["delta_version"],
            streams=streams,
        )
