"""What a run would read, worked out from checkpoints and Delta logs without a JVM."""

from __future__ import annotations

import pytest

from lakehouse.checkpoints import Checkpoint
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


@pytest.mark.parametrize("lake", ["local", "s3"], indirect=True)
def test_a_layer_with_nothing_new_starts_no_query(
    lake: Lake, capfd: pytest.CaptureFixture[str]
) -> None:
    """Even when Spark runs (a run not skipped beforehand, a reprocess), a Delta-sourced
    stream with nothing new is not started: its checkpoint does not move."""

    def checkpoint(layer: str) -> Checkpoint:
        return Checkpoint(lake.storage, lake.settings.path(ORDERS.stream(layer).checkpoint))

    lake.land(OrderEventGenerator(seed=52).batch(30), name="a.jsonl")
    for layer in ORDERS.layers:
        assert lake.run(layer) == 0
    assert "not started" not in capfd.readouterr().out
    logs = {layer: checkpoint(layer).log() for layer in ("silver", "gold")}
    versions = {t: lake.version(t) for t in ("silver/orders", "gold/sales_hourly")}
    for layer in ("silver", "gold"):
        assert lake.run(layer) == 0
    out = capfd.readouterr().out  # where a job logs
    assert (
        "query orders_silver not started: nothing new in bronze/orders_events since version "
        f"{lake.version('bronze/orders_events')}" in out
    )
    assert (
        "query orders_gold not started: nothing new in silver/orders since version "
        f"{versions['silver/orders']}" in out
    )
    assert {t: lake.version(t) for t in versions} == versions
    assert {layer: checkpoint(layer).log() for layer in logs} == logs
    runs = lake.rows("ops/run_log", ["layer", "status", "rows_in", "batches", "started_at"])
    last_silver = max((r for r in runs if r[0] == "silver"), key=lambda r: r[4])
    assert last_silver[1:4] == ("succeeded", 0, 0)
