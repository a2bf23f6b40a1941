"""What a layer would read if it ran now, worked out without a JVM.

Reads the stream's checkpoint (the files of a file source's log; the last committed offset of
a Delta source) and the source itself (the landing folder; the Delta log, through delta-rs)
and says what is new since the last committed micro-batch. The ``dry_run`` param uses it to
say what a run would do; it is also the basis for skipping Spark when nothing arrived.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from lakehouse.params import RunParams
from lakehouse.settings import Settings
from lakehouse.specs import PipelineSpec


@dataclass(frozen=True)
class Pending:
    layer: str
    items: int  # files (file source) or table versions (Delta source)
    rows: int | None  # rows in them, when known without reading data
    description: str

    @property
    def nothing(self) -> bool:
        return self.items == 0


def _batch_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return [p for p in directory.iterdir() if p.name.split(".")[0].isdigit()]


def last_committed_offsets(checkpoint: Path) -> list[dict] | None:
    """Source offsets of the last committed micro-batch (one dict per source), if any."""
    commits = [int(p.name) for p in _batch_files(checkpoint / "commits") if p.name.isdigit()]
    if not commits:
        return None
    lines = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()
    # v1 / batch metadata / one offset per source
    return [json.loads(line) for line in lines[2:] if line.strip() not in ("", "-")]


def file_source_seen(checkpoint: Path) -> set[str]:
    """Paths a file source has already taken (its log under ``sources/0``)."""
    seen: set[str] = set()
    for entry in _batch_files(checkpoint / "sources" / "0"):
        for line in entry.read_text().splitlines()[1:]:
            if line.strip():
                seen.add(unquote(urlparse(json.loads(line)["path"]).path))
    return seen


def _delta_pending(settings: Settings, layer: str, source: str, checkpoint: Path) -> Pending:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(settings.path(source))
    except TableNotFoundError:
        return Pending(layer, 0, 0, f"{source} does not exist yet: nothing to read")
    latest = table.version()
    offsets = last_committed_offsets(checkpoint)
    if not offsets:
        import pyarrow as pa

        counts = pa.table(table.get_add_actions(flatten=True)).column("num_records").to_pylist()
        rows = sum(int(n or 0) for n in counts)
        return Pending(
            layer, latest + 1, rows, f"all of {source} (version {latest}, {rows:,} rows)"
        )
    offset = offsets[0]
    start = int(offset["reservoirVersion"])
    if offset.get("isStartingVersion") or int(offset.get("index", -1)) != -1:
        start += 1  # the rest of a partly read version is not counted
    versions = [h for h in table.history() if int(h["version"]) >= start]
    rows = sum(
        int((h.get("operationMetrics") or {}).get("numOutputRows", 0) or 0)
        for h in versions
        if h.get("operation") not in ("OPTIMIZE", "VACUUM START", "VACUUM END")
    )
    if not versions:
        return Pending(layer, 0, 0, f"nothing new in {source} since version {start - 1}")
    return Pending(
        layer,
        len(versions),
        rows,
        f"{len(versions)} new versions of {source} ({start}..{latest}, about {rows:,} rows)",
    )


def pending_input(settings: Settings, pipeline: PipelineSpec, layer: str) -> Pending:
    stream = pipeline.stream(layer)
    checkpoint = settings.local_path(stream.checkpoint)
    if stream.source_table:
        return _delta_pending(settings, layer, stream.source_table, checkpoint)
    if settings.orders_source != "file":
        return Pending(layer, 0, None, f"{settings.orders_source} source: checked by the job")
    landing = settings.local_path(pipeline.landing)
    files = [
        p
        for p in (landing.iterdir() if landing.is_dir() else [])
        if p.is_file() and not p.name.startswith((".", "_"))
    ]
    seen = file_source_seen(checkpoint)
    new = [p for p in files if str(p.resolve()) not in seen and str(p) not in seen]
    size = sum(p.stat().st_size for p in new)
    return Pending(layer, len(new), None, f"{len(new)} new landing files ({size:,} bytes)")


def dry_run_report(settings: Settings, pipeline: PipelineSpec, params: RunParams) -> list[str]:
    """What a run with ``params`` would do, layer by layer, without doing it."""
    lines = [f"{pipeline.name}: {params.describe()}"]
    for layer in params.layers:
        pending = pending_input(settings, pipeline, layer)
        targets = ", ".join(pipeline.stream(layer).targets)
        lines.append(f"  {layer}: would read {pending.description} into {targets}")
        if layer != "bronze" and params.mode == "reprocess":
            lines.append(
                f"  {layer}: then re-derive {targets} for event_ts in "
                f"[{params.reprocess_from}, {params.reprocess_to}) from all of its input"
            )
        elif layer != "bronze" and params.mode == "full_refresh":
            lines.append(
                f"  {layer}: then rebuild {targets} from all of its input (one overwrite each)"
            )
    return lines
