"""Compile a ``RecordSpec`` into Spark column expressions: typed values and broken rules.

Every raw record is parsed once into a VARIANT (``try_parse_json``), so the JSON type of each
field is known exactly: ``"12"`` is a string, ``12`` an integer, ``12.5`` a decimal and
``{"a": 1}`` an object, which ``from_json`` with string fields cannot tell apart.

A record is valid when it breaks no rule. Each broken rule is named ``<rule>:<field>``
(``missing:total``, ``wrong_type:order_id``, ``no_zone:event_ts``...) or, for the whole
record, ``invalid_utf8``, ``not_json``, ``duplicate_key`` or ``not_object``. ``reasons``
lists them all in field order; ``reason`` is the first.

The work is staged in projections (parse, extract each field once, compute the parts a
field's checks share, check each field, combine) because Spark does not share a subexpression
that sits inside a ``CASE WHEN`` branch: written as one projection, the parse would run once
per rule that looks at the record, and a timestamp's pattern and cast once per rule that
reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakehouse.specs import FieldSpec, RecordSpec

# Java regular expressions: \z is the very end (a "$" would also match before a final newline).
_TS_WITH_ZONE = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})\z"
)
_TS_WITHOUT_ZONE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?\z"
_DECIMAL_NOTATION = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)\z"
_DIGITS = r"^[0-9]+\z"
_INTEGER = r"^-?[0-9]+\z"
# Wide enough for any value we keep, exact to 10 places before the final rounding.
_WIDE_DECIMAL = "decimal(38,10)"
# Years 1..9999 in UTC: 0001-01-01T00:00:00Z inclusive to 10000-01-01T00:00:00Z exclusive,
# in microseconds since the epoch.
_FIRST_MICROS, _END_MICROS = -62_135_596_800_000_000, 253_402_300_800_000_000
# Kinds whose value is a number: the text of a field is read only when it is a JSON string.
_NUMBER_KINDS = ("decimal", "count", "integer")

VALID_COL = "is_valid"
REASONS_COL = "reasons"
REASON_COL = "reason"

_WRAPPED, _DOC, _REASONS = "__wrapped", "__doc", "__reasons"


def _sub(name: str) -> str:
    return f"__sub_{name}"


def _type(name: str) -> str:
    return f"__type_{name}"


def _text(name: str) -> str:
    return f"__text_{name}"


def _value(name: str) -> str:
    return f"__value_{name}"


def _bad(name: str) -> str:
    return f"__bad_{name}"


def _part(name: str, part: str) -> str:
    return f"__part_{name}_{part}"


def _is_decimal_type(kind_type: Column) -> Column:
    return kind_type.startswith("DECIMAL(")


def _is_number_type(kind_type: Column) -> Column:
    return kind_type.isin("BIGINT", "DOUBLE", "FLOAT") | _is_decimal_type(kind_type)


def _rule(rule: str, field: str) -> Column:
    return F.lit(f"{rule}:{field}")


def _in_array(raw: Column) -> Column:
    """``raw`` as the only element of ``[...]``: text after the value breaks the array or adds
    a second element (unless it starts by closing the array: see ``_in_object``)."""
    return F.concat(F.lit("["), raw, F.lit("]"))


def _in_object(raw: Column) -> Column:
    """``raw`` as the value of ``{"v": ...}``: no ``]`` right after the value survives it."""
    return F.concat(F.lit('{"v":'), raw, F.lit("}"))


def _single_json(raw: Column, wrapped: Column) -> Column:
    """True when ``raw`` is exactly one JSON value.

    Spark's JSON parsers stop after the first value and ignore what follows, so
    ``{"a":1} junk`` or two objects on one line would pass. Parsed inside ``[...]``
    (``wrapped``), anything after the value breaks the array or adds a second element; the
    rare record with a ``]`` is also parsed inside ``{"v": ...}``, which no trailing ``]``
    survives.
    """
    return (
        wrapped.isNotNull()
        & F.try_variant_get(wrapped, "$[1]", "variant").isNull()
        & (~raw.contains("]") | F.try_parse_json(_in_object(raw)).isNotNull())
    )


def _only_duplicate_keys(raw: Column) -> Column:
    """For a refused record: one JSON value that a duplicate-tolerant parser reads, so the
    duplicate keys were the problem (evaluated for refused records only).

    ``get_json_object`` tolerates duplicate keys and reads a container to its end, but not
    past it. Inside ``[...]`` anything after the value breaks the array or adds a second
    element, unless it starts by closing the array early (``] ...``); a record with a ``]``
    is also read inside ``{"v": ...}``, where a ``]`` right after the value is an error. Text
    after the value escapes neither wrapping: it would have to start with ``]`` for one and
    with ``}`` for the other.
    """
    wrapped = _in_array(raw)
    return (
        F.get_json_object(wrapped, "$[0]").isNotNull()
        & F.get_json_object(wrapped, "$[1]").isNull()
        & (~raw.contains("]") | F.get_json_object(_in_object(raw), "$.v").isNotNull())
    )


def _is_json_integer(kind_type: Column, raw: Column, name: str) -> Column:
    """A JSON integer literal. VARIANT drops trailing zeros (``1.0`` becomes DECIMAL(1,0)) and
    stores integers beyond BIGINT as DECIMAL(p,0), so those few are checked on the text."""
    literal = F.get_json_object(raw, f"$.{name}")
    return (
        F.when(kind_type == F.lit("BIGINT"), F.lit(True))
        .when(_is_decimal_type(kind_type) & kind_type.endswith(",0)"), literal.rlike(_INTEGER))
        .otherwise(F.lit(False))
    )


def _parts(spec: FieldSpec, raw: Column) -> dict[str, Column]:
    """The parts of a present field that several of its rules read (its pattern, its cast),
    computed once in their own projection: see the module's docstring."""
    name = spec.name
    sub, kind_type, text = F.col(_sub(name)), F.col(_type(name)), F.col(_text(name))
    is_string = kind_type == F.lit("STRING")

    if spec.kind in ("id", "text", "string"):
        shaped = F.lit(True) if spec.pattern is None else text.rlike(f"^(?:{spec.pattern})\\z")
        ok = is_string & (F.length(text) > 0) if spec.kind != "string" else is_string
        ok = ok & shaped
        if spec.kind == "id":
            ok = ok | _is_json_integer(kind_type, raw, name)
        return {"ok": ok}
    if spec.kind == "enum":
        return {"ok": is_string & text.isin(*spec.allowed)}
    if spec.kind == "timestamp":
        # The pattern fixes the shape; the cast rejects impossible dates and times.
        return {"shaped": is_string & text.rlike(_TS_WITH_ZONE), "cast": text.try_cast("timestamp")}
    if spec.kind == "decimal":
        is_number = _is_number_type(kind_type)
        is_notation = is_string & text.rlike(_DECIMAL_NOTATION)
        number = F.when(is_number, F.try_variant_get(sub, "$", _WIDE_DECIMAL)).when(
            is_notation, text.try_cast(_WIDE_DECIMAL)
        )
        return {"number": number, "typed": is_number | is_notation}
    if spec.kind == "integer":
        is_integer = _is_json_integer(kind_type, raw, name)
        return {
            "number": F.when(is_integer, F.try_variant_get(sub, "$", "bigint")),
            "typed": is_integer,
        }
    if spec.kind == "count":
        is_integer = _is_json_integer(kind_type, raw, name)
        is_digits = is_string & text.rlike(_DIGITS)
        number = F.when(kind_type == F.lit("BIGINT"), F.try_variant_get(sub, "$", "bigint")).when(
            is_digits, text.try_cast("bigint")
        )
        return {"number": number, "typed": is_integer | is_digits}
    raise ValueError(f"unknown field kind {spec.kind!r}")


def _check(spec: FieldSpec) -> tuple[Column, Column]:
    """(typed value, broken rule) of a present field, from its extracted columns and parts."""
    name = spec.name
    text, is_string = F.col(_text(name)), F.col(_type(name)) == F.lit("STRING")

    def part(label: str) -> Column:
        return F.col(_part(name, label))

    if spec.kind in ("id", "text", "string"):
        violation = F.when(part("ok"), F.lit(None))
        if spec.kind != "string":
            violation = violation.when(is_string & (F.length(text) == 0), _rule("empty", name))
        violation = violation.when(is_string, _rule("bad_format", name))
        return F.when(part("ok"), text), violation.otherwise(_rule("wrong_type", name))

    if spec.kind == "enum":
        violation = (
            F.when(part("ok"), F.lit(None))
            .when(is_string, _rule("not_allowed", name))
            .otherwise(_rule("wrong_type", name))
        )
        return F.when(part("ok"), text), violation

    if spec.kind == "timestamp":
        # A time outside years 1..9999 once moved to UTC is impossible too.
        cast = part("cast")
        good = part("shaped") & (cast >= F.timestamp_micros(F.lit(_FIRST_MICROS)))
        good = good & (cast < F.timestamp_micros(F.lit(_END_MICROS)))
        violation = (
            F.when(good, F.lit(None))
            .when(~is_string, _rule("wrong_type", name))
            .when(text.rlike(_TS_WITHOUT_ZONE), _rule("no_zone", name))
            .when(~part("shaped"), _rule("bad_format", name))
            .otherwise(_rule("impossible_date", name))
        )
        return F.when(good, cast), violation

    number, typed = part("number"), part("typed")
    if spec.kind == "decimal":
        in_range = number.isNotNull()
        if spec.minimum is not None:
            in_range = in_range & (number >= F.lit(spec.minimum).cast(_WIDE_DECIMAL))
        if spec.maximum is not None:
            in_range = in_range & (number <= F.lit(spec.maximum).cast(_WIDE_DECIMAL))
        violation = F.when(~typed, _rule("wrong_type", name)).when(
            ~in_range, _rule("out_of_range", name)
        )
        # Casting to the narrower scale rounds half up.
        value = F.when(in_range, number.cast(f"decimal({spec.precision},{spec.scale})"))
        return value, violation

    in_range = number.isNotNull() if spec.kind == "integer" else number.isNotNull() & (number >= 0)
    violation = F.when(~typed, _rule("wrong_type", name)).when(
        ~in_range, _rule("out_of_range", name)
    )
    return F.when(in_range, number), violation


def _text_of(spec: FieldSpec) -> Column:
    """A present field's value as text; for a number kind only when it is a JSON string (the
    only case its rules read the text), so that numbers are not turned into strings."""
    text = F.try_variant_get(F.col(_sub(spec.name)), "$", "string")
    if spec.kind in _NUMBER_KINDS:
        return F.when(F.col(_type(spec.name)) == F.lit("STRING"), text)
    return text


def _not_object(doc: Column) -> Column:
    """The parsed record is not a JSON object: only an object casts to a struct (by field
    name; the one asked for need not exist), which is cheaper than naming the record's type."""
    return F.try_variant_get(doc, "$", "struct<`__object`: variant>").isNull()


def _listed(violation: Column) -> Column:
    """A broken rule as a list of zero or one: ``concat`` of these keeps the field order in
    generated code, where ``array_compact`` (a lambda) would evaluate every rule interpreted."""
    return F.when(violation.isNotNull(), F.array(violation)).otherwise(
        F.array().cast("array<string>")
    )


def _holds(other: str, values: tuple[str, ...]) -> Column:
    """Field ``other`` is valid and holds one of ``values`` (for ``*_when`` conditions)."""
    return F.coalesce(F.col(_value(other)).isin(*values), F.lit(False))


@dataclass(frozen=True)
class _Plan:
    """The columns ``with_validation`` adds, stage by stage: each stage is one projection of
    everything before it and these columns; ``outputs`` follow the input's own columns."""

    stages: tuple[tuple[Column, ...], ...]
    outputs: tuple[Column, ...]


# Built once per record and Spark JVM: building the columns takes about 2,000 calls into the
# JVM (0.3 to 0.6 s in a warm driver, for every micro-batch and re-derivation), and unresolved
# columns do not depend on the DataFrame they are applied to.
@dataclass
class _PlanCache:
    """The plans of one JVM, kept with the JVM itself (not its id, which a later gateway
    object could reuse): columns of an earlier JVM are of no use."""

    jvm: object = None
    plans: dict[RecordSpec, _Plan] = field(default_factory=dict)


_cache = _PlanCache()


def _validation_plan(record: RecordSpec) -> _Plan:
    from pyspark import SparkContext

    if _cache.jvm is not SparkContext._jvm:
        _cache.jvm, _cache.plans = SparkContext._jvm, {}
    if record not in _cache.plans:
        _cache.plans[record] = _build_plan(record)
    return _cache.plans[record]


def _build_plan(record: RecordSpec) -> _Plan:
    raw, raw_bytes = F.col("raw_value"), F.col("raw_bytes")
    names = [spec.name for spec in record.fields]
    stages: list[tuple[Column, ...]] = []

    # 1. Parse once; keep the record only if it is exactly one JSON value.
    stages.append((F.try_parse_json(_in_array(raw)).alias(_WRAPPED),))
    stages.append(
        (
            F.when(
                _single_json(raw, F.col(_WRAPPED)),
                F.try_variant_get(F.col(_WRAPPED), "$[0]", "variant"),
            ).alias(_DOC),
        )
    )
    # 2. Extract each field once: its VARIANT, JSON type (null when absent, VOID for null), text.
    stages.append(
        tuple(F.try_variant_get(F.col(_DOC), f"$.{n}", "variant").alias(_sub(n)) for n in names)
    )
    stages.append(tuple(F.schema_of_variant(F.col(_sub(n))).alias(_type(n)) for n in names))
    stages.append(tuple(_text_of(spec).alias(_text(spec.name)) for spec in record.fields))
    # 3. Compute the parts the rules share, then check each field.
    parts = {spec.name: _parts(spec, raw) for spec in record.fields}
    stages.append(tuple(c.alias(_part(n, label)) for n in names for label, c in parts[n].items()))
    checks = {spec.name: _check(spec) for spec in record.fields}
    stages.append(
        (
            *[checks[n][0].alias(_value(n)) for n in names],
            *[checks[n][1].alias(_bad(n)) for n in names],
        )
    )
    # 4. Combine: a record-level problem, else every field's broken rule, in field order.
    record_violation = (
        F.when(raw_bytes.isNotNull(), F.lit("invalid_utf8"))
        .when(F.col(_DOC).isNull() & _only_duplicate_keys(raw), F.lit("duplicate_key"))
        .when(F.col(_DOC).isNull(), F.lit("not_json"))
        .when(_not_object(F.col(_DOC)), F.lit("not_object"))
    )
    violations = []
    for spec in record.fields:
        present = F.col(_type(spec.name)).isNotNull() & (F.col(_type(spec.name)) != F.lit("VOID"))
        required: Column = F.lit(spec.required)
        if spec.optional_when is not None:
            other, values = spec.optional_when
            required = ~F.coalesce(F.col(_value(other)).isin(*values), F.lit(False))
        violation = F.when(present, F.col(_bad(spec.name))).when(
            required, _rule("missing", spec.name)
        )
        if spec.ignored_when is not None:
            other, values = spec.ignored_when
            violation = F.when(~_holds(other, values), violation)
        violations.append(violation)
    reasons = F.when(record_violation.isNotNull(), F.array(record_violation)).otherwise(
        F.concat(*[_listed(violation) for violation in violations])
    )
    stages.append((reasons.alias(_REASONS),))
    valid = F.size(F.col(_REASONS)) == 0
    kept = {
        spec.name: F.when(~_holds(*spec.ignored_when), F.col(_value(spec.name)))
        if spec.ignored_when
        else F.col(_value(spec.name))
        for spec in record.fields
    }
    outputs = (
        *[F.when(valid, kept[n]).alias(n) for n in names],
        F.col(_REASONS).alias(REASONS_COL),
        F.get(F.col(_REASONS), 0).alias(REASON_COL),
        valid.alias(VALID_COL),
        F.when(F.col(_DOC).isNotNull(), F.col(_text(record.event_id))).alias("raw_event_id"),
    )
    return _Plan(tuple(stages), outputs)


def with_validation(bronze_df: DataFrame, record: RecordSpec) -> DataFrame:
    """Add typed field columns, ``reasons``, ``reason`` and ``is_valid`` to bronze rows."""
    plan = _validation_plan(record)
    df = bronze_df
    for stage in plan.stages:
        df = df.select("*", *stage)
    # The input's own columns, but none named like the temporary ones.
    own = [c for c in bronze_df.columns if not c.startswith("__")]
    return df.select(*own, *plan.outputs)


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
