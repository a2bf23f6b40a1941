"""Declarations: a pipeline is one frozen dataclass, checked when it is created.

A pipeline declares where its raw records come from (``Source``), the rules a record must
keep (``RecordSpec`` of ``FieldSpec``), what else it expects of them (``Expectation``: warn,
drop or fail), how valid records become silver (one of the silver kinds: ``LatestState``,
``History``, ``AppendOnly``) and what gold it computes (``Gold``, from its own or other
pipelines' silver). Everything else is derived from that: the tables and their schemas, the
streams (one per layer, each with its checkpoint), the layers its DAG runs, the settings it
reads (``LAKEHOUSE_<NAME>_*``). The jobs in ``jobs/`` compile a declaration into Spark code;
the DAGs read it to wire tasks and assets. A declaration that cannot work (an unknown column
in a rule, a gold key that is not in its output, ...) is refused here, naming the field.

Declarations live one per file in the pipelines folder (``lakehouse.registry``).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from lakehouse.errors import ConfigurationError, DeclarationError

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*/[a-z][a-z0-9_]*$")
_IDENT_RE = re.compile(r"^[a-z][a-z0-9_]*$")
# Kafka's own rule for topic names.
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._\-]{1,249}$")

# Table properties that would quietly break exactly-once. The transaction identifiers
# that make replayed micro-batches no-ops must outlive the longest pause of any stream.
FORBIDDEN_TABLE_PROPERTIES = frozenset({"delta.setTransactionRetentionDuration"})
# Silver tables keep a change data feed: a gold (of any pipeline) recomputes exactly what
# their changes touch.
CHANGE_FEED = {"delta.enableChangeDataFeed": "true"}


class Layer(StrEnum):
    """The layers of a pipeline, in the order data flows through them. Each is one streaming
    query, one checkpoint, one job (``jobs/<layer>.py``) and one Airflow task."""

    BRONZE = "bronze"
    SILVER = "silver"
    GOLD = "gold"

    @property
    def job(self) -> str:
        """The Spark application under the project that runs this layer."""
        return f"jobs/{self.value}.py"


FieldKind = Literal["id", "enum", "timestamp", "text", "string", "decimal", "count", "integer"]
ExpectationAction = Literal["warn", "drop", "fail"]


def schema_fields(schema_ddl: str) -> list[tuple[str, str]]:
    """``(name, type)`` pairs of a DDL schema such as ``a STRING, b DECIMAL(18,2) NOT NULL``."""
    depth, parts, current = 0, [], ""
    for char in schema_ddl:
        depth += (char in "(<") - (char in ")>")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    fields = []
    for part in filter(str.strip, parts):
        name, type_ddl = part.strip().split(None, 1)
        type_ddl = re.sub(r"\s+NOT\s+NULL\s*$", "", type_ddl, flags=re.IGNORECASE)
        fields.append((name.strip("`"), type_ddl.strip()))
    return fields


def sql_columns(expression: str) -> list[str]:
    """The column names a SQL expression refers to (function names and literals left out)."""
    import sqlparse
    from sqlparse import tokens

    flat = [t for t in sqlparse.parse(expression)[0].flatten() if not t.is_whitespace]
    names = []
    for i, token in enumerate(flat):
        if token.ttype is tokens.Name:
            called = i + 1 < len(flat) and flat[i + 1].value == "("
            if not called:
                names.append(token.value.strip("`"))
    return names


def sql_placeholders(sql: str) -> set[str]:
    """The ``{name}`` placeholders of a SQL text (inputs of ``spark.sql(sql, **frames)``)."""
    return {name for _, name, _, _ in string.Formatter().parse(sql) if name}


# -- tables -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableSpec:
    """A Delta table under the lakehouse root.

    Parameters
    ----------
    name
        ``<layer>/<table>``; also its path under the root.
    schema
        Column definitions in Spark DDL; tables are created from it, never inferred.
    partition_by, zorder_by
        Physical layout; ``zorder_by`` is used by OPTIMIZE.
    properties
        Delta table properties set on creation.
    allow_full_refresh
        Whether ``full_refresh`` may rebuild this table from its upstream.
    """

    name: str
    schema: str
    description: str = ""
    partition_by: tuple[str, ...] = ()
    zorder_by: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    allow_full_refresh: bool = True

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise DeclarationError(f"table name {self.name!r} must look like 'layer/table'.")
        columns = set(self.columns)
        unknown = [c for c in (*self.partition_by, *self.zorder_by) if c not in columns]
        if unknown:
            raise DeclarationError(f"{self.name}: layout columns {unknown} are not in the schema.")
        if set(self.partition_by) & set(self.zorder_by):
            raise DeclarationError(f"{self.name}: cannot Z-order by a partition column.")
        forbidden = FORBIDDEN_TABLE_PROPERTIES & set(self.properties)
        if forbidden:
            raise DeclarationError(
                f"{self.name}: {sorted(forbidden)} would expire the transaction ids that make "
                "replayed micro-batches idempotent; leave it unset."
            )

    @property
    def layer(self) -> str:
        return self.name.split("/")[0]

    @property
    def columns(self) -> list[str]:
        return [name for name, _ in schema_fields(self.schema)]

    @property
    def checkpoint(self) -> str:
        """Checkpoint of the stream that writes this table, relative to the root."""
        return f"_checkpoints/{self.name}"


# Columns every bronze table has, whatever the source: the record's text exactly as
# delivered, and where it came from. A line that is not valid UTF-8 keeps its bytes.
# time_hint and key_hint are the record's time and key as far as they can be read (null when
# they cannot): a reprocess finds the records of its window and their keys from these two
# small columns, without parsing every record again. replayed_at: when a Kafka replay added
# the row again (silver then quarantines it only if it is not already there).
BRONZE_SCHEMA = (
    "raw_value STRING, raw_bytes BINARY, source STRING, source_file STRING, "
    "source_file_modified_at TIMESTAMP, kafka_topic STRING, kafka_partition INT, "
    "kafka_offset BIGINT, kafka_timestamp TIMESTAMP, kafka_key STRING, "
    "ingested_at TIMESTAMP, ingest_date DATE, time_hint TIMESTAMP, key_hint STRING, "
    "replayed_at TIMESTAMP"
)
# Bronze keeps file statistics of the columns a query filters on (the hints a reprocess reads,
# the Kafka lineage a replay matches, the times): not of the record's text or bytes, whose
# minimum and maximum no query can use and which cost a third of a bronze write to collect.
BRONZE_STATS_COLUMNS = (
    "source",
    "source_file_modified_at",
    "kafka_topic",
    "kafka_partition",
    "kafka_offset",
    "kafka_timestamp",
    "ingested_at",
    "time_hint",
    "key_hint",
    "replayed_at",
)


def quarantine_schema(time_field: str) -> str:
    """Invalid records with the rules they broke. ``<time>_hint``: the record's event time as
    far as it can be read (null if it cannot), so that a reprocess of a window replaces
    exactly the quarantine rows of that window."""
    return (
        "raw_value STRING, raw_bytes BINARY, reason STRING, reasons ARRAY<STRING>, "
        "event_id STRING, source STRING, source_file STRING, kafka_topic STRING, "
        "kafka_partition INT, kafka_offset BIGINT, ingested_at TIMESTAMP, "
        f"quarantined_at TIMESTAMP, {time_field}_hint TIMESTAMP"
    )


RUN_LOG = TableSpec(
    name="ops/run_log",
    description="One row per layer run and per maintenance action: what ran and what it did.",
    schema=(
        "pipeline STRING, layer STRING, action STRING, run_id STRING, query_id STRING, "
        "status STRING, started_at TIMESTAMP, ended_at TIMESTAMP, duration_s DOUBLE, "
        "rows_in BIGINT, rows_out BIGINT, rows_quarantined BIGINT, batches INT, "
        "source_start STRING, source_end STRING, spark_master STRING, error STRING, "
        "details STRING"
    ),
    # delta-rs appends its rows and checkpoints every 100 commits unless told: each append
    # then reads up to 100 commit files (100 requests on object storage). Spark's every 10.
    properties={"delta.checkpointInterval": "10"},
)


# -- records ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldSpec:
    """One field of a raw JSON record and the rule it must keep.

    Kinds: ``id`` (non-empty string, or JSON integer kept as its decimal text), ``enum``
    (exactly one of ``allowed``), ``timestamp`` (ISO-8601 with a zone), ``text`` (non-empty
    string), ``string`` (any string), ``decimal`` (JSON number or decimal-notation string
    within ``minimum..maximum``, rounded half up to ``scale``), ``count`` (integer >= 0 as a
    JSON integer or a string of digits), ``integer`` (a JSON integer of any sign).

    ``optional_when=("f", values)``: not required when field ``f`` holds one of ``values``
    (still checked when present). ``ignored_when=("f", values)``: neither required nor
    checked then. ``pattern``: for ``text`` and ``string``, a regular expression the whole
    value must match (``bad_format:<field>`` otherwise).
    """

    name: str
    kind: FieldKind
    required: bool = True
    optional_when: tuple[str, tuple[str, ...]] | None = None
    ignored_when: tuple[str, tuple[str, ...]] | None = None
    allowed: tuple[str, ...] = ()
    pattern: str | None = None
    minimum: str | None = None
    maximum: str | None = None
    precision: int = 18
    scale: int = 2

    def __post_init__(self) -> None:
        if not _IDENT_RE.match(self.name):
            raise DeclarationError(f"field name {self.name!r} is not a plain identifier.")
        if self.kind not in FieldKind.__args__:  # type: ignore[attr-defined]
            raise DeclarationError(f"field {self.name!r}: unknown kind {self.kind!r}.")
        if self.kind == "enum" and not self.allowed:
            raise DeclarationError(f"enum field {self.name!r} needs allowed values.")
        if self.kind != "enum" and self.allowed:
            raise DeclarationError(f"only enum fields take allowed values ({self.name!r}).")
        if self.optional_when and not self.required:
            raise DeclarationError(f"{self.name!r}: optional_when only makes sense if required.")
        if self.pattern is not None:
            if self.kind not in ("text", "string"):
                raise DeclarationError(
                    f"{self.name!r}: only text and string fields take a pattern."
                )
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise DeclarationError(f"{self.name!r}: pattern is not a regex: {exc}.") from None

    @property
    def sql_type(self) -> str:
        """The Spark type of the field's validated value."""
        if self.kind == "timestamp":
            return "TIMESTAMP"
        if self.kind == "decimal":
            return f"DECIMAL({self.precision},{self.scale})"
        if self.kind in ("count", "integer"):
            return "BIGINT"
        return "STRING"


@dataclass(frozen=True)
class RecordSpec:
    """The rules for one raw record: a JSON object with these fields (others are ignored).

    ``event_id`` names the field that identifies an event (a record delivered again carries
    the same one), ``key`` the entity the events are about (an order, a customer), ``time``
    when the event happened (it orders events, and is the window of a reprocess).
    """

    fields: tuple[FieldSpec, ...]
    key: str
    time: str
    event_id: str = "event_id"

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        if len(names) != len(set(names)):
            raise DeclarationError(f"record: duplicate field names in {names}.")
        for spec in self.fields:
            for condition in (spec.optional_when, spec.ignored_when):
                if condition and condition[0] not in names:
                    raise DeclarationError(
                        f"record: {spec.name!r} depends on unknown field {condition[0]!r}."
                    )
        for role in ("key", "time", "event_id"):
            name = getattr(self, role)
            if name not in names:
                raise DeclarationError(f"record.{role}: {name!r} is not one of its fields.")
            if self.field(name).ignored_when or not self.field(name).required:
                raise DeclarationError(f"record.{role}: {name!r} must be a required field.")
        if self.field(self.time).kind != "timestamp":
            raise DeclarationError(f"record.time: {self.time!r} is not a timestamp field.")
        if self.field(self.event_id).kind not in ("id", "text"):
            raise DeclarationError(f"record.event_id: {self.event_id!r} must be an id field.")

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def field(self, name: str) -> FieldSpec:
        for spec in self.fields:
            if spec.name == name:
                return spec
        raise KeyError(name)


@dataclass(frozen=True)
class Expectation:
    """What a valid record must also keep, and what happens to one that does not.

    ``when`` is a SQL condition over the record's validated fields that is true for a record
    that breaks the expectation. ``action``: ``warn`` keeps it and counts it; ``drop`` keeps
    it out of silver (bronze has it) and counts it; ``fail`` stops the run, naming the rule
    and the count, before anything of the micro-batch is written. Invalid records go to
    quarantine first; then ``drop`` rules apply; then ``fail`` and ``warn`` to the rest.
    """

    name: str
    when: str
    action: ExpectationAction

    def __post_init__(self) -> None:
        if not _IDENT_RE.match(self.name):
            raise DeclarationError(f"expectation name {self.name!r} is not a plain identifier.")
        if self.action not in ExpectationAction.__args__:  # type: ignore[attr-defined]
            raise DeclarationError(
                f"expectation {self.name}: action {self.action!r} is not warn, drop or fail."
            )
        if not self.when.strip():
            raise DeclarationError(f"expectation {self.name}: an empty condition.")


# -- silver kinds -----------------------------------------------------------------------------


@dataclass(frozen=True)
class LatestState:
    """Silver as current state: one row per key, from its winning event (the greatest
    ``order_by`` tuple; exact ties broken by a hash of the record, so that every order of
    arrival gives the same table). A late or repeated event never overwrites a newer one.
    ``rename`` maps event fields to state columns."""

    table: str
    quarantine: str
    order_by: tuple[str, ...] = ()  # default: (record.time, record.event_id)
    rename: Mapping[str, str] = field(default_factory=dict)
    zorder_by: tuple[str, ...] = ()
    allow_full_refresh: bool = True

    kind: str = field(default="latest", init=False)


@dataclass(frozen=True)
class History:
    """Silver as history (slowly changing dimension, type 2): one row per version of a key,
    ``valid_from``..``valid_to`` (null while current). Events of a key are walked in order of
    (time, event id): an event whose ``tracked`` values equal the current version's changes
    nothing; another ends the current version and starts one; an event whose ``op`` field is
    one of ``deletes`` ends the current version. A version of zero length is not a row. Late
    events split or move the versions they fall between, exactly as if they had come in time.

    ``changes`` is a table of its own: every valid event once (by event id), from which the
    history of a key is derived again whenever one of its events arrives.
    """

    table: str
    quarantine: str
    changes: str
    op: str
    tracked: tuple[str, ...]
    deletes: tuple[str, ...] = ("delete",)
    allow_full_refresh: bool = True

    kind: str = field(default="history", init=False)


@dataclass(frozen=True)
class AppendOnly:
    """Silver as events: every valid event once, de-duplicated by its event id (a record
    delivered again is the same event; of two different records with one id, the one with
    the greatest hash is kept, whatever the order they arrived in)."""

    table: str
    quarantine: str
    zorder_by: tuple[str, ...] = ()
    allow_full_refresh: bool = True

    kind: str = field(default="append", init=False)


SilverSpec = LatestState | History | AppendOnly


# -- gold -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoldInput:
    """A silver table a gold reads, under ``name`` (its ``{name}`` in the SQL), and which gold
    rows a change to it touches: ``touches`` is SQL over ``{changes}`` (the changed rows,
    before and after each change) and the inputs, giving the ``recompute_by`` values to
    recompute."""

    name: str
    table: str
    touches: str

    def __post_init__(self) -> None:
        # "changes" is the changed rows; "args" is spark.sql's own argument.
        if not _IDENT_RE.match(self.name) or self.name in ("changes", "args"):
            raise DeclarationError(f"gold input name {self.name!r} is not a usable identifier.")


@dataclass(frozen=True)
class Gold:
    """A gold table, recomputed per key from one or several silver tables.

    ``sql`` (with ``{input}`` placeholders) or ``function`` (inputs by name -> DataFrame)
    computes it; ``key`` identifies its rows; ``recompute_by`` (a part of the key, the whole
    key by default) is what changes are mapped to: every row whose ``recompute_by`` values a
    change touches is recomputed from the current inputs, and nothing else.
    """

    table: str
    schema: str
    key: tuple[str, ...]
    inputs: tuple[GoldInput, ...]
    sql: str | None = None
    function: Callable[[Mapping[str, Any]], Any] | None = None
    recompute_by: tuple[str, ...] = ()
    description: str = ""
    partition_by: tuple[str, ...] = ()
    zorder_by: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.sql is None) == (self.function is None):
            raise DeclarationError(f"gold {self.table}: give sql or function, exactly one.")
        columns = [name for name, _ in schema_fields(self.schema)]
        missing = [k for k in self.key if k not in columns]
        if not self.key or missing:
            raise DeclarationError(
                f"gold {self.table}: key {list(self.key)} is not in its output columns "
                f"{columns} (missing {missing})."
            )
        outside = [c for c in self.recompute_by if c not in self.key]
        if outside:
            raise DeclarationError(
                f"gold {self.table}: recompute_by {outside} is not part of the key."
            )
        names = [i.name for i in self.inputs]
        if not names or len(names) != len(set(names)):
            raise DeclarationError(f"gold {self.table}: inputs {names} must be named once each.")
        unknown = sql_placeholders(self.sql or "") - set(names)
        if unknown:
            raise DeclarationError(f"gold {self.table}: sql reads undeclared inputs {unknown}.")
        for item in self.inputs:
            unknown = sql_placeholders(item.touches) - {*names, "changes"}
            if unknown or "changes" not in sql_placeholders(item.touches):
                raise DeclarationError(
                    f"gold {self.table}: inputs[{item.name}].touches must read {{changes}} and "
                    f"only declared inputs (not {sorted(unknown)})."
                )

    @property
    def recompute_columns(self) -> tuple[str, ...]:
        return self.recompute_by or self.key


# -- source ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaSubscription:
    """The Kafka topics a pipeline reads: a list of names, or a regular expression.

    A pattern is matched against whole topic names (Java's ``Pattern.matches``, as Spark's
    ``subscribePattern`` does); topics created later that match are read from their start.
    Internal topics (``__consumer_offsets``...) never match.
    """

    topics: tuple[str, ...] = ()
    pattern: str | None = None

    def __post_init__(self) -> None:
        if bool(self.topics) == bool(self.pattern):
            raise ConfigurationError("Kafka: give a list of topics or a pattern, exactly one.")
        bad = [t for t in self.topics if not _TOPIC_RE.match(t) or t in (".", "..")]
        if bad:
            raise ConfigurationError(f"Kafka: {bad} are not valid topic names.")
        if len(set(self.topics)) != len(self.topics):
            raise ConfigurationError(f"Kafka: topics {list(self.topics)} repeat a name.")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ConfigurationError(
                    f"Kafka: topic pattern {self.pattern!r} is not a regular expression: {exc}."
                ) from None

    def matches(self, topic: str) -> bool:
        if topic.startswith("__"):
            return False
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    def spark_options(self) -> dict[str, str]:
        if self.pattern is not None:
            return {"subscribePattern": self.pattern}
        return {"subscribe": ",".join(self.topics)}

    def describe(self) -> str:
        if self.pattern is not None:
            return f"topics matching {self.pattern!r}"
        return f"topic{'s' if len(self.topics) > 1 else ''} {', '.join(self.topics)}"


@dataclass(frozen=True)
class Source:
    """Where raw records come from, and the bronze table that keeps them: JSON Lines files
    landing in ``landing`` (under the root), or the Kafka ``kafka_topics`` (or every topic
    matching ``kafka_topic_pattern``). Which of the two a deployment reads is its setting,
    ``LAKEHOUSE_<PIPELINE>_SOURCE``."""

    landing: str
    bronze: str
    kafka_topics: tuple[str, ...] = ()
    kafka_topic_pattern: str | None = None

    @property
    def kafka(self) -> KafkaSubscription:
        return KafkaSubscription(self.kafka_topics, self.kafka_topic_pattern)


# -- streams and pipelines --------------------------------------------------------------------


@dataclass(frozen=True)
class StreamSpec:
    """One layer's streaming query: where it reads, which tables it writes.

    The checkpoint belongs to the first target; a query never shares its checkpoint.
    """

    layer: Layer
    targets: tuple[str, ...]
    # The tables it reads as Delta streams (none: it reads the pipeline's raw source).
    sources: tuple[str, ...] = ()
    read_change_feed: bool = False
    pipeline: str = ""
    # The targets it only appends to (bronze, a quarantine); it merges into the others.
    appended: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.targets:
            raise DeclarationError(f"stream {self.layer} has no target table.")
        if not set(self.appended) <= set(self.targets):
            raise DeclarationError(f"stream {self.layer} appends to a table it does not write.")
        object.__setattr__(self, "layer", Layer(self.layer))

    @property
    def name(self) -> str:
        return f"{self.pipeline}.{self.layer}"

    @property
    def job(self) -> str:
        return self.layer.job

    @property
    def reads_raw_source(self) -> bool:
        return not self.sources

    @property
    def checkpoint(self) -> str:
        return f"_checkpoints/{self.targets[0]}"

    @property
    def rederive_marker(self) -> str:
        """Present while the layer re-derives its tables from all of its input (a reprocess
        or a full refresh), and after one that died: the layer's next run, whatever its mode,
        does that re-derivation first, and a scheduled run never skips the layer as idle."""
        return f"_runs/{self.name}.rederive.json"


def _state_schema(record: RecordSpec, silver: LatestState) -> str:
    renamed = [(silver.rename.get(f.name, f.name), f) for f in record.fields]
    key = silver.rename.get(record.key, record.key)
    columns = [f"{key} STRING NOT NULL"]
    columns += [f"{name} {f.sql_type}" for name, f in renamed if name != key]
    return ", ".join([*columns, "last_event_hash BIGINT"])


def _events_schema(record: RecordSpec) -> str:
    columns = [f"{record.event_id} STRING NOT NULL"]
    columns += [f"{f.name} {f.sql_type}" for f in record.fields if f.name != record.event_id]
    return ", ".join([*columns, "event_hash BIGINT"])


def _history_schema(record: RecordSpec, silver: History) -> str:
    tracked = [f"{name} {record.field(name).sql_type}" for name in silver.tracked]
    return ", ".join(
        [
            f"{record.key} STRING NOT NULL",
            *tracked,
            "valid_from TIMESTAMP NOT NULL",
            "valid_to TIMESTAMP",
            "is_current BOOLEAN",
            "started_by_event_id STRING",
        ]
    )


@dataclass(frozen=True)
class PipelineSpec:
    """A medallion pipeline, declared: source -> bronze -> silver (+ quarantine) -> gold.

    Any suffix of that chain may be left out: a pipeline with only a ``gold`` reads other
    pipelines' silver tables. ``schedule`` is a cron expression (None: runs only when
    triggered, or, for a gold on other pipelines' tables, when they change).
    """

    name: str
    description: str = ""
    source: Source | None = None
    record: RecordSpec | None = None
    expectations: tuple[Expectation, ...] = ()
    silver: SilverSpec | None = None
    gold: Gold | None = None
    schedule: str | None = None
    # Where it was declared and what its file says of it (set by the registry).
    origin: str = ""
    doc: str = ""
    tables: tuple[TableSpec, ...] = field(init=False, default=())
    streams: tuple[StreamSpec, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        if not _IDENT_RE.match(self.name):
            raise DeclarationError(f"name: {self.name!r} is not a plain identifier.")
        if self.silver is not None and (self.source is None or self.record is None):
            raise DeclarationError("silver: needs a source and a record to validate.")
        if self.source is not None and self.record is None:
            raise DeclarationError("record: a pipeline with a source declares its records.")
        if self.expectations and self.silver is None:
            raise DeclarationError("expectations: apply in silver, which is not declared.")
        if self.source is None and self.gold is None:
            raise DeclarationError("source: a pipeline reads a source, or computes a gold.")
        self._check_expectations()
        self._check_silver()
        tables, streams = self._derive()
        object.__setattr__(self, "tables", tables)
        object.__setattr__(self, "streams", streams)
        names = [t.name for t in tables]
        if len(names) != len(set(names)):
            raise DeclarationError(f"tables: a table is declared twice in {names}.")

    def _check_expectations(self) -> None:
        if not self.expectations:
            return
        assert self.record is not None
        known = set(self.record.names)
        seen: set[str] = set()
        for i, rule in enumerate(self.expectations):
            if rule.name in seen:
                raise DeclarationError(f"expectations[{i}]: {rule.name!r} is declared twice.")
            seen.add(rule.name)
            unknown = sorted({c for c in sql_columns(rule.when) if c.lower() not in known})
            if unknown:
                raise DeclarationError(
                    f"expectations[{i}] ({rule.name}).when: unknown column(s) {unknown}; the "
                    f"record's fields are {sorted(known)}."
                )

    def _check_silver(self) -> None:
        if self.silver is None:
            return
        assert self.record is not None
        known = set(self.record.names)
        if isinstance(self.silver, LatestState):
            unknown = [c for c in (*self.silver.order_by, *self.silver.rename) if c not in known]
            if unknown:
                raise DeclarationError(f"silver: order_by/rename name unknown fields {unknown}.")
        if isinstance(self.silver, History):
            unknown = [c for c in (self.silver.op, *self.silver.tracked) if c not in known]
            if unknown:
                raise DeclarationError(f"silver: op/tracked name unknown fields {unknown}.")
            if self.record.field(self.silver.op).kind != "enum":
                raise DeclarationError(f"silver.op: {self.silver.op!r} must be an enum field.")

    @property
    def order_by(self) -> tuple[str, ...]:
        """How the events of a key are ordered (silver kinds that order them)."""
        assert self.record is not None
        if isinstance(self.silver, LatestState) and self.silver.order_by:
            return self.silver.order_by
        return (self.record.time, self.record.event_id)

    def _derive(self) -> tuple[tuple[TableSpec, ...], tuple[StreamSpec, ...]]:
        tables: list[TableSpec] = []
        streams: list[StreamSpec] = []
        if self.source is not None:
            tables.append(
                TableSpec(
                    name=self.source.bronze,
                    description="Every delivered record, valid or not, exactly once, as raw text.",
                    schema=BRONZE_SCHEMA,
                    partition_by=("ingest_date",),
                    properties={"delta.dataSkippingStatsColumns": ",".join(BRONZE_STATS_COLUMNS)},
                    allow_full_refresh=False,
                )
            )
            bronze = (self.source.bronze,)
            streams.append(StreamSpec(Layer.BRONZE, bronze, appended=bronze, pipeline=self.name))
        if self.silver is not None:
            assert self.record is not None and self.source is not None
            tables += self._silver_tables(self.record, self.silver)
            targets = [self.silver.table, self.silver.quarantine]
            if isinstance(self.silver, History):
                targets.append(self.silver.changes)
            streams.append(
                StreamSpec(
                    Layer.SILVER,
                    tuple(targets),
                    (self.source.bronze,),
                    pipeline=self.name,
                    appended=(self.silver.quarantine,),
                )
            )
        if self.gold is not None:
            tables.append(
                TableSpec(
                    name=self.gold.table,
                    description=self.gold.description,
                    schema=self.gold.schema,
                    partition_by=self.gold.partition_by,
                    zorder_by=self.gold.zorder_by,
                )
            )
            streams.append(
                StreamSpec(
                    Layer.GOLD,
                    (self.gold.table,),
                    tuple(i.table for i in self.gold.inputs),
                    read_change_feed=True,
                    pipeline=self.name,
                )
            )
        return tuple(tables), tuple(streams)

    def _silver_tables(self, record: RecordSpec, silver: SilverSpec) -> list[TableSpec]:
        quarantine = TableSpec(
            name=silver.quarantine,
            description="Every invalid record with the rule it broke.",
            schema=quarantine_schema(record.time),
        )
        if isinstance(silver, LatestState):
            key = silver.rename.get(record.key, record.key)
            state = TableSpec(
                name=silver.table,
                description=f"Current state per {key} from its winning event.",
                schema=_state_schema(record, silver),
                zorder_by=silver.zorder_by or (key,),
                properties=CHANGE_FEED,
                allow_full_refresh=silver.allow_full_refresh,
            )
            return [state, quarantine]
        if isinstance(silver, History):
            history = TableSpec(
                name=silver.table,
                description=f"Every version of each {record.key}, valid_from..valid_to.",
                schema=_history_schema(record, silver),
                zorder_by=(record.key,),
                properties=CHANGE_FEED,
                allow_full_refresh=silver.allow_full_refresh,
            )
            changes = TableSpec(
                name=silver.changes,
                description=f"Every valid event once, the history of each {record.key} is "
                "derived from.",
                schema=_events_schema(record),
                zorder_by=(record.key,),
                allow_full_refresh=silver.allow_full_refresh,
            )
            return [history, quarantine, changes]
        events = TableSpec(
            name=silver.table,
            description="Every valid event once.",
            schema=_events_schema(record),
            zorder_by=silver.zorder_by or (record.event_id,),
            properties=CHANGE_FEED,
            allow_full_refresh=silver.allow_full_refresh,
        )
        return [events, quarantine]

    @property
    def kafka_subscription(self) -> KafkaSubscription | None:
        """The declared topics (None: the declaration names none)."""
        source = self.source
        if source is None or not (source.kafka_topics or source.kafka_topic_pattern):
            return None
        return source.kafka

    @property
    def landing(self) -> str:
        assert self.source is not None, f"{self.name} has no source"
        return self.source.landing

    def table(self, name: str) -> TableSpec:
        for spec in self.tables:
            if spec.name == name:
                return spec
        raise KeyError(f"{self.name} has no table {name!r}")

    def stream(self, layer: str) -> StreamSpec:
        for spec in self.streams:
            if spec.layer == layer:
                return spec
        raise KeyError(f"{self.name} has no {layer!r} layer")

    @property
    def layers(self) -> tuple[Layer, ...]:
        return tuple(s.layer for s in self.streams)

    def consumers_of(self, table: str) -> tuple[StreamSpec, ...]:
        """This pipeline's streams that read ``table`` (see ``Registry.consumers_of`` for
        all pipelines')."""
        return tuple(s for s in self.streams if table in s.sources)

    @property
    def reads(self) -> tuple[str, ...]:
        """Tables of other pipelines this one reads."""
        own = {t.name for t in self.tables}
        return tuple(dict.fromkeys(t for s in self.streams for t in s.sources if t not in own))
