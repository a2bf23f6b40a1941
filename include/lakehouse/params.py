"""Run parameters, declared once: each parameter set is one typed model.

From a model come the three places a parameter shows up, so they cannot drift apart:

* the DAG's ``Param`` JSON schema (``param_schemas``): the trigger form refuses malformed
  values before a run is created;
* the jobs' command line (``add_arguments`` / ``from_namespace``, and ``job_args`` to build
  it): jobs can be started without Airflow, and check everything again;
* the checks a schema cannot make (a window that ends before it starts, a mode that does not
  fit its parameters): the model's validators.

Every problem is reported at once in one ``InvalidRunParams``, and nothing has run when it is
raised. Three sets: ``RunParams`` (a pipeline run), ``MaintenanceParams`` and
``RestoreParams``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import Enum, StrEnum
from typing import Annotated, Any, get_args

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from lakehouse.backups import BACKUP_ID_PATTERN
from lakehouse.errors import InvalidRunParams, RetentionBelowFloor
from lakehouse.field_docs import DescribedModel
from lakehouse.specs import Layer, PipelineSpec, TableSpec

# ISO-8601 with a zone, years 1970..2999 (so that every accepted instant converts to UTC and
# back without overflow); no spaces, no paths, no quotes.
# Calendar days exactly (the form must accept what the model does): 31-day months, 30-day
# months, February to the 28th, and the 29th in leap years between 1970 and 2999.
_YEAR = r"(19[7-9][0-9]|2[0-9]{3})"
_LEAP_YEAR = r"(19(7[26]|8[048]|9[26])|2[0-9](0[48]|[2468][048]|[13579][26])|2[048]00)"
_DAY = (
    rf"({_YEAR}-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])"
    rf"|{_YEAR}-(0[469]|11)-(0[1-9]|[12][0-9]|30)"
    rf"|{_YEAR}-02-(0[1-9]|1[0-9]|2[0-8])"
    rf"|{_LEAP_YEAR}-02-29)"
)
ISO_WITH_ZONE_PATTERN = (
    rf"^{_DAY}"
    r"T([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\.[0-9]{1,6})?)?"
    r"(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
)
_ISO_WITH_ZONE = re.compile(ISO_WITH_ZONE_PATTERN)
FIRST_YEAR, LAST_YEAR = 1970, 2999
# A table of the registry, ``<layer>/<name>``; never a path of its own.
TABLE_NAME_PATTERN = r"^[a-z][a-z0-9_]*/[a-z][a-z0-9_]*$"


class Mode(StrEnum):
    """What a pipeline run does to silver and gold."""

    INCREMENTAL = "incremental"
    REPROCESS = "reprocess"
    FULL_REFRESH = "full_refresh"


class Action(StrEnum):
    """The maintenance actions, in the order a maintenance run takes them."""

    OPTIMIZE = "optimize"
    VACUUM = "vacuum"
    BACKUP = "backup"


def parse_instant(value: Any) -> datetime:
    """An ISO-8601 time with a zone (``2026-11-01T00:00:00Z``) as an aware datetime."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"{value!r} has no zone")
        if not FIRST_YEAR <= value.year <= LAST_YEAR:
            raise ValueError(f"{value.isoformat()} is outside the years {FIRST_YEAR}..{LAST_YEAR}")
        return value
    # fullmatch: ``$`` alone would let a final newline through.
    if not isinstance(value, str) or not _ISO_WITH_ZONE.fullmatch(value):
        raise ValueError(f"{value!r} is not an ISO-8601 time with a zone (2026-11-01T00:00:00Z)")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{value!r} is not a real date and time") from None


TableName = Annotated[str, StringConstraints(pattern=TABLE_NAME_PATTERN)]


def _distinct(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """A choice listed twice is refused, as the form's schema refuses it (``uniqueItems``)."""
    twice = sorted({str(getattr(v, "value", v)) for v in values if values.count(v) > 1})
    if twice:
        raise ValueError(f"{', '.join(twice)} listed twice")
    return values


Distinct = AfterValidator(_distinct)


def _whole(value: Any) -> Any:
    """JSON has one number type: ``1.0`` is the integer 1 to a JSON schema, so here too."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Whole = Annotated[StrictInt, BeforeValidator(_whole)]

Instant = Annotated[
    datetime,
    BeforeValidator(parse_instant),
    WithJsonSchema({"type": "string", "format": "date-time", "pattern": ISO_WITH_ZONE_PATTERN}),
]


def param(
    default: Any, title: str, section: str, jobs: Sequence[str] | str = "all", **bounds: Any
) -> Any:
    """A field of a parameter set: its default, its title and section on the trigger form,
    which jobs take it on their command line (``all``, a list of layers, or ``()`` for none),
    and its bounds. Its description is the docstring under it."""
    return Field(
        default,
        title=title,
        json_schema_extra={
            "section": section,
            "jobs": jobs if isinstance(jobs, str) else [str(j) for j in jobs],
        },
        **bounds,
    )


# -- the generic part -------------------------------------------------------------------------


class ParamsModel(DescribedModel):
    """A parameter set: strict types, unknown names refused, every problem reported at once."""

    # A field's description is the docstring under it (DescribedModel).
    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Any:
        """Check ``raw`` (JSON-like values: a trigger form, a DAG run's conf)."""
        # An empty field is an unset one; an unknown name is refused whatever its value.
        values = {k: v for k, v in raw.items() if v is not None or k not in cls.model_fields}
        try:
            return cls(**values)
        except ValidationError as exc:
            raise InvalidRunParams(
                "Refused to run: " + "; ".join(cls._problems(exc, values)) + "."
            ) from None

    @classmethod
    def _problems(cls, exc: ValidationError, raw: Mapping[str, Any]) -> list[str]:
        problems: list[str] = []
        unknown = sorted(str(e["loc"][0]) for e in exc.errors() if e["type"] == "extra_forbidden")
        if unknown:
            problems.append(f"unknown parameters {unknown}")
        bad_items: dict[str, list[Any]] = {}
        for error in exc.errors():
            loc, kind = error["loc"], error["type"]
            if kind == "extra_forbidden":
                continue
            if not loc:  # a model-level check: its message lists its own problems
                problems.extend(str(error["msg"]).removeprefix("Value error, ").split("; "))
                continue
            name = str(loc[0])
            value = raw.get(name)
            if len(loc) > 1:  # an item of a list
                bad_items.setdefault(name, []).append(error.get("input"))
                continue
            problems.append(cls._problem(name, value, kind, str(error["msg"])))
        for name, items in bad_items.items():
            choices = ", ".join(cls._choices(name))
            problems.append(f"{name} {items} are not among {choices}")
        return problems

    @classmethod
    def _problem(cls, name: str, value: Any, kind: str, message: str) -> str:
        if kind == "enum":
            return f"{name}={value!r} is not one of {', '.join(cls._choices(name))}"
        if kind.startswith("bool"):
            return f"{name}={value!r} is not true or false"
        if kind.startswith("int"):
            return f"{name}={value!r} is not an integer"
        if kind in ("greater_than_equal", "less_than_equal", "greater_than"):
            low, high = cls._bounds(name)
            return f"{name}={value} is outside {low}..{high}"
        if kind == "too_short":
            return f"{name} is empty: choose at least one of {', '.join(cls._choices(name))}"
        if kind == "string_pattern_mismatch":
            return f"{name}={value!r} is not an allowed value"
        return f"{name}={value!r}: {message.removeprefix('Value error, ')}"

    @classmethod
    def _choices(cls, name: str) -> list[str]:
        enum = _enum_of(cls.model_fields[name].annotation)
        return [str(e.value) for e in enum] if enum else []

    @classmethod
    def _bounds(cls, name: str) -> tuple[Any, Any]:
        low = high = None
        for item in cls.model_fields[name].metadata:
            low = getattr(item, "ge", None) if getattr(item, "ge", None) is not None else low
            high = getattr(item, "le", None) if getattr(item, "le", None) is not None else high
        return low, high

    # -- the command line of the jobs

    @classmethod
    def job_fields(cls, job: str | None = None) -> list[str]:
        """Fields a job takes on its command line (``job``: a layer, or None for any)."""
        names = []
        for name, info in cls.model_fields.items():
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            jobs = extra.get("jobs", "all")
            if jobs == "all" or (isinstance(jobs, list) and jobs and (job is None or job in jobs)):
                names.append(name)
        return names

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """One option per job field (``--reprocess-from``); unset options keep the default."""
        for name in cls.job_fields():
            info = cls.model_fields[name]
            flag = "--" + name.replace("_", "-")
            if _is_bool(info.annotation):
                parser.add_argument(flag, action="store_true", default=None, help=info.title)
            else:
                kind: type = (
                    float
                    if float in _flat(info.annotation)
                    else int
                    if _is_int(info.annotation)
                    else str
                )
                parser.add_argument(flag, type=kind, default=None, help=info.title)

    @classmethod
    def from_namespace(cls, namespace: argparse.Namespace) -> Any:
        raw: dict[str, Any] = {}
        for name in cls.job_fields():
            value = getattr(namespace, name, None)
            if value is None:
                continue
            if _is_tuple(cls.model_fields[name].annotation) and isinstance(value, str):
                value = [part for part in value.split(",") if part]
            raw[name] = value
        return cls.parse(raw)

    def job_args(self, job: str | None = None) -> list[str]:
        """The command line that carries these params to ``job`` (see ``add_arguments``)."""
        args: list[str] = []
        for name in self.job_fields(job):
            value = getattr(self, name)
            if value is None or value is False or value == ():
                continue
            flag = "--" + name.replace("_", "-")
            if value is True:
                args.append(flag)
            elif isinstance(value, tuple):
                args += [flag, ",".join(str(_plain(v)) for v in value)]
            else:
                args += [flag, str(_plain(value))]
        return args


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _flat(annotation: Any) -> list[Any]:
    args = get_args(annotation)
    if not args:
        return [annotation]
    found = []
    for arg in args:
        found += _flat(arg) if get_args(arg) else [arg]
    return found


def _enum_of(annotation: Any) -> type[Enum] | None:
    for arg in _flat(annotation):
        if isinstance(arg, type) and issubclass(arg, Enum):
            return arg
    return None


def _is_bool(annotation: Any) -> bool:
    return bool in _flat(annotation)


def _is_int(annotation: Any) -> bool:
    return int in _flat(annotation) and bool not in _flat(annotation)


def _is_tuple(annotation: Any) -> bool:
    origin = getattr(annotation, "__origin__", None)
    return origin is tuple or any(
        getattr(a, "__origin__", None) is tuple for a in get_args(annotation)
    )


def param_schemas(
    model: type[ParamsModel],
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    exclude: Sequence[str] = (),
) -> dict[str, dict[str, Any]]:
    """Each field as ``{"default": ..., <JSON schema keywords>}``, ready for Airflow's
    ``Param(default, **schema)``; ``overrides`` adds deployment facts (a floor, table names),
    ``exclude`` leaves out fields that do not apply (Kafka params of a gold-only pipeline)."""
    schema = model.model_json_schema()
    definitions = schema.get("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                # An enum's definition, under the field's own title and description.
                target = resolve(definitions[node["$ref"].split("/")[-1]])
                target = {k: v for k, v in target.items() if k not in ("title", "description")}
                return {**target, **{k: resolve(v) for k, v in node.items() if k != "$ref"}}
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    params: dict[str, dict[str, Any]] = {}
    for name, prop in schema["properties"].items():
        if name in exclude:
            continue
        prop = resolve(prop)
        _no_final_newline(prop)
        prop = _plain_keywords(prop)
        prop.pop("jobs", None)
        if prop.get("description"):
            prop["description"] = " ".join(prop["description"].split())
        else:
            prop.pop("description", None)
        for key in ("prefixItems", "maxItems"):
            prop.pop(key, None)
        if prop.get("type") == "array":
            prop.setdefault("uniqueItems", True)
        title = model.model_fields[name].title
        if title:
            prop["title"] = title
        default = prop.pop("default", None)
        params[name] = {
            "default": _plain_default(default),
            **prop,
            **(overrides or {}).get(name, {}),
        }
    return params


def _plain_keywords(prop: dict[str, Any]) -> dict[str, Any]:
    """An ``Optional[X]`` as X's keywords with null among its types, and bounds pydantic
    could not push into a JSON schema keyword (on a validated type) under their names."""
    options = prop.pop("anyOf", None)
    if options:
        kinds = [o for o in options if o.get("type") != "null"]
        prop = {**kinds[0], **prop, "type": ["null", kinds[0]["type"]]}
    for short, keyword in _BOUND_KEYWORDS.items():
        if short in prop:
            prop[keyword] = prop.pop(short)
    return prop


_BOUND_KEYWORDS = {
    "ge": "minimum",
    "le": "maximum",
    "gt": "exclusiveMinimum",
    "lt": "exclusiveMaximum",
}


def _no_final_newline(node: Any) -> None:
    """Next to every ``pattern``, refuse a newline: Airflow checks patterns with Python's
    ``re.search``, whose ``$`` also matches before a final newline (the model does not)."""
    if isinstance(node, dict):
        for value in node.values():
            _no_final_newline(value)
        if "pattern" in node:
            node["not"] = {"type": "string", "pattern": "\\n"}
    elif isinstance(node, list):
        for value in node:
            _no_final_newline(value)


def _plain_default(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return _plain(value)


# -- pipeline runs ----------------------------------------------------------------------------

MAX_FILES_PER_TRIGGER = 100_000
MAX_OFFSETS_PER_TRIGGER = 50_000_000


def _rate(title: str, most: int) -> Any:
    """A bronze rate limit: unset, or 1..``most``."""
    return param(None, title, "Rate limits", [Layer.BRONZE], ge=1, le=most)


class RunParams(ParamsModel):
    """One pipeline run."""

    mode: Mode = param(Mode.INCREMENTAL, "Mode", "What to run")
    """incremental: what arrived since the last run. reprocess: re-derive silver and gold from
    bronze for the window below. full_refresh: rebuild silver and gold from all of bronze."""
    reprocess_from: Instant | None = param(None, "Reprocess from (inclusive)", "Reprocess window")
    """For mode=reprocess: start of the window of the pipeline's event time, ISO-8601 with
    zone."""
    reprocess_to: Instant | None = param(None, "Reprocess to (exclusive)", "Reprocess window")
    """For mode=reprocess: end of the window, ISO-8601 with zone."""
    layers: Annotated[tuple[Layer, ...], Distinct] = param(
        tuple(Layer), "Layers", "What to run", jobs=(), min_length=1
    )
    """Which layers to run, in pipeline order."""
    max_files_per_trigger: Whole | None = _rate(
        "Landing files per micro-batch", MAX_FILES_PER_TRIGGER
    )
    """Raise for a catch-up; empty uses LAKEHOUSE_MAX_FILES_PER_TRIGGER."""
    max_offsets_per_trigger: Whole | None = _rate(
        "Kafka records per micro-batch", MAX_OFFSETS_PER_TRIGGER
    )
    """Raise for a catch-up; empty uses LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER."""
    accept_data_loss: StrictBool = param(
        False, "Go on past lost Kafka records", "Recovery", [Layer.BRONZE]
    )
    """Only after a KafkaOffsetsLost failure, once the loss is understood: bronze reads from the
    earliest offsets still on the brokers and records the lost ranges in ops/run_log. For this
    run only."""
    kafka_replay_from: Instant | None = param(
        None, "Replay Kafka from (inclusive)", "Kafka replay", [Layer.BRONZE]
    )
    """Kafka source only: bronze re-reads the records whose Kafka timestamp is in [from, to) and
    adds the ones it is missing (none twice). Refused when the brokers no longer hold the start
    of that range. Any mode; bronze must run."""
    kafka_replay_to: Instant | None = param(
        None, "Replay Kafka to (exclusive)", "Kafka replay", [Layer.BRONZE]
    )
    """End of the Kafka replay range, ISO-8601 with zone."""
    dry_run: StrictBool = param(False, "Dry run", "What to run", jobs=())
    """Only say what the run would do; change nothing."""

    @model_validator(mode="after")
    def _fits_together(self) -> RunParams:
        problems: list[str] = []
        window = (self.reprocess_from, self.reprocess_to)
        if self.mode == Mode.REPROCESS:
            if None in window:
                problems.append("mode=reprocess needs both reprocess_from and reprocess_to")
            else:
                _check_order("the window", *window, problems)  # type: ignore[arg-type]
        elif any(window):
            problems.append(
                f"reprocess_from/reprocess_to only apply to mode=reprocess, not {self.mode}"
            )
        replay = (self.kafka_replay_from, self.kafka_replay_to)
        if any(replay):
            if None in replay:
                problems.append("a Kafka replay needs both kafka_replay_from and kafka_replay_to")
            else:
                _check_order("the Kafka replay", *replay, problems)  # type: ignore[arg-type]
            if Layer.BRONZE not in self.layers:
                problems.append("a Kafka replay runs in bronze: include bronze in layers")
        if self.mode != Mode.INCREMENTAL and self.layers == (Layer.BRONZE,):
            problems.append(
                f"mode={self.mode} re-derives silver and gold; bronze alone has nothing to do"
            )
        if problems:
            raise ValueError("; ".join(problems))
        # Layers in pipeline order, each once.
        ordered = tuple(layer for layer in Layer if layer in self.layers)
        object.__setattr__(self, "layers", ordered)
        return self

    def check_against(self, pipeline: PipelineSpec) -> None:
        """Refuse what the pipeline's declarations forbid: ``full_refresh`` of a table declared
        ``allow_full_refresh=False``."""
        if self.mode != Mode.FULL_REFRESH:
            return
        refused = [
            table
            for layer in self.layers
            if layer != Layer.BRONZE and layer in pipeline.layers
            for table in pipeline.stream(layer).targets
            if not pipeline.table(table).allow_full_refresh
        ]
        if refused:
            raise InvalidRunParams(
                f"Refused to run: full_refresh is not allowed for {', '.join(refused)} "
                "(declared allow_full_refresh=False)."
            )

    def locked_tables(self, pipeline: PipelineSpec, layer: str) -> list[str]:
        """Tables a layer job holds while it runs: the ones it writes and, when it re-derives
        them, the ones it reads (so that the input cannot move under the recompute)."""
        stream = pipeline.stream(layer)
        tables = list(stream.targets)
        if self.mode != Mode.INCREMENTAL:
            tables += stream.sources
        return tables

    def describe(self) -> str:
        what = {
            Mode.INCREMENTAL: "process what arrived since the last run",
            Mode.REPROCESS: (
                f"re-derive silver and gold from bronze for [{self.reprocess_from}, "
                f"{self.reprocess_to})"
            ),
            Mode.FULL_REFRESH: "rebuild silver and gold from all of bronze",
        }[self.mode]
        loss = "; going on past Kafka records that are gone" if self.accept_data_loss else ""
        replay = (
            f"; bronze replays the Kafka records timestamped in [{self.kafka_replay_from}, "
            f"{self.kafka_replay_to}) that it is missing"
            if self.kafka_replay_from
            else ""
        )
        return f"{self.mode}: {what}; layers {', '.join(self.layers)}{loss}{replay}"


def _check_order(what: str, start: datetime, end: datetime, problems: list[str]) -> None:
    if end <= start:
        problems.append(f"{what} ends ({end.isoformat()}) before it starts ({start.isoformat()})")


# -- maintenance ------------------------------------------------------------------------------

DEFAULT_RETENTION_HOURS = 168
MAX_RETENTION_HOURS = 24 * 365 * 10
DEFAULT_KEEP_BACKUPS = 7
MAX_KEEP_BACKUPS = 1000


class MaintenanceParams(ParamsModel):
    """What one maintenance run does; the same checks in the DAG and in the job."""

    actions: Annotated[tuple[Action, ...], Distinct] = param(
        tuple(Action), "Actions", "What to run", min_length=1
    )
    """Which maintenance actions to run, in this order."""
    tables: Annotated[tuple[TableName, ...], Distinct] = param((), "Tables", "What to run")
    """Tables to OPTIMIZE and VACUUM; empty for every table."""
    retention_hours: Whole = param(
        DEFAULT_RETENTION_HOURS,
        "VACUUM retention (hours)",
        "VACUUM",
        ge=0,
        le=MAX_RETENTION_HOURS,
    )
    """Files removed from a table longer ago than this may be deleted. Raised for a table whose
    own deletedFileRetentionDuration is longer, and for a stream that lags further behind;
    never below the floor LAKEHOUSE_VACUUM_FLOOR_HOURS."""
    keep_backups: Whole = param(
        DEFAULT_KEEP_BACKUPS, "Checkpoint backups to keep", "Backups", ge=1, le=MAX_KEEP_BACKUPS
    )
    small_file_mb: StrictFloat = param(32.0, "Small file (MiB)", "OPTIMIZE", gt=0, le=1024 * 1024)
    """OPTIMIZE: a file below this size is small."""
    min_small_files: Whole = param(
        10, "Small files that make a partition worth compacting", "OPTIMIZE", ge=2, le=1_000_000
    )
    dry_run: StrictBool = param(False, "Dry run", "What to run")
    """Measure and report what would be done; change nothing."""

    @model_validator(mode="after")
    def _in_order(self) -> MaintenanceParams:
        ordered = tuple(action for action in Action if action in self.actions)
        object.__setattr__(self, "actions", ordered)
        return self

    def check_against(self, tables: Sequence[TableSpec], floor_hours: float) -> None:
        """The deployment's facts: the tables that exist, and the retention floor."""
        known = [t.name for t in tables]
        unknown = [t for t in self.tables if t not in known]
        if unknown:
            raise InvalidRunParams(
                f"Refused to run: tables {unknown} are not among {', '.join(known)}."
            )
        check_retention_floor(self.retention_hours, floor_hours)

    def selected(self, tables: Sequence[TableSpec]) -> tuple[TableSpec, ...]:
        return tuple(t for t in tables if not self.tables or t.name in self.tables)

    def only(self, action: Action) -> MaintenanceParams:
        """These params for one action (one DAG task)."""
        return self.model_copy(update={"actions": (action,)})

    def describe(self) -> str:
        tables = ", ".join(self.tables) if self.tables else "every table"
        actions = ", ".join(self.actions)
        what = f"{actions} on {tables}; VACUUM keeps {self.retention_hours} h"
        return f"{what} (dry run: nothing changes)" if self.dry_run else what


def check_retention_floor(retention_hours: float, floor_hours: float) -> None:
    if retention_hours < floor_hours:
        raise RetentionBelowFloor(
            f"VACUUM retention {retention_hours} h is below the floor of {floor_hours:g} h "
            "(LAKEHOUSE_VACUUM_FLOOR_HOURS); nothing was changed."
        )


class RestoreParams(ParamsModel):
    """A checkpoint restore of one layer (the admin DAG ``lakehouse_restore``)."""

    pipeline: str = Field(
        pattern=r"^[a-z][a-z0-9_]*$",
        title="Pipeline",
        json_schema_extra={"section": "What to restore", "jobs": []},
    )
    """The pipeline whose checkpoint to restore."""
    layer: Layer = param(Layer.SILVER, "Layer", "What to restore")
    """Whose checkpoint to restore; every layer after it is reset."""
    backup_id: str = param(
        "latest", "Backup", "What to restore", pattern=f"^(latest|{BACKUP_ID_PATTERN})$"
    )
    """A backup id (a folder under <root>/_backups/<pipeline>/), or latest."""
    dry_run: StrictBool = param(True, "Only check", "What to restore")
    """Run every check and report; change nothing. Untick to restore."""

    def job_args(self, job: str | None = None) -> list[str]:
        """``jobs/maintenance.py``'s restore options (its ``--pipeline`` is the job's own)."""
        args = ["--restore", str(self.layer), "--backup-id", self.backup_id]
        return [*args, "--dry-run"] if self.dry_run else args
