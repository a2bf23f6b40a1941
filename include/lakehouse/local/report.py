"""A short report on the lakehouse tables, read with delta-rs: no JVM, a second or two.

python -m lakehouse.local.report          # or: lakehouse report
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

from lakehouse.pipelines import ORDERS, RUN_LOG
from lakehouse.settings import Settings


def _rows(
    settings: Settings, table: str, columns: list[str] | None = None
) -> list[dict[str, Any]] | None:
    from deltalake.exceptions import TableNotFoundError

    try:
        return read_rows(settings.path(table), columns)
    except TableNotFoundError:
        return None


def read_rows(
    location: str, columns: list[str] | None = None, version: int | None = None
) -> list[dict[str, Any]]:
    """A Delta table's rows through delta-rs's own query engine.

    Not ``DeltaTable.to_pyarrow_table``: its pyarrow dataset scan leaves threads behind that
    abort the interpreter at exit about half the time ("terminate called without an active
    exception", delta-io/delta-rs#2184, apache/arrow#34314).
    """
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    selected = ", ".join(f'"{c}"' for c in columns) if columns else "*"
    query = QueryBuilder().register("t", DeltaTable(location, version=version))
    return list(pa.table(query.execute(f"SELECT {selected} FROM t").read_all()).to_pylist())


def render(settings: Settings, top: int = 5) -> str:
    lines = [f"Lakehouse at {settings.root}", ""]
    lines.append("Rows per table")
    for spec in (*ORDERS.tables, RUN_LOG):
        rows = _rows(settings, spec.name, spec.columns[:1])
        size = "not created yet" if rows is None else f"{len(rows):,}"
        lines.append(f"  {spec.name:<28} {size}")

    quarantine = _rows(settings, "silver/orders_quarantine", ["reason"]) or []
    if quarantine:
        lines += ["", f"Quarantine reasons ({len(quarantine):,} records)"]
        for reason, count in Counter(r["reason"] for r in quarantine).most_common():
            lines.append(f"  {reason:<28} {count:>6,}")

    gold = _rows(settings, "gold/sales_hourly") or []
    if gold:
        lines += ["", f"Busiest hours (gold/sales_hourly, top {top} by orders)"]
        lines.append(
            f"  {'hour (UTC)':<17} {'region':<9} {'orders':>6} {'cancelled':>9} "
            f"{'revenue':>12} {'avg':>8}"
        )
        for row in sorted(gold, key=lambda r: (-r["orders"], r["hour_start"], r["region"]))[:top]:
            avg = "-" if row["avg_order_value"] is None else f"{row['avg_order_value']:,.2f}"
            lines.append(
                f"  {row['hour_start']:%Y-%m-%d %H:%M} {row['region']:<9} {row['orders']:>6} "
                f"{row['cancelled']:>9} {row['revenue']:>12,.2f} {avg:>8}"
            )

    runs = _rows(settings, RUN_LOG.name) or []
    if runs:
        lines += ["", "Latest runs (ops/run_log)"]
        latest = sorted(runs, key=lambda r: r["started_at"])[-9:]
        for run in latest:
            what = run["layer"] if run["action"] == "stream" else f"{run['layer']}:{run['action']}"
            rows_in = "-" if run["rows_in"] is None else f"{run['rows_in']:,}"
            lines.append(
                f"  {run['started_at']:%Y-%m-%d %H:%M:%S} {run['pipeline']}.{what:<8} "
                f"{run['status']:<10} in {rows_in:>8}  {run['duration_s'] or 0:6.1f}s"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    print(render(Settings.from_env()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
