"""A checkpoint that does not fit its tables stops the job before it writes anything: damaged
(it lost its last entries), missing, or from another root. Today's Spark and Delta would run
on and lose or duplicate data without a word."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from lakehouse.sample_data import OrderEventGenerator, render_file
from tests.lake import Lake, state_transactions
from tests.oracle import comparable, expected_tables, split_records

TABLES = ("bronze/orders_events", "silver/orders", "silver/orders_quarantine", "gold/sales_hourly")


def deliver(lake: Lake, generator: OrderEventGenerator, orders: int) -> list[bytes]:
    content = render_file(generator.batch(orders))
    lake.land(content)
    return split_records(content)


def deliver_and_run(lake: Lake, generator: OrderEventGenerator, orders: int) -> list[bytes]:
    delivered = deliver(lake, generator, orders)
    lake.run_all()
    return delivered


def refused(lake: Lake, layer: str, capfd: pytest.CaptureFixture[str], *args: str) -> str:
    versions = {t: lake.version(t) for t in TABLES}
    assert lake.run(layer, *args) == 2
    assert {t: lake.version(t) for t in TABLES} == versions, "a refused run wrote nothing"
    return capfd.readouterr().err


def test_a_checkpoint_that_lost_its_last_batch_is_refused(
    lake: Lake, capfd: pytest.CaptureFixture[str]
) -> None:
    generator = OrderEventGenerator(seed=71)
    delivered = [*deliver_and_run(lake, generator, 30), *deliver_and_run(lake, generator, 30)]
    # The last batch's offsets and commit are lost (a partial copy): the table holds batch 1.
    checkpoint = lake.root / "_checkpoints" / "silver" / "orders"
    for folder in ("offsets", "commits"):
        for name in ("1", ".1.crc"):
            (checkpoint / folder / name).unlink(missing_ok=True)
    err = refused(lake, "silver", capfd)
    assert "ERROR [CheckpointBehindTable] orders.silver" in err
    assert "holds batch 1 of this query but the checkpoint planned batches up to 0" in err
    # Rebuilding silver from bronze is the way out that needs no backup.
    assert lake.run("silver", "--mode", "full_refresh") == 0
    assert lake.run("gold", "--mode", "full_refresh") == 0
    assert lake.contract_view() == comparable(expected_tables(delivered))


def test_a_missing_checkpoint_is_refused_unless_silver_is_rebuilt(
    lake: Lake, capfd: pytest.CaptureFixture[str]
) -> None:
    generator = OrderEventGenerator(seed=72)
    first = deliver_and_run(lake, generator, 40)
    for table in ("bronze/orders_events", "silver/orders"):
        shutil.rmtree(lake.root / "_checkpoints" / table)
    deliver(lake, generator, 10)
    err = refused(lake, "bronze", capfd)
    assert "ERROR [CheckpointMissing] bronze/orders_events has data but the checkpoint" in err
    err = refused(lake, "silver", capfd)
    assert "ERROR [CheckpointMissing] silver/orders has data" in err
    # A new checkpoint would have read the first file again: bronze still has it once.
    bronze = Counter(r[0] for r in lake.rows("bronze/orders_events", ["raw_value"]))
    assert bronze == Counter(line.decode("utf-8", errors="replace") for line in first)


def test_a_checkpoint_from_another_root_is_refused(
    lake: Lake, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    other = Lake(lake.spark, lake.settings.with_root(tmp_path / "other"), lake.monkeypatch)
    for target, seed in ((lake, 73), (other, 74)):
        deliver_and_run(target, OrderEventGenerator(seed=seed), 20)
    checkpoint = Path("_checkpoints") / "silver" / "orders"
    shutil.rmtree(lake.root / checkpoint)
    shutil.copytree(other.root / checkpoint, lake.root / checkpoint)
    deliver(lake, OrderEventGenerator(seed=75), 5)
    assert lake.run("bronze") == 0
    err = refused(lake, "silver", capfd)
    assert "ERROR [CheckpointForeign] orders.silver" in err


def test_the_guard_reads_from_the_checksum_what_the_state_holds(lake: Lake) -> None:
    """The guard takes a table's file count and writers' transaction versions from the
    version's Delta checksum (no Spark job); they are the state's, and without a checksum the
    state itself answers."""
    from jobs.delta_state import table_state

    deliver_and_run(lake, OrderEventGenerator(seed=76), 20)
    deliver_and_run(lake, OrderEventGenerator(seed=77), 20)
    jvm = lake.spark.sparkContext._jvm
    assert jvm is not None

    def checked(table: str, with_checksum: bool) -> tuple[int, dict[str, int]]:
        jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
        state = table_state(lake.spark, lake.settings.path(table))
        snapshot = state.jsnapshot
        assert snapshot.checksumOpt().isDefined() == with_checksum, table
        assert snapshot._computedStateTriggered() is not with_checksum, table
        from_state = (int(snapshot.numOfFiles()), state_transactions(jvm, snapshot))
        assert (state.file_count(), state.txn_versions) == from_state, table
        return from_state

    for table in TABLES:
        checked(table, with_checksum=True)
    files, transactions = checked("silver/orders", with_checksum=True)
    assert files > 0 and list(transactions.values()) == [1]  # one stream, batches 0 and 1

    for crc in (lake.root / "silver" / "orders" / "_delta_log").glob("*.crc"):
        crc.unlink()
    assert checked("silver/orders", with_checksum=False) == (files, transactions)


def test_a_run_reconstructs_in_the_background_only_the_state_its_merges_need(lake: Lake) -> None:
    """Before a stream writes, each target's snapshot gets its writers' transaction versions
    from its checksum; the state of a table the stream merges into is reconstructed beside
    the stream, that of a table it only appends to is not, and both answer as their state
    does. A table that is not there is left for the write to meet."""
    from jobs.delta_state import _snapshot, prefetch_state

    deliver_and_run(lake, OrderEventGenerator(seed=78), 20)
    jvm = lake.spark.sparkContext._jvm
    assert jvm is not None
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    merged, appended = (
        lake.settings.path(t) for t in ("silver/orders", "silver/orders_quarantine")
    )
    assert not _snapshot(lake.spark, merged)._computedStateTriggered()

    nowhere = lake.settings.path("silver/nowhere")
    prefetch_state(lake.spark, [nowhere, merged, appended], appended={appended})
    assert not (lake.root / "silver" / "nowhere").exists()

    for location, reconstructed in ((merged, True), (appended, False)):
        snapshot = _snapshot(lake.spark, location)
        assert snapshot._computedStateTriggered() is reconstructed, location
        to_java = jvm.scala.jdk.javaapi.CollectionConverters.asJava
        transactions = {str(k): int(v) for k, v in to_java(snapshot.transactions()).items()}
        assert list(transactions.values()) == [0]  # one stream, batch 0
        assert transactions == state_transactions(jvm, snapshot), location
