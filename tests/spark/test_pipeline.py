"""The orders pipeline end to end in one Spark session: the contract after every run."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from lakehouse.checkpoints import Checkpoint
from lakehouse.registry import get_pipeline
from lakehouse.sample_data import OrderEventGenerator, render_file
from tests.lake import Lake
from tests.oracle import comparable, expected_tables, split_records

ORDERS = get_pipeline("orders")


def deliver(lake: Lake, lines: list[bytes], seed: int) -> list[bytes]:
    """Land ``lines`` as one file; return the records the contract counts in it."""
    content = render_file(lines, random.Random(seed))
    lake.land(content)
    return split_records(content)


def test_generated_code_or_not_the_tables_are_the_same(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small input is evaluated without generated code (every other test here runs that
    way); with ``LAKEHOUSE_INTERPRET_SMALL_INPUTS=false`` Spark generates code, and the
    contract's tables are the same. The run log says which way each layer run went."""
    generator = OrderEventGenerator(seed=12)
    delivered = deliver(lake, generator.batch(120), seed=1)
    lake.run_all()
    monkeypatch.setenv("LAKEHOUSE_INTERPRET_SMALL_INPUTS", "false")
    delivered += deliver(lake, generator.batch(60) + generator.flush_late(), seed=2)
    lake.run_all()
    assert lake.contract_view() == comparable(expected_tables(delivered))
    runs = sorted(lake.rows("ops/run_log", ["started_at", "layer", "details"]))
    assert [(layer, json.loads(details)["generated_code"]) for _, layer, details in runs] == [
        ("bronze", False),
        ("silver", False),
        ("gold", False),
        ("bronze", True),
        ("silver", True),
        ("gold", True),
    ]


@pytest.mark.parametrize("lake", ["local", "s3"], indirect=True)
def test_contract_holds_after_every_run(lake: Lake) -> None:
    generator = OrderEventGenerator(seed=11)
    delivered: list[bytes] = []
    for i, n_orders in enumerate((120, 80, 60)):
        delivered += deliver(lake, generator.batch(n_orders), seed=i)
        if i == 1:  # two files in one run
            delivered += deliver(lake, generator.batch(30), seed=10 + i)
        lake.run_all()
        assert lake.contract_view() == comparable(expected_tables(delivered)), f"after run {i + 1}"
    delivered += deliver(lake, generator.flush_late(), seed=99)
    lake.run_all()
    expected = expected_tables(delivered)
    assert lake.contract_view() == comparable(expected)
    # The data covers what the contract is about; a pipeline that dropped every invalid or
    # late record could not pass the comparison above.
    assert sum(expected.quarantine.values()) >= 20
    assert len({reason for _, reason in expected.quarantine}) >= 10
    assert any(row[2] == "cancelled" for row in expected.silver.values())


def test_a_run_with_nothing_new_changes_nothing(lake: Lake) -> None:
    lake.land(OrderEventGenerator(seed=12).batch(60))
    lake.run_all()
    before = lake.snapshot()
    versions = {
        t: lake.version(t)
        for t in (
            "bronze/orders_events",
            "silver/orders",
            "silver/orders_quarantine",
            "gold/sales_hourly",
        )
    }
    lake.run_all()
    assert lake.snapshot() == before
    assert {t: lake.version(t) for t in versions} == versions, "an idle run made commits"


@pytest.mark.parametrize(
    ("layer", "fault"),
    [
        ("silver", "silver.after_quarantine"),
        ("silver", "silver.after_merge"),
        ("gold", "gold.after_merge"),
    ],
)
def test_a_batch_that_fails_midway_and_is_retried_leaves_identical_tables(
    lake: Lake, layer: str, fault: str
) -> None:
    generator = OrderEventGenerator(seed=13)
    delivered = deliver(lake, generator.batch(80), seed=1)
    lake.run_all()
    delivered += deliver(lake, generator.batch(60) + generator.flush_late(), seed=2)
    assert lake.run("bronze") == 0
    if layer == "gold":
        assert lake.run("silver") == 0
    assert lake.run(layer, fault=fault) == 1, "the injected fault must fail the run"
    # The retry replays the same micro-batch: writes already committed are skipped.
    lake.run_all()
    assert lake.contract_view() == comparable(expected_tables(delivered))
    # Each table records the last batch id of the query that wrote it, in its own log.
    for table in ("silver/orders", "silver/orders_quarantine"):
        query_id = lake.rows("ops/run_log", ["query_id", "layer", "status"])
        silver_ids = {
            q for q, layer_, status in query_id if layer_ == "silver" and status == "succeeded"
        }
        assert len(silver_ids) == 1
        assert lake.delta(table).transaction_version(silver_ids.pop()) == 1


def test_bad_files_land_record_by_record(lake: Lake) -> None:
    good = OrderEventGenerator(seed=14).batch(10)
    latin1 = "é".encode("latin-1")
    lines = [
        good[0],
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00",  # a gzip header: binary, not text
        b'{"event_id": "x' + latin1 + b'", "broken": true}',
        b"<html><body>not json</body></html>",
        good[1],
    ]
    delivered = deliver(lake, lines, seed=3)
    lake.land(b"\x00\x01\x02 \xff\xfe binary\nnext line", name="blob.bin")
    delivered += split_records(b"\x00\x01\x02 \xff\xfe binary\nnext line")
    lake.run_all()
    view = lake.contract_view()
    assert view == comparable(expected_tables(delivered))
    assert sum(view["bronze"].values()) == len(delivered) == 7
    reasons = sorted(reason for _, reason in view["quarantine"].elements())
    assert reasons == ["invalid_utf8", "invalid_utf8", "invalid_utf8", "not_json", "not_json"]


def test_hidden_and_underscore_files_are_not_read(lake: Lake) -> None:
    generator = OrderEventGenerator(seed=15)
    lake.land(generator.batch(5), name=".in-flight.jsonl")
    lake.land(generator.batch(5), name="_staging.jsonl")
    visible = deliver(lake, generator.batch(5), seed=4)
    lake.run_all()
    assert sum(lake.contract_view()["bronze"].values()) == len(visible)


def test_every_table_opens_without_spark(lake: Lake) -> None:
    lines = deliver(lake, OrderEventGenerator(seed=16).batch(40), seed=5)
    lake.run_all()
    expected = expected_tables(lines)
    counts = {
        "bronze/orders_events": sum(expected.bronze.values()),
        "silver/orders": len(expected.silver),
        "silver/orders_quarantine": sum(expected.quarantine.values()),
        "gold/sales_hourly": len(expected.gold),
    }
    for table, count in counts.items():
        assert len(lake.read_rows(table)) == count, table


def test_run_log_records_what_each_layer_did(lake: Lake) -> None:
    lines = deliver(lake, OrderEventGenerator(seed=17).batch(50), seed=6)
    lake.run_all("--run-id", "test-run-1")
    expected = expected_tables(lines)
    log = {
        row[0]: row[1:]
        for row in lake.rows(
            "ops/run_log",
            ["layer", "run_id", "status", "rows_in", "rows_out", "rows_quarantined", "batches"],
        )
    }
    n_bronze = sum(expected.bronze.values())
    n_quarantined = sum(expected.quarantine.values())
    assert log["bronze"] == (
        "test-run-1",
        "succeeded",
        pytest.approx(n_bronze, abs=n_bronze),
        n_bronze,
        0,
        1,
    )
    assert log["silver"] == (
        "test-run-1",
        "succeeded",
        n_bronze,
        n_bronze - n_quarantined,
        n_quarantined,
        1,
    )
    assert log["gold"][:2] == ("test-run-1", "succeeded")
    assert log["gold"][3] == len(expected.gold)


@pytest.mark.parametrize("lake", ["local", "s3"], indirect=True)
def test_a_second_writer_of_a_table_waits_then_stops(lake: Lake) -> None:
    from lakehouse.locks import table_locks

    lake.land(OrderEventGenerator(seed=18).batch(20))
    assert lake.run("bronze") == 0
    lake.monkeypatch.setenv("LAKEHOUSE_LOCK_WAIT_S", "1")
    with table_locks(lake.settings, ["silver/orders_quarantine"], owner="a maintenance run"):
        assert lake.run("silver") == 2  # refused: ConcurrentRun
    assert not lake.exists("silver/orders"), "a refused run wrote nothing"
    assert lake.run("silver") == 0
    assert lake.table("silver/orders").count() > 0
    statuses = [r[0] for r in lake.rows("ops/run_log", ["status"]) if r[0] != "succeeded"]
    assert statuses == ["refused"]


def test_a_new_stream_reads_an_appended_table_from_its_log_and_replays_its_first_batch(
    lake: Lake,
) -> None:
    """Silver and gold start from version 0's commit of a table that was only appended to,
    not from its snapshot; a first batch that failed is replayed as it was planned, even
    once the table is no longer only appended to (here compacted before the retry)."""
    from jobs.delta_state import appends_only

    generator = OrderEventGenerator(seed=17)
    delivered = deliver(lake, generator.batch(60), seed=1)
    assert lake.run("bronze") == 0
    delivered += deliver(lake, generator.batch(40) + generator.flush_late(), seed=2)
    assert lake.run("bronze") == 0
    bronze = lake.settings.path("bronze/orders_events")
    assert appends_only(lake.spark, bronze, change_feed=False)

    def first_offsets(layer: str) -> list[dict[str, Any] | None]:
        checkpoint = Checkpoint(lake.storage, lake.settings.path(ORDERS.stream(layer).checkpoint))
        return [dict(s) if s else None for s in checkpoint.offsets(0).sources]

    assert lake.run("silver", fault="silver.after_merge") == 1
    [planned] = first_offsets("silver")
    assert planned is not None and planned["isStartingVersion"] is False
    lake.spark.sql(f"OPTIMIZE delta.`{bronze}`").collect()
    assert not appends_only(lake.spark, bronze, change_feed=False)

    lake.run_all()
    assert lake.contract_view() == comparable(expected_tables(delivered))
    [gold_planned] = first_offsets("gold")
    assert gold_planned is not None and gold_planned["isStartingVersion"] is False
    # Once silver has merged updates into its first load, a new stream over it would start
    # from its snapshot.
    silver = lake.settings.path("silver/orders")
    assert appends_only(lake.spark, silver, change_feed=True)
    delivered += deliver(lake, generator.batch(40) + generator.flush_late(), seed=3)
    lake.run_all()
    assert lake.contract_view() == comparable(expected_tables(delivered))
    assert not appends_only(lake.spark, silver, change_feed=True)


def test_a_table_whose_log_does_not_hold_only_appends_is_read_from_its_snapshot(
    lake: Lake,
) -> None:
    from jobs import delta_state
    from jobs.delta_state import appends_only

    spark = lake.spark
    location = lake.settings.path("scratch/t")
    spark.sql(
        f"CREATE TABLE delta.`{location}` (id INT) USING delta "
        "TBLPROPERTIES (delta.enableChangeDataFeed = true)"
    )
    spark.sql(f"INSERT INTO delta.`{location}` VALUES (1), (2)")
    assert appends_only(spark, location, change_feed=True)
    plain = lake.settings.path("scratch/plain")
    spark.sql(f"CREATE TABLE delta.`{plain}` (id INT) USING delta")
    spark.sql(f"INSERT INTO delta.`{plain}` VALUES (1)")
    assert appends_only(spark, plain, change_feed=False)
    assert not appends_only(spark, plain, change_feed=True), "no change feed from version 0"
    spark.sql(f"ALTER TABLE delta.`{plain}` SET TBLPROPERTIES (delta.appendOnly = true)")
    assert not appends_only(spark, plain, change_feed=False), "metadata changed after creation"
    spark.sql(f"DELETE FROM delta.`{location}` WHERE id = 1")
    assert not appends_only(spark, location, change_feed=True)
    lake.monkeypatch.setattr(delta_state, "LOG_START_MAX_VERSIONS", 3)
    many = lake.settings.path("scratch/many")
    spark.sql(f"CREATE TABLE delta.`{many}` (id INT) USING delta")
    spark.sql(f"INSERT INTO delta.`{many}` VALUES (1)")
    spark.sql(f"INSERT INTO delta.`{many}` VALUES (2)")
    assert appends_only(spark, many, change_feed=False)
    spark.sql(f"INSERT INTO delta.`{many}` VALUES (3)")
    assert not appends_only(spark, many, change_feed=False), "a long log: the snapshot is cheaper"
