"""The customers oracle checked by hand, and the generator checked through the oracle.

The Spark tests trust ``tests/oracle_customers.py`` as the contract; these small cases,
with every row written out, are what makes that trust earned. The generator tests prove
that the adversarial situations the Spark tests rely on really occur in its output, so a
green Spark comparison means something. No Spark here: they run in a second.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from lakehouse.sample_customers import (
    INVALID_KINDS,
    MULTI_REASON_KINDS,
    NUMERIC_CUSTOMERS,
    CustomerEventGenerator,
    message_key,
)
from lakehouse.sample_data import OrderEventGenerator
from tests.oracle import SILVER_COLUMNS, expected_tables
from tests.oracle_customers import (
    HISTORY_COLUMNS,
    SEGMENT_COLUMNS,
    ConflictingEvent,
    ExpectedCustomers,
    comparable_customers,
    expected_customers,
    expected_segment_sales,
    validate_customer,
)

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
ABSENT = object()  # a field left out of the record
ANA = {"name": "Ana", "segment": "consumer", "country": "DE", "email": "ana@example.com"}


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def iso(minutes: float) -> str:
    return at(minutes).strftime("%Y-%m-%dT%H:%M:%SZ")


def rec(
    event_id: Any, minutes: float, op: Any = "upsert", customer: Any = "c1", **fields: Any
) -> bytes:
    """A record; an upsert gets Ana's fields unless overridden, ``ABSENT`` removes one."""
    record: dict[str, Any] = {
        "event_id": event_id,
        "customer_id": customer,
        "op": op,
        "updated_at": iso(minutes),
    }
    if op == "upsert":
        record.update(ANA)
    record.update(fields)
    return json.dumps({k: v for k, v in record.items() if v is not ABSENT}).encode()


def version(start: float, end: float | None, customer: str = "c1", **fields: Any) -> tuple:
    values = {**ANA, **fields}
    return (
        customer,
        values["name"],
        values["email"],
        values["segment"],
        values["country"],
        at(start),
        None if end is None else at(end),
        end is None,
    )


def history(records: Iterable[bytes | None]) -> list[tuple]:
    return sorted(expected_customers(records).history.values(), key=lambda r: (r[0], r[5]))


# -- the SCD2 walk ---------------------------------------------------------------------


def test_the_oracle_speaks_of_the_declared_columns() -> None:
    from lakehouse.registry import get_pipeline

    customers, sales = get_pipeline("customers"), get_pipeline("segment_sales")
    assert set(HISTORY_COLUMNS) <= set(customers.table("silver/customers_history").columns)
    assert list(SEGMENT_COLUMNS) == sales.table("gold/segment_sales_daily").columns
    assert SEGMENT_COLUMNS == ("order_date", "segment", "orders", "revenue")
    row = history([rec("e1", 0)])[0]
    assert dict(zip(HISTORY_COLUMNS, row, strict=True))["valid_from"] == at(0)


def test_a_late_event_splits_the_version_it_falls_in() -> None:
    on_time = [rec("e1", 0), rec("e3", 20, segment="vip")]
    assert history(on_time) == [
        version(0, 20),
        version(20, None, segment="vip"),
    ]
    late = rec("e2", 10, segment="business")
    expected = [
        version(0, 10),
        version(10, 20, segment="business"),
        version(20, None, segment="vip"),
    ]
    # Whatever the delivery order, the history is the one of the true order.
    for order in itertools.permutations([*on_time, late]):
        assert history(list(order)) == expected


def test_a_late_event_before_the_first_version() -> None:
    assert history([rec("e2", 10), rec("e1", 5, segment="vip")]) == [
        version(5, 10, segment="vip"),
        version(10, None),
    ]
    # A late delete before the first version finds no state: nothing changes.
    assert history([rec("e2", 10), rec("e1", 5, op="delete")]) == [version(10, None)]


def test_delete_ends_the_version_and_a_later_upsert_creates_it_again() -> None:
    records = [rec("e1", 0), rec("e2", 10, op="delete"), rec("e3", 20)]
    assert history(records) == [version(0, 10), version(20, None)]


def test_a_delete_when_absent_changes_nothing() -> None:
    assert history([rec("e1", 0, op="delete")]) == []
    assert history([rec("e1", 0, op="delete"), rec("e2", 5)]) == [version(5, None)]
    twice = [rec("e1", 0), rec("e2", 5, op="delete"), rec("e3", 7, op="delete")]
    assert history(twice) == [version(0, 5)]


def test_an_upsert_equal_to_the_current_state_changes_nothing() -> None:
    same = [
        rec("e1", 0),
        # Same name, email, segment, country: other zone, extra field, schema_version 1.
        rec("e2", 10, updated_at=at(10).strftime("%Y-%m-%dT%H:%M:%S+00:00"), schema_version=1),
        rec("e3", 20, source={"system": "crm"}),
    ]
    assert history(same) == [version(0, None)]
    # A null email is an absent email: still no change.
    no_email = [rec("e1", 0, email=ABSENT), rec("e2", 10, email=None)]
    assert history(no_email) == [version(0, None, email=None)]


def test_a_no_op_stops_being_one_when_a_late_change_arrives_before_it() -> None:
    first = [rec("e1", 0), rec("e3", 20)]
    assert history(first) == [version(0, None)]
    with_late = [*first, rec("e2", 10, segment="vip")]
    assert history(with_late) == [
        version(0, 10),
        version(10, 20, segment="vip"),
        version(20, None),
    ]


def test_a_tie_at_the_same_updated_at_is_broken_by_event_id_as_text() -> None:
    records = [
        rec("e1", 0),
        rec("x-2", 10, segment="business"),
        rec("x-1", 10, segment="vip"),  # sorts first: its version has no length
    ]
    assert history(records) == [version(0, 10), version(10, None, segment="business")]
    # Integer ids compare as their text: "9" sorts after "10", so event 9 wins.
    ints = [
        rec(1, 0),
        rec(9, 10, segment="vip"),
        rec(10, 10, updated_at=at(10).strftime("%Y-%m-%dT%H:%M:%S.000+00:00"), segment="business"),
    ]
    assert history(ints) == [version(0, 10), version(10, None, segment="vip")]
    # An upsert and a delete at one instant: the upsert's version has no length.
    upsert_then_delete = [rec("e1", 0), rec("e2", 10, segment="vip"), rec("e3", 10, op="delete")]
    assert history(upsert_then_delete) == [version(0, 10)]
    # A delete and an upsert at one instant: the customer is back at once.
    delete_then_upsert = [rec("e1", 0), rec("e2", 10, op="delete"), rec("e3", 10)]
    assert history(delete_then_upsert) == [version(0, 10), version(10, None)]


def test_an_empty_email_and_no_email_are_different_values() -> None:
    records = [rec("e1", 0, email=ABSENT), rec("e2", 10, email=""), rec("e3", 20, email=None)]
    assert history(records) == [
        version(0, 10, email=None),
        version(10, 20, email=""),
        version(20, None, email=None),
    ]
    assert expected_customers(records).warned == Counter({"email_missing": 3})


def test_a_repeated_event_counts_once_in_history() -> None:
    first = rec("e1", 0)
    again = json.dumps(dict(reversed(json.loads(first).items())), indent=None).encode()
    later = rec("e2", 10, segment="vip")
    expected = expected_customers([first, later, first, again])
    assert sorted(expected.history.values()) == [version(0, 10), version(10, None, segment="vip")]
    assert expected.bronze == Counter({first.decode(): 2, again.decode(): 1, later.decode(): 1})
    assert expected.quarantine == Counter()
    # 7 and "7" are the same event id, with the same meaning.
    same_id = expected_customers([rec(7, 0), rec("7", 0)])
    assert list(same_id.events) == ["7"]


def test_one_event_id_with_two_meanings_is_refused() -> None:
    with pytest.raises(ConflictingEvent, match="segment"):
        expected_customers([rec("e1", 0), rec("e1", 0, segment="vip")])
    with pytest.raises(ConflictingEvent, match="schema_version"):
        expected_customers([rec("e1", 0), rec("e1", 0, schema_version=1)])


def test_a_tombstone_is_a_record_that_is_not_json() -> None:
    expected = expected_customers([None, rec("e1", 0)])
    assert expected.bronze[None] == 1
    assert expected.quarantine == Counter({(None, "not_json"): 1})
    assert len(expected.history) == 1


# -- record rules ----------------------------------------------------------------------

BIG = "9" * 5000  # more digits than Python's int() takes from text

INVALID: list[tuple[bytes, list[str]]] = [
    (b'{"event_id": "\xff"}', ["invalid_utf8"]),
    (b"", ["not_json"]),
    (b"customer c1 changed", ["not_json"]),
    (b'{"event_id": "e1"', ["not_json"]),
    (rec("e1", 0)[:-1] + b', "x": NaN}', ["not_json"]),
    (rec("e1", 0)[:-1] + b', "op": "upsert"}', ["duplicate_key"]),
    (rec("e1", 0)[:-1] + b', "x": {"a": 1, "a": 1}}', ["duplicate_key"]),
    (b"[]", ["not_object"]),
    (b'"text"', ["not_object"]),
    (b"null", ["not_object"]),
    (b"12", ["not_object"]),
    (rec(ABSENT, 0), ["missing:event_id"]),
    (rec(None, 0), ["missing:event_id"]),
    (rec("", 0), ["empty:event_id"]),
    (rec(True, 0), ["wrong_type:event_id"]),
    (rec(1.5, 0), ["wrong_type:event_id"]),
    (rec(["e1"], 0), ["wrong_type:event_id"]),
    (rec("e1", 0, customer=ABSENT), ["missing:customer_id"]),
    (rec("e1", 0, customer=""), ["empty:customer_id"]),
    (rec("e1", 0, customer=False), ["wrong_type:customer_id"]),
    (rec("e1", 0, customer={"id": 1}), ["wrong_type:customer_id"]),
    (rec("e1", 0, op=ABSENT, **ANA), ["missing:op"]),
    (rec("e1", 0, op=1, **ANA), ["wrong_type:op"]),
    (rec("e1", 0, op="Upsert", **ANA), ["not_allowed:op"]),
    (rec("e1", 0, op="", **ANA), ["not_allowed:op"]),
    (rec("e1", 0, updated_at=ABSENT), ["missing:updated_at"]),
    (rec("e1", 0, updated_at=1793606400), ["wrong_type:updated_at"]),
    (rec("e1", 0, updated_at="2026-11-02T08:00:00"), ["no_zone:updated_at"]),
    (rec("e1", 0, updated_at="2026-11-02 08:00:00Z"), ["bad_format:updated_at"]),
    (rec("e1", 0, updated_at="2026-11-02"), ["bad_format:updated_at"]),
    (rec("e1", 0, updated_at="2026-11-02T08:00:00Z\n"), ["bad_format:updated_at"]),
    (rec("e1", 0, updated_at="\uff12026-11-02T08:00:00Z"), ["bad_format:updated_at"]),
    (rec("e1", 0, updated_at="2026-02-30T08:00:00Z"), ["impossible_date:updated_at"]),
    (rec("e1", 0, updated_at="2026-11-02T24:00:00Z"), ["impossible_date:updated_at"]),
    (rec("e1", 0, updated_at="2026-11-02T08:00:00+19:00"), ["impossible_date:updated_at"]),
    (rec("e1", 0, updated_at="9999-12-31T23:00:00-05:00"), ["impossible_date:updated_at"]),
    (rec("e1", 0, name=ABSENT), ["missing:name"]),
    (rec("e1", 0, name=None), ["missing:name"]),
    (rec("e1", 0, name=""), ["empty:name"]),
    (rec("e1", 0, name=7), ["wrong_type:name"]),
    (rec("e1", 0, segment=ABSENT), ["missing:segment"]),
    (rec("e1", 0, segment=["vip"]), ["wrong_type:segment"]),
    (rec("e1", 0, segment="VIP"), ["not_allowed:segment"]),
    (rec("e1", 0, segment=""), ["not_allowed:segment"]),
    (rec("e1", 0, country=ABSENT), ["missing:country"]),
    (rec("e1", 0, country=49), ["wrong_type:country"]),
    (rec("e1", 0, country="de"), ["bad_format:country"]),
    (rec("e1", 0, country="DEU"), ["bad_format:country"]),
    (rec("e1", 0, country="D1"), ["bad_format:country"]),
    (rec("e1", 0, country="ÄB"), ["bad_format:country"]),
    (rec("e1", 0, country="DE\n"), ["bad_format:country"]),
    (rec("e1", 0, email=1), ["wrong_type:email"]),
    (rec("e1", 0, op="delete", email=[]), ["wrong_type:email"]),
    (rec("e1", 0, schema_version="1"), ["wrong_type:schema_version"]),
    (rec("e1", 0, schema_version=True), ["wrong_type:schema_version"]),
    (rec("e1", 0)[:-1] + b', "schema_version": 1.0}', ["wrong_type:schema_version"]),
    (rec("e1", 0)[:-1] + b', "schema_version": 1e0}', ["wrong_type:schema_version"]),
    (rec("e1", 0, schema_version=2**63), ["out_of_range:schema_version"]),
    (rec("e1", 0, schema_version=-(2**63) - 1), ["out_of_range:schema_version"]),
    (rec("e1", 0)[:-1] + f', "schema_version": {BIG}}}'.encode(), ["out_of_range:schema_version"]),
    # Every broken rule, in field order.
    (
        b'{"op": "merge", "updated_at": "2026-11-02", "country": "de", "email": 3}',
        [
            "missing:event_id",
            "missing:customer_id",
            "not_allowed:op",
            "bad_format:updated_at",
            "missing:name",
            "missing:segment",
            "bad_format:country",
            "wrong_type:email",
        ],
    ),
    # Without an op that is exactly "delete", the upsert fields stay required.
    (
        rec("e1", 0, op=ABSENT, name=ABSENT, segment=ABSENT, country=ABSENT),
        ["missing:op", "missing:name", "missing:segment", "missing:country"],
    ),
    (
        rec("e1", 0, op="remove", schema_version=0.5),
        [
            "not_allowed:op",
            "missing:name",
            "missing:segment",
            "missing:country",
            "wrong_type:schema_version",
        ],
    ),
]


@pytest.mark.parametrize(("raw", "reasons"), INVALID)
def test_an_invalid_record_names_every_rule_it_breaks(raw: bytes, reasons: list[str]) -> None:
    assert validate_customer(raw) == (None, reasons)
    expected = expected_customers([raw])
    text = raw.decode("utf-8", errors="replace")
    assert expected.bronze == Counter({text: 1})
    assert expected.quarantine == Counter({(text, reasons[0]): 1})
    assert expected.quarantine_reasons == Counter({(text, tuple(reasons)): 1})
    assert expected.history == {}


VALID: list[tuple[bytes, dict[str, Any]]] = [
    (rec(12, 0, customer=34), {"event_id": "12", "customer_id": "34"}),
    (rec(-5, 0), {"event_id": "-5"}),
    (rec("e1", 0)[:-1] + f', "n": {BIG}}}'.encode(), {"event_id": "e1"}),
    (rec(int(BIG[:20]), 0), {"event_id": BIG[:20]}),
    (rec("e1", 0).replace(b'"e1"', BIG.encode()), {"event_id": BIG}),
    (rec("e1", 0, email=""), {"email": ""}),
    (rec("e1", 0, email=None, schema_version=None), {"email": None, "schema_version": None}),
    (rec("e1", 0, schema_version=1), {"schema_version": 1}),
    (rec("e1", 0, schema_version=-(2**63)), {"schema_version": -(2**63)}),
    (rec("e1", 0, name=" "), {"name": " "}),
    (
        rec("e1", 0, updated_at="2026-11-02T09:30:00.1234567+01:30"),
        {"updated_at": at(0) + timedelta(microseconds=123456)},
    ),
    # A delete ignores the upsert fields, even broken ones, and needs none of them.
    (rec("e1", 0, op="delete"), {"op": "delete", "name": None, "segment": None}),
    (
        rec("e1", 0, op="delete", name=0, segment="gold", country="xx"),
        {"name": None, "segment": None, "country": None},
    ),
    (b" " + rec("e1", 0, extra=[1, {"b": None}]) + b"\t", {"event_id": "e1"}),
]


@pytest.mark.parametrize(("raw", "fields"), VALID)
def test_a_valid_record_is_typed(raw: bytes, fields: dict[str, Any]) -> None:
    values, reasons = validate_customer(raw)
    assert reasons == []
    assert values is not None
    assert {k: values[k] for k in fields} == fields


# -- expectations ----------------------------------------------------------------------


def test_invalid_comes_before_drop_and_drop_before_fail() -> None:
    records = [
        rec("e1", 0, customer="test-1", schema_version=2),  # dropped, does not fail
        rec("e2", 0, customer="test-2", name=ABSENT),  # invalid: quarantined, not dropped
        rec("e3", 0, op="delete", customer="test-3"),
        rec("e4", 0, email=ABSENT),  # warned and kept
    ]
    expected = expected_customers(records)
    assert expected.dropped == Counter({"test_account": 2})
    assert expected.failing == Counter()
    assert [reason for _, reason in expected.quarantine] == ["missing:name"]
    assert expected.warned == Counter({"email_missing": 1})
    assert list(expected.history) == [("c1", at(0))]
    assert sum(expected.bronze.values()) == 4


def test_an_unsupported_schema_version_fails_and_reaches_nothing() -> None:
    records = [
        rec("e1", 0, schema_version=2, email=ABSENT),
        rec("e2", 5, schema_version=0),
        rec("e2", 5, schema_version=0),
        rec("e3", 10, customer="c2", schema_version=1),
    ]
    expected = expected_customers(records)
    assert expected.failing == Counter({"unsupported_schema_version": 3})
    assert expected.warned == Counter()  # the run that would warn never completes
    assert list(expected.history) == [("c2", at(10))]


def test_expectations_count_every_delivered_record() -> None:
    no_email = rec("e1", 0, email=ABSENT)
    records = [
        no_email,
        no_email,
        rec("e2", 5, email=""),
        rec("e3", 9, op="delete"),  # a delete without email is not warned
        rec("t1", 0, customer="test-x"),
        rec("t1", 0, customer="test-x"),
    ]
    expected = expected_customers(records)
    assert expected.warned == Counter({"email_missing": 3})
    assert expected.dropped == Counter({"test_account": 2})
    assert sorted(expected.history.values(), key=lambda r: r[5]) == [
        version(0, 5, email=None),
        version(5, 9, email=""),
    ]


# -- segment sales ---------------------------------------------------------------------


def order(order_id: str, customer: str, order_ts: str, total: str, status: str = "placed") -> bytes:
    return json.dumps(
        {
            "event_id": f"oe-{order_id}-{status}",
            "order_id": order_id,
            "customer_id": customer,
            "event_type": status,
            "order_ts": order_ts,
            "event_ts": order_ts,
            "region": "eu-west",
            "total": total,
        }
    ).encode()


def test_each_order_takes_the_segment_of_the_version_covering_its_time() -> None:
    customers = expected_customers(
        [
            rec("e1", 10, segment="vip"),
            rec("e2", 20, segment="business"),
            rec("e3", 30, op="delete"),
        ]
    )
    orders = expected_tables(
        [
            order("o1", "c1", "2026-11-02T08:09:59.999999Z", "1.00"),  # before: unknown
            order("o2", "c1", "2026-11-02T08:10:00Z", "2.00"),  # valid_from is inclusive
            order("o3", "c1", "2026-11-02T09:19:59.999999+01:00", "3.00"),
            order("o4", "c1", "2026-11-02T08:20:00Z", "4.005"),  # valid_to is exclusive
            order("o5", "c1", "2026-11-02T08:30:00Z", "5.00"),  # deleted: unknown
            order("o6", "c9", "2026-11-02T08:15:00Z", "6.00"),  # no versions: unknown
            order("o7", "c1", "2026-11-02T08:15:00Z", "7.00", "cancelled"),  # not counted
            order("o8", "c1", "2026-11-03T00:59:00+01:00", "8.10"),  # UTC date 11-02
            order("o9", "c1", "2026-11-03T01:00:00+01:00", "9.00"),  # UTC date 11-03
        ]
    )
    day, next_day = date(2026, 11, 2), date(2026, 11, 3)
    assert expected_segment_sales(orders.silver, customers.history) == {
        (day, "unknown"): (day, "unknown", 4, Decimal("20.10")),
        (day, "vip"): (day, "vip", 2, Decimal("5.00")),
        (day, "business"): (day, "business", 1, Decimal("4.01")),
        (next_day, "unknown"): (next_day, "unknown", 1, Decimal("9.00")),
    }
    assert len(SILVER_COLUMNS) == len(next(iter(orders.silver.values())))


def test_an_open_version_covers_the_future_and_naive_times_are_utc() -> None:
    customers = expected_customers([rec("e1", 0, segment="vip")])
    orders = expected_tables([order("o1", "c1", "2030-01-01T00:00:00Z", "1")])
    naive = comparable_customers(customers)["history"]
    sales = expected_segment_sales(orders.silver, naive)
    assert sales == {(date(2030, 1, 1), "vip"): (date(2030, 1, 1), "vip", 1, Decimal("1.00"))}


def test_comparable_customers_has_the_shape_pyspark_reads() -> None:
    customers = expected_customers([None, rec("e1", 0), rec("e2", 10, op="delete")])
    sales = expected_segment_sales(
        expected_tables([order("o1", "c1", "2026-11-02T08:05:00Z", "3")]).silver,
        customers.history,
    )
    view = comparable_customers(customers, sales)
    naive = datetime(2026, 11, 2, 8, 0)
    assert view["history"] == {
        ("c1", naive): (
            "c1",
            "Ana",
            "ana@example.com",
            "consumer",
            "DE",
            naive,
            naive + timedelta(minutes=10),
            False,
        )
    }
    assert view["bronze"][None] == 1
    assert view["segment_sales"] == {
        (date(2026, 11, 2), "consumer"): (date(2026, 11, 2), "consumer", 1, Decimal("3.00"))
    }
    assert "segment_sales" not in comparable_customers(customers)


# -- the generator, through the oracle ---------------------------------------------------


@pytest.mark.parametrize(("kind", "reason"), INVALID_KINDS)
def test_each_invalid_kind_breaks_exactly_the_rules_it_declares(kind: str, reason: str) -> None:
    raw = CustomerEventGenerator(seed=3).invalid(kind)
    assert validate_customer(raw) == (None, list(MULTI_REASON_KINDS.get(kind, (reason,))))


def _deliveries(seed: int) -> list[list[bytes]]:
    generator = CustomerEventGenerator(seed=seed)
    return [
        generator.initial_load(300),
        generator.batch(250),
        generator.batch(250),
        generator.batch(250, unsupported_schema_version=2),
        generator.batch(250),
        generator.flush_late(),
    ]


def test_the_generator_is_deterministic_per_seed() -> None:
    assert _deliveries(5) == _deliveries(5)
    assert _deliveries(5) != _deliveries(6)
    assert CustomerEventGenerator(seed=5).batch(50) == CustomerEventGenerator(seed=5).batch(50)


def test_by_default_no_record_fails_a_run_and_on_request_exactly_those() -> None:
    generator = CustomerEventGenerator(seed=8)
    default = generator.batch(300) + generator.flush_late()
    assert expected_customers(default).failing == Counter()
    failing = generator.batch(50, unsupported_schema_version=3)
    assert expected_customers(default + failing).failing == Counter(
        {"unsupported_schema_version": 3}
    )


def test_batches_rotate_through_every_invalid_kind() -> None:
    generator = CustomerEventGenerator(seed=9)
    lines = [line for _ in range(6) for line in generator.batch(300)]
    reasons = {reason for _, reason in expected_customers(lines).quarantine}
    assert reasons == {reason for _, reason in INVALID_KINDS}
    share = sum(expected_customers(lines).quarantine.values()) / len(lines)
    assert 0.03 < share < 0.07
    assert not any(b"\n" in line or b"\r" in line for line in lines)  # one line each


def _rows_by_customer(expected: ExpectedCustomers) -> dict[str, list[tuple]]:
    rows: dict[str, list[tuple]] = {}
    for row in sorted(expected.history.values(), key=lambda r: (r[0], r[5])):
        rows.setdefault(row[0], []).append(row)
    return rows


def _history_situations(expected: ExpectedCustomers) -> set[str]:
    """What the final history shows: many versions, deletes, re-creations, ties."""
    found: set[str] = set()
    rows = _rows_by_customer(expected)
    starts = {(r[0], r[5]) for r in expected.history.values()}
    ends = {(r[0], r[6]) for r in expected.history.values()}
    if any(len(versions) >= 3 for versions in rows.values()):
        found.add("three versions")
    if any(r[6] is not None and (r[0], r[6]) not in starts for r in expected.history.values()):
        found.add("ended by a delete")
    if any(
        a[6] is not None and a[6] < b[5] for v in rows.values() for a, b in itertools.pairwise(v)
    ):
        found.add("re-created after a delete")
    events = list(expected.events.values())
    instants = Counter((e["customer_id"], e["updated_at"]) for e in events)
    if any(n >= 2 for n in instants.values()):
        found.add("tie")
    for e in events:
        key = (e["customer_id"], e["updated_at"])
        if e["op"] == "delete" and key not in ends and instants[key] == 1:
            found.add("delete when absent")
        if e["op"] == "upsert" and key not in starts and instants[key] == 1:
            found.add("no-op upsert")
        if e["op"] == "upsert" and e["email"] == "":
            found.add("empty email")
        if e["op"] == "upsert" and e["email"] is None:
            found.add("no email")
        if e["schema_version"] == 1:
            found.add("schema_version 1")
    return found


def _late_situations(before: ExpectedCustomers, after: ExpectedCustomers) -> set[str]:
    """What a later delivery did to the history of an earlier one."""
    found: set[str] = set()
    old, new = _rows_by_customer(before), _rows_by_customer(after)
    for customer, versions in old.items():
        later = new.get(customer, [])
        if later and later[0][5] < versions[0][5]:
            found.add("late before the first version")
        for row in versions:
            moved = after.history.get((customer, row[5]))
            if (
                moved is not None
                and row[6] is not None
                and moved[6] is not None
                and moved[6] < row[6]
            ):
                found.add("late split a version")
    return found


def _delivery_situations(deliveries: list[list[bytes]]) -> set[str]:
    """What the raw deliveries show: repeats, re-serializations, shuffles, integer ids."""
    found: set[str] = set()
    lines = [line for delivery in deliveries for line in delivery]
    if any(n >= 2 for n in Counter(lines).values()):
        found.add("exact repeat")
    texts_by_id: dict[str, set[bytes]] = {}
    for line in set(lines):
        values, _ = validate_customer(line)
        if values is not None:
            texts_by_id.setdefault(values["event_id"], set()).add(line)
            document = json.loads(line)
            if isinstance(document["event_id"], int):
                found.add("integer event id")
            if isinstance(document["customer_id"], int):
                found.add("integer customer id")
    if any(len(texts) >= 2 for texts in texts_by_id.values()):
        found.add("re-serialized repeat")
    for delivery in deliveries:
        seen: dict[str, datetime] = {}
        for line in delivery:
            values, _ = validate_customer(line)
            if values is None:
                continue
            previous = seen.get(values["customer_id"])
            if previous is not None and values["updated_at"] < previous:
                found.add("out of order in a batch")
            seen[values["customer_id"]] = max(
                values["updated_at"], previous or values["updated_at"]
            )
    return found


@pytest.mark.parametrize("seed", [11, 12])
def test_the_generator_produces_every_adversarial_situation(seed: int) -> None:
    deliveries = _deliveries(seed)
    prefixes = [
        expected_customers([line for d in deliveries[:i] for line in d])
        for i in range(1, len(deliveries) + 1)
    ]
    final = prefixes[-1]
    found = _history_situations(final) | _delivery_situations(deliveries)
    for before, after in itertools.pairwise(prefixes):
        found |= _late_situations(before, after)
    assert found == {
        "three versions",
        "ended by a delete",
        "re-created after a delete",
        "tie",
        "delete when absent",
        "no-op upsert",
        "empty email",
        "no email",
        "schema_version 1",
        "late before the first version",
        "late split a version",
        "exact repeat",
        "re-serialized repeat",
        "integer event id",
        "integer customer id",
        "out of order in a batch",
    }
    assert final.dropped["test_account"] > 0
    assert final.warned["email_missing"] > 0
    assert final.failing == Counter({"unsupported_schema_version": 2})
    # The drop comes first: test accounts with an unsupported schema_version are there.
    assert any(
        v is not None
        and v["customer_id"].startswith("test-")
        and v["schema_version"] not in (None, 1)
        for v, _ in map(validate_customer, [line for d in deliveries for line in d])
    )


def test_a_numeric_customer_is_one_customer_whether_its_id_is_text_or_integer() -> None:
    generator = CustomerEventGenerator(seed=4)
    lines = [line for _ in range(8) for line in generator.batch(200)] + generator.flush_late()
    numeric: dict[str, set[type]] = {c: set() for c in NUMERIC_CUSTOMERS}
    for line in lines:
        values, _ = validate_customer(line)
        if values is not None and values["customer_id"] in numeric:
            numeric[values["customer_id"]].add(type(json.loads(line)["customer_id"]))
    assert any(types == {int, str} for types in numeric.values())


def test_orders_join_the_generated_customers() -> None:
    customers = CustomerEventGenerator(seed=21)
    lines = customers.initial_load() + customers.batch(400) + customers.flush_late()
    history = expected_customers(lines).history
    orders = OrderEventGenerator(seed=21)
    order_lines: list[bytes | None] = [*orders.batch(200), *orders.flush_late()]
    silver = expected_tables(order_lines).silver
    sales = expected_segment_sales(silver, history)
    live = sum(1 for row in silver.values() if row[2] != "cancelled")
    assert sum(row[2] for row in sales.values()) == live
    segments: Counter[str] = Counter()
    for (_, segment), row in sales.items():
        segments[segment] += row[2]
    assert {"consumer", "business", "vip"} <= set(segments)
    assert segments["unknown"] < live / 4
    # Some customer's orders fall into different versions of it.
    covered = {(r[0], r[5]) for r in history.values() for o in silver.values() if o[1] == r[0]}
    assert len(covered) > len({c for c, _ in covered})


def test_message_key_is_the_customer_id_as_text() -> None:
    assert message_key(rec("e1", 0, customer="c00042")) == b"c00042"
    assert message_key(rec("e1", 0, customer=9000001)) == b"9000001"
    assert message_key(rec("e1", 0, customer=True)) is None
    assert message_key(rec("e1", 0, customer="")) is None
    assert message_key(b"[1]") is None
    assert message_key(b"not json") is None
    assert message_key(b'{"customer_id": "\xff"}') is None
    assert message_key(None) is None
