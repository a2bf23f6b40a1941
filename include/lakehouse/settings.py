"""Deployment settings: environment variables with defaults, read in this one place.

Environments are data, not branches: a laptop, CI and a cluster differ only in the values
below. ``Settings.from_env()`` reads them and validates them once; everything else takes a
``Settings`` object.

=================================  ==========================================================
variable                           meaning (default)
=================================  ==========================================================
``LAKEHOUSE_ROOT``                 root of all tables, landing files and checkpoints; a local
                                   path or a URI such as ``s3a://bucket/lake``
                                   (``<project>/data/lakehouse``)
``LAKEHOUSE_SPARK_MASTER``         where jobs run: ``local[*]`` or ``spark://host:7077``;
                                   unset, the Airflow connection ``lakehouse_spark`` decides,
                                   and without one, local Spark
``LAKEHOUSE_ORDERS_SOURCE``        ``file`` (landing folder) or ``kafka`` (``file``)
``LAKEHOUSE_KAFKA_BOOTSTRAP``      Kafka brokers; unset, the host of the Airflow connection
                                   ``lakehouse_kafka``, and without one ``127.0.0.1:9092``
``LAKEHOUSE_ORDERS_KAFKA_TOPICS``  topics ``orders`` reads, comma-separated, instead of the
                                   declared ``orders.events``
``LAKEHOUSE_ORDERS_KAFKA_TOPIC_PATTERN``  or a regular expression for them (not both)
``LAKEHOUSE_ORDERS_SCHEDULE``      cron for ``orders_pipeline``; ``none`` for manual only
                                   (``0 */3 * * *``)
``LAKEHOUSE_SHUFFLE_PARTITIONS``   shuffle and Delta snapshot partitions (2 x cores, 2..200)
``LAKEHOUSE_MAX_FILES_PER_TRIGGER``  landing files per micro-batch (``1000``)
``LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER``  Kafka records per micro-batch (``200000``)
``LAKEHOUSE_DRIVER_MEMORY``        driver memory for spark-submit (``2g``)
``LAKEHOUSE_SPARK_CONF``           extra Spark settings, JSON object (``{}``)
``LAKEHOUSE_JARS_DIR``             the local jar cache (``<project>/.cache/jars``)
``LAKEHOUSE_LOCK_WAIT_S``          how long a job waits for another writer of its tables
                                   before it stops with ``ConcurrentRun`` (``60``)
``LAKEHOUSE_MAINTENANCE_SCHEDULE`` cron for ``lakehouse_maintenance``; ``none`` for manual
                                   only (``0 4 * * *``)
``LAKEHOUSE_VACUUM_FLOOR_HOURS``   the shortest VACUUM retention anyone may ask for (``168``)
``LAKEHOUSE_VACUUM_MARGIN_S``      kept beyond what a lagging stream needs, for clock skew
                                   between storage and driver (``3600``)
``LAKEHOUSE_RESTORE_ADMINS``       users allowed to trigger ``lakehouse_restore``, comma
                                   separated (``admin``)
``AWS_ENDPOINT_URL``               an S3-compatible endpoint other than AWS, e.g. the local
                                   server of ``make s3-up``; Spark's ``s3a://`` settings are
                                   derived from it (unset: AWS itself)
``AWS_REGION``                     the S3 region (``AWS_DEFAULT_REGION``, ``us-east-1``)
=================================  ==========================================================

S3 credentials are not settings: they stay in ``AWS_ACCESS_KEY_ID`` and
``AWS_SECRET_ACCESS_KEY``, where S3A's default credential chain and delta-rs read them, so
they never enter a settings object, the Spark configuration or a command line.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from lakehouse.errors import ConfigurationError

PROJECT_DIR = Path(__file__).resolve().parents[2]

SourceKind = Literal["file", "kafka"]
DEFAULT_KAFKA_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_S3_REGION = "us-east-1"
_ENDPOINT_RE = re.compile(r"^https?://[\w.\-]+(:\d{1,5})?/?$")
_BOOTSTRAP_RE = re.compile(r"^[\w.\-]+:\d{1,5}(,[\w.\-]+:\d{1,5})*$")
_MASTER_RE = re.compile(
    r"^(local(\[(\*|\d+)(,\d+)?\])?|spark://[\w.\-]+(:\d+)?(,[\w.\-]+(:\d+)?)*|yarn|k8s://\S+)$"
)


def _default_partitions() -> int:
    return max(2, min(200, 2 * (os.cpu_count() or 1)))


def _int(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r} is not an integer.") from None
    if not low <= value <= high:
        raise ConfigurationError(f"{name}={value} is outside {low}..{high}.")
    return value


def _schedule(raw: str) -> str | None:
    return None if raw.lower() in ("", "none", "null") else raw


@dataclass(frozen=True)
class Settings:
    """Typed deployment settings. Build with ``from_env``; derive variants with ``replace``."""

    root: str
    spark_master: str | None = None
    orders_source: SourceKind = "file"
    kafka_bootstrap: str | None = None
    orders_kafka_topics: tuple[str, ...] = ()
    orders_kafka_topic_pattern: str | None = None
    orders_schedule: str | None = "0 */3 * * *"
    shuffle_partitions: int = field(default_factory=_default_partitions)
    max_files_per_trigger: int = 1000
    max_offsets_per_trigger: int = 200_000
    driver_memory: str = "2g"
    lock_wait_s: int = 60
    maintenance_schedule: str | None = "0 4 * * *"
    vacuum_floor_hours: int = 168
    vacuum_margin_s: int = 3600
    restore_admins: tuple[str, ...] = ("admin",)
    extra_spark_conf: Mapping[str, str] = field(default_factory=dict)
    s3_endpoint: str | None = None
    s3_region: str = DEFAULT_S3_REGION
    project_dir: Path = PROJECT_DIR
    jars_dir: Path = PROJECT_DIR / ".cache" / "jars"

    def __post_init__(self) -> None:
        if not self.root:
            raise ConfigurationError("LAKEHOUSE_ROOT is empty.")
        if self.spark_master is not None and not _MASTER_RE.match(self.spark_master):
            raise ConfigurationError(
                f"LAKEHOUSE_SPARK_MASTER={self.spark_master!r} is not a Spark master URL "
                "(local[*], local[N], spark://host:port, yarn, k8s://...)."
            )
        if self.orders_source not in ("file", "kafka"):
            raise ConfigurationError(
                f"LAKEHOUSE_ORDERS_SOURCE={self.orders_source!r}: use 'file' or 'kafka'."
            )
        if self.kafka_bootstrap is not None and not _BOOTSTRAP_RE.match(self.kafka_bootstrap):
            raise ConfigurationError(
                f"LAKEHOUSE_KAFKA_BOOTSTRAP={self.kafka_bootstrap!r}: use host:port[,host:port...]."
            )
        if self.orders_kafka_topics and self.orders_kafka_topic_pattern:
            raise ConfigurationError(
                "Set LAKEHOUSE_ORDERS_KAFKA_TOPICS or LAKEHOUSE_ORDERS_KAFKA_TOPIC_PATTERN, "
                "not both."
            )
        if self.s3_endpoint is not None and not _ENDPOINT_RE.match(self.s3_endpoint):
            raise ConfigurationError(
                f"AWS_ENDPOINT_URL={self.s3_endpoint!r} is not an endpoint URL: use "
                "http(s)://host[:port], e.g. http://127.0.0.1:8333."
            )
        if not re.fullmatch(r"\d+[kmgt]", self.driver_memory.lower()):
            raise ConfigurationError(
                f"LAKEHOUSE_DRIVER_MEMORY={self.driver_memory!r}: use e.g. 2g."
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        project_dir = Path(env.get("LAKEHOUSE_HOME") or PROJECT_DIR)
        schedule = env.get("LAKEHOUSE_ORDERS_SCHEDULE", "0 */3 * * *").strip()
        maintenance = env.get("LAKEHOUSE_MAINTENANCE_SCHEDULE", "0 4 * * *").strip()
        admins = env.get("LAKEHOUSE_RESTORE_ADMINS", "admin")
        extra_raw = env.get("LAKEHOUSE_SPARK_CONF", "").strip() or "{}"
        try:
            extra = json.loads(extra_raw)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"LAKEHOUSE_SPARK_CONF is not a JSON object: {exc}") from None
        if not isinstance(extra, dict):
            raise ConfigurationError("LAKEHOUSE_SPARK_CONF must be a JSON object.")
        return cls(
            root=env.get("LAKEHOUSE_ROOT") or str(project_dir / "data" / "lakehouse"),
            spark_master=env.get("LAKEHOUSE_SPARK_MASTER") or None,
            orders_source=env.get("LAKEHOUSE_ORDERS_SOURCE", "file").strip().lower() or "file",  # type: ignore[arg-type]
            kafka_bootstrap=env.get("LAKEHOUSE_KAFKA_BOOTSTRAP", "").strip() or None,
            orders_kafka_topics=tuple(
                topic.strip()
                for topic in env.get("LAKEHOUSE_ORDERS_KAFKA_TOPICS", "").split(",")
                if topic.strip()
            ),
            orders_kafka_topic_pattern=env.get("LAKEHOUSE_ORDERS_KAFKA_TOPIC_PATTERN", "").strip()
            or None,
            orders_schedule=_schedule(schedule),
            maintenance_schedule=_schedule(maintenance),
            vacuum_floor_hours=_int(env, "LAKEHOUSE_VACUUM_FLOOR_HOURS", 168, 0, 87_600),
            vacuum_margin_s=_int(env, "LAKEHOUSE_VACUUM_MARGIN_S", 3600, 0, 864_000),
            restore_admins=tuple(a.strip() for a in admins.split(",") if a.strip()),
            shuffle_partitions=_int(
                env, "LAKEHOUSE_SHUFFLE_PARTITIONS", _default_partitions(), 1, 10_000
            ),
            max_files_per_trigger=_int(env, "LAKEHOUSE_MAX_FILES_PER_TRIGGER", 1000, 1, 1_000_000),
            max_offsets_per_trigger=_int(
                env, "LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER", 200_000, 1, 100_000_000
            ),
            driver_memory=env.get("LAKEHOUSE_DRIVER_MEMORY") or "2g",
            lock_wait_s=_int(env, "LAKEHOUSE_LOCK_WAIT_S", 60, 0, 86_400),
            extra_spark_conf={str(k): str(v) for k, v in extra.items()},
            s3_endpoint=env.get("AWS_ENDPOINT_URL", "").strip().rstrip("/") or None,
            s3_region=(env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "").strip()
            or DEFAULT_S3_REGION,
            project_dir=project_dir,
            jars_dir=Path(env.get("LAKEHOUSE_JARS_DIR") or project_dir / ".cache" / "jars"),
        )

    @property
    def kafka_brokers(self) -> str:
        """``LAKEHOUSE_KAFKA_BOOTSTRAP`` or the local default (the Airflow operator puts the
        ``lakehouse_kafka`` connection's host between the two)."""
        return self.kafka_bootstrap or DEFAULT_KAFKA_BOOTSTRAP

    def with_root(self, root: str | Path) -> Settings:
        return replace(self, root=str(root))

    def with_source(self, source: SourceKind) -> Settings:
        return replace(self, orders_source=source)

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
