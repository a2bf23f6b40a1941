"""Run-log rows written without Spark, through delta-rs: one row is not worth a Spark job.

Two kinds of writer append here: a task that decided not to start a JVM (a layer with nothing
new to read is skipped, and says so in ``ops/run_log``), and the jobs themselves
(``jobs.runtime.append_run_log``, after Spark has made the table with its properties). The
table's schema is ``lakehouse.specs.RUN_LOG``. Appends are blind appends, which Delta's
optimistic concurrency never refuses; every writer holds the table's write lease while it
appends (on S3, commits are not atomic between writers without it).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakehouse.settings import Settings
from lakehouse.specs import RUN_LOG, schema_fields

if TYPE_CHECKING:
    from lakehouse.s3 import S3Config

_ARROW_TYPES = {
    "STRING": "string",
    "TIMESTAMP": "timestamp",
    "DOUBLE": "float64",
    "BIGINT": "int64",
    "INT": "int32",
}


def _arrow_schema() -> Any:
    import pyarrow as pa

    fields = []
    for name, sql_type in schema_fields(RUN_LOG.schema):
        kind = _ARROW_TYPES[sql_type.upper()]
        arrow = pa.timestamp("us", tz="UTC") if kind == "timestamp" else getattr(pa, kind)()
        fields.append(pa.field(name, arrow))
    return pa.schema(fields)


def append_row(settings: Settings, s3: S3Config | None = None, **values: Any) -> None:
    """Append one row (columns of ``RUN_LOG``; ``details`` as a dict) with delta-rs, under the
    run log's write lease (``s3``: the credentials of an S3 root, default the environment's)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from lakehouse.fs import delta_storage_options
    from lakehouse.locks import table_locks

    row: dict[str, Any] = {name: None for name, _ in schema_fields(RUN_LOG.schema)}
    unknown = set(values) - set(row)
    if unknown:
        raise ValueError(f"not run-log columns: {sorted(unknown)}")
    row.update(values)
    row["details"] = json.dumps(values.get("details") or {}, sort_keys=True, default=str)
    started, ended = row.get("started_at"), row.get("ended_at")
    if isinstance(started, datetime) and isinstance(ended, datetime):
        row["duration_s"] = round((ended - started).total_seconds(), 3)
    table = pa.Table.from_pylist([row], schema=_arrow_schema())
    owner = f"{row.get('pipeline')}.{row.get('layer')} run {row.get('run_id')} (run log)"
    with table_locks(settings, [RUN_LOG.name], owner, settings.lock_wait_s, s3):
        options = delta_storage_options(settings, s3)
        write_deltalake(settings.path(RUN_LOG.name), table, mode="append", storage_options=options)


def now() -> datetime:
    return datetime.now(UTC)
