"""End to end: Airflow runs the example pipelines with spark-submit, locally and then on the
standalone cluster; a new pipeline is one file; misconfiguration stops a run with a named
error. (spark-submit drivers killed mid-batch: ``test_kill_matrix.py``.)"""

from __future__ import annotations

import json
import random
import re
import subprocess
from collections import Counter
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
    # The run's layers share one driver, started by the first with the quick compiler only
    # (every input here is small).
    submits = [line for line in output.splitlines() if "Spark-Submit cmd" in line]
    assert len(submits) == 1 and QUICK_JIT_OPTION in submits[0], submits
    return {m[1]: (int(m[2]), int(m[3]), int(m[4])) for m in _SUMMARY.findall(output)}


def deliver(lake: Lake, lines: list[bytes], seed: int, pipeline: str = "orders") -> list[bytes]:
    content = render_file(lines, random.Random(seed))
    lake.land(content, pipeline=pipeline)
    return split_records(content)


def check_runs(lake: Lake, second_run_env: dict[str, str]) -> None:
    """Two runs of the three example pipelines through Airflow, customers, then orders, then
    segment sales, with a delivery before each; both contracts after each. The second runs
    with ``second_run_env`` (another Spark master: the same checkpoints go on there)."""
    orders, customers = OrderEventGenerator(seed=31), CustomerEventGenerator(seed=31)
    delivered = deliver(lake, orders.batch(150), seed=1)
    delivered_c = deliver(lake, customers.initial_load() + customers.batch(100), 1, "customers")
    dags_test(lake, "customers")
    first = dags_test(lake, "orders")
    dags_test(lake, "segment_sales")
    expected = expected_tables(delivered)
    assert lake.contract_view() == comparable(expected)
    expected_c = expected_customers(delivered_c)
    sales = expected_segment_sales(expected.silver, expected_c.history)
    assert lake.customers_view(True) == comparable_customers(expected_c, sales)
    n_quarantined = sum(expected.quarantine.values())
    # Bronze reads lines (blank ones included) and writes records.
    assert first["bronze"][1] == len(delivered) <= first["bronze"][0]
    assert first["silver"] == (len(delivered), len(delivered) - n_quarantined, n_quarantined)

    new = deliver(lake, orders.batch(80) + orders.flush_late(), seed=2)
    delivered_c += deliver(lake, customers.batch(60) + customers.flush_late(), 2, "customers")
    dags_test(lake, "customers", **second_run_env)
    second = dags_test(lake, "orders", **second_run_env)
    dags_test(lake, "segment_sales", **second_run_env)
    assert second["bronze"][1] == len(new), "the second run reads only the new file"
    expected = expected_tables(delivered + new)
    assert lake.contract_view() == comparable(expected)
    expected_c = expected_customers(delivered_c)
    sales = expected_segment_sales(expected.silver, expected_c.history)
    assert lake.customers_view(True) == comparable_customers(expected_c, sales)


# Seven DAG runs, six spark-submits (one shared driver per run that has work; three on the
# cluster): 5.5-6.5 minutes on a 2-core machine alone, more beside other work; the suite's
# 15-minute guard against a hang is too close.
@pytest.mark.cluster
@pytest.mark.timeout(1800)
def test_airflow_runs_the_pipelines_locally_then_on_the_standalone_cluster(
    lake: Lake, spark_cluster: str
) -> None:
    """A lake outgrows one machine: the first runs on local Spark, the next on the standalone
    cluster, from the checkpoints the local runs left; then an idle run starts no JVM."""
    check_runs(lake, {"LAKEHOUSE_SPARK_MASTER": spark_cluster})
    # Each layer ran once on each master (skipped runs name none).
    masters = Counter(row[0] for row in lake.rows("ops/run_log", ["spark_master"]) if row[0])
    assert masters == {"local[*]": 6, spark_cluster: 6}, masters
    # One Spark application per DAG run: its layers ran in the run's shared driver.
    apps: dict[tuple[str, str], set[str]] = {}
    for pipeline, run_id, details in lake.rows("ops/run_log", ["pipeline", "run_id", "details"]):
        if details and "spark_app" in details:
            apps.setdefault((pipeline, run_id), set()).add(json.loads(details)["spark_app"])
    assert len(apps) == 6 and all(len(ids) == 1 for ids in apps.values()), apps

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
