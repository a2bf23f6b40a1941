"""End to end: Airflow runs lakehouse_maintenance with spark-submit while a pipeline layer
writes the same tables; the two never write a table at the same time."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime

import pytest

from lakehouse.local.env import subprocess_env
from lakehouse.sample_data import OrderEventGenerator
from lakehouse.settings import Settings
from tests.lake import Lake
from tests.oracle import comparable, expected_tables
from tests.spark.test_maintenance import RETENTION_CHECK, deliver, run_layers

pytestmark = [pytest.mark.slow, pytest.mark.airflow]

SILVER_TABLES = ("silver/orders", "silver/orders_quarantine")


def commit_times(lake: Lake, table: str) -> list[tuple[datetime, str]]:
    from pyspark.sql import functions as F

    history_df = lake.spark.sql(f"DESCRIBE HISTORY delta.`{lake.settings.path(table)}`")
    rows = history_df.select(F.unix_micros("timestamp").alias("micros"), "operation").collect()
    return sorted((datetime.fromtimestamp(r["micros"] / 1e6, UTC), r["operation"]) for r in rows)


def test_the_maintenance_dag_and_a_pipeline_run_never_write_a_table_at_once(lake: Lake) -> None:
    orders = OrderEventGenerator(seed=61)
    delivered = deliver(lake, orders, 30, seed=1)
    run_layers(lake, "bronze", "silver", "gold")
    delivered += deliver(lake, orders, 30, seed=2)
    assert lake.run("bronze") == 0  # silver has work waiting

    # `airflow dags test` with the run's params: VACUUM and backup (optimize is skipped).
    env = subprocess_env(Settings.from_env(), LAKEHOUSE_ROOT=str(lake.root))
    env.pop("LAKEHOUSE_FAULT", None)
    conf = json.dumps({"actions": ["vacuum", "backup"]})
    process = subprocess.Popen(
        ["airflow", "dags", "test", "lakehouse_maintenance", "--conf", conf],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if "maintenance of orders:" in line:  # the job is about to take its first lock
            break
    started = datetime.now(UTC)
    assert lake.run("silver") == 0  # the pipeline's silver layer, started together with it
    silver_ran = (started, datetime.now(UTC))
    output = "".join(lines) + process.communicate(timeout=900)[0]
    assert process.returncode == 0 and "state=success" in output, output[-6000:]

    rows = lake.rows("ops/run_log", ["action", "status", "run_id", "details"])
    maintenance = [(a, s, json.loads(d)) for a, s, _, d in rows if a != "stream"]
    assert {a for a, _, _ in maintenance} == {"vacuum", "backup"}
    assert {s for _, s, _ in maintenance} <= {"succeeded", "skipped"}
    assert len({r for a, _, r, _ in rows if a != "stream"}) == 1, "one Airflow run id"
    windows = [w for _, _, d in maintenance for w in d["locks"]]
    assert any(  # the maintenance run held silver's locks while silver ran, or waited for them
        (
            datetime.fromisoformat(w["to"]) > silver_ran[0]
            and datetime.fromisoformat(w["from"]) < silver_ran[1]
        )
        or w["waited_s"] > 0
        for w in windows
        if set(w["tables"]) & set(SILVER_TABLES)
    )
    for table in SILVER_TABLES:
        held = [
            (datetime.fromisoformat(w["from"]), datetime.fromisoformat(w["to"]))
            for w in windows
            if table in w["tables"]
        ]
        for at, operation in commit_times(lake, table):
            inside = any(start <= at <= end for start, end in held)
            if operation.startswith("VACUUM"):
                assert inside, f"{table}: {operation} at {at} outside maintenance's lock"
            elif silver_ran[0] <= at <= silver_ran[1]:
                assert not inside, f"{table}: silver's {operation} at {at} in maintenance's lock"

    backups = sorted((lake.root / "_backups" / "orders").glob("2*"))
    assert len(backups) == 1 and (backups[0] / "manifest.json").exists()
    assert lake.run("gold") == 0
    assert lake.contract_view() == comparable(expected_tables(delivered))
    assert lake.spark.conf.get(RETENTION_CHECK) == "true"
