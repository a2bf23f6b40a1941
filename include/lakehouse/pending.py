"""What a layer would read if it ran now, worked out without a JVM.

Reads the stream's checkpoint (``lakehouse.checkpoints``: the files a file source took; the
last committed offsets of Kafka or Delta sources) and the source itself (the landing folder;
the brokers' latest offsets; the Delta log, through delta-rs) and says what is new since the
last committed micro-batch. The ``dry_run`` param uses it to say what a run would do, and a
scheduled run skips a layer with nothing to do without starting Spark (``Pending.nothing``, and
no ``unfinished_rederivation``).

A micro-batch that was planned but never committed (a killed run) is always something to do:
the next run finishes it; so is a re-derivation that was left unfinished (its marker).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakehouse.checkpoints import Checkpoint, DeltaPosition, RederiveMarker
from lakehouse.fs import Storage, delta_storage_options, normalize_location, storage_for
from lakehouse.params import Mode, RunParams
from lakehouse.settings import Settings, SourceKind
from lakehouse.specs import Layer, PipelineSpec

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from lakehouse.kafka.access import KafkaAccess
    from lakehouse.kafka.brokers import PreflightReport
    from lakehouse.s3 import S3Config

# Commits that change no data: a stream reading the table skips them.
_NO_DATA_OPERATIONS = ("OPTIMIZE", "VACUUM START", "VACUUM END")

# Up to this much input, a run pays more to compile than to run: its driver starts with the
# quick compiler (``lakehouse.jvm``) and its query is evaluated without generated code
# (``jobs.session.interpreted``). Measured on 2 cores, both are at least as fast up to here.
SMALL_MAX_ROWS = 100_000
SMALL_MAX_BYTES = 32 * 1024 * 1024  # landing files: about 100,000 order events


@dataclass(frozen=True)
class Pending:
    layer: str
    items: int  # files (file source) or table versions (Delta source)
    rows: int | None  # rows in them, when known without reading data
    description: str
    bytes: int | None = None  # their size, when that is what is known (landing files)

    @property
    def nothing(self) -> bool:
        return self.items == 0

    @property
    def small(self) -> bool:
        """Known to be small: at most ``SMALL_MAX_ROWS`` rows (when the rows are known) or
        ``SMALL_MAX_BYTES`` bytes; an input of unknown size never is."""
        if self.rows is not None:
            return self.rows <= SMALL_MAX_ROWS
        return self.bytes is not None and self.bytes <= SMALL_MAX_BYTES


def _delta_pending(
    settings: Settings,
    layer: str,
    source: str,
    checkpoint: Checkpoint,
    index: int,
    s3: S3Config | None,
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
    position = DeltaPosition.from_offset(committed.source(index) if committed else None)
    if position is None:
        rows = _table_rows(table)
        return Pending(
            layer, latest + 1, rows, f"all of {source} (version {latest}, {_rows_text(rows)})"
        )
    start = position.next_unread_version
    # Only the unread commits (none when the checkpoint is at the latest version): a table's
    # whole history grows with every run of every day.
    unread = latest - start + 1
    versions = table.history(limit=unread) if unread > 0 else []
    rows = sum(
        int((h.get("operationMetrics") or {}).get("numOutputRows", 0) or 0)
        for h in versions
        if h.get("operation") not in _NO_DATA_OPERATIONS
    )
    if not rows and all(h.get("operation") in _NO_DATA_OPERATIONS for h in versions):
        return Pending(layer, 0, 0, f"nothing new in {source} since version {start - 1}")
    return Pending(
        layer,
        len(versions),
        rows,
        f"{len(versions)} new versions of {source} ({start}..{latest}, about {rows:,} rows)",
    )


def _table_rows(table: DeltaTable) -> int | None:
    """Rows in a table's current files, from the statistics its log keeps for each (None if a
    file has none)."""
    import pyarrow as pa

    counts = pa.table(table.get_add_actions(flatten=True)).column("num_records").to_pylist()
    return None if None in counts else sum(int(n) for n in counts)


def whole_tables(
    settings: Settings, layer: str, tables: Sequence[str], s3: S3Config | None = None
) -> Pending:
    """All of ``tables``, as a re-derivation (a reprocess or a full refresh) reads them, with
    their rows from the Delta log: its size decides, as an increment's does, whether the work
    is small (``Pending.small``)."""
    from deltalake import DeltaTable

    options = delta_storage_options(settings, s3)
    counts = [_table_rows(DeltaTable(settings.path(t), storage_options=options)) for t in tables]
    rows = None if None in counts else sum(n or 0 for n in counts)
    return Pending(layer, len(tables), rows, f"all of {', '.join(tables)} ({_rows_text(rows)})")


def _rows_text(rows: int | None) -> str:
    return "rows unknown" if rows is None else f"{rows:,} rows"


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
    return Pending(layer, len(new), None, f"{len(new)} new landing files ({size:,} bytes)", size)


def _kafka_pending(
    settings: Settings,
    pipeline: PipelineSpec,
    layer: str,
    checkpoint: Checkpoint,
    access: KafkaAccess,
) -> Pending:
    """Records on the brokers after the checkpoint (the pre-flight check's backlog)."""
    from lakehouse.kafka.brokers import check_offsets
    from lakehouse.kafka.offsets import checkpoint_offsets

    topics = settings.pipeline(pipeline).subscription
    report = check_offsets(access, topics, checkpoint_offsets(checkpoint), accept_data_loss=True)
    return kafka_backlog(layer, report)


def kafka_backlog(layer: str, report: PreflightReport) -> Pending:
    """What a Kafka pre-flight check found to read."""
    return Pending(
        layer,
        report.backlog,
        report.backlog,
        f"{report.backlog:,} new records on {report.partitions} Kafka partition(s)",
    )


def unfinished_rederivation(
    settings: Settings, pipeline: PipelineSpec, layer: str, s3: S3Config | None = None
) -> Pending | None:
    """A re-derivation of ``layer`` that an earlier run left unfinished (its marker,
    ``StreamSpec.rederive_marker``), as work for the next run; None when there is none. A
    layer that reads the raw source (bronze) never re-derives: no read for it."""
    stream = pipeline.stream(layer)
    if stream.reads_raw_source:
        return None
    marker = RederiveMarker(storage_for(settings, s3), settings.path(stream.rederive_marker))
    spec = marker.spec()
    if spec is None:
        return None
    left = json.dumps(spec)
    return Pending(layer, 1, None, f"a re-derivation to finish (left unfinished: {left})")


def pending_input(
    settings: Settings,
    pipeline: PipelineSpec,
    layer: str,
    kafka: KafkaAccess | None = None,
    s3: S3Config | None = None,
) -> Pending:
    """What ``layer`` of ``pipeline`` would read now. A Kafka source is asked only when
    ``kafka`` (how to reach it) is given; without it the answer is "checked by the job".
    ``s3``: credentials for an S3 root (default the environment's)."""
    stream = pipeline.stream(layer)
    storage = storage_for(settings, s3)
    checkpoint = Checkpoint(storage, settings.path(stream.checkpoint))
    log = checkpoint.log()
    if log.last_offsets is not None and log.last_offsets != log.last_commit:
        return Pending(
            layer, 1, None, f"micro-batch {log.last_offsets} to finish (never committed)"
        )
    if stream.sources:
        found = [
            _delta_pending(settings, layer, source, checkpoint, index, s3)
            for index, source in enumerate(stream.sources)
        ]
        if len(found) == 1:
            return found[0]
        rows = [p.rows for p in found]
        return Pending(
            layer,
            sum(p.items for p in found),
            None if None in rows else sum(r or 0 for r in rows),
            "; ".join(p.description for p in found),
        )
    source = settings.pipeline(pipeline).source
    if source == SourceKind.KAFKA:
        if kafka is None:
            return Pending(layer, 1, None, "kafka source: checked by the job")
        return _kafka_pending(settings, pipeline, layer, checkpoint, kafka)
    return _landing_pending(settings, pipeline, layer, storage, checkpoint)


def dry_run_report(
    settings: Settings, pipeline: PipelineSpec, params: RunParams, s3: S3Config | None = None
) -> list[str]:
    """What a run with ``params`` would do, layer by layer, without doing it."""
    lines = [f"{pipeline.name}: {params.describe()}"]
    for layer in params.layers:
        if layer not in pipeline.layers:
            continue
        pending = unfinished_rederivation(settings, pipeline, layer, s3) or pending_input(
            settings, pipeline, layer, s3=s3
        )
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
