"""Validate raw records against their ``RecordSpec``: typed values and broken rules.

The rules are checked on the JVM by the project's record validator
(``jvm/src/lakehouse/validation/RecordValidator.java``), a Spark function compiled with the
project (``lakehouse.jars``): one pass of a streaming JSON parser per record, which sees each
field's JSON type exactly, so ``"12"`` is a string, ``12`` an integer, ``12.5`` a decimal and
``{"a": 1}`` an object, which ``from_json`` with string fields cannot tell apart. The
declaration is handed to it as JSON; the function is registered once per declaration and
Spark session.

A record is valid when it breaks no rule. Each broken rule is named ``<rule>:<field>``
(``missing:total``, ``wrong_type:order_id``, ``no_zone:event_ts``...) or, for the whole
record, ``invalid_utf8``, ``not_json``, ``duplicate_key`` or ``not_object``. ``reasons``
lists them all in field order; ``reason`` is the first. ``raw_event_id`` is the event id as
far as it can be read, valid or not (a string, an integer's decimal text, another scalar's
JSON text), for the quarantine.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.specs import RecordSpec

VALID_COL = "is_valid"
REASONS_COL = "reasons"
REASON_COL = "reason"
_VERDICT = "__verdict"
_VALIDATOR = "lakehouse.validation.RecordValidator"


def spec_json(record: RecordSpec) -> str:
    """The declaration as the JVM validator reads it."""
    return json.dumps(
        {
            "event_id": record.event_id,
            "fields": [
                {
                    "name": spec.name,
                    "kind": spec.kind,
                    "required": spec.required,
                    "optional_when": spec.optional_when,
                    "ignored_when": spec.ignored_when,
                    "allowed": list(spec.allowed),
                    "pattern": spec.pattern,
                    "minimum": spec.minimum,
                    "maximum": spec.maximum,
                    "precision": spec.precision,
                    "scale": spec.scale,
                    "sql_type": spec.sql_type,
                }
                for spec in record.fields
            ],
        },
        sort_keys=True,
    )


@dataclass
class _Registered:
    """The validator functions registered in one Spark session (a new JVM, or a new session
    in it, starts with none)."""

    session: object = None
    names: dict[RecordSpec, str] = field(default_factory=dict)


_registered = _Registered()


def _validator(spark: SparkSession, record: RecordSpec) -> str:
    """The name of the session's function that validates ``record`` (registered once)."""
    jsession = spark._jsparkSession
    if _registered.session is not jsession:
        _registered.session, _registered.names = jsession, {}
    if record not in _registered.names:
        text = spec_json(record)
        name = f"lakehouse_validate_{hashlib.sha256(text.encode()).hexdigest()[:12]}"
        # The name is the declaration's: one that exists already (registered through another
        # Python handle of the same JVM session, a shared driver's earlier run) is the same.
        if not spark.catalog.functionExists(name):
            jvm = spark.sparkContext._jvm
            assert jvm is not None
            jvm.lakehouse.validation.RecordValidator.register(jsession, name, text)
        _registered.names[record] = name
    return _registered.names[record]


def with_validation(bronze_df: DataFrame, record: RecordSpec) -> DataFrame:
    """Add typed field columns, ``reasons``, ``reason``, ``is_valid`` and ``raw_event_id`` to
    bronze rows (``raw_value``, and ``raw_bytes`` for a record that was not UTF-8)."""
    name = _validator(bronze_df.sparkSession, record)
    verdict: Column = F.call_function(
        name, F.col("raw_value").cast("binary"), F.col("raw_bytes").isNotNull()
    )
    # The function once per record, in a projection of its own; the columns are read from it.
    checked_df = bronze_df.select("*", verdict.alias(_VERDICT))
    own = [c for c in bronze_df.columns if not c.startswith("__")]
    outputs = [*record.names, REASONS_COL, REASON_COL, VALID_COL, "raw_event_id"]
    return checked_df.select(*own, *[F.col(f"{_VERDICT}.{c}").alias(c) for c in outputs])


KEY_HINT = "_key_hint"
# Bronze's own copies of the hints, taken at ingest (null in rows older than the columns).
STORED_TIME_HINT, STORED_KEY_HINT = "time_hint", "key_hint"


def time_hint(record: RecordSpec) -> str:
    """The column with a record's event time as far as it can be read (kept in quarantine)."""
    return f"{record.time}_hint"


def _parsed_hints(raw: Column, record: RecordSpec) -> tuple[Column, Column]:
    hints = F.from_json(raw, f"`{record.time}` STRING, `{record.key}` STRING")
    return hints[record.time].try_cast("timestamp"), hints[record.key]


def with_stored_hints(records_df: DataFrame, record: RecordSpec) -> DataFrame:
    """Bronze's ``time_hint`` and ``key_hint`` for new records (one small parse at ingest)."""
    time, key = _parsed_hints(F.col("raw_value"), record)
    return records_df.withColumn(STORED_TIME_HINT, time).withColumn(STORED_KEY_HINT, key)


def with_hints(records_df: DataFrame, record: RecordSpec) -> DataFrame:
    """Add ``<time>_hint`` and ``_key_hint``: the record's time and key as far as they can be
    read from any record, valid or not (null when they cannot).

    Bronze keeps both from ingest (``time_hint``, ``key_hint``); only rows older than those
    columns (both null) are parsed again, inside the branch that needs it, so that a
    reprocess reads two small columns instead of parsing every record. For a valid record
    the hints equal its validated time and key.
    """
    time, key = _parsed_hints(F.col("raw_value"), record)
    if {STORED_TIME_HINT, STORED_KEY_HINT} <= set(records_df.columns):
        legacy = F.col(STORED_TIME_HINT).isNull() & F.col(STORED_KEY_HINT).isNull()
        time = F.when(legacy, time).otherwise(F.col(STORED_TIME_HINT))
        key = F.when(legacy, key).otherwise(F.col(STORED_KEY_HINT))
    return records_df.select(
        *records_df.columns, time.alias(time_hint(record)), key.alias(KEY_HINT)
    )
