"""A short report on the lakehouse tables, read with delta-rs: no JVM, a second or two, on a
local root or on S3 alike.

python -m lakehouse.local.report          # or: lakehouse report

For every declared pipeline: its tables' sizes, its quarantine reasons, its expectations
(how many records each rule counted, dropped or failed, over all runs); then a look at the
demo pipelines' tables when they are there (the busiest hours of sales, one customer's
history, the top segments per day), and the latest runs.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from typing import Any

from lakehouse.fs import delta_storage_options
from lakehouse.registry import Registry, registry
from lakehouse.settings import Settings
from lakehouse.specs import RUN_LOG, Layer


def read_rows(
    location: str,
    columns: list[str] | None = None,
    version: int | None = None,
    storage_options: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """A Delta table's rows through delta-rs's own query engine (``storage_options``: see
    ``lakehouse.fs.delta_storage_options``).

    Not ``DeltaTable.to_pyarrow_table``: its pyarrow dataset scan leaves threads behind that
    abort the interpreter at exit about half the time ("terminate called without an active
    exception", delta-io/delta-rs#2184, apache/arrow#34314).
    """
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    selected = ", ".join(f'"{c}"' for c in columns) if columns else "*"
    table = DeltaTable(location, version=version, storage_options=storage_options)
    query = QueryBuilder().register("t", table)
    return list(pa.table(query.execute(f"SELECT {selected} FROM t").read_all()).to_pylist())


class Tables:
    """The lake's tables by name, each read at most once."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.storage_options = delta_storage_options(settings)
        self._rows: dict[str, list[dict[str, Any]] | None] = {}

    def rows(self, table: str) -> list[dict[str, Any]] | None:
        """Every row of ``table``; None when it does not exist yet."""
        from deltalake.exceptions import TableNotFoundError

        if table not in self._rows:
            try:
                self._rows[table] = read_rows(
                    self.settings.path(table), storage_options=self.storage_options
                )
            except TableNotFoundError:
                self._rows[table] = None
        return self._rows[table]


def _sizes(tables: Tables, lakehouse: Registry) -> list[str]:
    lines = ["Rows per table"]
    for spec in lakehouse.tables:
        rows = tables.rows(spec.name)
        size = "not created yet" if rows is None else f"{len(rows):,}"
        lines.append(f"  {spec.name:<32} {size}")
    return lines


def _quarantine(tables: Tables, lakehouse: Registry) -> list[str]:
    lines: list[str] = []
    for pipeline in lakehouse.pipelines.values():
        if pipeline.silver is None:
            continue
        rows = tables.rows(pipeline.silver.quarantine) or []
        if not rows:
            continue
        lines += ["", f"Quarantine reasons of {pipeline.name} ({len(rows):,} records)"]
        for reason, count in Counter(r["reason"] for r in rows).most_common(8):
            lines.append(f"  {reason:<32} {count:>7,}")
    return lines


def _expectations(runs: list[dict[str, Any]], lakehouse: Registry) -> list[str]:
    """Each expectation's count over every silver run (and the runs it failed)."""
    counted: dict[tuple[str, str], int] = defaultdict(int)
    failed: Counter[str] = Counter()
    for run in runs:
        if run["layer"] != Layer.SILVER or run["action"] != "stream":
            continue
        details = json.loads(run["details"] or "{}")
        for rule, figures in (details.get("expectations") or {}).items():
            counted[(run["pipeline"], rule)] += int(figures.get("records") or 0)
        if (run["error"] or "").startswith("ExpectationFailed"):
            failed[run["pipeline"]] += 1
    lines: list[str] = []
    for pipeline in lakehouse.pipelines.values():
        if not pipeline.expectations:
            continue
        lines += ["", f"Expectations of {pipeline.name} (records, over all runs)"]
        for rule in pipeline.expectations:
            count = counted.get((pipeline.name, rule.name), 0)
            lines.append(f"  {rule.name:<28} {rule.action:<5} {count:>7,}")
        if failed[pipeline.name]:
            lines.append(f"  runs stopped by a fail rule: {failed[pipeline.name]}")
    return lines


def _busiest_hours(tables: Tables, top: int) -> list[str]:
    gold = tables.rows("gold/sales_hourly") or []
    if not gold:
        return []
    lines = ["", f"Busiest hours (gold/sales_hourly, top {top} by orders)"]
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
    return lines


def _a_history(tables: Tables) -> list[str]:
    """The customer with the most versions, version by version."""
    history = tables.rows("silver/customers_history") or []
    if not history:
        return []
    versions = Counter(r["customer_id"] for r in history)
    customer, count = max(versions.items(), key=lambda item: (item[1], item[0]))
    rows = sorted(
        (r for r in history if r["customer_id"] == customer), key=lambda r: r["valid_from"]
    )
    lines = ["", f"History of customer {customer} ({count} versions, silver/customers_history)"]
    lines.append(f"  {'valid from (UTC)':<17} {'valid to':<17} {'segment':<9} {'country':<7} name")
    for row in rows:
        until = "current" if row["valid_to"] is None else f"{row['valid_to']:%Y-%m-%d %H:%M}"
        lines.append(
            f"  {row['valid_from']:%Y-%m-%d %H:%M} {until:<17} {row['segment']:<9} "
            f"{row['country']:<7} {row['name']}"
        )
    return lines


def _segments(tables: Tables, days: int) -> list[str]:
    daily = tables.rows("gold/segment_sales_daily") or []
    if not daily:
        return []
    by_day: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in daily:
        by_day[row["order_date"]].append(row)
    lines = ["", f"Top segments per day (gold/segment_sales_daily, last {days} days)"]
    for day in sorted(by_day)[-days:]:
        ranked = sorted(by_day[day], key=lambda r: (-r["revenue"], r["segment"]))
        cells = ", ".join(f"{r['segment']} {r['revenue']:,.2f} ({r['orders']})" for r in ranked)
        lines.append(f"  {day:%Y-%m-%d}  {cells}")
    return lines


def _latest_runs(runs: list[dict[str, Any]]) -> list[str]:
    if not runs:
        return []
    lines = ["", "Latest runs (ops/run_log)"]
    for run in sorted(runs, key=lambda r: r["started_at"])[-12:]:
        what = run["layer"] if run["action"] == "stream" else f"{run['layer']}:{run['action']}"
        rows_in = "-" if run["rows_in"] is None else f"{run['rows_in']:,}"
        lines.append(
            f"  {run['started_at']:%Y-%m-%d %H:%M:%S} {run['pipeline'] + '.' + what:<24} "
            f"{run['status']:<10} in {rows_in:>8}  {run['duration_s'] or 0:6.1f}s"
        )
    return lines


def render(settings: Settings, top: int = 5) -> str:
    lakehouse = registry(settings)
    tables = Tables(settings)
    runs = tables.rows(RUN_LOG.name) or []
    lines = [f"Lakehouse at {settings.root}", ""]
    lines += _sizes(tables, lakehouse)
    lines += _quarantine(tables, lakehouse)
    lines += _expectations(runs, lakehouse)
    lines += _busiest_hours(tables, top)
    lines += _a_history(tables)
    lines += _segments(tables, top)
    lines += _latest_runs(runs)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    print(render(Settings.from_env()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
