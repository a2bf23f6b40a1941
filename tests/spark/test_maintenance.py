"""Maintenance against real Delta tables: OPTIMIZE, a VACUUM next to a lagging stream, backups
and restores, and the retention rules. Jobs run in-process on the session's Spark, as the
layer tests do; every scenario ends by comparing the tables with the oracle."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from lakehouse.sample_data import OrderEventGenerator, render_file
from tests.lake import Lake
from tests.oracle import comparable, expected_tables, split_records

RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
RETENTION_WINDOW_IGNORE = "spark.databricks.delta.vacuum.retentionWindowIgnore.enabled"
TABLES = ("bronze/orders_events", "silver/orders", "silver/orders_quarantine", "gold/sales_hourly")


def maintain(lake: Lake, *args: str) -> tuple[int, dict[str, Any]]:
    """Run ``jobs/maintenance.py`` in-process; returns its exit code and summary."""
    from jobs import maintenance

    assert lake.scratch is not None
    summary_file = lake.scratch / "maintenance-summary.json"
    common = ["--pipeline", "orders", "--root", lake.settings.root]
    code = maintenance.main([*common, "--summary-file", str(summary_file), *args])
    # Whatever the path, Delta's safety switch is on and nothing else was left changed.
    assert lake.spark.conf.get(RETENTION_CHECK) == "true"
    assert lake.spark.conf.get(RETENTION_WINDOW_IGNORE, None) is None
    return code, json.loads(summary_file.read_text())


def actions(summary: dict[str, Any], action: str) -> dict[str, dict[str, Any]]:
    """The summary's records of ``action`` by target table."""
    return {a["details"]["target"]: a for a in summary["actions"] if a["action"] == action}


def deliver(lake: Lake, generator: OrderEventGenerator, orders: int, seed: int) -> list[bytes]:
    """Land one file with ``orders`` new orders (and their follow-ups, late, repeated and
    broken records); return the records the contract counts in it."""
    content = render_file(generator.batch(orders), random.Random(seed))
    lake.land(content)
    return split_records(content)


def run_layers(lake: Lake, *layers: str) -> None:
    for layer in layers:
        assert lake.run(layer) == 0, f"{layer} failed"


def num_files(lake: Lake, table: str) -> int:
    detail = lake.spark.sql(f"DESCRIBE DETAIL delta.`{lake.settings.path(table)}`").collect()
    return int(detail[0]["numFiles"])


def set_deleted_file_retention(lake: Lake, tables: tuple[str, ...], interval: str) -> None:
    for table in tables:
        lake.spark.sql(
            f"ALTER TABLE delta.`{lake.settings.path(table)}` "
            f"SET TBLPROPERTIES ('delta.deletedFileRetentionDuration' = '{interval}')"
        )


def age_tables(lake: Lake, hours: float) -> None:
    """Make everything the tables hold so far look ``hours`` older: data, change data and
    commit files alike (commit times are the commit files' times), as if it had been written
    then. Checkpoints and landing files are left as they are."""
    shift_s = hours * 3600
    for table in TABLES:
        for path in Path(lake.settings.path(table)).rglob("*"):
            stat = path.stat()
            os.utime(path, (stat.st_atime - shift_s, stat.st_mtime - shift_s))
    jvm = lake.spark.sparkContext._jvm
    assert jvm is not None
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # forget the cached commit times


SPREAD_CONF = {
    # Read a landing file in 2 KiB splits and keep every shuffle partition a task.
    "spark.sql.files.maxPartitionBytes": "2048",
    "spark.sql.adaptive.coalescePartitions.enabled": "false",
}


@pytest.fixture
def small_writes(lake: Lake, spark: SparkSession) -> Iterator[None]:
    """Every run writes several files per table, as a micro-batch of real size spread over a
    cluster would (a test batch of a few KiB would otherwise land in one file)."""
    lake.monkeypatch.setenv("LAKEHOUSE_SHUFFLE_PARTITIONS", "8")
    lake.monkeypatch.setenv("LAKEHOUSE_SPARK_CONF", json.dumps(SPREAD_CONF))
    yield
    for key in SPREAD_CONF:
        spark.conf.unset(key)
    spark.conf.set("spark.sql.shuffle.partitions", "2")


@pytest.mark.parametrize("lake", ["local", "s3"], indirect=True)
def test_optimize_pays_and_vacuum_keeps_what_a_lagging_stream_needs(
    lake: Lake, small_writes: None
) -> None:
    lake.monkeypatch.setenv("LAKEHOUSE_VACUUM_FLOOR_HOURS", "0")  # tests may ask for 0 h
    lake.monkeypatch.setenv("LAKEHOUSE_VACUUM_MARGIN_S", "60")
    # On S3 the same, but nothing can be made to look old: VACUUM keeps what gold needs and
    # has nothing old enough to remove.
    orders = OrderEventGenerator(seed=41)
    delivered = deliver(lake, orders, 30, seed=1)
    run_layers(lake, "bronze", "silver", "gold")
    # Files may go as soon as no reader needs them: VACUUM's own retention is what counts.
    set_deleted_file_retention(lake, TABLES[:3], "interval 0 seconds")
    if lake.settings.root_is_local:
        age_tables(lake, 10)  # the first run was ten hours ago (S3 objects cannot be aged)
    for seed in (2, 3):
        delivered += deliver(lake, orders, 30, seed=seed)
        run_layers(lake, "bronze", "silver", "gold")
    aged = lake.settings.root_is_local
    measured_tables = ("bronze/orders_events", "silver/orders")
    measured = "--tables", ",".join(measured_tables)
    # Gold stops here. Silver keeps changing (new orders: new small files) and is compacted.
    delivered += deliver(lake, OrderEventGenerator(seed=42), 40, seed=4)
    run_layers(lake, "bronze", "silver")

    before = lake.contract_view()
    files_before = {t: num_files(lake, t) for t in TABLES}
    code, summary = maintain(lake, "--actions", "optimize", *measured)
    assert code == 0, summary
    optimized = actions(summary, "optimize")
    files_after = {t: num_files(lake, t) for t in TABLES}
    for table in ("bronze/orders_events", "silver/orders"):
        assert optimized[table]["status"] == "succeeded", optimized[table]
        assert files_before[table] >= 10 * files_after[table], (table, files_before, files_after)
        assert optimized[table]["details"]["files_after"] == files_after[table]
    assert optimized["silver/orders"]["details"]["zorder_by"] == ["order_id"]
    assert optimized["bronze/orders_events"]["details"]["partitions"][0].startswith("ingest_date=")
    assert lake.contract_view() == before, "OPTIMIZE changed the data"

    versions = {t: lake.version(t) for t in TABLES}
    code, summary = maintain(lake, "--actions", "optimize", *measured)
    assert code == 0
    again = actions(summary, "optimize")
    assert {t: a["status"] for t, a in again.items()} == dict.fromkeys(
        measured[1].split(","), "skipped"
    )
    assert again["silver/orders"]["details"]["reason"].startswith("healthy: nothing written")
    assert {t: lake.version(t) for t in TABLES} == versions, "a healthy table was rewritten"

    code, summary = maintain(lake, "--actions", "vacuum", "--retention-hours", "0", *measured)
    assert code == 0, summary
    vacuumed = actions(summary, "vacuum")
    silver = vacuumed["silver/orders"]["details"]
    # Asked for 0 h; gold still reads silver from before the compaction, so VACUUM kept 1 h
    # (a whole hour: Delta's unit) and with it every file gold needs.
    assert (silver["requested_hours"], silver["retention_hours"]) == (0, 1), silver
    assert "orders.gold lags" in silver["reason"]
    kept = silver["kept_for_streams"]
    assert kept["streams"] == ["orders.gold"] and kept["files"] > 0, kept
    assert kept["change_data_files"] > 0, "gold reads silver's change data"
    if aged:  # What no stream needs any more, ten hours old, went.
        assert silver["files_removed"] > 0 and silver["bytes_removed"] > 0
        assert vacuumed["bronze/orders_events"]["details"]["files_removed"] > 0
    else:  # Nothing is an hour old yet.
        assert silver["files_removed"] == 0

    assert lake.run("gold") == 0, "gold could not catch up after VACUUM"
    assert lake.contract_view() == comparable(expected_tables(delivered))
    logged = lake.rows("ops/run_log", ["action", "status", "details"])
    vacuum_rows = [json.loads(d) for a, s, d in logged if a == "vacuum" and s == "succeeded"]
    assert {row["table"] for row in vacuum_rows} == {"silver/orders", "bronze/orders_events"}
    assert any(row.get("kept_for_streams", {}).get("files") for row in vacuum_rows)


def test_a_retention_below_the_floor_is_refused_and_changes_nothing(lake: Lake) -> None:
    lake.land(OrderEventGenerator(seed=44).batch(10))
    assert lake.run("bronze") == 0
    version = lake.version("bronze/orders_events")
    code, summary = maintain(lake, "--actions", "vacuum", "--retention-hours", "24")
    assert code == 2
    assert summary["error"].startswith("RetentionBelowFloor: VACUUM retention 24 h is below")
    assert lake.version("bronze/orders_events") == version
    refused = [r for r in lake.rows("ops/run_log", ["action", "status"]) if r[0] != "stream"]
    assert refused == [("maintenance", "refused")]
    # A deployment cannot switch Delta's retention check off: the setting is refused.
    lake.monkeypatch.setenv("LAKEHOUSE_SPARK_CONF", json.dumps({RETENTION_CHECK: "false"}))
    code, summary = maintain(lake, "--actions", "vacuum")
    lake.monkeypatch.delenv("LAKEHOUSE_SPARK_CONF")
    assert code == 2
    assert summary["error"].startswith("ConfigurationError: LAKEHOUSE_SPARK_CONF=<not shown>: ")
    assert [r for r in lake.rows("ops/run_log", ["action"]) if r[0] == "vacuum"] == []
    assert lake.version("bronze/orders_events") == version


def checkpoint_files(lake: Lake) -> dict[str, tuple[int, str | None]]:
    """Every checkpoint file's size, and its text (the hidden checksum files: size only)."""
    root = lake.settings.path("_checkpoints")
    files: dict[str, tuple[int, str | None]] = {}
    for name, size in lake.storage.list_tree(root).items():
        binary = name.rsplit("/", 1)[-1].startswith(".")
        files[name] = (size, None if binary else lake.storage.read_text(f"{root}/{name}"))
    return files


@pytest.mark.parametrize("lake", ["local", "s3"], indirect=True)
def test_backup_more_runs_restore_and_rerun_hold_the_contract(lake: Lake) -> None:
    orders = OrderEventGenerator(seed=51)
    delivered = deliver(lake, orders, 30, seed=1)
    run_layers(lake, "bronze", "silver", "gold")
    code, summary = maintain(lake, "--actions", "backup")
    assert code == 0, summary
    backup = actions(summary, "backup")["orders checkpoints"]["details"]
    backup_id = backup["backup_id"]
    at_backup = {"silver": lake.silver(), "quarantine": lake.contract_view()["quarantine"]}
    manifest_text = lake.storage.read_text(
        lake.settings.path(f"_backups/orders/{backup_id}/manifest.json")
    )
    assert manifest_text is not None
    manifest = json.loads(manifest_text)
    silver_sinks = {s["table"]: s for s in manifest["streams"]["silver"]["sinks"]}
    assert silver_sinks["silver/orders"]["version"] == lake.version("silver/orders")
    # The manifest holds what the checkpoint agrees with: the batch it last committed is the
    # transaction version the query recorded in its tables.
    silver = manifest["streams"]["silver"]
    assert silver_sinks["silver/orders"]["txn_version"] == silver["last_commit"] == 0
    assert silver["sources"][0]["position"]["reservoirVersion"] >= 1
    assert manifest["code_version"].startswith("0.1.0+")

    delivered += deliver(lake, orders, 30, seed=2)  # more runs after the backup
    run_layers(lake, "bronze", "silver", "gold")
    versions = {t: lake.version(t) for t in TABLES}
    checkpoints = checkpoint_files(lake)

    if lake.settings.root_is_local:  # objects' times on S3 are the server's: no ageing there
        # 200 hours later Delta no longer reads those versions back (deletedFileRetention-
        # Duration is 168 h): the restore is refused with the reason, and nothing changes.
        age_tables(lake, 200)
        code, summary = maintain(
            lake, *lake.granted("restore"), "--restore", "silver", "--backup-id", backup_id
        )
        age_tables(lake, -200)
        assert code == 2
        assert summary["error"].startswith(
            "CheckpointInconsistent: refused to restore orders.silver"
        )
        assert "cannot be read" in summary["error"] and "nothing was changed" in summary["error"]
        assert {t: lake.version(t) for t in TABLES} == versions
        assert checkpoint_files(lake) == checkpoints

    # A restore that dies half-way blocks the pipeline until it is run again.
    lake.monkeypatch.setenv("LAKEHOUSE_FAULT", "restore.before_checkpoint")
    code, _ = maintain(
        lake, *lake.granted("restore"), "--restore", "silver", "--backup-id", backup_id
    )
    lake.monkeypatch.delenv("LAKEHOUSE_FAULT")
    assert code == 1
    assert lake.run("silver") == 2, "a layer job ran during an unfinished restore"
    code, summary = maintain(
        lake, *lake.granted("restore"), "--restore", "silver", "--backup-id", "latest"
    )
    assert code == 0, summary
    restored = actions(summary, "restore")["orders.silver"]["details"]
    assert restored["resumed"] and restored["reset"] == ["orders.gold", "segment_sales.gold"]
    assert (
        restored["tables"]["silver/orders"]["to_version"]
        == silver_sinks["silver/orders"]["version"]
    )
    assert restored["query_id"] != restored["backup_query_id"]
    # Silver is back as it was at the backup, gold waits to be rebuilt.
    assert lake.silver() == at_backup["silver"]
    assert lake.contract_view()["quarantine"] == at_backup["quarantine"]
    assert lake.gold() == {}

    run_layers(lake, "bronze", "silver", "gold")
    assert lake.contract_view() == comparable(expected_tables(delivered))
    logged = lake.rows("ops/run_log", ["action", "status"])
    assert [s for a, s in logged if a == "restore"].count("succeeded") == 1


def test_a_restore_that_would_need_a_deleted_landing_file_is_refused(lake: Lake) -> None:
    orders = OrderEventGenerator(seed=52)
    deliver(lake, orders, 20, seed=1)
    run_layers(lake, "bronze", "silver", "gold")
    code, summary = maintain(lake, "--actions", "backup")
    assert code == 0, summary
    deliver(lake, orders, 20, seed=2)
    run_layers(lake, "bronze")
    # The file bronze read after the backup is deleted from the landing folder: a restored
    # bronze checkpoint would never see its records again.
    newest = max(
        (lake.root / "landing" / "orders").glob("*.jsonl"), key=lambda p: p.stat().st_mtime
    )
    newest.unlink()
    versions = {t: lake.version(t) for t in TABLES}
    code, summary = maintain(
        lake, *lake.granted("restore"), "--restore", "bronze", "--backup-id", "latest"
    )
    assert code == 2
    assert summary["error"].startswith("CheckpointInconsistent: refused to restore orders.bronze")
    assert "1 landing file(s) bronze read after the backup are gone" in summary["error"]
    assert {t: lake.version(t) for t in TABLES} == versions
