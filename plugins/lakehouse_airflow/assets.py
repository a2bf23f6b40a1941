"""One Airflow Asset per lakehouse table, defined once from the table registry."""

from __future__ import annotations

from airflow.sdk import Asset

from lakehouse.pipelines import PIPELINES, RUN_LOG


def table_asset(table: str) -> Asset:
    """The asset for ``layer/table`` (e.g. ``silver/orders``)."""
    return Asset(
        name=f"lakehouse.{table.replace('/', '.')}",
        uri=f"lakehouse://{table}",
        group="lakehouse",
    )


TABLE_ASSETS: dict[str, Asset] = {
    spec.name: table_asset(spec.name)
    for pipeline in PIPELINES.values()
    for spec in (*pipeline.tables, RUN_LOG)
}
