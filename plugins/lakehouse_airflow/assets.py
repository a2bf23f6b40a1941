"""One Airflow Asset per lakehouse table, named from the table's name."""

from __future__ import annotations

from airflow.sdk import Asset


def table_asset(table: str) -> Asset:
    """The asset for ``layer/table`` (e.g. ``silver/orders``)."""
    return Asset(
        name=f"lakehouse.{table.replace('/', '.')}",
        uri=f"lakehouse://{table}",
        group="lakehouse",
    )
