"""The warm driver a pipeline run's layer tasks share (``jobs/driver.py``, started and asked
by ``lakehouse.run_driver`` as the Airflow operator does): one Spark application runs the
run's layers and stops after the last; a failed job stops it too, and so does a quiet while;
a driver killed mid-batch fails its task with ``DriverLost`` and the retry goes on exactly
once; a request that comes as an idle driver stops goes to a new one; a task with other Spark
settings is refused (it submits its own). A kept driver (``LAKEHOUSE_RUN_DRIVER_KEEP_S``)
serves a DAG's next runs too, and stops once nobody asked it for that long."""

from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path

import pytest

from jobs.faults import PAUSE_S
from lakehouse.errors import DriverLost
from lakehouse.run_driver import RunDriver, driver_file, fingerprint, start
from lakehouse.sample_data import OrderEventGenerator, render_file
from lakehouse.settings import Settings
from lakehouse.submit import job_submit_spec
from tests.lake import Lake
from tests.oracle import comparable, expected_tables, split_records

pytestmark = pytest.mark.slow

MASTER = "local[2]"


class Run:
    """One pipeline run's tasks on one machine, as the operator drives them."""

    def __init__(self, lake: Lake, run_id: str, idle_s: int = 60, keep_s: int = 0) -> None:
        from lakehouse.local.env import subprocess_env

        root = lake.settings.root
        self.settings = (
            Settings.from_env()
            .with_root(root)
            .with_env(
                LAKEHOUSE_RUN_DRIVER_IDLE_S=str(idle_s), LAKEHOUSE_RUN_DRIVER_KEEP_S=str(keep_s)
            )
        )
        self.env = subprocess_env(self.settings, LAKEHOUSE_ROOT=root)
        self.env.pop("LAKEHOUSE_FAULT", None)
        self.starts: list[subprocess.Popen[bytes]] = []
        self.task_env: dict[str, str] = {}
        self.begin(run_id)

    def begin(self, run_id: str) -> None:
        """The DAG's run ``run_id`` starts: its tasks' driver."""
        self.run_id = run_id
        # What a layer task would submit: the driver is started from it.
        self.submit = spec = job_submit_spec(self.settings, "orders", "bronze", run_id=run_id)
        settings = fingerprint([MASTER, spec.conf, spec.jars])
        self.driver = RunDriver.of("orders_pipeline", run_id, settings, self.settings)

    def start(self, log_file: Path) -> subprocess.Popen[bytes]:
        """The driver's spark-submit, with the starting task's variables (as the operator)."""
        driver = self.driver.submit_spec(
            self.submit, self.settings, "orders", task_env=self.task_env
        )
        self.starts.append(start(driver.argv(MASTER), {**self.env, **self.task_env}, log_file))
        return self.starts[-1]

    def layer(self, layer: str, *, last: bool = False, **env: str) -> tuple[int | None, str]:
        spec = job_submit_spec(self.settings, "orders", layer, run_id=self.run_id)
        self.task_env = env
        lines: list[str] = []
        code = self.driver.run(layer, spec.args, env, last=last, start=self.start, out=lines.append)
        return code, "\n".join(lines)

    def stopped(self, timeout: float = 60) -> int:
        """The exit code of the last driver started, once it stopped by itself."""
        code = self.starts[-1].wait(timeout)
        assert not self.driver.log_path.exists(), "a driver that stopped in order leaves no log"
        assert not driver_file(self.driver.name, ".lock").exists(), "nor its start lock"
        return code


def deliver(lake: Lake, orders: OrderEventGenerator, n: int, seed: int) -> list[bytes]:
    content = render_file(orders.batch(n), random.Random(seed))
    lake.land(content)
    return split_records(content)


def spark_apps(lake: Lake, run_id: str) -> dict[str, str]:
    rows = lake.rows("ops/run_log", ["layer", "run_id", "status", "details"])
    return {
        r[0]: json.loads(r[3])["spark_app"] for r in rows if r[1] == run_id and r[2] == "succeeded"
    }


def test_a_runs_layers_share_one_driver_that_stops_after_the_last(lake: Lake) -> None:
    orders = OrderEventGenerator(seed=5)
    delivered = deliver(lake, orders, 120, seed=1)
    run = Run(lake, "run-1")
    # The task that starts the driver has a variable of its own; the next jobs must not see
    # it (were silver to, it would fail at its fault point).
    outputs = {"bronze": run.layer("bronze", LAKEHOUSE_FAULT="silver.after_merge")}
    outputs |= {layer: run.layer(layer, last=layer == "gold") for layer in ("silver", "gold")}
    assert {layer: code for layer, (code, _) in outputs.items()} == {
        "bronze": 0,
        "silver": 0,
        "gold": 0,
    }
    # The job's own output came back to the task, summary included.
    assert all("SUMMARY {" in text for _, text in outputs.values()), outputs["silver"][1][-2000:]
    assert len(run.starts) == 1, "one spark-submit for the run's three layers"
    assert run.stopped() == 0, "the run's last layer stops its driver"
    apps = spark_apps(lake, "run-1")
    assert sorted(apps) == ["bronze", "gold", "silver"] and len(set(apps.values())) == 1, apps
    assert lake.contract_view() == comparable(expected_tables(delivered))


def test_a_failed_or_killed_job_ends_its_driver_and_the_retry_goes_on_exactly_once(
    lake: Lake,
) -> None:
    orders = OrderEventGenerator(seed=6)
    delivered = deliver(lake, orders, 100, seed=2)
    run = Run(lake, "run-2", idle_s=8)
    assert run.layer("bronze")[0] == 0
    # A job that fails ends the driver: the retry gets a fresh JVM, as with spark-submit.
    code, text = run.layer("silver", LAKEHOUSE_FAULT="silver.after_merge")
    assert code == 1 and "fault injected at silver.after_merge" in text, text[-2000:]
    assert run.stopped() == 0 and len(run.starts) == 1
    # A driver killed mid-batch (its whole process group, as a lost machine) fails the task.
    with pytest.raises(DriverLost, match="went away while running silver"):
        run.layer("silver", LAKEHOUSE_FAULT="silver.after_merge:kill")
    assert len(run.starts) == 2 and run.starts[-1].wait(60) != 0
    # The retry starts a third driver and commits the batch once. (That driver will hold the
    # moment it stops for being idle open for PAUSE_S, still listening.)
    run.env["LAKEHOUSE_FAULT"] = "driver.idle_stop:pause"
    assert run.layer("silver")[0] == 0 and len(run.starts) == 3
    run.env.pop("LAKEHOUSE_FAULT")
    # A task that would submit with other Spark settings is refused, and runs its own.
    other = RunDriver(run.driver.run_key, "other settings")
    refused = other.run("gold", [], {}, last=True, start=run.start, out=print)
    assert refused is None and len(run.starts) == 3
    # Nobody asks for idle_s: the driver stops by itself. A request that comes as it stops
    # is never taken: the task sends it to a fourth driver, which runs it.
    deadline = time.monotonic() + 60
    while "no request for" not in run.driver.log_path.read_text(errors="replace"):
        assert time.monotonic() < deadline, run.driver.log_tail()
        time.sleep(0.2)
    code, text = run.layer("gold", last=True)
    assert code == 0 and len(run.starts) == 4, text[-2000:]
    assert "stopped (idle) as this request came: starting a new one" in text
    assert run.starts[2].wait(PAUSE_S + 60) == 0
    assert run.stopped() == 0
    assert lake.contract_view() == comparable(expected_tables(delivered))
    statuses = sorted(r[0] for r in lake.rows("ops/run_log", ["status"]))
    assert statuses.count("killed") == 1, statuses


def test_a_kept_driver_serves_the_dags_next_runs_and_stops_when_nobody_asks(lake: Lake) -> None:
    orders = OrderEventGenerator(seed=7)
    delivered = deliver(lake, orders, 120, seed=3)
    run = Run(lake, "run-3", keep_s=15)
    for layer in ("bronze", "silver", "gold"):
        assert run.layer(layer, last=layer == "gold")[0] == 0
    assert run.starts[0].poll() is None, "a kept driver outlives its run's last layer"
    assert not run.driver.stop(), "a run that ends early leaves the kept driver to the next"
    # The DAG's next run, with a small delivery: the same driver, not a new JVM.
    delivered += deliver(lake, orders, 12, seed=4)
    run.begin("run-4")
    assert [
        run.layer(layer, last=layer == "gold")[0] for layer in ("bronze", "silver", "gold")
    ] == [0, 0, 0]
    assert len(run.starts) == 1, "one spark-submit for both runs"
    first, second = spark_apps(lake, "run-3"), spark_apps(lake, "run-4")
    assert len(set(first.values()) | set(second.values())) == 1, (first, second)
    assert lake.contract_view() == comparable(expected_tables(delivered))
    # Nobody asks for keep_s: it stops by itself, in order.
    assert run.stopped(timeout=15 + 60) == 0


def test_a_submitted_driver_imports_pyspark_with_its_bytecode(tmp_path: Path) -> None:
    """spark-submit puts pyspark's and py4j's source zips first on its driver's path; a job
    imports the installed packages instead (``jobs.prefer_installed_pyspark``), whose bytecode
    pip compiled, and the project from its archive."""
    import dataclasses

    from lakehouse.local.env import subprocess_env

    settings = Settings.from_env()
    script = tmp_path / "where.py"
    script.write_text(
        "import sys\nimport jobs\nimport py4j\nimport pyspark.sql\n"
        "print('WHERE', jobs.__file__, pyspark.__file__, py4j.__file__, sys.path.index("
        "next(p for p in sys.path if p.endswith('pyspark.zip'))) == len(sys.path) - 2)\n"
    )
    spec = job_submit_spec(settings, "orders", "bronze", run_id="where")
    spec = dataclasses.replace(spec, application=str(script), args=())
    result = subprocess.run(
        spec.argv(MASTER), env=subprocess_env(settings), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("WHERE "))
    _, jobs_file, pyspark_file, py4j_file, zips_last = line.split()
    assert jobs_file.endswith(".zip/jobs/__init__.pyc"), jobs_file
    site = str(Path(pyspark_file).parent.parent)
    assert (
        pyspark_file == f"{site}/pyspark/__init__.py"
        and (Path(site) / "pyspark" / "__pycache__").is_dir()
    ), pyspark_file
    assert py4j_file == f"{site}/py4j/__init__.py", py4j_file
    assert zips_last == "True"
