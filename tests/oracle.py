"""The contract (../shared/contract.md) implemented a second time, in plain Python.

The tests compare the Spark pipeline's tables with what this oracle derives from the same
raw lines. It shares no code with the jobs: it reads JSON with Python's parser, checks the
rules with Python types and computes silver and gold with dictionaries, so a bug in the
Spark expressions cannot hide by being repeated here.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

# ASCII digits only, and \Z: "$" would also match before a trailing newline.
_TS = re.compile(
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(Z|([+-])([0-9]{2}):([0-9]{2}))?\Z"
)
_DECIMAL = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)\Z")
_DIGITS = re.compile(r"^[0-9]+\Z")
_BLANK = re.compile(rb"^[ \t\n\x0b\f\r]*$")
EVENT_TYPES = ("placed", "updated", "cancelled")
MAX_TOTAL = Decimal(10) ** 12
MAX_LONG = 2**63 - 1


class _Duplicate(Exception):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise _Duplicate
    return dict(pairs)


def _reject_constant(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity are not JSON


def split_records(content: bytes) -> list[bytes]:
    """Records of a landing file: lines split on \\n, one trailing \\r dropped, blanks skipped."""
    records = []
    for line in content.split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not _BLANK.match(line):
            records.append(line)
    return records


def _timestamp(value: Any) -> tuple[datetime | None, str | None]:
    if not isinstance(value, str):
        return None, "wrong_type"
    match = _TS.match(value)
    if not match:
        return None, "bad_format"
    year, month, day, hour, minute, second, fraction, zone, sign, zh, zm = match.groups()
    if zone is None:
        return None, "no_zone"
    try:
        offset = timedelta(0)
        if zone != "Z":
            if int(zh) > 18 or int(zm) > 59:
                raise ValueError("offset")
            offset = timedelta(hours=int(zh), minutes=int(zm)) * (1 if sign == "+" else -1)
        micros = int((fraction or "0")[:6].ljust(6, "0"))
        local = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            micros,
            tzinfo=timezone(offset),
        )
        utc = local.astimezone(UTC)
    except (ValueError, OverflowError):  # a date that is not, or not in years 1..9999 in UTC
        return None, "impossible_date"
    return utc, None


def _id(value: Any) -> tuple[str | None, str | None]:
    if isinstance(value, bool):
        return None, "wrong_type"
    if isinstance(value, int):
        return str(value), None
    if isinstance(value, str):
        return (value, None) if value else (None, "empty")
    return None, "wrong_type"


def _total(value: Any) -> tuple[Decimal | None, str | None]:
    if isinstance(value, bool):
        return None, "wrong_type"
    if isinstance(value, int | Decimal):
        number = Decimal(value)
    elif isinstance(value, str) and _DECIMAL.match(value):
        try:
            number = Decimal(value)
        except InvalidOperation:
            return None, "wrong_type"
    else:
        return None, "wrong_type"
    if not Decimal(0) <= number <= MAX_TOTAL:
        return None, "out_of_range"
    return number.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP), None


def _count(value: Any) -> tuple[int | None, str | None]:
    if isinstance(value, bool):
        return None, "wrong_type"
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and _DIGITS.match(value):
        number = int(value)
    else:
        return None, "wrong_type"
    if not 0 <= number <= MAX_LONG:
        return None, "out_of_range"
    return number, None


class Checked:
    """A record checked field by field: the typed values and the broken rules, in order."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record
        self.values: dict[str, Any] = {}
        self.reasons: list[str] = []

    def rule(self, name: str, required: bool, checker: Any) -> None:
        if self.record.get(name) is None:  # a JSON null counts as absent
            self.values[name] = None
            if required:
                self.reasons.append(f"missing:{name}")
            return
        value, problem = checker(self.record[name])
        self.values[name] = value
        if problem:
            self.reasons.append(f"{problem}:{name}")


def _check(record: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    checked = Checked(record)
    rule, values = checked.rule, checked.values
    for name in ("event_id", "order_id", "customer_id"):
        rule(name, True, _id)
    rule(
        "event_type",
        True,
        lambda v: (
            (v, None)
            if v in EVENT_TYPES and isinstance(v, str)
            else (None, "not_allowed" if isinstance(v, str) else "wrong_type")
        ),
    )
    rule("order_ts", True, _timestamp)
    rule("event_ts", True, _timestamp)
    rule(
        "region",
        True,
        lambda v: (
            (v, None)
            if isinstance(v, str) and v
            else (None, "empty" if isinstance(v, str) else "wrong_type")
        ),
    )
    cancelled = values.get("event_type") == "cancelled"
    rule("total", not cancelled, _total)
    rule("items_count", False, _count)
    for name in ("currency", "product_category"):
        rule(name, False, lambda v: (v, None) if isinstance(v, str) else (None, "wrong_type"))
    return values, checked.reasons


def parse_object(raw: bytes, parse_int: Callable[[str], Any] = int) -> dict[str, Any] | str:
    """The JSON object of a raw record, or the reason it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid_utf8"
    try:
        document = json.loads(
            text,
            object_pairs_hook=_pairs,
            parse_float=Decimal,
            parse_int=parse_int,
            parse_constant=_reject_constant,
        )
    except _Duplicate:
        # Only when the text is one JSON value once duplicates are allowed: a duplicate key
        # in text that has more after its value is not JSON at all.
        try:
            json.loads(text, parse_float=Decimal, parse_constant=_reject_constant)
        except ValueError:
            return "not_json"
        return "duplicate_key"
    except ValueError:
        return "not_json"
    return document if isinstance(document, dict) else "not_object"


Check = Callable[[dict[str, Any]], tuple[dict[str, Any], list[str]]]


def validate(
    raw: bytes, check: Check = _check, parse_int: Callable[[str], Any] = int
) -> tuple[dict[str, Any] | None, list[str]]:
    """(typed fields, []) for a valid record; (None, reasons) for an invalid one."""
    document = parse_object(raw, parse_int)
    if isinstance(document, str):
        return None, [document]
    values, reasons = check(document)
    return (None, reasons) if reasons else (values, [])


@dataclass
class Expected:
    """What the tables must hold after all of ``records`` were delivered."""

    bronze: Counter = field(default_factory=Counter)  # raw text -> count
    quarantine: Counter = field(default_factory=Counter)  # (raw text, reason) -> count
    silver: dict[str, tuple] = field(default_factory=dict)  # order_id -> row
    gold: dict[tuple, tuple] = field(default_factory=dict)  # (hour, region) -> row


SILVER_COLUMNS = (
    "order_id",
    "customer_id",
    "status",
    "order_ts",
    "region",
    "product_category",
    "total",
    "currency",
    "items_count",
    "last_event_id",
    "last_event_ts",
)
GOLD_COLUMNS = ("hour_start", "region", "orders", "cancelled", "revenue", "avg_order_value")


def checked_records(
    records: Iterable[bytes | None], check: Callable[[bytes], Any] = validate
) -> Iterator[tuple[str | None, dict[str, Any] | None, list[str]]]:
    """Each record's text as bronze holds it, with its typed values or the reasons it is
    invalid; ``None`` is a Kafka message without a value, which is not JSON."""
    for raw in records:
        if raw is None:
            yield None, None, ["not_json"]
        else:
            yield (raw.decode("utf-8", errors="replace"), *check(raw))


def expected_tables(records: list[bytes | None]) -> Expected:
    """``records`` are raw records; ``None`` is a Kafka message without a value (a
    tombstone): a record with no text, which is not JSON."""
    expected = Expected()
    winners: dict[str, dict[str, Any]] = {}
    for text, values, reasons in checked_records(records):
        expected.bronze[text] += 1
        if values is None:
            expected.quarantine[(text, reasons[0])] += 1
            continue
        current = winners.get(values["order_id"])
        key = (values["event_ts"], values["event_id"])
        if current is None or key > (current["event_ts"], current["event_id"]):
            winners[values["order_id"]] = values
    for order_id, v in winners.items():
        expected.silver[order_id] = (
            order_id,
            v["customer_id"],
            v["event_type"],
            v["order_ts"],
            v["region"],
            v["product_category"],
            v["total"],
            v["currency"],
            v["items_count"],
            v["event_id"],
            v["event_ts"],
        )
    expected.gold = gold_of(expected.silver)
    return expected


def gold_of(silver: dict[str, tuple]) -> dict[tuple, tuple]:
    """Gold as the contract derives it from silver's rows (in ``SILVER_COLUMNS`` order)."""
    gold: dict[tuple, tuple] = {}
    hours: dict[tuple, list[tuple]] = {}
    for row in silver.values():
        hour = row[3].replace(minute=0, second=0, microsecond=0)
        hours.setdefault((hour, row[4]), []).append(row)
    for (hour, region), rows in hours.items():
        live = [r for r in rows if r[2] != "cancelled"]
        revenue = sum((r[6] for r in live), Decimal("0.00"))
        average = (
            (revenue / len(live)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
            if live
            else None
        )
        gold[(hour, region)] = (hour, region, len(live), len(rows) - len(live), revenue, average)
    return gold


def naive_utc(row: tuple) -> tuple:
    """A row with aware datetimes turned into naive UTC ones, as PySpark returns them."""
    return tuple(
        v.astimezone(UTC).replace(tzinfo=None) if isinstance(v, datetime) else v for v in row
    )


def comparable(expected: Expected) -> dict[str, Any]:
    """The oracle's tables in the shape of ``Lake.snapshot()`` (bronze without file names)."""
    return {
        "bronze": Counter(expected.bronze),
        "quarantine": Counter(expected.quarantine),
        "silver": {k: naive_utc(v) for k, v in expected.silver.items()},
        "gold": {naive_utc(k): naive_utc(v) for k, v in expected.gold.items()},
    }
