"""The Airflow UI, in a real browser: trigger a reprocess through the params form; Airflow's
own backfill re-derives its interval; bad params are refused before a run exists.

Starts Airflow's API server, scheduler and DAG processor in a scratch home and drives
Debian's headless Chromium with Playwright. Screenshots go to ``test-artifacts/browser/``.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from lakehouse.local.airflow_server import AirflowServer, airflow_server
from lakehouse.sample_data import OrderEventGenerator, render_file
from tests import PROJECT_DIR
from tests.lake import Lake
from tests.oracle import comparable, expected_tables, split_records

pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.timeout(2400)]

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags Chromium keeps dialling Google on a closed network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = PROJECT_DIR / "test-artifacts" / "browser"


def corrupt_day(lake: Lake, day: str, next_day: str) -> None:
    """What a bug in silver or gold logic would leave behind for one day."""
    lake.spark.sql(
        f"UPDATE delta.`{lake.settings.path('silver/orders')}` SET total = total + 1, "
        f"region = 'nowhere' WHERE last_event_ts >= '{day}' AND last_event_ts < '{next_day}'"
    )
    lake.spark.sql(f"UPDATE delta.`{lake.settings.path('gold/sales_hourly')}` SET orders = 0")


@pytest.fixture(scope="module")
def browser_dir() -> Path:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium package")
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    ARTIFACTS.mkdir(parents=True)
    return ARTIFACTS


@pytest.fixture
def loaded(lake: Lake) -> tuple[Lake, list[bytes]]:
    generator = OrderEventGenerator(seed=61, start=OrderEventGenerator().start.replace(hour=21))
    content = render_file(generator.batch(120) + generator.flush_late(), random.Random(1))
    lake.land(content)
    return lake, split_records(content)


@pytest.fixture
def server(loaded: tuple[Lake, list[bytes]], tmp_path: Path) -> Iterator[AirflowServer]:
    lake, _ = loaded
    with airflow_server(
        tmp_path / "airflow",
        ARTIFACTS,
        LAKEHOUSE_ROOT=str(lake.root),
        LAKEHOUSE_ORDERS_SCHEDULE="0 0 * * *",
    ) as running:
        # Unpaused with catchup off, the scheduler starts the latest daily interval at once:
        # that scheduled, incremental run loads the landed events.
        deadline = time.monotonic() + 120
        while not (runs := running.api("GET", "/dags/orders_pipeline/dagRuns")["dag_runs"]):
            assert time.monotonic() < deadline, "the scheduler started no run"
            time.sleep(2)
        assert [r["run_type"] for r in runs] == ["scheduled"]
        assert running.wait_for_run("orders_pipeline", runs[0]["dag_run_id"]) == "success"
        yield running


def trigger_reprocess_in_the_ui(server: AirflowServer, day: str, next_day: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1300})
        page.goto(f"{server.url}/")
        page.fill("input[name=username]", server.user)
        page.fill("input[name=password]", server.password)
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r".*:\d+/?$"), timeout=60_000)
        page.goto(f"{server.url}/dags/orders_pipeline")
        page.get_by_role("button", name="Trigger").first.click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_role("button", name="What to run").click()
        mode = dialog.get_by_role("combobox").first
        mode.click()
        mode.fill("reprocess")
        page.keyboard.press("Enter")
        assert dialog.locator("input[name=element_mode]").input_value() == "reprocess"
        dialog.get_by_role("button", name="Reprocess window").click()
        for index, value in enumerate((day, next_day)):
            # The first date-time field is the run's logical date; then from, then to.
            dialog.get_by_test_id("datetime-input").nth(index + 1).click()
            picker = page.locator("[data-scope=popover][data-part=content][data-state=open]").last
            date_input, time_input = picker.locator("input").nth(0), picker.locator("input").nth(1)
            date_input.fill(value[:10].replace("-", "/"))
            time_input.fill(value[11:16])
            page.keyboard.press("Enter")
            page.keyboard.press("Escape")
        # The run configuration the form built, shown as JSON for the screenshot.
        dialog.get_by_role("button", name="Advanced Options").click()
        page.wait_for_timeout(1000)
        page.screenshot(path=str(ARTIFACTS / "1-trigger-form.png"), full_page=True)
        dialog.get_by_test_id("trigger-dag-submit").click()
        page.wait_for_timeout(2000)
        page.screenshot(path=str(ARTIFACTS / "2-triggered.png"), full_page=True)
        browser.close()


def latest_manual_run(server: AirflowServer) -> dict:
    runs = server.api("GET", "/dags/orders_pipeline/dagRuns?order_by=-run_after")["dag_runs"]
    manual = [r for r in runs if r["run_type"] == "manual"]
    assert manual, runs
    return dict(manual[0])


def test_reprocess_from_the_trigger_form_and_a_backfill(
    loaded: tuple[Lake, list[bytes]], server: AirflowServer, browser_dir: Path
) -> None:
    lake, delivered = loaded
    expected = comparable(expected_tables(delivered))
    assert lake.contract_view() == expected

    # 1. A bug left day 2026-11-02 wrong; an operator reprocesses that day from the UI.
    corrupt_day(lake, "2026-11-02", "2026-11-03")
    assert lake.contract_view() != expected
    trigger_reprocess_in_the_ui(server, "2026-11-02T00:00:00Z", "2026-11-03T00:00:00Z")
    run = latest_manual_run(server)
    assert run["conf"]["mode"] == "reprocess"
    assert run["conf"]["reprocess_from"].startswith("2026-11-02T00:00:00")
    assert run["conf"]["reprocess_to"].startswith("2026-11-03T00:00:00")
    assert server.wait_for_run("orders_pipeline", run["dag_run_id"]) == "success"
    assert lake.contract_view() == expected

    # 2. Airflow's own backfill: each run re-derives its data interval (here one day); the
    #    params it is given (here: skip bronze, which has nothing new) are kept.
    corrupt_day(lake, "2026-11-03", "2026-11-04")
    backfill = server.api(
        "POST",
        "/backfills",
        {
            "dag_id": "orders_pipeline",
            "from_date": "2026-11-03T00:00:00Z",
            "to_date": "2026-11-03T00:00:00Z",
            "max_active_runs": 1,
            "reprocess_behavior": "completed",
            "dag_run_conf": {"layers": ["silver", "gold"]},
        },
    )
    deadline = time.monotonic() + 900
    backfill_runs: list[dict] = []
    while time.monotonic() < deadline:
        runs = server.api("GET", "/dags/orders_pipeline/dagRuns")["dag_runs"]
        backfill_runs = [r for r in runs if r["run_type"] == "backfill"]
        if backfill_runs and all(r["state"] in ("success", "failed") for r in backfill_runs):
            break
        time.sleep(3)
    assert [r["state"] for r in backfill_runs] == ["success"], backfill
    interval = (backfill_runs[0]["data_interval_start"], backfill_runs[0]["data_interval_end"])
    assert interval[0].startswith("2026-11-03T00:00:00") and interval[1].startswith("2026-11-04")
    states = {
        t["task_id"]: t["state"]
        for t in server.api(
            "GET",
            f"/dags/orders_pipeline/dagRuns/{quote(backfill_runs[0]['dag_run_id'])}/taskInstances",
        )["task_instances"]
    }
    assert states == {
        "plan": "success",
        "bronze": "skipped",
        "silver": "success",
        "gold": "success",
    }
    assert lake.contract_view() == expected

    # 3. Bad params never become a run, and change nothing.
    versions = {t: lake.version(t) for t in ("silver/orders", "gold/sales_hourly")}
    for conf in ({"mode": "replay"}, {"mode": "reprocess", "reprocess_from": "../../etc"},
                 {"max_files_per_trigger": 10**9}):  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as refused:
            server.api(
                "POST", "/dags/orders_pipeline/dagRuns", {"logical_date": None, "conf": conf}
            )
        assert refused.value.code == 400, json.dumps(conf)
    assert {t: lake.version(t) for t in versions} == versions
    assert (browser_dir / "1-trigger-form.png").stat().st_size > 10_000
