"""The lakehouse on the local S3 server, as a deployment runs it: spark-submit drivers that
share nothing but the bucket, and Airflow with the ``lakehouse_s3`` connection.

* Two drivers of one layer started at once: one runs, the other waits and stops with
  ``ConcurrentRun``; a driver paused (SIGSTOP) past its lease is replaced by its retry and,
  woken up, stops with ``LeaseLost`` without committing: the contract holds exactly.
* Airflow runs a pipeline on an ``s3a://`` root with nothing but the connection's
  credentials: the secret shows in no log, command line, process environment or XCom.

The contract tests themselves run on both roots in ``tests/spark`` (``lake`` with the param
"s3") and in ``tests/e2e/test_kafka.py``; the lease's own process tests are in
``tests/e2e/test_leases.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from lakehouse.local.report import render
from lakehouse.local.services import S3Server
from lakehouse.sample_data import OrderEventGenerator, render_file
from lakehouse.settings import Settings
from tests.e2e.test_kafka import _processes, airflow_dags_test
from tests.lake import Lake
from tests.oracle import comparable, expected_tables, split_records

pytestmark = pytest.mark.slow

LEASE_S = 8


class Output:
    """A process's output, read as it comes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def wait_for(self, text: str, timeout_s: float = 300) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"never saw {text!r}: {''.join(self.lines)[-4000:]}")

    def finish(self, timeout_s: float = 600) -> tuple[int, str]:
        code = self.process.wait(timeout=timeout_s)
        self.thread.join(timeout=10)
        return code, "".join(self.lines)


@pytest.mark.parametrize("lake", ["s3"], indirect=True)
def test_two_drivers_of_a_layer_on_s3_one_writes_and_a_paused_one_is_fenced(lake: Lake) -> None:
    generator = OrderEventGenerator(seed=71)
    delivered: list[bytes] = []
    for i in range(8):
        content = render_file(generator.batch(15))
        lake.land(content, name=f"part-{i:02d}.jsonl")
        delivered += split_records(content)
    settings = {"LAKEHOUSE_LOCK_LEASE_S": str(LEASE_S)}

    # Two bronze drivers at once, one file per micro-batch: one runs, the other waits 5 s
    # and stops with ConcurrentRun.
    pair = [
        Output(
            lake.submit(
                "orders",
                "bronze",
                "--max-files-per-trigger",
                "1",
                run_id=f"pair-{side}",
                **settings,
                LAKEHOUSE_LOCK_WAIT_S="5",
            )
        )
        for side in ("a", "b")
    ]
    results = sorted((o.finish() for o in pair), key=lambda r: r[0])
    assert [code for code, _ in results] == [0, 2], [out[-3000:] for _, out in results]
    assert (
        "ERROR [ConcurrentRun] bronze/orders_events is being written by orders.bronze run "
        in (results[1][1])
    )
    bronze = Counter(r[0] for r in lake.rows("bronze/orders_events", ["raw_value"]))
    assert bronze == comparable(expected_tables(delivered))["bronze"], "one writer, each once"

    # Silver: a driver paused mid-run past its lease (a zombie), and its retry.
    zombie = Output(lake.submit("orders", "silver", run_id="zombie", **settings))
    zombie.wait_for("query orders_silver started")
    os.killpg(zombie.process.pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        retry = Output(
            lake.submit("orders", "silver", run_id="retry", **settings, LAKEHOUSE_LOCK_WAIT_S="120")
        )
        code, output = retry.finish()
        assert code == 0, output[-4000:]
        assert re.search(
            r"lease of silver/orders: generation \d+ taken "
            r"\(generation \d+ of orders.silver run zombie",
            output,
        ), output[-3000:]
        time.sleep(max(0.0, stopped_at + LEASE_S + 1 - time.monotonic()))
    finally:
        os.killpg(zombie.process.pid, signal.SIGCONT)
    code, output = zombie.finish()
    assert code == 2, output[-4000:]
    assert "ERROR [LeaseLost] the write lease of silver/orders" in output

    assert lake.run("gold") == 0
    assert lake.contract_view() == comparable(expected_tables(delivered))
    runs = lake.rows("ops/run_log", ["layer", "run_id", "status", "error"])
    # The retry found the zombie's run marker (a run that started and never ended) and logged
    # it as killed; the zombie, woken, logged its own refusal.
    assert {(layer, run, status) for layer, run, status, _ in runs if layer == "silver"} == {
        ("silver", "zombie", "killed"),
        ("silver", "zombie", "refused"),
        ("silver", "retry", "succeeded"),
    }
    # The report reads the same tables from S3 without a JVM.
    report = render(lake.settings)
    assert f"Lakehouse at {lake.settings.root}" in report
    assert f"silver/orders                    {len(expected_tables(delivered).silver):,}" in report


def _descendants(root: int) -> set[int]:
    """``root`` and every process below it (from the parent pids in ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, pending = set(), [root]
    while pending:
        pid = pending.pop()
        found.add(pid)
        pending += children.get(pid, [])
    return found


@pytest.mark.airflow
@pytest.mark.parametrize("lake", ["s3"], indirect=True)
def test_airflow_on_s3_with_the_connection_and_the_secret_shows_nowhere(
    lake: Lake, s3_server: S3Server, tmp_path: Path
) -> None:
    """``airflow dags test orders_pipeline`` on an ``s3a://`` root whose only credentials are
    the ``lakehouse_s3`` connection's (no ``AWS_*`` in any environment): the tables hold the
    contract, and the secret key is in no task log, XCom or rendered field, no process's
    command line or environment, and no file left behind."""
    from lakehouse.local.env import airflow_home

    config = s3_server.config()
    canary = config.secret_access_key
    records = OrderEventGenerator(seed=72).batch(60)
    content = render_file(records)
    lake.land(content)
    connections: dict[str, dict[str, object]] = {
        "lakehouse_s3": {
            "conn_type": "aws",
            "login": config.access_key_id,
            "password": canary,
            "extra": {"endpoint_url": config.endpoint, "region_name": config.region},
        }
    }
    settings = Settings.from_env()
    # The connection is the only way in: no AWS_* variable reaches Airflow.
    process, task_tmp = airflow_dags_test(
        settings, lake.settings.root, tmp_path, connections, drop=("AWS_", "LAKEHOUSE_S3_PORT")
    )
    exposed: list[str] = []
    submits: set[int] = set()

    def watch() -> None:
        # Airflow and everything it starts (not the S3 server, which knows its own secret).
        while process.poll() is None:
            family = _descendants(process.pid)
            for pid, (cmdline, environ) in _processes().items():
                if pid not in family:
                    continue
                if canary in cmdline or canary.encode() in environ:
                    exposed.append(cmdline[:300])
                if "SparkSubmit" in cmdline and "jobs/" in cmdline:
                    submits.add(pid)
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    output, _ = process.communicate(timeout=1500)
    watcher.join(timeout=10)
    assert process.returncode == 0 and "state=success" in output, output[-6000:]
    assert lake.contract_view() == comparable(expected_tables(split_records(content)))
    assert f"S3: {config.endpoint} as {config.access_key_id} (connection lakehouse_s3)" in output
    assert submits, "the process watcher never saw a spark-submit"

    database = b"".join(
        p.read_bytes() for p in airflow_home(settings).glob("airflow.db*") if p.is_file()
    )
    leaks = {
        "task output": canary in output,
        "task log files": any(
            canary.encode() in p.read_bytes() for p in (tmp_path / "logs").rglob("*") if p.is_file()
        ),
        "Airflow database (XCom, rendered fields)": canary.encode() in database,
        "process command lines or environments": bool(exposed),
        "run log": canary in repr(lake.rows("ops/run_log")),
        "the access file, left behind": any(task_tmp.rglob("s3-access.json")),
    }
    assert leaks == dict.fromkeys(leaks, False)
    run_id = re.search(r"run_id=(manual__[^,\s]+)", output)
    assert run_id is not None
    with sqlite3.connect(airflow_home(settings) / "airflow.db") as db:
        summary = db.execute(
            "SELECT value FROM xcom WHERE dag_id = 'orders_pipeline' AND task_id = 'silver' "
            "AND run_id = ?",
            (run_id.group(1),),
        ).fetchone()
    assert json.loads(summary[0])["status"] == "succeeded"
