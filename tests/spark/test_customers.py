"""The customers pipeline and segment sales in one Spark session, against the customers
oracle (``tests/oracle_customers.py``): SCD2 history under late, repeated and out-of-order
changes, expectations that warn, drop and fail, a gold that joins two pipelines and
recomputes only the days a change touches, reprocess and full refresh."""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lakehouse.sample_customers import CustomerEventGenerator
from lakehouse.sample_data import OrderEventGenerator, render_file
from tests import PROJECT_DIR
from tests.lake import Lake
from tests.oracle import expected_tables, split_records
from tests.oracle_customers import (
    comparable_customers,
    expected_customers,
    expected_segment_sales,
    validate_customer,
)

CUSTOMER_TABLES = (
    "silver/customers_history",
    "silver/customers_quarantine",
    "silver/customers_changes",
)


def deliver(lake: Lake, pipeline: str, lines: list[bytes], seed: int) -> list[bytes]:
    content = render_file(lines, random.Random(seed))
    lake.land(content, pipeline=pipeline)
    return split_records(content)


def expected_view(customers: list[bytes], orders: list[bytes]) -> dict[str, Any]:
    expected = expected_customers(customers)
    sales = expected_segment_sales(expected_tables(orders).silver, expected.history)
    return comparable_customers(expected, sales)


def logged_expectations(lake: Lake) -> Counter[str]:
    """Every rule's count over every customers silver run, from the run log."""
    counted: Counter[str] = Counter()
    for pipeline, layer, status, details in lake.rows(
        "ops/run_log", ["pipeline", "layer", "status", "details"]
    ):
        if (pipeline, layer, status) == ("customers", "silver", "succeeded"):
            for rule, figures in json.loads(details)["expectations"].items():
                counted[rule] += figures["records"]
    return counted


def test_history_and_segment_sales_hold_after_every_run(lake: Lake) -> None:
    customers, orders = CustomerEventGenerator(seed=21), OrderEventGenerator(seed=21)
    delivered_c: list[bytes] = []
    delivered_o: list[bytes] = []
    deliveries = [
        (customers.initial_load(3000) + customers.batch(150), orders.batch(120)),
        (customers.batch(120), orders.batch(80)),
        (customers.batch(60) + customers.flush_late(), orders.batch(40) + orders.flush_late()),
    ]
    for i, (customer_lines, order_lines) in enumerate(deliveries):
        delivered_c += deliver(lake, "customers", customer_lines, seed=i)
        delivered_o += deliver(lake, "orders", order_lines, seed=10 + i)
        lake.run_everything()
        view = lake.customers_view(with_segment_sales=True)
        assert view == expected_view(delivered_c, delivered_o), f"after run {i + 1}"

    expected = expected_customers(delivered_c)
    assert logged_expectations(lake) == {
        "email_missing": expected.warned["email_missing"],
        "test_account": expected.dropped["test_account"],
        "unsupported_schema_version": 0,
    }
    # The data covers what the contract is about.
    versions = Counter(customer for customer, _ in expected.history)
    assert max(versions.values()) >= 3
    assert any(row[6] is not None for row in expected.history.values()), "a closed version"
    assert expected.warned["email_missing"] and expected.dropped["test_account"]
    assert len({reason for _, reason in expected.quarantine}) >= 10
    unknown = sum(r[2] for k, r in lake.segment_sales().items() if k[1] == "unknown")
    assert 0 < unknown < sum(r[2] for r in lake.segment_sales().values())


def scratch_declarations(tmp_path: Path, **changes: tuple[str, str]) -> Path:
    """A copy of the example declarations with text replaced in some of them."""
    folder = tmp_path / "pipelines"
    shutil.copytree(PROJECT_DIR / "pipelines", folder)
    for name, (old, new) in changes.items():
        path = folder / f"{name}.py"
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))
    return folder


def test_a_fail_expectation_stops_the_batch_until_the_declaration_changes(
    lake: Lake, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    customers = CustomerEventGenerator(seed=22)
    delivered = deliver(lake, "customers", customers.initial_load(40) + customers.batch(20), 1)
    lake.run_all(pipeline="customers")
    versions = {t: lake.version(t) for t in CUSTOMER_TABLES}
    bad = deliver(lake, "customers", customers.batch(20, unsupported_schema_version=3), 2)
    assert lake.run("bronze", pipeline="customers") == 0
    for _ in range(2):  # refused, and refused again: the batch waits
        assert lake.run("silver", pipeline="customers") == 2
        assert {t: lake.version(t) for t in CUSTOMER_TABLES} == versions, "nothing was written"
    err = capfd.readouterr().err
    assert (
        "ERROR [ExpectationFailed] customers: the fail expectation(s) unsupported_schema_version"
        in err
    )
    assert "3 record(s) broken in micro-batch 1; nothing of it was written" in err

    # The declaration changes (the rule now warns): the same batch goes through.
    lake.monkeypatch.setenv(
        "LAKEHOUSE_PIPELINES_DIR",
        str(
            scratch_declarations(
                tmp_path,
                customers=('"fail"', '"warn"'),
            )
        ),
    )
    assert lake.run("silver", pipeline="customers") == 0
    expected = expected_customers(delivered + bad)
    unsupported = {
        str(values["event_id"])
        for line in bad
        for values, _ in [validate_customer(line)]
        if values
        and values.get("schema_version") not in (None, 1)
        and not str(values["customer_id"]).startswith("test-")
    }
    assert len(unsupported) == 3
    kept = {r[0] for r in lake.rows("silver/customers_changes", ["event_id"])}
    assert kept == set(expected.events) | unsupported
    assert logged_expectations(lake)["unsupported_schema_version"] == 3


def late_change(customer_id: str, at: datetime, segment: str) -> bytes:
    return json.dumps(
        {
            "event_id": f"late-{customer_id}-{at:%H%M%S}",
            "customer_id": customer_id,
            "op": "upsert",
            "updated_at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "name": "Late Change",
            "segment": segment,
            "country": "DE",
            "email": "late@example.com",
        }
    ).encode()


def test_a_late_customer_change_recomputes_only_the_days_it_touches(lake: Lake) -> None:
    customers = CustomerEventGenerator(seed=23)
    # Orders over several days (a generator's clock moves 1-40 s per event): two of them.
    evening = datetime(2026, 11, 2, 20, tzinfo=UTC)
    orders = [
        OrderEventGenerator(seed=s, start=evening + timedelta(days=2 * i))
        for i, s in enumerate((23, 24))
    ]
    delivered_c = deliver(lake, "customers", customers.initial_load(), 1)
    delivered_o = deliver(lake, "orders", orders[0].batch(600) + orders[1].batch(600), 2)
    lake.run_everything()
    days_in_table = {day for day, _ in lake.segment_sales()}
    assert len(days_in_table) >= 3

    # A customer with orders on one day only gets a change dated before all of them.
    silver = expected_tables(delivered_o).silver
    by_customer: dict[str, set] = {}
    for row in silver.values():
        by_customer.setdefault(row[1], set()).add(row[3].date())
    customer = sorted(c for c, days in by_customer.items() if len(days) == 1)[0]
    first_order = min(r[3] for r in silver.values() if r[1] == customer)
    line = late_change(customer, first_order - timedelta(minutes=1), "vip")
    delivered_c += deliver(lake, "customers", [line], 3)
    lake.run_all(pipeline="customers")
    assert lake.run("gold", pipeline="segment_sales") == 0
    assert lake.customers_view(with_segment_sales=True) == expected_view(delivered_c, delivered_o)
    details = json.loads(
        lake.table("ops/run_log")
        .where("pipeline = 'segment_sales'")
        .orderBy("started_at", ascending=False)
        .first()["details"]
    )
    assert details["keys_recomputed"] == 1, "one day of the table's, not all of them"
    assert details["input_versions"] == {
        "silver/orders": lake.version("silver/orders"),
        "silver/customers_history": lake.version("silver/customers_history"),
    }


def test_a_new_gold_starts_from_a_snapshot_of_its_inputs(lake: Lake) -> None:
    customers, orders = CustomerEventGenerator(seed=24), OrderEventGenerator(seed=24)
    delivered_c: list[bytes] = []
    delivered_o: list[bytes] = []
    for i in range(3):  # many versions of both inputs before the gold exists
        delivered_c += deliver(
            lake, "customers", customers.initial_load(100) + customers.batch(40), i
        )
        delivered_o += deliver(lake, "orders", orders.batch(60), 10 + i)
        lake.run_all(pipeline="customers")
        lake.run_all(pipeline="orders")
    changes = sum(
        lake.spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(lake.settings.path(table))
        .count()
        for table in ("silver/orders", "silver/customers_history")
    )
    current = lake.table("silver/orders").count() + lake.table("silver/customers_history").count()
    assert lake.run("gold", pipeline="segment_sales") == 0
    (rows_in,) = [
        r[0] for r in lake.rows("ops/run_log", ["rows_in", "pipeline"]) if r[1] == "segment_sales"
    ]
    assert rows_in == current < changes, "the current rows, not every version's changes"
    assert lake.segment_sales() == expected_view(delivered_c, delivered_o)["segment_sales"]


def test_reprocess_re_derives_the_customers_a_window_touches(lake: Lake) -> None:
    customers = CustomerEventGenerator(seed=25)
    delivered = deliver(lake, "customers", customers.initial_load(150) + customers.batch(100), 1)
    delivered += deliver(lake, "customers", customers.batch(60) + customers.flush_late(), 2)
    lake.run_all(pipeline="customers")
    expected = comparable_customers(expected_customers(delivered))
    assert lake.customers_view() == expected

    history = lake.settings.path("silver/customers_history")
    lake.spark.sql(f"UPDATE delta.`{history}` SET name = 'corrupted'")
    start, end = datetime(2026, 11, 2, tzinfo=UTC), datetime(2026, 11, 3, tzinfo=UTC)
    args = (
        "--mode",
        "reprocess",
        "--reprocess-from",
        start.isoformat(),
        "--reprocess-to",
        end.isoformat(),
    )
    assert lake.run("silver", *args, pipeline="customers") == 0

    touched = set()
    for line in delivered:
        try:
            record = json.loads(line)
            at = datetime.fromisoformat(str(record["updated_at"]).replace("Z", "+00:00"))
            if start <= at < end:
                touched.add(str(record["customer_id"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    fixed = {k: v for k, v in lake.history().items() if k[0] in touched}
    assert touched and fixed == {k: v for k, v in expected["history"].items() if k[0] in touched}
    untouched = [v for k, v in lake.history().items() if k[0] not in touched]
    assert untouched and all(v[1] == "corrupted" for v in untouched), "outside the window"
    assert lake.customers_view()["quarantine"] == expected["quarantine"]

    # Again: nothing left to change, nothing committed.
    versions = {
        t: lake.version(t) for t in ("silver/customers_history", "silver/customers_changes")
    }
    assert lake.run("silver", *args, pipeline="customers") == 0
    assert {t: lake.version(t) for t in versions} == versions

    assert lake.run("silver", "--mode", "full_refresh", pipeline="customers") == 0
    assert lake.customers_view() == expected


def test_a_batch_that_dies_between_its_writes_is_completed_by_the_retry(lake: Lake) -> None:
    customers = CustomerEventGenerator(seed=26)
    delivered = deliver(lake, "customers", customers.initial_load(60) + customers.batch(60), 1)
    assert lake.run("bronze", pipeline="customers") == 0
    assert lake.run("silver", fault="silver.after_changes", pipeline="customers") == 1
    assert lake.run("silver", pipeline="customers") == 0
    assert lake.customers_view() == comparable_customers(expected_customers(delivered))
