"""What maintenance reads from a Delta table: its snapshot's files, transaction ids, history.

SQL covers history and time travel. The per-file view of a snapshot, the table id and the
transaction ids of streaming writers are only reachable through Delta's ``DeltaLog`` on the
JVM; this module is the one place that touches it, so a Delta upgrade that moves it breaks
here and nowhere else. Commit files themselves (``_delta_log/<version>.json``) follow the
public Delta protocol and are read as JSON.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import storage

log = logging.getLogger("lakehouse.delta_state")

# The parts of a commit file maintenance needs (Delta protocol: add, remove, cdc actions).
_COMMIT_SCHEMA = (
    "add STRUCT<path: STRING, partitionValues: MAP<STRING, STRING>, size: BIGINT, "
    "dataChange: BOOLEAN>, "
    "remove STRUCT<path: STRING, size: BIGINT, dataChange: BOOLEAN>, "
    "cdc STRUCT<path: STRING, size: BIGINT>"
)


@dataclass(frozen=True)
class TableState:
    """A table's latest snapshot: identity, version, properties, streaming txn versions."""

    location: str
    table_id: str
    version: int
    properties: dict[str, str]
    txn_versions: dict[str, int]
    jsnapshot: Any  # the JVM Snapshot, for files()

    def file_count(self) -> int:
        return _file_count(self.jsnapshot)

    def files(self, spark: SparkSession) -> DataFrame:
        """The snapshot's data files: ``path``, ``size``, ``partitionValues``."""
        return DataFrame(self.jsnapshot.allFiles().toDF(), spark).select(
            "path", "size", "partitionValues"
        )


def is_delta_table(spark: SparkSession, location: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, location))


def _snapshot(spark: SparkSession, location: str) -> Any:
    """The table's latest JVM ``Snapshot`` (the log listed again; no Spark job)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, location)
    none = jvm.scala.Option.empty()
    return delta_log.update(False, none, none)


def _file_count(snapshot: Any) -> int:
    """How many data files a snapshot has: from the version's checksum when it has one (no
    Spark job), else from the snapshot's state."""
    checksum = _checksum(snapshot)
    if checksum is not None:
        return int(checksum.numFiles())
    return int(snapshot.numOfFiles())


def has_no_files(spark: SparkSession, location: str) -> bool:
    """Whether the table's latest version holds no data file (an empty table)."""
    return _file_count(_snapshot(spark, location)) == 0


def table_version(spark: SparkSession, location: str) -> int:
    """The table's latest version, from its log (``DESCRIBE HISTORY`` would run a Spark job
    to read the last commit; every layer run asks this two or three times)."""
    return int(_snapshot(spark, location).version())


def table_properties(spark: SparkSession, location: str) -> dict[str, str]:
    """The table's properties (``TBLPROPERTIES``), from its latest metadata (no Spark job)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    configuration = _snapshot(spark, location).metadata().configuration()
    to_java = jvm.scala.jdk.javaapi.CollectionConverters.asJava
    return {str(k): str(v) for k, v in to_java(configuration).items()}


def table_state(spark: SparkSession, location: str) -> TableState:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    snapshot = _snapshot(spark, location)
    to_java = jvm.scala.jdk.javaapi.CollectionConverters.asJava
    metadata = snapshot.metadata()
    return TableState(
        location=location,
        table_id=str(metadata.id()),
        version=int(snapshot.version()),
        properties={str(k): str(v) for k, v in to_java(metadata.configuration()).items()},
        txn_versions=_txn_versions(jvm, snapshot),
        jsnapshot=snapshot,
    )


def _txn_versions(jvm: Any, snapshot: Any) -> dict[str, int]:
    """The streaming writers' last transaction versions (``SetTransaction`` actions): from
    the version's checksum where it lists them (``known_transactions``), else from the
    snapshot's reconstructed state. That costs a fresh driver a second or more of Spark
    jobs, wasted on a table the run then does not write (a quarantine when every record is
    valid). Both give the same map: the checksum is the state's summary."""
    known_transactions(jvm, snapshot)
    to_java = jvm.scala.jdk.javaapi.CollectionConverters.asJava
    return {str(k): int(v) for k, v in to_java(snapshot.transactions()).items()}


def known_transactions(jvm: Any, snapshot: Any) -> bool:
    """Give a JVM ``Snapshot`` its writers' transaction versions from its version's checksum
    (``jvm/src/lakehouse/delta/KnownTransactions.java``) before anything asks for them:
    Delta 4.4 answers them from the whole reconstructed state, not from the checksum that
    lists them (Delta computes it incrementally at each commit, by default). True if the
    snapshot answers them without reconstructing its state; False leaves it to Delta (no
    checksum, one without the list, or a table that expires transactions)."""
    return bool(jvm.lakehouse.delta.KnownTransactions.prime(snapshot))


def prefetch_state(
    spark: SparkSession, locations: Sequence[str], appended: Collection[str] = ()
) -> None:
    """Ready the snapshots of the tables a run is about to write (``locations``), meant to
    run beside the stream (``delta_writes.alongside``).

    Every idempotent write (``txnAppId``: the Delta sink, ``append_once``, the MERGEs) asks
    its snapshot for the writers' transaction versions, and Delta 4.4 reconstructs the
    snapshot's whole state to answer (three small Spark jobs, 0.3 to 0.4 s per table in a
    warm driver, more in a fresh one) where the version's checksum lists them: each snapshot
    gets them from its checksum first (``known_transactions``), so a table the run only
    appends to (``appended``: bronze, a quarantine) needs no state at all. A table it merges
    into does (a MERGE finds the files to rewrite in it): that state is reconstructed here,
    beside the micro-batch's read and validation, and the write finds it computed (the same
    ``Snapshot`` object while the table has no newer commit; a newer one is reconstructed by
    the write as before). A failure here is left for the write to meet and report.
    """
    jvm = spark.sparkContext._jvm
    for location in locations:
        try:
            snapshot = _snapshot(spark, location)
            known = known_transactions(jvm, snapshot)
            if not known or location not in appended:
                snapshot.computedState()
        except Exception as exc:  # the write will meet it and say so
            log.debug("state of %s not prefetched: %s", location, exc)


def _checksum(snapshot: Any) -> Any | None:
    """The version's Delta checksum (a JVM ``VersionChecksum``), or None if it has none."""
    checksum = snapshot.checksumOpt()
    return checksum.get() if checksum.isDefined() else None


@dataclass(frozen=True)
class Commit:
    version: int
    committed_at: datetime
    operation: str
    metrics: dict[str, str]


def history(spark: SparkSession, location: str) -> dict[int, Commit]:
    """Every commit the log still holds, by version (times in UTC)."""
    from delta.tables import DeltaTable

    rows = (
        DeltaTable.forPath(spark, location)
        .history()
        # As epoch microseconds: collected timestamps would be in the driver's local zone.
        .select(
            "version", F.unix_micros("timestamp").alias("micros"), "operation", "operationMetrics"
        )
        .collect()
    )
    return {
        int(r["version"]): Commit(
            int(r["version"]),
            datetime.fromtimestamp(r["micros"] / 1e6, UTC),
            str(r["operation"]),
            dict(r["operationMetrics"] or {}),
        )
        for r in rows
    }


def commit_file(location: str, version: int) -> str:
    return f"{location}/_delta_log/{version:020d}.json"


def commit_files(location: str, versions: Sequence[int]) -> list[str]:
    return [commit_file(location, v) for v in versions]


def commit_info(spark: SparkSession, location: str, version: int) -> dict[str, Any] | None:
    """The ``commitInfo`` action of commit ``version`` (its operation and operation metrics),
    read from the commit's JSON file: no Spark job, where ``DESCRIBE HISTORY`` runs one (0.2 s
    in a warm driver, a second in a cold one). None when the file is gone (log cleanup) or
    holds no ``commitInfo``."""
    text = storage.read_text(spark, commit_file(location, version))
    for line in (text or "").splitlines():
        action = json.loads(line) if line.strip() else {}
        if "commitInfo" in action:
            info: dict[str, Any] = action["commitInfo"]
            return info
    return None


def logged_versions(spark: SparkSession, location: str) -> set[int]:
    """Versions whose JSON commit file is still in ``_delta_log``."""
    return {
        int(name[:-5])
        for name in storage.list_names(spark, f"{location}/_delta_log")
        if name.endswith(".json") and name[:-5].isdigit()
    }


def commit_actions(spark: SparkSession, location: str, versions: Sequence[int]) -> DataFrame:
    """The add, remove and cdc actions of the commits ``versions`` (which must exist)."""
    return spark.read.schema(_COMMIT_SCHEMA).json(commit_files(location, versions))


def absolute(location: str, path: str) -> str:
    """A path from the log (relative and URL-encoded, or absolute) as a location."""
    if "://" in path or path.startswith("/"):
        return path
    return f"{location.rstrip('/')}/{unquote(path)}"


def missing_files(spark: SparkSession, paths: Sequence[str]) -> list[str]:
    return [p for p in paths if not storage.exists(spark, p)]


# Up to this many commits, a new stream reads a table's log instead of its snapshot (below).
LOG_START_MAX_VERSIONS = 32


def appends_only(spark: SparkSession, location: str, *, change_feed: bool) -> bool:
    """Whether every commit of the table is still in its log (version 0 onwards, at most
    ``LOG_START_MAX_VERSIONS``) and only ever added data: no commit removed a file or wrote
    change data, and none after the first changed the table's metadata or protocol (with
    ``change_feed``, the first one turned the change feed on).

    A new stream over such a table reads the same files whether it starts from the latest
    snapshot (Delta's default) or from version 0's commit (``startingVersion``), and the log
    costs much less: the snapshot start ran 5 to 17 Spark jobs, 3.5 to 7.7 s of a first load
    of 100,000 events, and again when the next run replays that first batch's offsets."""
    versions = logged_versions(spark, location)
    if not versions or len(versions) > LOG_START_MAX_VERSIONS:
        return False
    if versions != set(range(max(versions) + 1)):
        return False  # version 0 is gone (log cleanup), or a commit is missing from the listing
    feed_on = False
    for version in sorted(versions):
        text = storage.read_text(spark, commit_file(location, version)) or ""
        for line in text.splitlines():
            action = json.loads(line) if line.strip() else {}
            if "remove" in action or "cdc" in action:
                return False
            if version > 0 and ("metaData" in action or "protocol" in action):
                return False
            if "metaData" in action:
                configuration = action["metaData"].get("configuration") or {}
                feed_on = configuration.get("delta.enableChangeDataFeed") == "true"
    return feed_on or not change_feed
