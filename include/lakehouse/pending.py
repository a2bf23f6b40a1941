"""What a layer would read if it ran now, worked out without a JVM.

Reads the stream's checkpoint (``lakehouse.checkpoints``: the files a file source took; the
last committed offset of a Delta source) and the source itself (the landing folder; the
Delta log, through delta-rs) and says what is new since the last committed micro-batch. The
``dry_run`` param uses it to say what a run would do; it is also the basis for skipping Spark
when nothing arrived.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakehouse.checkpoints import Checkpoint, DeltaPosition
from lakehouse.fs import Storage, delta_storage_options, normalize_location, storage_for
from lakehouse.params import Mode, RunParams
from lakehouse.settings import Settings, SourceKind
from lakehouse.specs import Layer, PipelineSpec

if TYPE_CHECKING:
    from lakehouse.s3 import S3Config

# Commits that change no data: a stream reading the table skips them.
_NO_DATA_OPERATIONS = ("OPTIMIZE", "VACUUM START", "VACUUM END")


@dataclass(frozen=True)
class Pending:
    layer: str
    items: int  # files (file source) or table versions (Delta source)
    rows: int | None  # rows in them, when known without reading data
    description: str

    @property
    def nothing(self) -> bool:
        return self.items == 0


def _delta_pending(
    settings: Settings, layer: str, source: str, checkpoint: Checkpoint, s3: S3Config | None
) -> Pending:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        options = delta_storage_options(settings, s3)
        table = DeltaTable(settings.path(source), storage_options=options)
    except TableNotFoundError:
        return Pending(layer, 0, 0, f"{source} does not exist yet: nothing to read")
    latest = table.version()
    committed = checkpoint.committed_offsets()
    position = DeltaPosition.from_offset(committed.source(0) if committed else None)
    if position is None:
        import pyarrow as pa

        counts = pa.table(table.get_add_actions(flatten=True)).column("num_records").to_pylist()
        rows = sum(int(n or 0) for n in counts)
        return Pending(
            layer, latest + 1, rows, f"all of {source} (version {latest}, {rows:,} rows)"
        )
    start = position.next_unread_version
    versions = [h for h in table.history() if int(h["version"]) >= start]
    rows = sum(
        int((h.get("operationMetrics") or {}).get("numOutputRows", 0) or 0)
        for h in versions
        if h.get("operation") not in _NO_DATA_OPERATIONS
    )
    if not versions:
        return Pending(layer, 0, 0, f"nothing new in {source} since version {start - 1}")
    return Pending(
        layer,
        len(versions),
        rows,
        f"{len(versions)} new versions of {source} ({start}..{latest}, about {rows:,} rows)",
    )


def _landing_pending(
    settings: Settings, pipeline: PipelineSpec, layer: str, storage: Storage, checkpoint: Checkpoint
) -> Pending:
    """Landing files the file source has not taken yet (hidden names are never taken)."""
    landing = settings.path(pipeline.landing)
    files = {
        name: size
        for name, size in storage.file_sizes(landing).items()
        if not name.startswith((".", "_"))
    }
    seen = checkpoint.files_read()
    new = {
        name: size
        for name, size in files.items()
        if normalize_location(f"{landing}/{name}") not in seen
    }
    size = sum(new.values())
    return Pending(layer, len(new), None, f"{len(new)} new landing files ({size:,} bytes)")


def pending_input(
    settings: Settings, pipeline: PipelineSpec, layer: str, s3: S3Config | None = None
) -> Pending:
    """What ``layer`` would read now (``s3``: credentials for an S3 root, default the
    environment's)."""
    stream = pipeline.stream(layer)
    storage = storage_for(settings, s3)
    checkpoint = Checkpoint(storage, settings.path(stream.checkpoint))
    if stream.sources:
        return _delta_pending(settings, layer, stream.sources[0], checkpoint, s3)
    source = settings.pipeline(pipeline).source
    if source != SourceKind.FILE:
        return Pending(layer, 0, None, f"{source} source: checked by the job")
    return _landing_pending(settings, pipeline, layer, storage, checkpoint)


def dry_run_report(
    settings: Settings, pipeline: PipelineSpec, params: RunParams, s3: S3Config | None = None
) -> list[str]:
    """What a run with ``params`` would do, layer by layer, without doing it."""
    lines = [f"{pipeline.name}: {params.describe()}"]
    for layer in params.layers:
        if layer not in pipeline.layers:
            continue
        pending = pending_input(settings, pipeline, layer, s3)
        targets = ", ".join(pipeline.stream(layer).targets)
        lines.append(f"  {layer}: would read {pending.description} into {targets}")
        if layer != Layer.BRONZE and params.mode == Mode.REPROCESS:
            lines.append(
                f"  {layer}: then re-derive {targets} for [{params.reprocess_from}, "
                f"{params.reprocess_to}) from all of its input"
            )
        elif layer != Layer.BRONZE and params.mode == Mode.FULL_REFRESH:
            lines.append(
                f"  {layer}: then rebuild {targets} from all of its input (one overwrite each)"
            )
    return lines
