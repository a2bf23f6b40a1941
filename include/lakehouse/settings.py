"""Deployment settings: one typed model read from the environment, defaults written once.

Environments are data, not branches: a laptop, CI and a cluster differ only in the values of
the ``LAKEHOUSE_*`` variables. ``Settings.from_env()`` reads and checks them once;
everything else takes a ``Settings`` object. Each field's variable, default, bounds and
meaning are declared on the field below (``python -m lakehouse.settings`` prints them, with this
machine's defaults, as a table like the README's).

Settings of one pipeline are named after it, ``LAKEHOUSE_<PIPELINE>_<SETTING>`` (e.g.
``LAKEHOUSE_ORDERS_SOURCE``), and read by ``Settings.pipeline(spec)``: each pipeline picks
its own source, topics and schedule, with its declaration's values as the defaults.

S3 endpoints and regions are read from the variables every S3 client reads
(``AWS_ENDPOINT_URL``, ``AWS_REGION``). S3 credentials are not settings: they stay in
``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``, where S3A's default credential chain and
delta-rs read them, so they never enter a settings object, the Spark configuration or a
command line.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field, ValidationError, field_validator

from lakehouse.errors import ConfigurationError
from lakehouse.field_docs import DescribedModel
from lakehouse.secrets import protected_keys

if TYPE_CHECKING:
    from lakehouse.specs import KafkaSubscription, PipelineSpec

PROJECT_DIR = Path(__file__).resolve().parents[2]
PREFIX = "LAKEHOUSE_"
DEFAULT_KAFKA_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_S3_REGION = "us-east-1"

_ENDPOINT_RE = r"^https?://[\w.\-]+(:\d{1,5})?/?$"
_BOOTSTRAP_RE = r"^[\w.\-]+:\d{1,5}(,[\w.\-]+:\d{1,5})*$"
_MASTER_RE = (
    r"^(local(\[(\*|\d+)(,\d+)?\])?|spark://[\w.\-]+(:\d+)?(,[\w.\-]+(:\d+)?)*|yarn|k8s://\S+)$"
)


class SourceKind(StrEnum):
    """Where a pipeline's bronze layer reads raw records."""

    FILE = "file"
    KAFKA = "kafka"


def _default_partitions() -> int:
    return max(2, min(200, 2 * (os.cpu_count() or 1)))


def _env(field_name: str, variable: str | None = None, **extra: Any) -> dict[str, Any]:
    """Field metadata: the variable a field is read from (``LAKEHOUSE_<FIELD>`` unless named)."""
    return {"env": variable or PREFIX + field_name.upper(), **extra}


def _schedule(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return None if text.lower() in ("", "none", "null") else text


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return tuple(value)


# Fields whose values may hold secrets.
_SECRET_FIELDS = frozenset({"extra_spark_conf"})


class _EnvModel(DescribedModel):
    """A frozen model whose fields are read from environment variables (see ``_read``)."""

    # A field's description is the docstring under it (DescribedModel).
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    @classmethod
    def variable(cls, name: str, prefix: str = PREFIX) -> str:
        extra = cls.model_fields[name].json_schema_extra
        variable = extra.get("env") if isinstance(extra, dict) else None
        return str(variable) if variable and prefix == PREFIX else prefix + name.upper()

    @classmethod
    def _read(cls, env: Mapping[str, str], prefix: str = PREFIX, **given: Any) -> dict[str, Any]:
        """The fields whose variables are set (and not blank), as raw strings."""
        raw = dict(given)
        for name in cls.model_fields:
            value = env.get(cls.variable(name, prefix), "").strip()
            if value and name not in raw:
                raw[name] = value
        return raw

    @classmethod
    def _build(cls, raw: dict[str, Any], prefix: str = PREFIX) -> Any:
        try:
            return cls(**raw)
        except ValidationError as exc:
            problems = []
            for error in exc.errors():
                name = str(error["loc"][0]) if error["loc"] else ""
                where = cls.variable(name, prefix) if name in cls.model_fields else name
                value = raw.get(name, error.get("input"))
                message = str(error["msg"]).removeprefix("Value error, ")
                # A value that may hold secrets is never repeated in an error.
                shown = "<not shown>" if name in _SECRET_FIELDS else repr(value)
                problems.append(f"{where}={shown}: {message}")
            raise ConfigurationError("; ".join(problems) + ".") from None


class PipelineSettings(_EnvModel):
    """One pipeline's deployment settings (``LAKEHOUSE_<PIPELINE>_<FIELD>``); unset fields take
    the declaration's values."""

    source: SourceKind = SourceKind.FILE
    """``file`` (landing folder) or ``kafka``"""
    kafka_topics: tuple[str, ...] = ()
    """topics to read, comma-separated, instead of the declared ones"""
    kafka_topic_pattern: str | None = None
    """or a regular expression matching whole topic names (not both)"""
    schedule: str | None = None
    """cron for ``<pipeline>_pipeline``; ``none`` for manual runs only"""
    # The declaration's topics, the default of the two settings above.
    declared_topics: Any = Field(None, exclude=True, repr=False)

    _split = field_validator("kafka_topics", mode="before")(_names)
    _none = field_validator("schedule", mode="before")(_schedule)

    @field_validator("source", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        if isinstance(value, str) and value.lower() not in ("file", "kafka"):
            raise ValueError("use 'file' or 'kafka'")
        return value.lower() if isinstance(value, str) else value

    @field_validator("kafka_topic_pattern")
    @classmethod
    def _one_way(cls, pattern: str | None, info: Any) -> str | None:
        if pattern and info.data.get("kafka_topics"):
            raise ValueError("set the topics or the topic pattern, not both")
        return pattern

    @property
    def subscription(self) -> KafkaSubscription:
        """The topics to read: this deployment's choice if it made one, else the declared."""
        from lakehouse.specs import KafkaSubscription

        if self.kafka_topics or self.kafka_topic_pattern:
            return KafkaSubscription(self.kafka_topics, self.kafka_topic_pattern)
        declared: KafkaSubscription = self.declared_topics
        return declared


class Settings(_EnvModel):
    """Typed deployment settings. Build with ``from_env``; derive variants with ``with_root``
    or ``with_env``."""

    root: str = ""
    """root of tables, landing files and checkpoints; a path or a URI such as
    ``s3a://bucket/lake`` (default ``<project>/data/lakehouse``)"""
    spark_master: str | None = None
    """where jobs run (``local[4]``, ``spark://host:7077``, ``yarn``, ``k8s://...``). Unset:
    the Airflow connection ``lakehouse_spark``, and without it local Spark"""
    kafka_bootstrap: str | None = None
    """Kafka brokers (``host:port,...``). Unset: the host of the Airflow connection
    ``lakehouse_kafka``, and without it ``127.0.0.1:9092``"""
    shuffle_partitions: int = Field(default_factory=_default_partitions, ge=1, le=10_000)
    """shuffle and Delta snapshot partitions (default 2 x cores, 2..200)"""
    max_files_per_trigger: int = Field(1000, ge=1, le=1_000_000)
    """landing files per micro-batch; a backlog becomes several batches"""
    max_offsets_per_trigger: int = Field(200_000, ge=1, le=100_000_000)
    """Kafka records per micro-batch"""
    driver_memory: str = "2g"
    """spark-submit driver memory"""
    run_driver_idle_s: int = Field(60, ge=0, le=3600)
    """the layer tasks of a pipeline run share one warm Spark driver, started by the first
    and stopped after the last; it also stops when no task asked it for this long. ``0``:
    every layer task starts its own ``spark-submit``"""
    run_driver_keep_s: int = Field(0, ge=0, le=86_400)
    """``0``: a run's driver stops after the run's last layer, so nothing runs between runs.
    More: one driver per pipeline DAG (on each worker machine) serves its runs one after
    another and stops when no run asked it for this long; a small scheduled run finds a warm
    JVM instead of starting one (tens of seconds less), for the driver's memory between runs"""
    interpret_small_inputs: bool = True
    """a layer run whose input is known to be small (at most 100,000 rows, or 32 MiB of
    landing files; for a reprocess or full refresh, the tables it re-derives from) evaluates
    its query without generated code (Spark's internal
    ``spark.sql.codegen.factoryMode=NO_CODEGEN``): a third less time for a small delivery.
    ``false``: every query generates code, Spark's default"""
    lock_wait_s: int = Field(60, ge=0, le=86_400)
    """how long a job waits for another writer of its tables before ``ConcurrentRun``"""
    lock_lease_s: int = Field(30, ge=3, le=3600)
    """how long the write lease of a writer that stopped renewing it (a crashed or paused
    driver, on any machine) keeps others out; renewed every quarter of it"""
    maintenance_schedule: str | None = "0 4 * * *"
    """cron for ``lakehouse_maintenance``; ``none`` for manual runs only"""
    vacuum_floor_hours: int = Field(168, ge=0, le=87_600)
    """the shortest VACUUM retention anyone may ask for"""
    vacuum_margin_s: int = Field(3600, ge=0, le=864_000)
    """kept beyond what a lagging stream needs (clock skew between storage and driver)"""
    extra_spark_conf: dict[str, str] = Field(
        default_factory=dict, json_schema_extra=_env("extra_spark_conf", "LAKEHOUSE_SPARK_CONF")
    )
    """extra Spark settings as a JSON object, e.g. ``{"spark.executor.memory": "4g"}``;
    handed to spark-submit in a file only its user can read, never on its command line; the
    safety settings (``spark.redaction.regex``, ``spark.sql.files.ignoreMissingFiles``,
    Delta's retention check) are refused"""
    s3_endpoint: str | None = Field(None, json_schema_extra=_env("s3_endpoint", "AWS_ENDPOINT_URL"))
    """an S3-compatible endpoint other than AWS, e.g. the local server of ``make s3-up``;
    Spark's ``s3a://`` settings are derived from it (unset: AWS itself)"""
    s3_region: str = Field(DEFAULT_S3_REGION, json_schema_extra=_env("s3_region", "AWS_REGION"))
    """the S3 region (or ``AWS_DEFAULT_REGION``)"""
    project_dir: Path = Field(PROJECT_DIR, json_schema_extra=_env("project_dir", "LAKEHOUSE_HOME"))
    """the project checkout (set by ``make env``)"""
    pipelines_dir: str = ""
    """the folders of pipeline declarations, separated by `:` (default
    ``<project>/pipelines``)"""
    jars_dir: Path | None = None
    """the local jar cache (default ``<project>/.cache/jars``)"""
    # Every LAKEHOUSE_* variable, for the settings of each pipeline (``pipeline``).
    environ: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)

    _none = field_validator("maintenance_schedule", mode="before")(_schedule)

    @field_validator("spark_master")
    @classmethod
    def _master(cls, value: str | None) -> str | None:
        if value is not None and not re.match(_MASTER_RE, value):
            raise ValueError(
                "not a Spark master URL (local[*], local[N], spark://host:port, yarn, k8s://...)"
            )
        return value

    @field_validator("kafka_bootstrap")
    @classmethod
    def _bootstrap(cls, value: str | None) -> str | None:
        if value is not None and not re.match(_BOOTSTRAP_RE, value):
            raise ValueError("use host:port[,host:port...]")
        return value

    @field_validator("s3_endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not re.match(_ENDPOINT_RE, value):
            raise ValueError(
                "not an endpoint URL: use http(s)://host[:port], e.g. http://127.0.0.1:8333"
            )
        return value.rstrip("/")

    @field_validator("driver_memory")
    @classmethod
    def _memory(cls, value: str) -> str:
        if not re.fullmatch(r"\d+[kmgt]", value.lower()):
            raise ValueError("use e.g. 2g")
        return value

    @field_validator("extra_spark_conf", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON object: {exc}") from None
            if not isinstance(value, dict):
                raise ValueError("must be a JSON object")
            value = {str(k): str(v) for k, v in value.items()}
        fixed = protected_keys(value) if isinstance(value, dict) else []
        if fixed:
            # The error names the keys, never a value (which might be a secret).
            raise ValueError(
                f"{', '.join(fixed)} cannot be set: the project fixes these safety settings "
                "(Spark's log redaction, failing on missing files, Delta's VACUUM retention "
                "check); remove them"
            )
        return value

    def model_post_init(self, context: Any) -> None:
        # Defaults that depend on the project folder, decided once.
        if not self.root:
            object.__setattr__(self, "root", str(self.project_dir / "data" / "lakehouse"))
        if self.jars_dir is None:
            object.__setattr__(self, "jars_dir", self.project_dir / ".cache" / "jars")
        if not self.pipelines_dir:
            object.__setattr__(self, "pipelines_dir", str(self.project_dir / "pipelines"))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        lakehouse = {k: v for k, v in env.items() if k.startswith(PREFIX)}
        raw = cls._read(env, environ=lakehouse)
        if "s3_region" not in raw and env.get("AWS_DEFAULT_REGION", "").strip():
            raw["s3_region"] = env["AWS_DEFAULT_REGION"].strip()
        settings: Settings = cls._build(raw)
        return settings

    def pipeline(self, spec: PipelineSpec) -> PipelineSettings:
        """``spec``'s settings from ``LAKEHOUSE_<NAME>_*``, the declaration's where unset."""
        prefix = f"{PREFIX}{spec.name.upper()}_"
        raw = PipelineSettings._read(self.environ, prefix)
        raw.setdefault("schedule", spec.schedule)
        raw["declared_topics"] = spec.kafka_subscription
        settings: PipelineSettings = PipelineSettings._build(raw, prefix)
        return settings

    @property
    def kafka_brokers(self) -> str:
        """``LAKEHOUSE_KAFKA_BOOTSTRAP`` or the local default (the Airflow operator puts the
        ``lakehouse_kafka`` connection's host between the two)."""
        return self.kafka_bootstrap or DEFAULT_KAFKA_BOOTSTRAP

    @property
    def jar_cache(self) -> Path:
        assert self.jars_dir is not None
        return self.jars_dir

    def with_root(self, root: str | Path) -> Settings:
        return self.model_copy(update={"root": str(root)})

    def with_env(self, **variables: str) -> Settings:
        """These settings read again with ``variables`` (``LAKEHOUSE_*``) changed."""
        s3 = {"AWS_REGION": self.s3_region, "AWS_ENDPOINT_URL": self.s3_endpoint or ""}
        env = {**self.environ, **s3, "LAKEHOUSE_ROOT": self.root, **variables}
        return Settings.from_env({**env, "LAKEHOUSE_HOME": str(self.project_dir)})

    @property
    def root_is_local(self) -> bool:
        return "://" not in self.root or self.root.startswith("file://")

    def path(self, relative: str) -> str:
        """Absolute location of ``relative`` under the root (a path or a URI)."""
        return f"{self.root.rstrip('/')}/{relative.strip('/')}"

    def local_path(self, relative: str) -> Path:
        """Like ``path`` for a local root; raises for object stores."""
        if not self.root_is_local:
            raise ConfigurationError(f"{self.root} is not a local folder.")
        return Path(self.root.removeprefix("file://")) / relative


def settings_table() -> list[tuple[str, str, str]]:
    """``(variable, default, meaning)`` for every setting, for the README."""
    rows = []
    for model, prefix in ((Settings, PREFIX), (PipelineSettings, f"{PREFIX}<PIPELINE>_")):
        for name, info in model.model_fields.items():
            if info.exclude:
                continue
            default = info.default_factory() if info.default_factory else info.default  # type: ignore[call-arg]
            shown = (
                "unset"
                if default in (None, "", (), {})
                else ",".join(default)
                if isinstance(default, tuple)
                else str(default)
            )
            if isinstance(default, Path):
                shown = "<project>"
            description = re.sub(
                r"``([^`]+)``", r"`\1`", " ".join((info.description or "").split())
            )
            rows.append((model.variable(name, prefix), shown, description))
    return rows


if __name__ == "__main__":
    for variable, default, meaning in settings_table():
        sys.stdout.write(f"| `{variable}` | {default} | {meaning} |\n")
