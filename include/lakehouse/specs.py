"""Declarations of tables, record rules and pipelines: frozen dataclasses checked on creation.

A pipeline is data: its tables, the rules a raw record must keep, and the streams (one per
layer) that move records from the source to bronze, silver and gold. The jobs in ``jobs/``
compile these declarations into Spark code; the DAGs read them to wire tasks and assets.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from lakehouse.errors import ConfigurationError

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*/[a-z][a-z0-9_]*$")
_IDENT_RE = re.compile(r"^[a-z][a-z0-9_]*$")
# Kafka's own rule for topic names.
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._\-]{1,249}$")

# Table properties that would quietly break exactly-once. The transaction identifiers
# that make replayed micro-batches no-ops must outlive the longest pause of any stream.
FORBIDDEN_TABLE_PROPERTIES = frozenset({"delta.setTransactionRetentionDuration"})


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


FieldKind = Literal["id", "enum", "timestamp", "text", "string", "decimal", "count"]


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
            raise ConfigurationError(f"table name {self.name!r} must look like 'layer/table'.")
        columns = set(self.columns)
        unknown = [c for c in (*self.partition_by, *self.zorder_by) if c not in columns]
        if unknown:
            raise ConfigurationError(
                f"{self.name}: layout columns {unknown} are not in the schema."
            )
        if set(self.partition_by) & set(self.zorder_by):
            raise ConfigurationError(f"{self.name}: cannot Z-order by a partition column.")
        forbidden = FORBIDDEN_TABLE_PROPERTIES & set(self.properties)
        if forbidden:
            raise ConfigurationError(
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


@dataclass(frozen=True)
class FieldSpec:
    """One field of a raw JSON record and the rule it must keep.

    Kinds: ``id`` (non-empty string, or JSON integer kept as its decimal text), ``enum``
    (exactly one of ``allowed``), ``timestamp`` (ISO-8601 with a zone), ``text`` (non-empty
    string), ``string`` (any string), ``decimal`` (JSON number or decimal-notation string
    within ``minimum..maximum``, rounded half up to ``scale``), ``count`` (integer >= 0 as a
    JSON integer or a string of digits).
    """

    name: str
    kind: FieldKind
    required: bool = True
    # Required unless <field> holds one of <values>, e.g. ("event_type", ("cancelled",)).
    optional_when: tuple[str, tuple[str, ...]] | None = None
    allowed: tuple[str, ...] = ()
    minimum: str | None = None
    maximum: str | None = None
    precision: int = 18
    scale: int = 2

    def __post_init__(self) -> None:
        if not _IDENT_RE.match(self.name):
            raise ConfigurationError(f"field name {self.name!r} is not a plain identifier.")
        if self.kind == "enum" and not self.allowed:
            raise ConfigurationError(f"enum field {self.name!r} needs allowed values.")
        if self.kind != "enum" and self.allowed:
            raise ConfigurationError(f"only enum fields take allowed values ({self.name!r}).")
        if self.optional_when and not self.required:
            raise ConfigurationError(f"{self.name!r}: optional_when only makes sense if required.")


@dataclass(frozen=True)
class RecordSpec:
    """The rules for one raw record: a JSON object with these fields (others are ignored)."""

    fields: tuple[FieldSpec, ...]

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        if len(names) != len(set(names)):
            raise ConfigurationError(f"duplicate field names in {names}.")
        for spec in self.fields:
            if spec.optional_when and spec.optional_when[0] not in names:
                raise ConfigurationError(f"{spec.name!r} depends on unknown field.")

    def field(self, name: str) -> FieldSpec:
        for spec in self.fields:
            if spec.name == name:
                return spec
        raise KeyError(name)


@dataclass(frozen=True)
class UpsertSpec:
    """How valid events become current state: one row per ``key``, the greatest
    ``order_by`` tuple wins, ties broken by a hash of the raw record so that any order of
    arrival gives the same table. ``rename`` maps event fields to state columns."""

    key: str
    order_by: tuple[str, ...]
    rename: Mapping[str, str] = field(default_factory=dict)


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

    def __post_init__(self) -> None:
        if not self.targets:
            raise ConfigurationError(f"stream {self.layer} has no target table.")
        object.__setattr__(self, "layer", Layer(self.layer))

    @property
    def job(self) -> str:
        return self.layer.job

    @property
    def reads_raw_source(self) -> bool:
        return not self.sources

    @property
    def checkpoint(self) -> str:
        return f"_checkpoints/{self.targets[0]}"


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
class PipelineSpec:
    """A medallion pipeline: raw source -> bronze -> silver (+ quarantine) -> gold."""

    name: str
    description: str
    landing: str
    kafka_topics: tuple[str, ...]
    record: RecordSpec
    upsert: UpsertSpec
    tables: tuple[TableSpec, ...]
    streams: tuple[StreamSpec, ...]
    gold_transform: str
    # Instead of ``kafka_topics``: every topic whose whole name matches.
    kafka_topic_pattern: str | None = None
    # When ``<name>_pipeline`` runs (cron; None: only when triggered).
    # LAKEHOUSE_<NAME>_SCHEDULE overrides it.
    schedule: str | None = None

    def __post_init__(self) -> None:
        if not _IDENT_RE.match(self.name):
            raise ConfigurationError(f"pipeline name {self.name!r} is not a plain identifier.")
        self.kafka_subscription  # noqa: B018 (validates the topics or the pattern)
        names = {t.name for t in self.tables}
        for stream in self.streams:
            missing = [t for t in (*stream.targets, *stream.sources) if t not in names]
            if missing:
                raise ConfigurationError(f"{self.name}.{stream.layer} uses undeclared {missing}.")
        layers = [s.layer for s in self.streams]
        if len(layers) != len(set(layers)):
            raise ConfigurationError(f"{self.name}: one stream per layer, got {layers}.")
        checkpoints = [s.checkpoint for s in self.streams]
        if len(checkpoints) != len(set(checkpoints)):
            raise ConfigurationError(f"{self.name}: two streams share a checkpoint.")

    @property
    def kafka_subscription(self) -> KafkaSubscription:
        return KafkaSubscription(self.kafka_topics, self.kafka_topic_pattern)

    def table(self, name: str) -> TableSpec:
        for spec in self.tables:
            if spec.name == name:
                return spec
        raise KeyError(f"{self.name} has no table {name!r}")

    def stream(self, layer: str) -> StreamSpec:
        for spec in self.streams:
            if spec.layer == layer:
                return spec
        raise KeyError(f"{self.name} has no {layer!r} stream")

    @property
    def layers(self) -> tuple[Layer, ...]:
        return tuple(s.layer for s in self.streams)

    def consumers_of(self, table: str) -> tuple[StreamSpec, ...]:
        """Streams that read ``table``: their checkpoints pin the versions VACUUM must keep."""
        return tuple(s for s in self.streams if table in s.sources)

    def downstream_of(self, stream: StreamSpec) -> list[StreamSpec]:
        """Every stream that reads what ``stream`` writes, directly or further down."""
        found: list[StreamSpec] = []
        frontier = list(stream.targets)
        while frontier:
            table = frontier.pop(0)
            for consumer in self.consumers_of(table):
                if consumer not in found and consumer != stream:
                    found.append(consumer)
                    frontier.extend(consumer.targets)
        return found
