"""Create Delta tables from their declarations, idempotently and never by inference."""

from __future__ import annotations

from pyspark.sql import SparkSession

from lakehouse.errors import ConfigurationError
from lakehouse.settings import Settings
from lakehouse.specs import TableSpec, schema_fields


def quote_path(location: str) -> str:
    if "`" in location:
        raise ConfigurationError(f"table location {location!r} must not contain a backtick.")
    return f"delta.`{location}`"


def create_statement(spec: TableSpec, location: str) -> str:
    parts = [f"CREATE TABLE IF NOT EXISTS {quote_path(location)} ({spec.schema}) USING DELTA"]
    if spec.partition_by:
        parts.append(f"PARTITIONED BY ({', '.join(spec.partition_by)})")
    if spec.properties:
        props = ", ".join(f"'{k}' = '{v}'" for k, v in sorted(spec.properties.items()))
        parts.append(f"TBLPROPERTIES ({props})")
    return " ".join(parts)


def add_missing_columns(spark: SparkSession, spec: TableSpec, location: str) -> list[str]:
    """Add the declared columns an existing table lacks (new nullable columns only: the one
    schema change every reader and every running stream tolerates). Returns their names."""
    existing = {c.lower() for c in spark.read.format("delta").load(location).columns}
    missing = [(n, t) for n, t in schema_fields(spec.schema) if n.lower() not in existing]
    if missing:
        columns = ", ".join(f"{name} {type_ddl}" for name, type_ddl in missing)
        spark.sql(f"ALTER TABLE {quote_path(location)} ADD COLUMNS ({columns})")
    return [name for name, _ in missing]


def ensure_table(spark: SparkSession, settings: Settings, spec: TableSpec) -> str:
    """Create ``spec`` under the root unless it exists, or add the columns it lacks; return
    its location."""
    from delta.tables import DeltaTable

    location = settings.path(spec.name)
    if DeltaTable.isDeltaTable(spark, location):
        add_missing_columns(spark, spec, location)
        return location
    try:
        spark.sql(create_statement(spec, location))
    except Exception:
        # Another job created it between our check and our CREATE (an analysis error or a
        # Delta concurrency error): fine if it is there now.
        if not DeltaTable.isDeltaTable(spark, location):
            raise
    return location


def ensure_tables(spark: SparkSession, settings: Settings, specs: list[TableSpec]) -> None:
    for spec in specs:
        ensure_table(spark, settings, spec)
