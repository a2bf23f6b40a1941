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
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from lakehouse.settings import Settings
from lakehouse.specs import RUN_LOG, schema_fields

if TYPE_CHECKING:
    from lakehouse.s3 import S3Config

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Each column as an Arrow type of arro3 (deltalake's own Arrow library): pyarrow would bring
# pandas with it, a quarter of a second of imports for one row.
_ARROW_TYPES = {
    "STRING": "string",
    "TIMESTAMP": "timestamp",
    "DOUBLE": "float64",
    "BIGINT": "int64",
    "INT": "int32",
}


def _column(value: Any, sql_type: str) -> Any:
    """One value as a one-row arro3 array of the column's type."""
    from arro3.core import Array, DataType

    kind = _ARROW_TYPES[sql_type.upper()]
    if kind != "timestamp":
        return Array([value], getattr(DataType, kind)())
    # arro3 builds timestamps from their integer microseconds only (a naive time is UTC's).
    micros = None
    if value is not None:
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        micros = (moment - _EPOCH) // timedelta(microseconds=1)
    return Array([micros], DataType.int64()).cast(DataType.timestamp("us", tz="UTC"))


def append_row(settings: Settings, s3: S3Config | None = None, **values: Any) -> None:
    """Append one row (columns of ``RUN_LOG``; ``details`` as a dict) with delta-rs, under the
    run log's write lease (``s3``: the credentials of an S3 root, default the environment's)."""
    from arro3.core import Table
    from deltalake import write_deltalake

    from lakehouse.fs import delta_storage_options
    from lakehouse.locks import table_locks

    fields = schema_fields(RUN_LOG.schema)
    row: dict[str, Any] = {name: None for name, _ in fields}
    unknown = set(values) - set(row)
    if unknown:
        raise ValueError(f"not run-log columns: {sorted(unknown)}")
    row.update(values)
    row["details"] = json.dumps(values.get("details") or {}, sort_keys=True, default=str)
    started, ended = row.get("started_at"), row.get("ended_at")
    if isinstance(started, datetime) and isinstance(ended, datetime):
        row["duration_s"] = round((ended - started).total_seconds(), 3)
    table = Table.from_pydict({name: _column(row[name], sql_type) for name, sql_type in fields})
    owner = f"{row.get('pipeline')}.{row.get('layer')} run {row.get('run_id')} (run log)"
    with table_locks(settings, [RUN_LOG.name], owner, settings.lock_wait_s, s3):
        options = delta_storage_options(settings, s3)
        write_deltalake(
            settings.path(RUN_LOG.name),
            table,
            mode="append",
            storage_options=options,
            configuration=dict(RUN_LOG.properties),  # used when this append makes the table
        )


def is_ready(settings: Settings, s3: S3Config | None = None) -> bool:
    """Whether the run log exists with every column and property ``RUN_LOG`` declares, read
    from its log by delta-rs: a job then appends without asking Spark to make sure of it (in
    a fresh driver, loading the table's state in Spark took more than half a second)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from lakehouse.fs import delta_storage_options

    try:
        table = DeltaTable(
            settings.path(RUN_LOG.name), storage_options=delta_storage_options(settings, s3)
        )
    except TableNotFoundError:
        return False
    columns = {field.name.lower() for field in table.schema().fields}
    configuration = table.metadata().configuration
    return all(name.lower() in columns for name, _ in schema_fields(RUN_LOG.schema)) and all(
        configuration.get(k) == v for k, v in RUN_LOG.properties.items()
    )


def now() -> datetime:
    return datetime.now(UTC)
