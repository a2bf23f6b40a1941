"""Run-log rows written by delta-rs (no JVM): exact values back, and a table that keeps its
log short for the appends of many runs a day."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from deltalake import DeltaTable

from lakehouse.runlog import append_row
from lakehouse.settings import Settings
from lakehouse.specs import RUN_LOG, schema_fields


def _rows(settings: Settings) -> list[dict[str, object]]:
    rows = DeltaTable(settings.path(RUN_LOG.name)).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda row: str(row["run_id"]))


def test_a_row_comes_back_exactly(tmp_path: Path) -> None:
    settings = Settings.from_env({}).with_root(tmp_path)
    started = datetime(2026, 11, 27, 1, 2, 3, 456789, tzinfo=UTC)
    ended = datetime(2026, 11, 27, 1, 2, 5, 1, tzinfo=UTC)
    append_row(
        settings,
        pipeline="orders",
        layer="silver",
        action="stream",
        run_id="r1",
        status="skipped",
        started_at=started,
        ended_at=ended,
        rows_in=0,
        batches=2,
        details={"reason": "nothing new", "jvm_started": False},
    )
    append_row(settings, pipeline="orders", layer="gold", run_id="r2", status="failed")

    first, second = _rows(settings)
    assert first == {
        "pipeline": "orders",
        "layer": "silver",
        "action": "stream",
        "run_id": "r1",
        "query_id": None,
        "status": "skipped",
        "started_at": started,
        "ended_at": ended,
        "duration_s": 1.543,
        "rows_in": 0,
        "rows_out": None,
        "rows_quarantined": None,
        "batches": 2,
        "source_start": None,
        "source_end": None,
        "spark_master": None,
        "error": None,
        "details": '{"jvm_started": false, "reason": "nothing new"}',
    }
    assert second["started_at"] is None and second["duration_s"] is None
    assert second["details"] == "{}"
    table = DeltaTable(settings.path(RUN_LOG.name))
    assert [f.name for f in table.schema().fields] == [n for n, _ in schema_fields(RUN_LOG.schema)]


def test_a_table_made_by_an_append_checkpoints_every_ten_commits(tmp_path: Path) -> None:
    settings = Settings.from_env({}).with_root(tmp_path)
    for i in range(12):
        append_row(settings, pipeline="orders", layer="bronze", run_id=f"r{i:02}", status="ok")

    table = DeltaTable(settings.path(RUN_LOG.name))
    assert table.metadata().configuration == {"delta.checkpointInterval": "10"}
    log = Path(settings.path(RUN_LOG.name)) / "_delta_log"
    assert sorted(p.name for p in log.glob("*.checkpoint.parquet")) == [
        "00000000000000000009.checkpoint.parquet"
    ]
    assert [row["run_id"] for row in _rows(settings)] == [f"r{i:02}" for i in range(12)]


def test_an_append_imports_neither_pandas_nor_pyarrow(tmp_path: Path) -> None:
    """A skipped layer's whole work is a decision and this row: a quarter of a second of
    pandas and pyarrow imports would be most of it."""
    code = (
        "import sys; from lakehouse.runlog import append_row, now;"
        "from lakehouse.settings import Settings;"
        f"append_row(Settings.from_env({{}}).with_root({str(tmp_path)!r}), run_id='r',"
        " started_at=now(), ended_at=now());"
        "print(sorted(m for m in ('pandas', 'pyarrow') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_failed_run_names_the_jvm_root_cause() -> None:
    from jobs.runtime import RunRecord

    class Wrapped(Exception):
        _stackTrace = (
            "org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed while writing rows"
            "\n\tat org.apache.spark.Foo.bar(Foo.scala:1)\nCaused by: org.apache.spark."
            "SparkException: stage failure\n\tat x\nCaused by: java.lang.ArithmeticException: "
            "/ by zero\n\tat y"
        )

    record = RunRecord("orders", "silver", "r", "running", datetime.now(UTC))
    record.fail(Wrapped("[TASK_WRITE_FAILED] Task failed while writing rows"))
    assert (record.status, record.error_code) == ("failed", "Wrapped")
    assert record.error == (
        "Wrapped: [TASK_WRITE_FAILED] Task failed while writing rows Caused by: "
        "java.lang.ArithmeticException: / by zero"
    )


def test_a_run_log_is_ready_only_with_every_declared_column_and_property(tmp_path: Path) -> None:
    """A job skips Spark's check of the run log when delta-rs finds it ready; a table that
    lacks a column or a property is not, and Spark gives it what it lacks."""
    from arro3.core import Array, DataType, Table
    from deltalake import write_deltalake

    from lakehouse.runlog import is_ready

    settings = Settings.from_env({}).with_root(tmp_path / "made")
    assert not is_ready(settings)  # no table yet
    append_row(settings, pipeline="orders", layer="gold", run_id="r", status="ok")
    assert is_ready(settings)

    older = Settings.from_env({}).with_root(tmp_path / "older")
    columns = [n for n, _ in schema_fields(RUN_LOG.schema) if n != "details"]
    one_row = Table.from_pydict({n: Array([None], DataType.string()) for n in columns})
    location = older.path(RUN_LOG.name)
    write_deltalake(location, one_row, configuration=dict(RUN_LOG.properties))
    assert not is_ready(older)  # a column is missing

    plain = Settings.from_env({}).with_root(tmp_path / "plain")
    full = Table.from_pydict({n: Array([None], DataType.string()) for n in [*columns, "details"]})
    write_deltalake(plain.path(RUN_LOG.name), full)
    assert not is_ready(plain)  # delta.checkpointInterval is not set
