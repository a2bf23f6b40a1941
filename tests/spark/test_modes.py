"""reprocess and full_refresh: each leaves the contract exact and is a no-op when repeated;
bad parameters are refused before anything changes."""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from lakehouse.checkpoints import Checkpoint, DeltaPosition
from lakehouse.errors import InvalidRunParams
from lakehouse.params import RunParams
from lakehouse.pending import pending_input, unfinished_rederivation
from lakehouse.registry import get_pipeline
from lakehouse.sample_data import OrderEventGenerator, render_file
from tests.lake import Lake
from tests.oracle import (
    GOLD_COLUMNS,
    SILVER_COLUMNS,
    comparable,
    expected_tables,
    gold_of,
    split_records,
)

DAY1 = "2026-11-02T00:00:00Z"
DAY2 = "2026-11-03T00:00:00Z"
TABLES = ("silver/orders", "silver/orders_quarantine", "gold/sales_hourly")
ORDERS = get_pipeline("orders")


def deliver(lake: Lake, lines: list[bytes], seed: int) -> list[bytes]:
    content = render_file(lines, random.Random(seed))
    lake.land(content)
    return split_records(content)


@pytest.fixture
def loaded(lake: Lake) -> tuple[Lake, list[bytes]]:
    """Two days of orders, all layers run once: the generator's clock crosses midnight, so
    21 orders end on the second day, 13 of them with no event on the first."""
    generator = OrderEventGenerator(seed=41, start=OrderEventGenerator().start.replace(hour=22))
    delivered = deliver(lake, generator.batch(150), seed=1)
    delivered += deliver(lake, generator.batch(90) + generator.flush_late(), seed=2)
    lake.run_all()
    return lake, delivered


def corrupt(lake: Lake) -> None:
    """What a bug in silver or gold logic would have left behind: every order's total, some
    quarantine rows of the first day, every gold row."""
    for statement in (
        f"UPDATE delta.`{lake.settings.path('silver/orders')}` SET total = total + 1",
        f"DELETE FROM delta.`{lake.settings.path('silver/orders_quarantine')}` "
        "WHERE event_ts_hint >= '2026-11-02' AND event_ts_hint < '2026-11-03' "
        "AND reason LIKE 'missing%'",
        f"UPDATE delta.`{lake.settings.path('gold/sales_hourly')}` SET orders = orders + 7",
    ):
        lake.spark.sql(statement)


def plain_key_and_time(raw: bytes, mentioned: set[str]) -> tuple[str, datetime] | None:
    """The order and the time a record says, when both read plainly: a JSON object whose
    ``order_id`` is the one order it names and whose ``event_ts`` has a zone."""
    try:
        record = json.loads(raw)
        key, at = record["order_id"], datetime.fromisoformat(record["event_ts"])
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(key, str) or at.tzinfo is None or mentioned != {key}:
        return None
    return key, at


def window_orders(delivered: list[bytes]) -> tuple[set[str], set[str]]:
    """The orders a reprocess of DAY1..DAY2 re-derives (a record of theirs, valid or not,
    says a time in the window) and those it must leave alone (every record naming them says
    a time outside it). An order named by a record whose time or key does not read plainly
    (bronze's hints may read it otherwise) is in neither."""
    start, end = (datetime.fromisoformat(t) for t in (DAY1, DAY2))
    inside: set[str] = set()
    named: set[str] = set()
    unclear: set[str] = set()
    ids = re.compile(rb"o\d+-\d{7}")
    for raw in delivered:
        mentioned = {m.decode() for m in ids.findall(raw)}
        named |= mentioned
        said = plain_key_and_time(raw, mentioned)
        if said is None:
            unclear |= mentioned
        elif start <= said[1] < end:
            inside.add(said[0])
    return inside - unclear, named - inside - unclear


TOTAL = SILVER_COLUMNS.index("total")
ORDERS_COL = GOLD_COLUMNS.index("orders")


def with_total_plus_one(row: tuple[Any, ...]) -> tuple[Any, ...]:
    total = row[TOTAL]
    return (*row[:TOTAL], None if total is None else total + 1, *row[TOTAL + 1 :])


def assert_window_repaired(
    view: dict[str, Any], expected: dict[str, Any], delivered: list[bytes]
) -> None:
    """After ``corrupt`` and a reprocess of DAY1..DAY2: the quarantine and the orders with a
    record in the window are as the records say, the orders with none keep what the "bug"
    left, and gold (which a reprocess recomputes whole) is derived from silver as it is."""
    inside, outside = window_orders(delivered)
    inside, outside = inside & set(expected["silver"]), outside & set(expected["silver"])
    assert len(inside) > 100 and len(outside) >= 5, (len(inside), len(outside))
    assert view["quarantine"] == expected["quarantine"]
    silver = view["silver"]
    assert {k: silver[k] for k in inside} == {k: expected["silver"][k] for k in inside}
    assert {k: silver[k] for k in outside} == {
        k: with_total_plus_one(expected["silver"][k]) for k in outside
    }
    assert view["gold"] == gold_of(silver) != expected["gold"]


@pytest.mark.parametrize("lake", ["local", "s3"], indirect=True)
def test_reprocess_re_derives_the_window_and_nothing_else(loaded: tuple[Lake, list[bytes]]) -> None:
    lake, delivered = loaded
    expected = comparable(expected_tables(delivered))
    assert lake.contract_view() == expected
    corrupt(lake)
    args = ("--mode", "reprocess", "--reprocess-from", DAY1, "--reprocess-to", DAY2)
    for layer in ("silver", "gold"):
        assert lake.run(layer, *args) == 0
    view = lake.contract_view()
    assert_window_repaired(view, expected, delivered)
    # Small tables: the re-derivations ran without generated code.
    assert re_derivations(lake) == [("silver", "reprocess", False), ("gold", "reprocess", False)]
    # The run log counts the window's quarantine rows (in the pass that counts the rest).
    in_window = [t for (t,) in lake.rows("silver/orders_quarantine", ["event_ts_hint"])]
    in_window = [t for t in in_window if t is not None and t.day == 2]
    assert 0 < len(in_window) < sum(view["quarantine"].values())
    assert re_derivation_details(lake, "silver", "reprocess")["quarantine_rows"] == len(in_window)

    # Repeating the reprocess changes nothing, and commits nothing: not the quarantine
    # window's same verdicts, not gold's same rows.
    before = lake.snapshot()
    versions = {t: lake.version(t) for t in TABLES}
    for layer in ("silver", "gold"):
        assert lake.run(layer, *args) == 0
    assert lake.snapshot() == before
    assert {t: lake.version(t) for t in TABLES} == versions


def test_re_derivations_with_generated_code_or_without_give_the_same_tables(
    loaded: tuple[Lake, list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-derivation of small tables is evaluated without generated code (every other test
    here runs that way); with ``LAKEHOUSE_INTERPRET_SMALL_INPUTS=false`` Spark generates code,
    and a reprocess and a full refresh repair the corruption exactly all the same. The run log
    says which way each layer's re-derivation ran."""
    lake, delivered = loaded
    expected = comparable(expected_tables(delivered))
    window = ("--mode", "reprocess", "--reprocess-from", DAY1, "--reprocess-to", DAY2)
    monkeypatch.setenv("LAKEHOUSE_INTERPRET_SMALL_INPUTS", "false")
    corrupt(lake)
    for layer in ("silver", "gold"):
        assert lake.run(layer, *window) == 0
    assert_window_repaired(lake.contract_view(), expected, delivered)
    corrupt(lake)
    for layer in ("silver", "gold"):
        assert lake.run(layer, "--mode", "full_refresh") == 0
    assert lake.contract_view() == expected
    assert re_derivations(lake) == [
        ("silver", "reprocess", True),
        ("gold", "reprocess", True),
        ("silver", "full_refresh", True),
        ("gold", "full_refresh", True),
    ]


def re_derivations(lake: Lake) -> list[tuple[str, str, bool]]:
    """Each re-derivation in the run log, in order: layer, mode, whether it generated code."""
    runs = sorted(lake.rows("ops/run_log", ["started_at", "layer", "details"]))
    return [
        (layer, mode, json.loads(details)[mode]["generated_code"])
        for _, layer, details in runs
        for mode in ("reprocess", "full_refresh")
        if mode in json.loads(details)
    ]


def re_derivation_details(lake: Lake, layer: str, mode: str) -> dict[str, Any]:
    """The run-log figures of the latest ``mode`` re-derivation of ``layer``."""
    runs = sorted(lake.rows("ops/run_log", ["started_at", "layer", "details"]))
    found = [json.loads(d)[mode] for _, name, d in runs if name == layer and mode in json.loads(d)]
    return dict(found[-1])


def test_a_gold_re_derivation_that_dies_after_its_catch_up_is_finished_by_the_next_run(
    loaded: tuple[Lake, list[bytes]],
) -> None:
    """Gold's re-derivation leaves the catch-up's micro-batches to the recompute of every row
    after it. A run that dies in between has moved the checkpoint past silver's rewrite and
    recomputed nothing: its marker keeps gold from being skipped as idle, and the next run,
    whatever its mode, recomputes every row."""
    lake, delivered = loaded
    expected = comparable(expected_tables(delivered))
    corrupt(lake)
    assert lake.run("silver", "--mode", "full_refresh") == 0
    silver_version = lake.version("silver/orders")
    args = ("--mode", "full_refresh")
    assert lake.run("gold", *args, fault="gold.rederive.after_catch_up") == 1
    assert lake.contract_view()["gold"] == with_orders_plus_seven(expected["gold"])
    gold_stream = ORDERS.stream("gold")
    committed = Checkpoint(lake.storage, lake.settings.path(gold_stream.checkpoint))
    position = DeltaPosition.from_offset(committed.committed_offsets().source(0))
    assert position is not None and position.next_unread_version == silver_version + 1
    # Silver has nothing new for gold, yet a scheduled run does not skip gold as idle.
    assert pending_input(lake.settings, ORDERS, "gold").nothing
    pending = unfinished_rederivation(lake.settings, ORDERS, "gold")
    assert pending is not None and not pending.nothing
    assert pending.description.startswith("a re-derivation to finish (left unfinished: ")
    assert '"mode": "full_refresh"' in pending.description

    assert lake.run("gold") == 0
    assert lake.contract_view() == expected
    assert not (lake.root / gold_stream.rederive_marker).exists()
    assert unfinished_rederivation(lake.settings, ORDERS, "gold") is None
    completed = re_derivation_details(lake, "gold", "completed_rederive")
    assert completed["numOutputRows"] == len(expected["gold"])


def with_orders_plus_seven(gold: dict[tuple, tuple]) -> dict[tuple, tuple]:
    """Gold as ``corrupt`` leaves it: seven more orders in every row."""
    return {
        k: (*row[:ORDERS_COL], row[ORDERS_COL] + 7, *row[ORDERS_COL + 1 :])
        for k, row in gold.items()
    }


@pytest.mark.parametrize("lake", ["local", "s3"], indirect=True)
def test_full_refresh_rebuilds_without_an_empty_table_and_repeats_as_a_no_op(
    loaded: tuple[Lake, list[bytes]],
) -> None:
    lake, delivered = loaded
    corrupt(lake)
    versions = {t: lake.version(t) for t in TABLES}
    for layer in ("silver", "gold"):
        assert lake.run(layer, "--mode", "full_refresh") == 0
    assert lake.contract_view() == comparable(expected_tables(delivered))
    for table in TABLES:
        # The rebuild is one overwrite commit; no version a reader could see is empty.
        latest = lake.version(table)
        operations = [
            h["operation"] for h in lake.delta(table).history(5) if h["version"] > versions[table]
        ]
        assert operations[0] == "WRITE" and operations.count("WRITE") == 1, (table, operations)
        for version in range(versions[table], latest + 1):
            rows = len(lake.read_rows(table, version=version))
            assert rows > 0, f"{table} was empty at version {version}"

    quarantined = len(lake.rows("silver/orders_quarantine"))
    assert re_derivation_details(lake, "silver", "full_refresh")["quarantine_rows"] == quarantined

    before = lake.snapshot()
    for layer in ("silver", "gold"):
        assert lake.run(layer, "--mode", "full_refresh") == 0
    assert lake.snapshot() == before


def test_new_data_after_a_full_refresh_is_read_once(loaded: tuple[Lake, list[bytes]]) -> None:
    lake, delivered = loaded
    generator = OrderEventGenerator(seed=42)
    delivered += deliver(lake, generator.batch(60), seed=3)
    assert lake.run("bronze") == 0
    # Not yet in silver: the refresh must catch the stream up first, then rebuild.
    for layer in ("silver", "gold"):
        assert lake.run(layer, "--mode", "full_refresh") == 0
    delivered += deliver(lake, generator.batch(40) + generator.flush_late(), seed=4)
    lake.run_all()
    assert lake.contract_view() == comparable(expected_tables(delivered))


def test_a_silver_full_refresh_that_dies_after_its_catch_up_is_finished_by_the_next_run(
    loaded: tuple[Lake, list[bytes]],
) -> None:
    """A full refresh's catch-up only moves the checkpoint: everything is rewritten after it.
    A run that dies in between has written nothing and read the new records past its
    checkpoint; its marker keeps silver from being skipped as idle, and the next run,
    whatever its mode, rewrites silver and the quarantine from all of bronze."""
    lake, delivered = loaded
    delivered += deliver(lake, OrderEventGenerator(seed=43).batch(60), seed=3)
    assert lake.run("bronze") == 0
    expected = comparable(expected_tables(delivered))
    corrupt(lake)
    versions = {t: lake.version(t) for t in TABLES[:2]}
    args = ("--mode", "full_refresh")
    assert lake.run("silver", *args, fault="silver.rederive.after_catch_up") == 1
    assert {t: lake.version(t) for t in TABLES[:2]} == versions
    silver_stream = ORDERS.stream("silver")
    committed = Checkpoint(lake.storage, lake.settings.path(silver_stream.checkpoint))
    position = DeltaPosition.from_offset(committed.committed_offsets().source(0))
    assert position is not None
    assert position.next_unread_version == lake.version("bronze/orders_events") + 1
    assert pending_input(lake.settings, ORDERS, "silver").nothing
    pending = unfinished_rederivation(lake.settings, ORDERS, "silver")
    assert pending is not None and '"window": null' in pending.description

    assert lake.run("silver") == 0
    assert lake.run("gold", *args) == 0
    assert lake.contract_view() == expected
    assert not (lake.root / silver_stream.rederive_marker).exists()
    completed = re_derivation_details(lake, "silver", "completed_rederive")
    assert completed["quarantine_rows"] == sum(expected["quarantine"].values())


BAD_PARAMS = [
    (("--mode", "replay"), "mode='replay' is not one of"),
    (("--mode", "reprocess"), "needs both reprocess_from and reprocess_to"),
    (("--mode", "reprocess", "--reprocess-from", DAY2, "--reprocess-to", DAY1), "ends"),
    (
        ("--mode", "reprocess", "--reprocess-from", "2026-11-02", "--reprocess-to", DAY2),
        "not an ISO-8601 time with a zone",
    ),
    (("--mode", "incremental", "--reprocess-from", DAY1), "only apply to mode=reprocess"),
    (("--max-files-per-trigger", "0"), "outside 1.."),
]


def test_bad_params_are_refused_and_change_nothing(
    loaded: tuple[Lake, list[bytes]], capfd: pytest.CaptureFixture
) -> None:
    # One loaded lake for every case: a refused run changes nothing the next case could see.
    lake, _ = loaded
    versions = {t: lake.version(t) for t in TABLES}
    for args, message in BAD_PARAMS:
        assert lake.run("silver", *args) == 2, args
        err = capfd.readouterr().err
        assert "ERROR [InvalidRunParams]" in err and message in err, (args, err[-2000:])
        assert {t: lake.version(t) for t in TABLES} == versions, args


def test_full_refresh_is_refused_for_tables_that_forbid_it() -> None:
    orders = get_pipeline("orders")
    assert orders.silver is not None
    pipeline = replace(orders, silver=replace(orders.silver, allow_full_refresh=False))
    params = RunParams.parse({"mode": "full_refresh"})
    with pytest.raises(InvalidRunParams, match=r"not allowed for silver/orders"):
        params.check_against(pipeline)
    RunParams.parse({"mode": "full_refresh"}).check_against(orders)  # allowed by default
    # Bronze is declared allow_full_refresh=False; a refresh never rebuilds it.
    assert not orders.table("bronze/orders_events").allow_full_refresh


def test_a_reprocess_that_dies_between_its_writes_is_finished_by_the_next_run(
    loaded: tuple[Lake, list[bytes]],
) -> None:
    lake, delivered = loaded
    expected = comparable(expected_tables(delivered))
    corrupt(lake)
    args = ("--mode", "reprocess", "--reprocess-from", DAY1, "--reprocess-to", DAY2)
    # Silver's state is re-derived, its quarantine is not: the run dies in between.
    assert lake.run("silver", *args, fault="silver.rederive.after_silver") == 1
    assert lake.contract_view()["quarantine"] != expected["quarantine"]
    # Bronze has nothing new, yet a scheduled run does not skip silver as idle.
    assert pending_input(lake.settings, ORDERS, "silver").nothing
    pending = unfinished_rederivation(lake.settings, ORDERS, "silver")
    assert pending is not None and not pending.nothing
    assert pending.description.startswith("a re-derivation to finish (left unfinished: ")
    # The next run, whatever its mode, finishes the re-derivation first.
    assert lake.run("silver") == 0
    assert lake.contract_view()["quarantine"] == expected["quarantine"]
    assert lake.run("gold", *args) == 0
    assert_window_repaired(lake.contract_view(), expected, delivered)
    assert not (lake.root / "_runs" / "orders.silver.rederive.json").exists()
