"""End to end: Airflow runs orders_pipeline with spark-submit, locally and on the standalone
cluster; spark-submit drivers killed mid-batch recover exactly once; misconfiguration stops a
run with a named error."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lakehouse.local.env import subprocess_env
from lakehouse.sample_data import OrderEventGenerator, render_file
from lakehouse.settings import Settings
from lakehouse.submit import job_submit_spec
from tests.lake import Lake
from tests.oracle import comparable, expected_tables, split_records

pytestmark = [pytest.mark.slow, pytest.mark.airflow]

_SUMMARY = re.compile(r"orders\.(bronze|silver|gold): (\d+) rows in, (\d+) out, (\d+) quarantined")


def project_settings() -> Settings:
    return Settings.from_env()


def airflow(lake: Lake, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = subprocess_env(project_settings(), **{"LAKEHOUSE_ROOT": str(lake.root), **env})
    environment.pop("LAKEHOUSE_FAULT", None)
    return subprocess.run(
        ["airflow", *args], env=environment, capture_output=True, text=True, timeout=900
    )


def dags_test(lake: Lake, **env: str) -> dict[str, tuple[int, int, int]]:
    """Run the whole DAG once; returns each layer's (rows in, out, quarantined)."""
    result = airflow(lake, "dags", "test", "orders_pipeline", **env)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "state=success" in output, output[-6000:]
    return {m[0]: (int(m[1]), int(m[2]), int(m[3])) for m in _SUMMARY.findall(output)}


def deliver(lake: Lake, lines: list[bytes], seed: int) -> list[bytes]:
    content = render_file(lines, random.Random(seed))
    lake.land(content)
    return split_records(content)


def check_runs(lake: Lake, runs: int = 2, **env: str) -> None:
    """``runs`` (1 or 2) whole DAG runs with a delivery before each; the contract after each."""
    generator = OrderEventGenerator(seed=31)
    delivered = deliver(lake, generator.batch(150), seed=1)
    first = dags_test(lake, **env)
    expected = expected_tables(delivered)
    assert lake.contract_view() == comparable(expected)
    n_quarantined = sum(expected.quarantine.values())
    # Bronze reads lines (blank ones included) and writes records.
    assert first["bronze"][1] == len(delivered) <= first["bronze"][0]
    assert first["silver"] == (len(delivered), len(delivered) - n_quarantined, n_quarantined)
    if runs == 1:
        return

    new = deliver(lake, generator.batch(80) + generator.flush_late(), seed=2)
    second = dags_test(lake, **env)
    assert second["bronze"][1] == len(new), "the second run reads only the new file"
    assert lake.contract_view() == comparable(expected_tables(delivered + new))


def test_airflow_runs_the_pipeline_on_local_spark(lake: Lake) -> None:
    check_runs(lake, 2)
    masters = {row[0] for row in lake.rows("ops/run_log", ["spark_master"])}
    assert masters == {"local[*]"}


@pytest.mark.cluster
def test_airflow_runs_the_pipeline_on_the_standalone_cluster(
    lake: Lake, spark_cluster: str
) -> None:
    # One run: the second run's incremental read is the same code, checked on local Spark.
    check_runs(lake, 1, LAKEHOUSE_SPARK_MASTER=spark_cluster)
    masters = {row[0] for row in lake.rows("ops/run_log", ["spark_master"])}
    assert masters == {spark_cluster}


def submit(lake: Lake, layer: str, **env: str) -> subprocess.Popen[str]:
    settings = project_settings().with_root(lake.root)
    spec = job_submit_spec(settings, "orders", layer, run_id=f"kill-test-{layer}")
    return subprocess.Popen(
        spec.argv("local[2]"),
        env=subprocess_env(settings, LAKEHOUSE_ROOT=str(lake.root), **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a fault's SIGKILL takes the driver's group, not pytest
    )


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
    process = submit(lake, "bronze")
    assert process.stdout is not None
    for line in process.stdout:
        if "query orders_bronze started" in line:
            break
    time.sleep(delay)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert finish(submit(lake, "bronze"))[0] == 0

    # Silver and gold die right after their Delta commits, before Spark records the batch.
    for layer, point in (("silver", "silver.after_merge"), ("gold", "gold.after_merge")):
        code, output = finish(submit(lake, layer, LAKEHOUSE_FAULT=f"{point}:kill"))
        assert code == -signal.SIGKILL, output[-3000:]
        code, output = finish(submit(lake, layer))
        assert code == 0, output[-3000:]
    assert lake.contract_view() == comparable(expected_tables(delivered))


def test_misconfiguration_stops_with_a_named_error(lake: Lake, tmp_path: Path) -> None:
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
