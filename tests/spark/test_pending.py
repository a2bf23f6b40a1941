"""What a run would read, worked out from checkpoints and Delta logs without a JVM."""

from __future__ import annotations

import pytest

from lakehouse.params import RunParams
from lakehouse.pending import dry_run_report, pending_input
from lakehouse.registry import get_pipeline
from lakehouse.sample_data import OrderEventGenerator
from tests.lake import Lake

ORDERS = get_pipeline("orders")


@pytest.mark.parametrize("lake", ["local", "s3"], indirect=True)
def test_pending_input_follows_the_checkpoints(lake: Lake) -> None:
    generator = OrderEventGenerator(seed=51)

    def pending() -> dict[str, tuple[int, int | None]]:
        return {
            layer: (p.items, p.rows)
            for layer in ORDERS.layers
            for p in [pending_input(lake.settings, ORDERS, layer)]
        }

    lake.land(generator.batch(20), name="a.jsonl")
    lake.land(generator.batch(20), name="b.jsonl")
    assert pending()["bronze"] == (2, None)
    assert pending()["silver"] == (0, 0), "no bronze table yet"
    assert lake.run("bronze") == 0
    bronze_rows = lake.table("bronze/orders_events").count()
    assert pending()["bronze"] == (0, None)
    # A new stream reads the whole table: the CREATE and the first append.
    assert pending()["silver"] == (2, bronze_rows)
    assert lake.run("silver") == 0
    assert pending()["silver"] == (0, 0)
    lake.land(generator.batch(10), name="c.jsonl")
    assert lake.run("bronze") == 0
    new_rows = lake.table("bronze/orders_events").count() - bronze_rows
    assert pending()["silver"] == (1, new_rows)

    report = dry_run_report(lake.settings, ORDERS, RunParams.parse({"dry_run": True}))
    assert (
        report[1] == "  bronze: would read 0 new landing files (0 bytes) into bronze/orders_events"
    )
    assert "1 new versions of bronze/orders_events" in report[2]
