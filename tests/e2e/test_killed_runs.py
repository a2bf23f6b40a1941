"""What a kill -9 leaves behind is found at the next start: the killed layer run gets its
``killed`` row in ``ops/run_log``, and a backup's stale ``.partial`` copy is removed.

The layer run is a real spark-submit in its own process group (as Airflow starts it), killed
with SIGKILL once it holds its locks and has started its query."""

from __future__ import annotations

import json
import os
import random
import signal
import time

import pytest

from jobs.run_markers import marker_path
from lakehouse.sample_data import OrderEventGenerator, render_file
from lakehouse.settings import Settings
from tests.lake import Lake
from tests.oracle import split_records

pytestmark = pytest.mark.slow


def run_log(lake: Lake) -> list[tuple]:
    columns = ["layer", "run_id", "status", "error"]
    return sorted(lake.table("ops/run_log").select(*columns).collect(), key=lambda r: r[1])


def test_a_killed_layer_run_is_logged_by_the_next_run(lake: Lake) -> None:
    records = split_records(render_file(OrderEventGenerator(seed=5).batch(200), random.Random(2)))
    for index in range(0, len(records), 20):
        lake.land(records[index : index + 20], name=f"part-{index:04d}.jsonl")
    settings = Settings.from_env().with_root(lake.root)
    process = lake.submit(
        "orders", "bronze", "--max-files-per-trigger", "1", run_id="the-killed-run"
    )
    seen = lake.read_until(process, "batch 1:")
    marker = lake.root / marker_path(settings, "orders", "bronze").removeprefix(
        str(lake.root) + "/"
    )
    assert marker.exists(), "".join(seen[-20:])
    assert json.loads(marker.read_text())["run_id"] == "the-killed-run"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert marker.exists(), "a killed run cannot clean up"

    assert lake.run("bronze", "--run-id", "the-next-run") == 0
    rows = run_log(lake)
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("bronze", "the-killed-run", "killed"),
        ("bronze", "the-next-run", "succeeded"),
    ]
    assert "found by run the-next-run" in rows[0][3]
    assert not marker.exists(), "the next run ended and removed its own marker"
    # Nothing was lost or doubled by the kill.
    assert lake.table("bronze/orders_events").count() == len(records)

    # A run that fails or is refused is no killed run: no row for it later.
    assert lake.run("bronze", "--run-id", "a-third-run") == 0
    assert [r[2] for r in run_log(lake)].count("killed") == 1


def test_a_stale_partial_backup_is_removed_by_the_next_backup(lake: Lake) -> None:
    from jobs import maintenance

    lake.land(render_file(OrderEventGenerator(seed=6).batch(20), random.Random(3)))
    lake.run_all()
    stale = lake.root / "_backups" / "orders" / ".20260101T000000000000Z.partial"
    (stale / "_checkpoints" / "silver").mkdir(parents=True)
    (stale / "_checkpoints" / "silver" / "metadata").write_text("{}")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    summary_file = lake.root.parent / "backup-summary.json"
    code = maintenance.main(
        ["--pipeline", "orders", "--root", str(lake.root), "--actions", "backup",
         "--summary-file", str(summary_file)]
    )  # fmt: skip
    assert code == 0
    assert not stale.exists()
    (action,) = json.loads(summary_file.read_text())["actions"]
    assert action["details"]["removed_partial"] == [stale.name]
    backups = [p.name for p in (lake.root / "_backups" / "orders").iterdir()]
    assert len(backups) == 1 and not backups[0].startswith("."), backups
