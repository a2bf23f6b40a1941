"""The customers contract (../shared/contract-customers.md) implemented a second time, in
plain Python.

The tests compare the Spark customers pipeline and ``gold/segment_sales_daily`` with what
this oracle derives from the same raw records. Like ``tests/oracle.py`` for orders it
shares no code with the jobs: JSON is read with Python's parser (duplicate keys and NaN
refused), rules are checked on Python types, and the SCD2 history is a literal walk of
each customer's events, so a mistake in a Spark window or merge cannot hide by being
repeated here. Only the small record helpers of the orders oracle are reused, so both
pipelines read ids, timestamps and JSON the same way.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from tests.oracle import Checked, _id, _timestamp, checked_records, naive_utc, validate

OPS = ("upsert", "delete")
SEGMENTS = ("consumer", "business", "vip")
UNKNOWN_SEGMENT = "unknown"
TEST_ACCOUNT_PREFIX = "test-"
SUPPORTED_SCHEMA_VERSION = 1
MIN_LONG = -(2**63)
MAX_LONG = 2**63 - 1
_COUNTRY = re.compile(r"[A-Z]{2}")  # used with fullmatch: no trailing newline sneaks in
_CENT = Decimal("0.01")

HISTORY_COLUMNS = (
    "customer_id",
    "name",
    "email",
    "segment",
    "country",
    "valid_from",
    "valid_to",
    "is_current",
)
SEGMENT_COLUMNS = ("order_date", "segment", "orders", "revenue")
# The fields a record's meaning consists of; two deliveries of one event_id must agree on
# all of them (extra unknown fields are ignored by the contract, so they may differ).
FIELDS = (
    "event_id",
    "customer_id",
    "op",
    "updated_at",
    "name",
    "segment",
    "country",
    "email",
    "schema_version",
)


class ConflictingEvent(ValueError):
    """Two valid records share an ``event_id`` but not their meaning.

    The contract treats a second record with the same ``event_id`` as the same event, so
    which one wins would be undefined; the generator must never produce this, and the
    oracle refuses to guess so a generator bug shows up as an error, not as a diff.
    """


class _BigInt:
    """An integer literal longer than Python's int-from-text limit (4300 digits).

    Python's ``int()`` refuses such text, which would make the record look like non-JSON;
    it is JSON, and an id keeps it as its decimal text while a schema_version is simply
    out of range.
    """

    def __init__(self, text: str) -> None:
        self.text = text


def _parse_int(text: str) -> int | _BigInt:
    try:
        return int(text)
    except ValueError:
        return _BigInt(text)


def _identifier(value: Any) -> tuple[str | None, str | None]:
    if isinstance(value, _BigInt):
        return value.text, None
    return _id(value)


def _text(accept: Callable[[str], Any], problem: str) -> Callable[[Any], tuple[Any, Any]]:
    """A rule for a string field: ``wrong_type`` unless a string, ``problem`` unless accepted."""

    def check(value: Any) -> tuple[str | None, str | None]:
        if not isinstance(value, str):
            return None, "wrong_type"
        return (value, None) if accept(value) else (None, problem)

    return check


_op = _text(lambda v: v in OPS, "not_allowed")
_name = _text(bool, "empty")
_segment = _text(lambda v: v in SEGMENTS, "not_allowed")
_country = _text(_COUNTRY.fullmatch, "bad_format")


def _email(value: Any) -> tuple[str | None, str | None]:
    return (value, None) if isinstance(value, str) else (None, "wrong_type")


def _schema_version(value: Any) -> tuple[int | None, str | None]:
    if isinstance(value, _BigInt):
        return None, "out_of_range"
    if isinstance(value, bool) or not isinstance(value, int):
        return None, "wrong_type"  # 1.0 parses as Decimal, "1" as str: neither is an integer
    if not MIN_LONG <= value <= MAX_LONG:
        return None, "out_of_range"
    return value, None


def _check(record: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    checked = Checked(record)
    rule, values = checked.rule, checked.values
    rule("event_id", True, _identifier)
    rule("customer_id", True, _identifier)
    rule("op", True, _op)
    rule("updated_at", True, _timestamp)
    # Only an op that is exactly "delete" frees the record from the upsert fields: with an
    # invalid or missing op we cannot tell it is a delete, so they stay required.
    if values["op"] == "delete":
        values.update(name=None, segment=None, country=None)
    else:
        rule("name", True, _name)
        rule("segment", True, _segment)
        rule("country", True, _country)
    rule("email", False, _email)
    rule("schema_version", False, _schema_version)
    return values, checked.reasons


def validate_customer(raw: bytes) -> tuple[dict[str, Any] | None, list[str]]:
    """(typed fields, []) for a valid record; (None, every broken rule in field order) for
    an invalid one, the first being the ``reason`` quarantine must show."""
    return validate(raw, _check, parse_int=_parse_int)


@dataclass
class ExpectedCustomers:
    """What the customers tables and expectation counts must be after all of ``records``
    were delivered (in any order, any number of runs)."""

    bronze: Counter = field(default_factory=Counter)  # raw text -> count
    quarantine: Counter = field(default_factory=Counter)  # (raw text, reason) -> count
    # (raw text, every reason in field order) -> count: the ``reasons`` column
    quarantine_reasons: Counter = field(default_factory=Counter)
    history: dict[tuple[str, datetime], tuple] = field(default_factory=dict)
    warned: Counter = field(default_factory=Counter)  # rule -> delivered records
    dropped: Counter = field(default_factory=Counter)  # rule -> delivered records
    failing: Counter = field(default_factory=Counter)  # rule -> delivered records
    events: dict[str, dict[str, Any]] = field(default_factory=dict)  # event_id -> values


def _same_event(first: dict[str, Any], second: dict[str, Any]) -> None:
    differing = [name for name in FIELDS if first[name] != second[name]]
    if differing:
        raise ConflictingEvent(
            f"event_id {first['event_id']!r} delivered with different {', '.join(differing)}"
        )


def _classify(values: dict[str, Any], expected: ExpectedCustomers) -> bool:
    """Apply the expectations in the contract's order; True when the event reaches silver.

    A record that fails the run is not kept (nothing of its micro-batch is committed) and
    is not warned about either: the run that would warn never completes.
    """
    if values["customer_id"].startswith(TEST_ACCOUNT_PREFIX):
        expected.dropped["test_account"] += 1
        return False
    version = values["schema_version"]
    if version is not None and version != SUPPORTED_SCHEMA_VERSION:
        expected.failing["unsupported_schema_version"] += 1
        return False
    if values["op"] == "upsert" and not values["email"]:
        expected.warned["email_missing"] += 1
    return True


def _walk(customer_id: str, events: list[dict[str, Any]]) -> list[tuple]:
    """The SCD2 versions of one customer, read literally off the contract."""
    rows: list[tuple] = []
    current: dict[str, Any] | None = None  # the open version's values and valid_from

    def close(at: datetime) -> None:
        assert current is not None
        if current["valid_from"] != at:  # a version of no length is not a row
            rows.append(_row(customer_id, current, at))

    for event in sorted(events, key=lambda e: (e["updated_at"], e["event_id"])):
        at = event["updated_at"]
        if event["op"] == "delete":
            if current is not None:
                close(at)
            current = None
            continue
        state = {k: event[k] for k in ("name", "email", "segment", "country")}
        if current is not None and all(current[k] == v for k, v in state.items()):
            continue  # an upsert that changes nothing
        if current is not None:
            close(at)
        current = {**state, "valid_from": at}
    if current is not None:
        rows.append(_row(customer_id, current, None))
    return rows


def _row(customer_id: str, version: dict[str, Any], valid_to: datetime | None) -> tuple:
    return (
        customer_id,
        version["name"],
        version["email"],
        version["segment"],
        version["country"],
        version["valid_from"],
        valid_to,
        valid_to is None,
    )


def expected_customers(records: Iterable[bytes | None]) -> ExpectedCustomers:
    """``records`` are raw records in delivery order; ``None`` is a Kafka message without
    a value (a tombstone): a record with no text, which is not JSON."""
    expected = ExpectedCustomers()
    seen: dict[str, dict[str, Any]] = {}  # every valid record's meaning, by event_id
    for text, values, reasons in checked_records(records, validate_customer):
        expected.bronze[text] += 1
        if values is None:
            expected.quarantine[(text, reasons[0])] += 1
            expected.quarantine_reasons[(text, tuple(reasons))] += 1
            continue
        earlier = seen.setdefault(values["event_id"], values)
        _same_event(earlier, values)
        if _classify(values, expected):
            expected.events.setdefault(values["event_id"], values)
    by_customer: dict[str, list[dict[str, Any]]] = {}
    for event in expected.events.values():
        by_customer.setdefault(event["customer_id"], []).append(event)
    for customer_id, events in by_customer.items():
        for row in _walk(customer_id, events):
            key = (customer_id, row[5])
            assert key not in expected.history, f"two versions start at {key}"
            expected.history[key] = row
    return expected


def _utc(value: datetime) -> datetime:
    """Aware UTC; a naive datetime (as PySpark returns them) is taken to be UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def expected_segment_sales(
    orders_silver: dict[str, tuple], history: dict[tuple, tuple]
) -> dict[tuple[date, str], tuple]:
    """``gold/segment_sales_daily`` from orders' silver rows (``tests.oracle.SILVER_COLUMNS``
    layout) and customers' history rows (``HISTORY_COLUMNS`` layout)."""
    versions: dict[str, list[tuple[datetime, datetime | None, str]]] = {}
    for row in history.values():
        valid_to = None if row[6] is None else _utc(row[6])
        versions.setdefault(row[0], []).append((_utc(row[5]), valid_to, row[3]))
    days: dict[tuple[date, str], list[Decimal]] = {}
    for order in orders_silver.values():
        customer_id, status, order_ts, total = order[1], order[2], _utc(order[3]), order[6]
        if status == "cancelled":
            continue
        covering = [
            segment
            for valid_from, valid_to, segment in versions.get(customer_id, [])
            if valid_from <= order_ts and (valid_to is None or order_ts < valid_to)
        ]
        assert len(covering) <= 1, f"versions of {customer_id} overlap at {order_ts}"
        segment = covering[0] if covering else UNKNOWN_SEGMENT
        days.setdefault((order_ts.date(), segment), []).append(total)
    return {
        (day, segment): (
            day,
            segment,
            len(totals),
            sum(totals, Decimal("0.00")).quantize(_CENT, rounding=ROUND_HALF_UP),
        )
        for (day, segment), totals in days.items()
    }


def comparable_customers(
    expected: ExpectedCustomers, segment_sales: dict[tuple, tuple] | None = None
) -> dict[str, Any]:
    """The oracle's tables in the shape PySpark reads them (naive UTC datetimes, dates as
    ``datetime.date``, decimals as ``Decimal``), as ``tests.oracle.comparable`` does for
    orders. ``segment_sales`` (from ``expected_segment_sales``) is added when given."""
    view: dict[str, Any] = {
        "bronze": Counter(expected.bronze),
        "quarantine": Counter(expected.quarantine),
        "history": {naive_utc(k): naive_utc(v) for k, v in expected.history.items()},
    }
    if segment_sales is not None:
        view["segment_sales"] = dict(segment_sales)
    return view
