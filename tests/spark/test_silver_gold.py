"""Silver's ordering rules and gold's recompute, with late, repeated, out-of-order and tied
events delivered in adversarial orders across micro-batches."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from lakehouse.registry import get_pipeline
from tests.lake import Lake
from tests.oracle import GOLD_COLUMNS, comparable, expected_tables


def event(order: str, event_id: str, ts: str, kind: str = "updated", **fields: Any) -> bytes:
    record = {
        "event_id": event_id,
        "order_id": order,
        "customer_id": "c1",
        "event_type": kind,
        "order_ts": "2026-11-02T10:05:00Z",
        "event_ts": ts,
        "region": "eu-west",
        "total": 10,
    }
    record.update(fields)
    return json.dumps(record).encode()


def deliver_and_run(lake: Lake, lines: list[bytes], layers: tuple[str, ...]) -> None:
    lake.land(lines)
    for layer in layers:
        assert lake.run(layer) == 0


def test_the_greatest_event_wins_whatever_the_order_of_arrival(lake: Lake) -> None:
    a3 = event("A", "a3", "2026-11-02T12:00:00Z", total=30)
    a1 = event("A", "a1", "2026-11-02T10:05:00Z", "placed", total=10)
    a2 = event("A", "a2", "2026-11-02T11:00:00+00:30", total=20)  # 10:30 UTC: older than a3
    b1 = event("B", "b1", "2026-11-02T10:10:00Z", "placed", total=5)
    c1 = event("C", "c1", "2026-11-02T10:00:00Z", "placed", total=1)
    c2 = event("C", "c2", "2026-11-02T10:01:00Z", total=2)
    d_low = event("D", "d-a", "2026-11-02T10:20:00Z", total=7)
    d_high = event("D", "d-b", "2026-11-02T10:20:00Z", total=8)  # same time, greater id
    e_cancel = event("E", "e2", "2026-11-02T13:00:00Z", "cancelled", total=None)
    e_late = event("E", "e1", "2026-11-02T12:59:59.999999Z", total=99)
    f_invalid_newer = event("F", "f2", "2026-11-02T23:00:00", total=50)  # no zone: quarantined
    f1 = event("F", "f1", "2026-11-02T10:00:00Z", "placed", total=3)
    batches = [
        [a3, b1, b1, c2, c1, d_high, e_cancel, f1],  # duplicate B, C out of order
        [a1, a2, b1, d_low, e_late, f_invalid_newer],  # all late, repeated or invalid
    ]
    delivered: list[bytes] = []
    for lines in batches:
        delivered += lines
        deliver_and_run(lake, lines, ("bronze", "silver", "gold"))
    silver = lake.silver()
    picked = {order: (row[2], row[6], row[9]) for order, row in silver.items()}
    assert picked == {
        "A": ("updated", Decimal("30.00"), "a3"),
        "B": ("placed", Decimal("5.00"), "b1"),
        "C": ("updated", Decimal("2.00"), "c2"),
        "D": ("updated", Decimal("8.00"), "d-b"),
        "E": ("cancelled", None, "e2"),
        "F": ("placed", Decimal("3.00"), "f1"),
    }
    assert lake.contract_view() == comparable(expected_tables(delivered))


def _silver_after(root: Path, lake: Lake, batches: list[list[bytes]]) -> dict[str, tuple]:
    for lines in batches:
        deliver_and_run(lake, lines, ("bronze", "silver"))
    return lake.silver()


def test_exact_ties_resolve_the_same_in_any_order(lake: Lake, tmp_path: Path) -> None:
    # Same order, event_ts and event_id, different content: a producer bug the table must
    # still resolve deterministically, whichever copy arrives first.
    x = event("T", "t1", "2026-11-02T10:00:00Z", total=1)
    y = event("T", "t1", "2026-11-02T10:00:00Z", total=2)
    first = _silver_after(lake.root, lake, [[x], [y]])
    other = Lake(lake.spark, lake.settings.with_root(tmp_path / "other"), lake.monkeypatch)
    second = _silver_after(other.root, other, [[y], [x]])
    assert first == second
    assert len(first) == 1


def test_gold_follows_late_and_updated_events(lake: Lake) -> None:
    gold = get_pipeline("orders").gold
    assert gold is not None and gold.function is not None
    batches = [
        [
            event("G1", "g1", "2026-11-02T10:05:00Z", "placed", total="10.10"),
            event("G2", "g2", "2026-11-02T10:06:00Z", "placed", total="20.20"),
            event(
                "G3",
                "g3",
                "2026-11-02T11:10:00Z",
                "placed",
                total=5,
                order_ts="2026-11-02T11:00:00Z",
            ),
            event(
                "G4",
                "g4",
                "2026-11-02T09:10:00Z",
                "placed",
                total=1,
                region="us-east",
                order_ts="2026-11-02T09:00:00Z",
            ),
        ],
        [
            # G1 is cancelled; G3 is corrected into another hour and region, emptying 11:00;
            # G4's update arrives a day late and changes its old hour.
            event("G1", "g1b", "2026-11-02T10:30:00Z", "cancelled", total=None),
            event(
                "G3",
                "g3b",
                "2026-11-02T11:20:00Z",
                total=7,
                order_ts="2026-11-02T12:00:00Z",
                region="ap-south",
            ),
            event(
                "G4",
                "g4b",
                "2026-11-03T09:10:00Z",
                total="2.50",
                region="us-east",
                order_ts="2026-11-02T09:00:00Z",
            ),
        ],
        [
            # A late event older than G3's correction must not move it back.
            event("G3", "g3a", "2026-11-02T11:15:00Z", total=6, order_ts="2026-11-02T11:00:00Z"),
        ],
    ]
    delivered: list[bytes] = []
    for lines in batches:
        delivered += lines
        deliver_and_run(lake, lines, ("bronze", "silver", "gold"))
        recomputed = {
            (r[0], r[1]): tuple(r)
            for r in gold.function({"orders": lake.table("silver/orders")})
            .select(*GOLD_COLUMNS)
            .collect()
        }
        assert lake.gold() == recomputed
        assert lake.contract_view() == comparable(expected_tables(delivered))
    hour = datetime(2026, 11, 2, 10)
    assert lake.gold() == {
        (datetime(2026, 11, 2, 9), "us-east"): (
            datetime(2026, 11, 2, 9),
            "us-east",
            1,
            0,
            Decimal("2.50"),
            Decimal("2.50"),
        ),
        (hour, "eu-west"): (hour, "eu-west", 1, 1, Decimal("20.20"), Decimal("20.20")),
        (datetime(2026, 11, 2, 12), "ap-south"): (
            datetime(2026, 11, 2, 12),
            "ap-south",
            1,
            0,
            Decimal("7.00"),
            Decimal("7.00"),
        ),
    }


def test_an_hour_of_only_cancelled_orders_has_no_average(lake: Lake) -> None:
    deliver_and_run(
        lake,
        [event("H1", "h1", "2026-11-02T10:05:00Z", "cancelled", total=None)],
        ("bronze", "silver", "gold"),
    )
    hour = datetime(2026, 11, 2, 10)
    assert lake.gold() == {(hour, "eu-west"): (hour, "eu-west", 0, 1, Decimal("0.00"), None)}
