"""Streaming checkpoints read without Spark: offsets, positions, backup manifests.

A checkpoint (``<root>/_checkpoints/<table>``) holds ``metadata`` (the query id, which is also
the Delta transaction id of every write the query makes), ``offsets/<n>`` (the end offsets of
batch ``n``, written before the batch runs), ``commits/<n>`` (written after it committed) and,
for a file source, ``sources/``. Maintenance reads them to learn which table versions a
stream still needs (VACUUM must keep them) and to back them up with a manifest of everything
they must agree with.

Invariant between a checkpoint and a table it writes (``T`` the table's transaction version
for the query, ``C`` the last committed batch, ``O`` the last planned one, ``O`` = ``C`` or
``C + 1``): the table may never hold a batch the checkpoint did not plan, ``T <= O``. ``T`` may
trail ``C``: a batch with nothing for a table writes nothing to it. ``T == C + 1 == O`` is a
crash between the table commit and ``commits/<O>``: the replay is skipped by the table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from lakehouse.specs import PipelineSpec, StreamSpec

BACKUP_DIR = "_backups"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
BACKUP_ID_FORMAT = "%Y%m%dT%H%M%S%fZ"


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
    try:
        datetime.strptime(text, BACKUP_ID_FORMAT)
    except ValueError:
        return False
    return True


def backups_to_drop(backup_ids: Sequence[str], keep: int) -> list[str]:
    """The oldest backups beyond the newest ``keep`` (ids sort by time)."""
    ordered = sorted(b for b in backup_ids if is_backup_id(b))
    return ordered[: max(0, len(ordered) - keep)]


def downstream_streams(pipeline: PipelineSpec, stream: StreamSpec) -> list[StreamSpec]:
    """Every stream that reads what ``stream`` writes, directly or further down."""
    found: list[StreamSpec] = []
    frontier = list(stream.targets)
    while frontier:
        table = frontier.pop(0)
        for consumer in pipeline.consumers_of(table):
            if consumer not in found and consumer != stream:
                found.append(consumer)
                frontier.extend(consumer.targets)
    return found


# -- offsets ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetEntry:
    """One ``offsets/<n>`` file: batch metadata and one offset per source (None: none yet)."""

    batch_id: int
    metadata: Mapping[str, Any]
    sources: tuple[Mapping[str, Any] | None, ...]


def parse_offsets(batch_id: int, text: str) -> OffsetEntry:
    """Parse Spark's offset log format: a ``v1`` line, the metadata, one line per source."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("v"):
        raise ValueError(f"offsets/{batch_id} is not a Spark offset log entry")
    metadata = json.loads(lines[1]) if len(lines) > 1 else {}
    sources = tuple(None if line.strip() == "-" else json.loads(line) for line in lines[2:])
    return OffsetEntry(batch_id, metadata, sources)


@dataclass(frozen=True)
class DeltaPosition:
    """Where a Delta source stands: in ``reservoir_version``, after file ``index``
    (-1: before its first file); ``is_starting_version``: still reading that version's
    snapshot."""

    reservoir_id: str
    reservoir_version: int
    index: int
    is_starting_version: bool

    @classmethod
    def from_offset(cls, offset: Mapping[str, Any] | None) -> DeltaPosition | None:
        if not offset or "reservoirVersion" not in offset:
            return None
        return cls(
            reservoir_id=str(offset.get("reservoirId", "")),
            reservoir_version=int(offset["reservoirVersion"]),
            index=int(offset.get("index", -1)),
            is_starting_version=bool(offset.get("isStartingVersion", False)),
        )


@dataclass(frozen=True)
class CheckpointLog:
    """The batch ids a checkpoint holds, and its query id."""

    query_id: str | None
    offsets: tuple[int, ...]
    commits: tuple[int, ...]

    @property
    def last_offsets(self) -> int | None:
        return max(self.offsets) if self.offsets else None

    @property
    def last_commit(self) -> int | None:
        return max(self.commits) if self.commits else None

    @property
    def resume_batch(self) -> int | None:
        """The batch whose end offsets are where the next run starts reading (the last
        committed one); before any commit, the first planned batch (it is replayed from the
        source's beginning up to its end offsets). None: the query never ran."""
        if self.last_commit is not None:
            return self.last_commit
        return min(self.offsets) if self.offsets else None


def batch_ids(names: Sequence[str]) -> tuple[int, ...]:
    """Batch ids among file names of ``offsets/`` or ``commits/`` (checksums, temp files
    and anything else skipped)."""
    return tuple(sorted(int(n) for n in names if n.isdigit()))


def parse_query_id(text: str) -> str:
    return str(json.loads(text.splitlines()[0])["id"])


def txn_problem(
    table: str, txn_version: int | None, last_commit: int | None, last_offsets: int | None
) -> str | None:
    """Why a table and the checkpoint of the query writing it cannot agree, or None."""
    if txn_version is None:
        return None
    if last_offsets is None or txn_version > last_offsets:
        planned = "no batch" if last_offsets is None else f"batches up to {last_offsets}"
        return (
            f"{table} holds batch {txn_version} of this query but the checkpoint planned "
            f"{planned}: the checkpoint is older than its table"
        )
    return None


# -- manifests --------------------------------------------------------------------------------


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
