"""Create Delta tables from their declarations, idempotently and never by inference."""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession

from jobs.delta_state import is_delta_table, table_properties
from lakehouse.errors import ConfigurationError
from lakehouse.locks import holds
from lakehouse.settings import Settings
from lakehouse.specs import TableSpec, schema_fields

log = logging.getLogger("lakehouse.tables")


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


def set_declared_properties(spark: SparkSession, spec: TableSpec, location: str) -> list[str]:
    """Give an existing table the declared properties it lacks or holds another value of
    (a table made before a property was declared gets it; one commit, no data changed).
    Properties that are not declared are left as they are. Returns the names set.

    Only the table's writer does it, under the table's lease: a metadata commit beside
    another job's write would fail that write."""
    if not holds(spec.name):
        return []
    held = table_properties(spark, location)
    differing = {k: v for k, v in spec.properties.items() if held.get(k) != v}
    if differing:
        props = ", ".join(f"'{k}' = '{v}'" for k, v in sorted(differing.items()))
        spark.sql(f"ALTER TABLE {quote_path(location)} SET TBLPROPERTIES ({props})")
        log.info("%s: declared properties set: %s", spec.name, props)
    return sorted(differing)


def ensure_table(spark: SparkSession, settings: Settings, spec: TableSpec) -> str:
    """Create ``spec`` under the root unless it exists, or give it the columns and properties
    it lacks; return its location."""
    location = settings.path(spec.name)
    if is_delta_table(spark, location):
        add_missing_columns(spark, spec, location)
        set_declared_properties(spark, spec, location)
        return location
    try:
        spark.sql(create_statement(spec, location))
    except Exception:
        # Another job created it between our check and our CREATE (an analysis error or a
        # Delta concurrency error): fine if it is there now.
        if not is_delta_table(spark, location):
            raise
    return location


def ensure_tables(spark: SparkSession, settings: Settings, specs: list[TableSpec]) -> None:
    for spec in specs:
        ensure_table(spark, settings, spec)
