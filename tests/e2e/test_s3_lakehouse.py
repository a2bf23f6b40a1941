"""The lakehouse on the local S3 server, as a deployment runs it: spark-submit drivers that
share nothing but the bucket. Two drivers of one layer started at once: one runs, the other
waits and stops with ``ConcurrentRun``; a driver paused (SIGSTOP) past its lease is replaced
by its retry and, woken up, stops with ``LeaseLost`` without committing: the contract holds
exactly.

Airflow on an ``s3a://`` root with nothing but the ``lakehouse_s3`` connection's credentials
(and Kafka's over SASL) is in ``tests/e2e/test_kafka.py``. The contract tests themselves run
on both roots in ``tests/spark`` (``lake`` with the param "s3") and in
``tests/e2e/test_kafka.py``; the lease's own process tests are in ``tests/e2e/test_leases.py``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections import Counter

import pytest

from lakehouse.local.report import render
from lakehouse.sample_data import OrderEventGenerator, render_file
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
