"""Streaming checkpoints, read in one place and without Spark.

A checkpoint (``<root>/_checkpoints/<table>``) holds ``metadata`` (the query id, which is also
the Delta transaction id of every write the query makes), ``offsets/<n>`` (the end offsets of
batch ``n``, written before the batch runs), ``commits/<n>`` (written after it committed) and,
for some sources, ``sources/<i>/`` (a file source's log of the files it took; a Kafka source's
starting offsets). ``Checkpoint`` reads all of it over any ``lakehouse.fs.Storage``: the local
disk, an object store, or Spark's Hadoop file system inside a job. If Spark changes its
offset-log format, this is the one place to change.

Invariant between a checkpoint and a table it writes (``T`` the table's transaction version
for the query, ``C`` the last committed batch, ``O`` the last planned one, ``O`` = ``C`` or
``C + 1``): the table may never hold a batch the checkpoint did not plan, ``T <= O``. ``T`` may
trail ``C``: a batch with nothing for a table writes nothing to it. ``T == C + 1 == O`` is a
crash between the table commit and ``commits/<O>``: the replay is skipped by the table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lakehouse.errors import CheckpointInconsistent
from lakehouse.fs import Storage, normalize_location


@dataclass(frozen=True)
class OffsetEntry:
    """One ``offsets/<n>`` file: batch metadata and one offset per source (None: none yet)."""

    batch_id: int
    metadata: Mapping[str, Any]
    sources: tuple[Mapping[str, Any] | None, ...]

    def source(self, index: int = 0) -> Mapping[str, Any] | None:
        return self.sources[index] if index < len(self.sources) else None


def parse_offsets(batch_id: int, text: str) -> OffsetEntry:
    """Parse Spark's offset log format: a ``v1`` line, the metadata, one line per source."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("v"):
        raise CheckpointInconsistent(f"offsets/{batch_id} is not a Spark offset log entry.")
    try:
        metadata = json.loads(lines[1]) if len(lines) > 1 else {}
        sources = tuple(None if line.strip() == "-" else json.loads(line) for line in lines[2:])
    except ValueError:
        raise CheckpointInconsistent(f"offsets/{batch_id} is damaged (not JSON).") from None
    return OffsetEntry(batch_id, metadata, sources)


def parse_query_id(text: str) -> str:
    return str(json.loads(text.splitlines()[0])["id"])


def batch_ids(names: Sequence[str]) -> tuple[int, ...]:
    """Batch ids among file names of ``offsets/`` or ``commits/`` (checksums, temp files
    and anything else skipped)."""
    return tuple(sorted(int(n) for n in names if n.isdigit()))


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

    @property
    def next_unread_version(self) -> int:
        """The first version none of whose changes has been read yet."""
        partly_read = self.is_starting_version or self.index != -1
        return self.reservoir_version + 1 if partly_read else self.reservoir_version


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


@dataclass(frozen=True)
class Checkpoint:
    """One streaming checkpoint at ``location``, read through ``storage``."""

    storage: Storage
    location: str

    def path(self, relative: str) -> str:
        return f"{self.location.rstrip('/')}/{relative}"

    def query_id(self) -> str | None:
        text = self.storage.read_text(self.path("metadata"))
        return parse_query_id(text) if text else None

    def log(self) -> CheckpointLog:
        return CheckpointLog(
            query_id=self.query_id(),
            offsets=batch_ids(self.storage.list_names(self.path("offsets"))),
            commits=batch_ids(self.storage.list_names(self.path("commits"))),
        )

    def offsets(self, batch_id: int) -> OffsetEntry:
        text = self.storage.read_text(self.path(f"offsets/{batch_id}"))
        if text is None:
            raise CheckpointInconsistent(
                f"the checkpoint {self.location} has no offsets/{batch_id}."
            )
        return parse_offsets(batch_id, text)

    def committed_offsets(self, log: CheckpointLog | None = None) -> OffsetEntry | None:
        """The end offsets of the last committed batch: where the next batch starts."""
        last = (log or self.log()).last_commit
        return None if last is None else self.offsets(last)

    def resume_offsets(self, log: CheckpointLog | None = None) -> OffsetEntry | None:
        """The offsets of the resume batch (see ``CheckpointLog.resume_batch``)."""
        batch = (log or self.log()).resume_batch
        return None if batch is None else self.offsets(batch)

    def initial_offset(self, source: int = 0) -> str | None:
        """What ``sources/<source>/0`` holds: a source's starting offsets (Kafka), as JSON
        text after Spark's version prefix; None when there is none."""
        text = self.storage.read_text(self.path(f"sources/{source}/0"))
        if text is None or "{" not in text:
            return None
        return text[text.index("{") :]

    def files_read(self, source: int = 0) -> set[str]:
        """Paths a file source has already taken (its log under ``sources/<source>``), in
        ``lakehouse.fs.normalize_location``'s spelling (a local path; ``s3a://bucket/key``)."""
        folder = self.path(f"sources/{source}")
        seen: set[str] = set()
        for name in self.storage.list_names(folder):
            if not name.split(".")[0].isdigit():
                continue
            text = self.storage.read_text(f"{folder}/{name}") or ""
            for line in text.splitlines()[1:]:
                if line.strip():
                    seen.add(normalize_location(json.loads(line)["path"]))
        return seen


@dataclass(frozen=True)
class RederiveMarker:
    """A layer's re-derivation that is not one commit (``StreamSpec.rederive_marker``): put
    down before its first write, cleared after its last, holding as JSON what it has to do
    and the run that began it. A marker that is there is a promise the layer's next run
    keeps, whatever its mode; read and written through any ``lakehouse.fs.Storage``, so the
    idle check (no Spark) and the jobs read the same thing."""

    storage: Storage
    location: str

    def spec(self) -> dict[str, Any] | None:
        """What the unfinished re-derivation has to do; None when there is none."""
        text = self.storage.read_text(self.location)
        return None if text is None else dict(json.loads(text))

    def put(self, spec: Mapping[str, Any]) -> None:
        self.storage.write_bytes(self.location, json.dumps(dict(spec)).encode("utf-8"))

    def clear(self) -> None:
        self.storage.delete_file(self.location)


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
