"""End to end: Airflow runs the example pipelines with spark-submit, locally and on the
standalone cluster; a new pipeline is one file; spark-submit drivers killed mid-batch recover
exactly once; misconfiguration stops a run with a named error."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lakehouse.jvm import QUICK_JIT_OPTION
from lakehouse.local.env import subprocess_env
from lakehouse.sample_customers import CustomerEventGenerator
from lakehouse.sample_data import OrderEventGenerator, render_file
from lakehouse.settings import Settings
from tests.lake import Lake
from tests.oracle import comparable, expected_tables, split_records
from tests.oracle_customers import (
    comparable_customers,
    expected_customers,
    expected_segment_sales,
)
from tests.readme import readme_example

pytestmark = [pytest.mark.slow, pytest.mark.airflow]

_SUMMARY = re.compile(r"(\w+)\.(bronze|silver|gold): (\d+) rows in, (\d+) out, (\d+) quarantined")


def project_settings() -> Settings:
    return Settings.from_env()


def airflow(lake: Lake, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = subprocess_env(project_settings(), **{"LAKEHOUSE_ROOT": str(lake.root), **env})
    environment.pop("LAKEHOUSE_FAULT", None)
    return subprocess.run(
        ["airflow", *args], env=environment, capture_output=True, text=True, timeout=900
    )


def dags_test(lake: Lake, pipeline: str = "orders", **env: str) -> dict[str, tuple[int, int, int]]:
    """Run the pipeline's whole DAG once; returns each layer's (rows in, out, quarantined)."""
    result = airflow(lake, "dags", "test", f"{pipeline}_pipeline", **env)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "state=success" in output, output[-6000:]
    # Every input here is small: each driver starts with the quick compiler only.
    submits = [line for line in output.splitlines() if "Spark-Submit cmd" in line]
    assert submits and all(QUICK_JIT_OPTION in line for line in submits), submits
    return {m[1]: (int(m[2]), int(m[3]), int(m[4])) for m in _SUMMARY.findall(output)}


def deliver(lake: Lake, lines: list[bytes], seed: int, pipeline: str = "orders") -> list[bytes]:
    content = render_file(lines, random.Random(seed))
    lake.land(content, pipeline=pipeline)
    return split_records(content)


def check_runs(lake: Lake, runs: int = 2, **env: str) -> None:
    """``runs`` (1 or 2) runs of the three example pipelines through Airflow, customers, then
    orders, then segment sales, with a delivery before each; both contracts after each."""
    orders, customers = OrderEventGenerator(seed=31), CustomerEventGenerator(seed=31)
    delivered = deliver(lake, orders.batch(150), seed=1)
    delivered_c = deliver(lake, customers.initial_load() + customers.batch(100), 1, "customers")
    dags_test(lake, "customers", **env)
    first = dags_test(lake, "orders", **env)
    dags_test(lake, "segment_sales", **env)
    expected = expected_tables(delivered)
    assert lake.contract_view() == comparable(expected)
    expected_c = expected_customers(delivered_c)
    sales = expected_segment_sales(expected.silver, expected_c.history)
    assert lake.customers_view(True) == comparable_customers(expected_c, sales)
    n_quarantined = sum(expected.quarantine.values())
    # Bronze reads lines (blank ones included) and writes records.
    assert first["bronze"][1] == len(delivered) <= first["bronze"][0]
    assert first["silver"] == (len(delivered), len(delivered) - n_quarantined, n_quarantined)
    if runs == 1:
        return

    new = deliver(lake, orders.batch(80) + orders.flush_late(), seed=2)
    delivered_c += deliver(lake, customers.batch(60) + customers.flush_late(), 2, "customers")
    dags_test(lake, "customers", **env)
    second = dags_test(lake, "orders", **env)
    dags_test(lake, "segment_sales", **env)
    assert second["bronze"][1] == len(new), "the second run reads only the new file"
    expected = expected_tables(delivered + new)
    assert lake.contract_view() == comparable(expected)
    expected_c = expected_customers(delivered_c)
    sales = expected_segment_sales(expected.silver, expected_c.history)
    assert lake.customers_view(True) == comparable_customers(expected_c, sales)


# Seven DAG runs, twelve spark-submits: about 13 minutes on a 2-core machine alone, more
# beside other work; the suite's 15-minute guard against a hang is too close.
@pytest.mark.timeout(1800)
def test_airflow_runs_the_pipelines_on_local_spark(lake: Lake) -> None:
    check_runs(lake, 2)
    masters = {row[0] for row in lake.rows("ops/run_log", ["spark_master"]) if row[0]}
    assert masters == {"local[*]"}

    # Nothing new: every layer is skipped without a JVM, and says so in the run log.
    before = lake.snapshot()
    result = airflow(lake, "dags", "test", "orders_pipeline")
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "state=success" in output, output[-4000:]
    assert "Spark-Submit cmd" not in output, "an idle run started a JVM"
    assert output.count("no JVM started") == 3
    skipped = [
        r for r in lake.rows("ops/run_log", ["layer", "status", "details"]) if r[1] == "skipped"
    ]
    assert sorted(r[0] for r in skipped) == ["bronze", "gold", "silver"]
    assert all("nothing new" in r[2] for r in skipped)
    assert lake.snapshot() == before


@pytest.mark.cluster
def test_airflow_runs_the_pipelines_on_the_standalone_cluster(
    lake: Lake, spark_cluster: str
) -> None:
    # One run: the second run's incremental read is the same code, checked on local Spark.
    check_runs(lake, 1, LAKEHOUSE_SPARK_MASTER=spark_cluster)
    masters = {row[0] for row in lake.rows("ops/run_log", ["spark_master"])}
    assert masters == {spark_cluster}


def test_a_new_pipeline_is_one_file(lake: Lake, tmp_path: Path) -> None:
    """The README's example declaration, alone in a pipelines folder, runs through Airflow:
    nothing else had to change for it."""
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "page_views.py").write_text(readme_example("page_views.py"))
    lake.land(
        [
            b'{"event_id": "v1", "page": "/home", "viewed_at": "2026-11-02T10:00:00Z"}',
            b'{"event_id": "v1", "page": "/home", "viewed_at": "2026-11-02T10:00:00Z"}',
            b'{"event_id": "v2", "page": "/cart", "viewed_at": "2026-11-02T11:00:00Z"}',
            b'{"event_id": "v3", "page": "/cart", "viewed_at": "soon"}',
        ],
        pipeline="page_views",
    )
    runs = dags_test(lake, "page_views", LAKEHOUSE_PIPELINES_DIR=str(folder))
    assert runs["silver"] == (4, 3, 1)  # three valid records (one event twice), one invalid
    assert sorted(lake.rows("gold/page_views_daily", ["page", "views"])) == [
        ("/cart", 1),
        ("/home", 1),
    ]


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    output, _ = process.communicate(timeout=600)
    return process.returncode, output


def test_drivers_killed_mid_batch_recover_exactly_once(lake: Lake) -> None:
    generator = OrderEventGenerator(seed=32)
    delivered = deliver(lake, generator.batch(120), seed=1)
    lake.run_all()  # the first load in-process: only the killed runs need a process of their own
    delivered += deliver(lake, generator.batch(300) + generator.flush_late(), seed=2)

    # Bronze killed at a random moment while its query runs (seeded, so it is repeatable).
    delay = random.Random(7).uniform(0.5, 4.0)
    process = lake.submit("orders", "bronze")
    lake.read_until(process, "query orders_bronze started")
    time.sleep(delay)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert finish(lake.submit("orders", "bronze"))[0] == 0

    # Silver and gold die right after their Delta commits, before Spark records the batch.
    for layer, point in (("silver", "silver.after_merge"), ("gold", "gold.after_merge")):
        code, output = finish(lake.submit("orders", layer, fault=f"{point}:kill"))
        assert code == -signal.SIGKILL, output[-3000:]
        code, output = finish(lake.submit("orders", layer))
        assert code == 0, output[-3000:]
    assert lake.contract_view() == comparable(expected_tables(delivered))


def test_misconfiguration_stops_with_a_named_error(lake: Lake, tmp_path: Path) -> None:
    lake.land(OrderEventGenerator(seed=33).batch(5))  # work to do: no idle skip
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cases = {
        "LakehouseRootNotWritable": {"LAKEHOUSE_ROOT": str(blocker / "lake")},
        "SparkMasterUnreachable": {"LAKEHOUSE_SPARK_MASTER": "spark://127.0.0.1:1"},
        "JavaNotFound": {"JAVA_HOME": str(tmp_path / "no-java")},
    }
    for code, env in cases.items():
        result = airflow(lake, "tasks", "test", "orders_pipeline", "bronze", **env)
        output = result.stdout + result.stderr
        # `airflow tasks test` exits 0 either way; the task's state tells (a dead master may
        # come back, so that one is retried; the others fail at once).
        assert re.search(r"new_state=(failed|up_for_retry)", output), (code, output[-3000:])
        assert f"[{code}]" in output, output[-3000:]
        assert "What to do:" in output
