"""Each record rule of the contract, from both sides, checked by Spark and by the oracle."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.transforms import filter_not_blank, with_raw_record
from jobs.validation import with_validation
from lakehouse.registry import get_pipeline
from tests.oracle import split_records, validate

BASE = {
    "event_id": "e1",
    "order_id": "o1",
    "customer_id": "c1",
    "event_type": "placed",
    "order_ts": "2026-11-02T10:15:00Z",
    "event_ts": "2026-11-02T10:16:00Z",
    "region": "eu-west",
    "total": 12.5,
}
DROP = object()

ORDERS = get_pipeline("orders")


def rec(**changes: object) -> bytes:
    record = {k: v for k, v in BASE.items()}
    for key, value in changes.items():
        if value is DROP:
            record.pop(key, None)
        else:
            record[key] = value
    return json.dumps(record).encode()


def raw_field(name: str, text: str) -> bytes:
    """A record with one field written verbatim (numbers json.dumps would normalise)."""
    return rec(**{name: "@@"}).replace(b'"@@"', text.encode())


def raw_total(text: str) -> bytes:
    return raw_field("total", text)


VALID = {
    "plain": rec(),
    "integer ids": rec(event_id=17, order_id=12345678901234567890, customer_id=-5),
    "updated": rec(event_type="updated"),
    "cancelled without total": rec(event_type="cancelled", total=DROP),
    "cancelled with null total": rec(event_type="cancelled", total=None),
    "fraction and offsets": rec(
        order_ts="2026-11-02T10:15:00.5+02:00", event_ts="2026-11-02T10:16:00.123456789-05:30"
    ),
    "string total": rec(total="12.50"),
    "zero total": rec(total=0),
    "max total": rec(total=1000000000000),
    "max total as string": rec(total="1000000000000.00"),
    "exponent total": raw_total("1e3"),
    "round half up": raw_total("12.345"),
    "round down": raw_total("12.344"),
    "half cent": raw_total("0.005"),
    "negative zero string": rec(total="-0"),
    "items zero": rec(items_count=0),
    "items as digits": rec(items_count="12"),
    "items null": rec(items_count=None),
    "optional strings": rec(currency="EUR", product_category="books"),
    "null optional string": rec(currency=None),
    "unknown fields": rec(coupon={"code": "X", "n": [1, 2]}),
    "early and late years": rec(
        order_ts="0001-01-03T00:00:00+01:00", event_ts="9999-12-29T22:59:59.999999-01:00"
    ),
    "padded": b"  " + rec() + b" \t",
}

INVALID = {
    "not json": (b"hello", "not_json"),
    # Wrapped as "[...]" these parse as an empty array: still no JSON value.
    "empty": (b"", "not_json"),
    "blank": (b" \t ", "not_json"),
    "carriage return": (b"\r", "not_json"),
    "truncated": (rec()[:-3], "not_json"),
    "trailing garbage": (rec() + b" xyz", "not_json"),
    "two objects": (rec() + rec(event_id="e2"), "not_json"),
    "two values": (rec() + b", 1", "not_json"),
    "bracket then object": (rec() + b"] {}", "not_json"),
    "NaN": (raw_total("NaN"), "not_json"),
    # JSON text has no byte order mark, single quotes or raw control characters.
    "byte order mark": (b"\xef\xbb\xbf" + rec(), "not_json"),
    "single quotes": (b"{'event_id': 'e1'}", "not_json"),
    "control character in a string": (rec().replace(b"eu-west", b"eu\x01west"), "not_json"),
    "empty object": (b"{}", "missing:event_id"),
    "array": (b"[" + rec() + b"]", "not_object"),
    "number": (b"123", "not_object"),
    "string": (b'"x"', "not_object"),
    "null": (b"null", "not_object"),
    "duplicate key": (rec()[:-1] + b', "region": "us-east"}', "duplicate_key"),
    # A "]" inside the record (an array anywhere) must not hide the duplicate, nor hide
    # text after the value from the check.
    "duplicate key and an array": (
        rec(tags=["sync", 1])[:-1] + b', "region": "us-east"}',
        "duplicate_key",
    ),
    "duplicate key, bracket then value": (
        rec()[:-1] + b', "region": "us-east"}] , [1',
        "not_json",
    ),
    "duplicate key, brace then text": (
        rec()[:-1] + b', "region": "us-east"}} x',
        "not_json",
    ),
    "duplicate key and an array, then text": (
        rec(tags=[1])[:-1] + b', "region": "us-east"}] x',
        "not_json",
    ),
    "invalid utf8": (rec(region="eu-\udcff").replace(b"\\udcff", b"\xff"), "invalid_utf8"),
    "empty event_id": (rec(event_id=""), "empty:event_id"),
    "bool event_id": (rec(event_id=True), "wrong_type:event_id"),
    "decimal event_id": (rec(event_id=1.5), "wrong_type:event_id"),
    "integral decimal order_id": (rec(order_id=1.0), "wrong_type:order_id"),
    "exponent event_id": (raw_field("event_id", "1e3"), "wrong_type:event_id"),
    "object customer_id": (rec(customer_id={"a": 1}), "wrong_type:customer_id"),
    "array customer_id": (rec(customer_id=[1]), "wrong_type:customer_id"),
    "missing order_id": (rec(order_id=DROP), "missing:order_id"),
    "null order_id": (rec(order_id=None), "missing:order_id"),
    "upper event_type": (rec(event_type="PLACED"), "not_allowed:event_type"),
    "unknown event_type": (rec(event_type="shipped"), "not_allowed:event_type"),
    "numeric event_type": (rec(event_type=1), "wrong_type:event_type"),
    "no zone": (rec(order_ts="2026-11-02T10:15:00"), "no_zone:order_ts"),
    "space separator": (rec(order_ts="2026-11-02 10:15:00Z"), "bad_format:order_ts"),
    "no seconds": (rec(event_ts="2026-11-02T10:15Z"), "bad_format:event_ts"),
    "date only": (rec(event_ts="2026-11-02"), "bad_format:event_ts"),
    "compact offset": (rec(event_ts="2026-11-02T10:15:00+0200"), "bad_format:event_ts"),
    "epoch number": (rec(order_ts=1700000000), "wrong_type:order_ts"),
    "february 30": (rec(order_ts="2026-02-30T10:00:00Z"), "impossible_date:order_ts"),
    "hour 24": (rec(order_ts="2026-11-02T24:00:00Z"), "impossible_date:order_ts"),
    "offset 25h": (rec(event_ts="2026-11-02T10:00:00+25:00"), "impossible_date:event_ts"),
    "year 10000 in UTC": (rec(event_ts="9999-12-31T23:30:00-01:00"), "impossible_date:event_ts"),
    "year 0 in UTC": (rec(order_ts="0001-01-01T00:30:00+01:00"), "impossible_date:order_ts"),
    "empty region": (rec(region=""), "empty:region"),
    "numeric region": (rec(region=5), "wrong_type:region"),
    "missing region": (rec(region=DROP), "missing:region"),
    "placed without total": (rec(total=DROP), "missing:total"),
    "updated with null total": (rec(event_type="updated", total=None), "missing:total"),
    "word total": (rec(total="abc"), "wrong_type:total"),
    "exponent string total": (rec(total="1e3"), "wrong_type:total"),
    "comma total": (rec(total="12,50"), "wrong_type:total"),
    "padded string total": (rec(total=" 12"), "wrong_type:total"),
    "bool total": (rec(total=True), "wrong_type:total"),
    "negative total": (raw_total("-0.01"), "out_of_range:total"),
    "too large total": (raw_total("1000000000000.01"), "out_of_range:total"),
    "cancelled bad total": (rec(event_type="cancelled", total="abc"), "wrong_type:total"),
    "negative items": (rec(items_count=-1), "out_of_range:items_count"),
    "fractional items": (rec(items_count=2.5), "wrong_type:items_count"),
    "integral decimal items": (raw_field("items_count", "2.0"), "wrong_type:items_count"),
    "huge items": (raw_field("items_count", "99999999999999999999"), "out_of_range:items_count"),
    "decimal string items": (rec(items_count="2.0"), "wrong_type:items_count"),
    "signed string items": (rec(items_count="-1"), "wrong_type:items_count"),
    "bool items": (rec(items_count=True), "wrong_type:items_count"),
    "numeric currency": (rec(currency=5), "wrong_type:currency"),
}


@pytest.fixture(scope="module")
def verdicts(spark: SparkSession) -> dict[bytes, tuple[bool, str | None, dict]]:
    lines = list(VALID.values()) + [raw for raw, _ in INVALID.values()]
    lines_df = spark.createDataFrame([(bytearray(line),) for line in lines], "b binary")
    records_df = with_raw_record(lines_df.select(F.col("b").cast("string").alias("value")))
    validated = with_validation(records_df, ORDERS.record).collect()
    assert len(validated) == len(lines)
    by_raw = {}
    for line, row in zip(lines, validated, strict=True):
        fields = {f.name: row[f.name] for f in ORDERS.record.fields}
        by_raw[line] = (row["is_valid"], row["reason"], fields)
    return by_raw


@pytest.mark.parametrize("name", list(VALID))
def test_valid_records_pass(name: str, verdicts: dict) -> None:
    raw = VALID[name]
    assert validate(raw)[1] == [], f"oracle rejects {name}"
    is_valid, reason, _ = verdicts[raw]
    assert (is_valid, reason) == (True, None)


@pytest.mark.parametrize("name", list(INVALID))
def test_invalid_records_name_their_rule(name: str, verdicts: dict) -> None:
    raw, rule = INVALID[name]
    assert validate(raw)[1][:1] == [rule], f"oracle disagrees on {name}"
    is_valid, reason, fields = verdicts[raw]
    assert (is_valid, reason) == (False, rule)
    assert all(value is None for value in fields.values()), "invalid records carry no values"


@pytest.mark.parametrize(
    ("name", "field", "value"),
    [
        ("integer ids", "event_id", "17"),
        ("integer ids", "order_id", "12345678901234567890"),
        ("integer ids", "customer_id", "-5"),
        ("string total", "total", Decimal("12.50")),
        ("max total", "total", Decimal("1000000000000.00")),
        ("exponent total", "total", Decimal("1000.00")),
        ("round half up", "total", Decimal("12.35")),
        ("round down", "total", Decimal("12.34")),
        ("half cent", "total", Decimal("0.01")),
        ("negative zero string", "total", Decimal("0.00")),
        ("cancelled without total", "total", None),
        ("items as digits", "items_count", 12),
        ("items null", "items_count", None),
        ("fraction and offsets", "order_ts", datetime(2026, 11, 2, 8, 15, 0, 500000)),
        ("fraction and offsets", "event_ts", datetime(2026, 11, 2, 15, 46, 0, 123456)),
    ],
)
def test_values_are_kept_as_the_contract_says(
    name: str, field: str, value: object, verdicts: dict
) -> None:
    _, _, fields = verdicts[VALID[name]]
    assert fields[field] == value
    oracle_value = validate(VALID[name])[0][field]  # type: ignore[index]
    if isinstance(oracle_value, datetime):
        oracle_value = oracle_value.astimezone(UTC).replace(tzinfo=None)
    assert oracle_value == value


def test_the_quarantine_gets_the_event_id_as_far_as_it_can_be_read(spark: SparkSession) -> None:
    lines = [
        rec(event_id=17, region=""),  # an integer: its decimal text
        rec(event_id="e9", total="abc"),
        raw_field("event_id", "1.50"),  # another scalar: its JSON text
        rec(event_id={"a": 1}),
        rec()[:-1] + b', "region": "x"}',  # not read: a duplicate key
        b"[1]",
    ]
    lines_df = spark.createDataFrame([(bytearray(line),) for line in lines], "b binary")
    records_df = with_raw_record(lines_df.select(F.col("b").cast("string").alias("value")))
    rows = with_validation(records_df, ORDERS.record).collect()
    assert [r["raw_event_id"] for r in rows] == ["17", "e9", "1.50", None, None, None]
    assert [r["is_valid"] for r in rows] == [False] * len(lines)


def test_a_kafka_message_without_a_value_is_not_json(spark: SparkSession) -> None:
    records_df = spark.createDataFrame([(None, None)], "raw_value string, raw_bytes binary")
    row = with_validation(records_df, ORDERS.record).first()
    assert row is not None
    assert (row["is_valid"], row["reasons"], row["raw_event_id"]) == (False, ["not_json"], None)


def test_line_endings_and_blank_lines(spark: SparkSession) -> None:
    content = rec() + b"\r\n\r\n   \n" + rec(event_id="e2") + b"\n\t\n" + rec(event_id="e3")
    lines_df = spark.createDataFrame([(bytearray(x),) for x in content.split(b"\n")], "b binary")
    records_df = filter_not_blank(
        with_raw_record(lines_df.select(F.col("b").cast("string").alias("value")))
    )
    got = sorted(r["raw_value"] for r in records_df.collect())
    want = sorted(r.decode() for r in split_records(content))
    assert got == want
    assert len(got) == 3 and not any(v.endswith("\r") for v in got)


def test_lone_carriage_return_is_data_not_a_line_break(spark: SparkSession) -> None:
    content = rec() + b"\r" + rec(event_id="e2")
    lines_df = spark.createDataFrame([(bytearray(content),)], "b binary")
    records_df = with_raw_record(lines_df.select(F.col("b").cast("string").alias("value")))
    validated = with_validation(records_df, ORDERS.record).collect()
    assert [(r["is_valid"], r["reason"]) for r in validated] == [(False, "not_json")]
    assert validate(content)[1] == ["not_json"]


def test_invalid_utf8_keeps_its_bytes(spark: SparkSession) -> None:
    raw = b'{"region": "eu-\xff"}'
    lines_df = spark.createDataFrame([(bytearray(raw + b"\r"),)], "b binary")
    row = with_raw_record(lines_df.select(F.col("b").cast("string").alias("value"))).first()
    assert row is not None
    assert bytes(row["raw_bytes"]) == raw
    assert row["raw_value"] == '{"region": "eu-\ufffd"}'
