"""A Delta snapshot's writers' transaction versions come from its version's checksum
(``jvm/src/lakehouse/delta/KnownTransactions.java``) instead of its reconstructed state: a
layer run that only appends reconstructs no table's state, and a snapshot answers as its
state would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from jobs.delta_state import _snapshot, _txn_versions, known_transactions
from jobs.delta_writes import append_once
from tests.lake import Lake, state_transactions
from tests.oracle import comparable, expected_tables

RECONSTRUCTION = "Delta: Compute snapshot for version"


def job_descriptions(spark: SparkSession, work: Callable[[], Any]) -> list[str]:
    """The description of every Spark job the session ran during ``work``."""
    context = spark.sparkContext._jsc.sc()
    jvm = spark.sparkContext._jvm
    assert jvm is not None

    def jobs() -> dict[int, str]:
        context.listenerBus().waitUntilEmpty()
        listed = jvm.scala.jdk.javaapi.CollectionConverters.asJava(
            context.statusStore().jobsList(None)
        )
        return {
            int(job.jobId()): str(job.description().get()) if job.description().isDefined() else ""
            for job in listed
        }

    before = jobs()
    work()
    return [text for job, text in sorted(jobs().items()) if job not in before]


def test_a_bronze_run_reconstructs_no_tables_state(lake: Lake) -> None:
    """Bronze only appends (Delta's streaming sink, which asks for its query's last
    transaction version before it writes): on a second delivery it runs its write and no
    job to reconstruct a table's state; the tables are the contract's."""
    delivered, descriptions = lake.second_delivery(
        43, lambda: job_descriptions(lake.spark, lambda: lake.run("bronze"))
    )
    assert descriptions, "the stream's write runs as Spark jobs"
    assert [d for d in descriptions if d.startswith(RECONSTRUCTION)] == []
    lake.run_all()
    assert lake.contract_view() == comparable(expected_tables(delivered))


def test_a_snapshot_given_its_checksums_transactions_answers_as_its_state(lake: Lake) -> None:
    """Two writers' idempotent appends (a replay among them, which commits nothing): the
    snapshot given the checksum's versions answers them without reconstructing its state,
    and they are the state's; the snapshot's other values are Delta's as before, and one
    that had reconstructed its state is given the same. A snapshot without a checksum and
    one whose table expires transactions are left to Delta."""
    jvm = lake.spark.sparkContext._jvm
    assert jvm is not None
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog
    location = str(lake.scratch / "two_writers")
    rows = lake.spark.range(3)
    for app_id, batch_id in (("a", 0), ("b", 0), ("a", 1), ("a", 2), ("b", 1), ("a", 1)):
        append_once(rows, location, app_id, batch_id)
    written = {"a": 2, "b": 1}

    delta_log.clearCache()
    snapshot = _snapshot(lake.spark, location)
    assert int(snapshot.version()) == 4  # five commits: the replay of ("a", 1) made none
    assert known_transactions(jvm, snapshot) is True
    assert _txn_versions(jvm, snapshot) == written
    assert not snapshot._computedStateTriggered()
    assert known_transactions(jvm, snapshot) is True  # answered already, the same
    assert int(snapshot.numOfFiles()) == int(snapshot.allFiles().count()) > 0
    assert state_transactions(jvm, snapshot) == written
    assert lake.spark.read.format("delta").load(location).count() == 15

    delta_log.clearCache()
    computed = _snapshot(lake.spark, location)
    computed.computedState()
    assert known_transactions(jvm, computed) is True
    assert _txn_versions(jvm, computed) == written

    (lake.scratch / "two_writers" / "_delta_log" / f"{4:020d}.crc").unlink()
    delta_log.clearCache()
    unchecked = _snapshot(lake.spark, location)
    assert unchecked.checksumOpt().isEmpty()
    assert known_transactions(jvm, unchecked) is False
    assert _txn_versions(jvm, unchecked) == written

    lake.spark.sql(
        f"ALTER TABLE delta.`{location}` "
        "SET TBLPROPERTIES ('delta.setTransactionRetentionDuration' = 'interval 30 days')"
    )
    delta_log.clearCache()
    expiring = _snapshot(lake.spark, location)
    assert expiring.checksumOpt().isDefined()
    assert known_transactions(jvm, expiring) is False
    assert _txn_versions(jvm, expiring) == written
