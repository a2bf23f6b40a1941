"""Kafka as a source: how to reach the brokers, and the pre-flight check of their offsets.

**Reaching the brokers.** ``KafkaAccess`` holds the brokers and the security settings (SASL
PLAIN or SCRAM, TLS) in one place and turns them into the two clients' dialects: Spark's
``kafka.``-prefixed source options and librdkafka's configuration (confluent-kafka, for the
pre-flight check). The Airflow operator builds it from the ``lakehouse_kafka`` connection at
execute time and hands it to the job in a file readable only by its owner, whose path travels
in the environment variable ``LAKEHOUSE_KAFKA_ACCESS_FILE``: a secret never appears on a command
line, in a param or in a rendered template. Without that file (a job started by hand, the
tests) the job reads ``LAKEHOUSE_KAFKA_BOOTSTRAP`` without security.

**Pre-flight.** Before Spark starts, ``check_offsets`` compares what the checkpoint still has
to read with what the brokers still hold. Records that aged out (retention) before bronze read
them are data loss: the check raises ``KafkaOffsetsLost`` naming every partition and offset
range that is gone, instead of letting Spark fail on it later (or, with ``failOnDataLoss``
off, skip it in silence). The checkpoint's state is read from its ``offsets/`` and
``commits/`` logs (Spark's write-ahead log: ``offsets/<n>`` is written before batch ``n``
runs, ``commits/<n>`` after it committed), so the next run starts where the last committed
batch ended.

confluent-kafka is imported inside the functions that use it: this module is imported by the
Airflow operator and must stay cheap.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from lakehouse.errors import (
    CheckpointInconsistent,
    ConfigurationError,
    KafkaAuthenticationFailed,
    KafkaOffsetsLost,
    KafkaReplayUnavailable,
    KafkaTopicNotFound,
    SourceUnavailable,
)
from lakehouse.settings import Settings
from lakehouse.specs import KafkaSubscription, PipelineSpec

ACCESS_FILE_ENV = "LAKEHOUSE_KAFKA_ACCESS_FILE"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
BROKER_TIMEOUT_S = 10.0

log = logging.getLogger("lakehouse.kafka")

TopicPartition = tuple[str, int]


# ----------------------------------------------------------------------------- access


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class KafkaAccess:
    """Brokers and security settings for one Kafka cluster.

    Parameters
    ----------
    bootstrap_servers
        ``host:port[,host:port...]``.
    security_protocol
        ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``.
    sasl_mechanism, username, password
        For the ``SASL_*`` protocols: ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``.
    ssl_ca_pem, ssl_ca_location
        The CA certificates that sign the brokers' certificates (PEM text, or a PEM file on
        every machine that runs the job); unset, the system's trust store.
    ssl_certificate_pem, ssl_key_pem, ssl_key_password
        A client certificate for mutual TLS (PEM); the key may be encrypted (PKCS#8).
    ssl_check_hostname
        Whether the broker's certificate must name its host (on unless told otherwise).
    """

    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl_ca_pem: str | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_pem: str | None = None
    ssl_key_pem: str | None = field(default=None, repr=False)
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True

    def __post_init__(self) -> None:
        problems = []
        if not self.bootstrap_servers:
            problems.append("no brokers")
        if self.security_protocol not in SECURITY_PROTOCOLS:
            problems.append(
                f"security_protocol {self.security_protocol!r} is not one of "
                f"{', '.join(SECURITY_PROTOCOLS)}"
            )
        sasl = self.security_protocol.startswith("SASL_")
        if sasl:
            if self.sasl_mechanism not in SASL_MECHANISMS:
                problems.append(
                    f"sasl_mechanism {self.sasl_mechanism!r} is not one of "
                    f"{', '.join(SASL_MECHANISMS)}"
                )
            if not self.username or not self.password:
                problems.append(f"{self.security_protocol} needs a login and a password")
        elif self.sasl_mechanism or self.username or self.password:
            problems.append(
                f"a login or sasl_mechanism needs a SASL_* protocol, not {self.security_protocol}"
            )
        uses_ssl = self.security_protocol in ("SSL", "SASL_SSL")
        ssl_given = [
            f.name
            for f in fields(self)
            if f.name.startswith("ssl_") and f.type != "bool" and getattr(self, f.name)
        ]
        if ssl_given and not uses_ssl:
            problems.append(f"{ssl_given} need the SSL or SASL_SSL protocol")
        if self.ssl_ca_pem and self.ssl_ca_location:
            problems.append("give ssl_ca_pem or ssl_ca_location, not both")
        if bool(self.ssl_certificate_pem) != bool(self.ssl_key_pem):
            problems.append("mutual TLS needs both ssl_certificate_pem and ssl_key_pem")
        if problems:
            # The message names fields, never their values.
            raise ConfigurationError(f"Kafka connection: {'; '.join(problems)}.")

    @property
    def secrets(self) -> tuple[str, ...]:
        """Values that must never be shown (for Airflow's secrets masker)."""
        return tuple(v for v in (self.password, self.ssl_key_pem, self.ssl_key_password) if v)

    def describe(self) -> str:
        who = f" as {self.username} ({self.sasl_mechanism})" if self.username else ""
        return f"{self.bootstrap_servers} over {self.security_protocol}{who}"

    # -- the two clients

    def spark_options(self) -> dict[str, str]:
        """Source options for Spark's Kafka connector (Java client settings, prefixed)."""
        options = {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "kafka.security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            module = (
                "org.apache.kafka.common.security.plain.PlainLoginModule"
                if self.sasl_mechanism == "PLAIN"
                else "org.apache.kafka.common.security.scram.ScramLoginModule"
            )
            options["kafka.sasl.mechanism"] = self.sasl_mechanism
            options["kafka.sasl.jaas.config"] = (
                f"{module} required username={_jaas_quote(self.username or '')} "
                f"password={_jaas_quote(self.password or '')};"
            )
        if self.security_protocol in ("SSL", "SASL_SSL"):
            if self.ssl_ca_pem:
                options["kafka.ssl.truststore.type"] = "PEM"
                options["kafka.ssl.truststore.certificates"] = self.ssl_ca_pem
            elif self.ssl_ca_location:
                options["kafka.ssl.truststore.type"] = "PEM"
                options["kafka.ssl.truststore.location"] = self.ssl_ca_location
            if self.ssl_certificate_pem and self.ssl_key_pem:
                options["kafka.ssl.keystore.type"] = "PEM"
                options["kafka.ssl.keystore.certificate.chain"] = self.ssl_certificate_pem
                options["kafka.ssl.keystore.key"] = self.ssl_key_pem
                if self.ssl_key_password:
                    options["kafka.ssl.key.password"] = self.ssl_key_password
            options["kafka.ssl.endpoint.identification.algorithm"] = (
                "https" if self.ssl_check_hostname else ""
            )
        return options

    def client_config(self) -> dict[str, Any]:
        """Configuration for librdkafka (confluent-kafka's admin client and producer)."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            config["sasl.mechanism"] = self.sasl_mechanism
            config["sasl.username"] = self.username
            config["sasl.password"] = self.password
        if self.security_protocol in ("SSL", "SASL_SSL"):
            if self.ssl_ca_pem:
                config["ssl.ca.pem"] = self.ssl_ca_pem
            elif self.ssl_ca_location:
                config["ssl.ca.location"] = self.ssl_ca_location
            if self.ssl_certificate_pem and self.ssl_key_pem:
                config["ssl.certificate.pem"] = self.ssl_certificate_pem
                config["ssl.key.pem"] = self.ssl_key_pem
                if self.ssl_key_password:
                    config["ssl.key.password"] = self.ssl_key_password
            config["ssl.endpoint.identification.algorithm"] = (
                "https" if self.ssl_check_hostname else "none"
            )
        return config

    # -- handing it to the job

    def write(self, path: Path) -> Path:
        """Write these settings to ``path``, created new and readable by its owner only."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(asdict(self), handle)
        return path

    @classmethod
    def read(cls, path: str | Path) -> KafkaAccess:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigurationError(
                f"{ACCESS_FILE_ENV}={path} cannot be read: {type(exc).__name__}."
            ) from None
        return cls(**data)

    @classmethod
    def for_job(cls, settings: Settings, env: Mapping[str, str] | None = None) -> KafkaAccess:
        """What a job uses: the operator's file if it left one, else plain brokers."""
        env = os.environ if env is None else env
        path = env.get(ACCESS_FILE_ENV)
        if path:
            return cls.read(path)
        return cls(bootstrap_servers=settings.kafka_brokers)

    @classmethod
    def from_connection(
        cls,
        *,
        host: str | None,
        port: int | None,
        login: str | None,
        password: str | None,
        extra: Mapping[str, Any],
        bootstrap_override: str | None,
        default_bootstrap: str,
    ) -> KafkaAccess:
        """From the fields of an Airflow connection (see README, 'Kafka').

        The brokers are ``bootstrap_override`` (``LAKEHOUSE_KAFKA_BOOTSTRAP``) if set, else
        the connection's host (``host:port,host:port`` or ``host`` plus port), else
        ``default_bootstrap``.
        """
        known = {f.name for f in fields(cls)} - {"bootstrap_servers", "username", "password"}
        unknown = sorted(set(extra) - known)
        if unknown:
            raise ConfigurationError(
                f"Kafka connection: unknown extra fields {unknown}; known: {sorted(known)}."
            )
        brokers = bootstrap_override
        if not brokers and host:
            brokers = host if ("," in host or ":" in host or not port) else f"{host}:{port}"
        options = dict(extra)
        if "ssl_check_hostname" in options:
            options["ssl_check_hostname"] = str(options["ssl_check_hostname"]).lower() not in (
                "false",
                "0",
                "no",
            )
        if login and "security_protocol" not in options:
            options["security_protocol"] = "SASL_SSL"
        return cls(
            bootstrap_servers=brokers or default_bootstrap,
            username=login or None,
            password=password or None,
            **options,
        )


def subscription(pipeline: PipelineSpec, settings: Settings) -> KafkaSubscription:
    """The topics to read: the deployment's override if set, else the declaration."""
    if settings.orders_kafka_topics or settings.orders_kafka_topic_pattern:
        return KafkaSubscription(settings.orders_kafka_topics, settings.orders_kafka_topic_pattern)
    return pipeline.kafka_subscription


# ------------------------------------------------------------------------ checkpoint


ListNames = Callable[[str], list[str]]
ReadText = Callable[[str], "str | None"]


def local_checkpoint(checkpoint: str | Path) -> tuple[ListNames, ReadText]:
    """Readers for a checkpoint on a local disk (no JVM needed)."""
    base = Path(str(checkpoint).removeprefix("file://").removeprefix("file:"))

    def list_names(relative: str) -> list[str]:
        folder = base / relative
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []

    def read_text(relative: str) -> str | None:
        path = base / relative
        return path.read_text(encoding="utf-8") if path.is_file() else None

    return list_names, read_text


def _batch_ids(names: list[str]) -> list[int]:
    return sorted(int(n) for n in names if n.isdigit())


def _parse_kafka_offsets(text: str, where: str) -> dict[TopicPartition, int]:
    try:
        data = json.loads(text)
        return {
            (topic, int(partition)): int(offset)
            for topic, partitions in data.items()
            for partition, offset in partitions.items()
        }
    except (ValueError, AttributeError, TypeError):
        raise CheckpointInconsistent(
            f"{where} does not hold Kafka offsets: this checkpoint was written by another "
            "source (the landing files?). A root's bronze stream cannot change its source."
        ) from None


def checkpoint_offsets(
    list_names: ListNames, read_text: ReadText
) -> dict[TopicPartition, int] | None:
    """Where the next run of a Kafka stream starts, per partition; ``None`` for a new stream.

    That is the end of the last committed batch (``offsets/<c>`` for the last ``commits/<c>``);
    with no committed batch yet, the offsets the stream started from (``sources/0/0``).
    """
    committed = _batch_ids(list_names("commits"))
    if committed:
        name = f"offsets/{committed[-1]}"
        text = read_text(name)
        if text is None:
            raise CheckpointInconsistent(
                f"the checkpoint has commits/{committed[-1]} but no {name}."
            )
        # "v1", the batch's metadata, then one line of offsets per source.
        lines = text.splitlines()
        if len(lines) < 3:
            raise CheckpointInconsistent(f"{name} in the checkpoint is incomplete.")
        return _parse_kafka_offsets(lines[2], name)
    initial = read_text("sources/0/0")
    if initial is None:
        return None
    # Spark writes the version, then the JSON (v1 has no line break between them).
    payload = initial[initial.index("{") :] if "{" in initial else ""
    return _parse_kafka_offsets(payload, "sources/0/0")


# ---------------------------------------------------------------------------- brokers


@dataclass(frozen=True)
class Watermarks:
    """A partition's earliest offset still held, and the offset its next record gets."""

    earliest: int
    latest: int


def _kafka_error_text(exc: BaseException) -> str:
    error = exc.args[0] if exc.args else exc
    text = error.str() if hasattr(error, "str") else str(error)
    return str(text)


def broker_offsets(
    access: KafkaAccess, topics: KafkaSubscription, timeout_s: float = BROKER_TIMEOUT_S
) -> dict[TopicPartition, Watermarks]:
    """Earliest and latest offsets of every partition the subscription reads.

    Raises ``SourceUnavailable`` when no broker answers, ``KafkaAuthenticationFailed`` when
    the brokers refuse the login and ``KafkaTopicNotFound`` when a listed topic is missing.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka import TopicPartition as KafkaPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    seen: list[Any] = []
    # librdkafka's own log lines would repeat the errors below; keep them out of task logs
    # and collect the errors instead: a refused login is only told there.
    config: dict[str, Any] = {**access.client_config(), "log_level": 0, "error_cb": seen.append}
    admin = AdminClient(config)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            metadata = admin.list_topics(timeout=min(1.0, timeout_s))
            break
        except KafkaException as exc:
            admin.poll(0)  # serves error_cb
            refused = [e for e in seen if e.code() == KafkaError._AUTHENTICATION]
            if refused:
                raise KafkaAuthenticationFailed(
                    f"Kafka at {access.describe()} refused the login: {refused[0].str()}."
                ) from None
            if time.monotonic() >= deadline:
                raise SourceUnavailable(
                    f"No Kafka broker answers at {access.describe()} (waited "
                    f"{timeout_s:.0f}s): {_kafka_error_text(exc)}."
                ) from None
    if topics.topics:
        missing = [t for t in topics.topics if t not in metadata.topics]
        if missing:
            raise KafkaTopicNotFound(
                f"Kafka topic{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                f"{'do' if len(missing) > 1 else 'does'} not exist on {access.bootstrap_servers}."
            )
    names = sorted(t for t in metadata.topics if topics.matches(t))
    partitions = [
        KafkaPartition(topic, partition)
        for topic in names
        for partition in sorted(metadata.topics[topic].partitions)
    ]
    if not partitions:
        return {}
    try:
        earliest = admin.list_offsets(
            {p: OffsetSpec.earliest() for p in partitions}, request_timeout=timeout_s
        )
        latest = admin.list_offsets(
            {p: OffsetSpec.latest() for p in partitions}, request_timeout=timeout_s
        )
        return {
            (p.topic, p.partition): Watermarks(
                earliest[p].result(timeout=timeout_s).offset,
                latest[p].result(timeout=timeout_s).offset,
            )
            for p in partitions
        }
    except KafkaException as exc:
        raise SourceUnavailable(
            f"Kafka at {access.bootstrap_servers} did not give its offsets: "
            f"{_kafka_error_text(exc)}."
        ) from None


def lost_offsets(
    start: dict[TopicPartition, int] | None, brokers: dict[TopicPartition, Watermarks]
) -> list[str]:
    """What the next run cannot read any more, one sentence per partition; [] if nothing.

    ``start`` is where the checkpoint resumes (``None``: a new stream, which starts from the
    earliest offsets and so loses nothing). A partition the checkpoint has not seen yet (added
    since, or a new topic matching a pattern) is read from offset 0.
    """
    if start is None:
        return []
    lost = []
    for (topic, partition), marks in sorted(brokers.items()):
        resume = start.get((topic, partition), 0)
        if marks.earliest > resume:
            lost.append(
                f"{topic}[{partition}] offsets {resume}..{marks.earliest - 1} "
                f"({marks.earliest - resume} records; the earliest left is {marks.earliest})"
            )
        elif marks.latest < resume:
            lost.append(
                f"{topic}[{partition}] ends at offset {marks.latest} but was already read up to "
                f"{resume}: the topic was deleted and created again, or truncated"
            )
    for topic, partition in sorted(set(start) - set(brokers)):
        lost.append(
            f"{topic}[{partition}] is gone (read up to offset {start[(topic, partition)]}; "
            "whatever came after it is lost)"
        )
    return lost


@dataclass
class PreflightReport:
    """What the pre-flight check saw; kept in the run log's details."""

    partitions: int
    backlog: int
    lost: list[str]
    check_ms: float

    def details(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kafka_partitions": self.partitions,
            "kafka_backlog": self.backlog,
            "kafka_preflight_ms": round(self.check_ms, 1),
        }
        if self.lost:
            data["kafka_lost_offsets_accepted"] = self.lost
        return data


def check_offsets(
    access: KafkaAccess,
    topics: KafkaSubscription,
    start: dict[TopicPartition, int] | None,
    *,
    accept_data_loss: bool = False,
    timeout_s: float = BROKER_TIMEOUT_S,
) -> PreflightReport:
    """The pre-flight check: raise ``KafkaOffsetsLost`` if records the checkpoint has not
    read are gone from the brokers (unless ``accept_data_loss``, for the one run that goes
    on without them), ``SourceUnavailable`` / ``KafkaTopicNotFound`` as ``broker_offsets``."""
    t0 = time.perf_counter()
    brokers = broker_offsets(access, topics, timeout_s)
    lost = lost_offsets(start, brokers)
    backlog = sum(
        max(0, m.latest - max(m.earliest, (start or {}).get(tp, 0))) for tp, m in brokers.items()
    )
    report = PreflightReport(len(brokers), backlog, lost, (time.perf_counter() - t0) * 1000)
    if lost and not accept_data_loss:
        raise KafkaOffsetsLost(
            f"Records of {topics.describe()} aged out of Kafka before bronze read them: "
            + "; ".join(lost)
            + "."
        )
    if lost:
        log.warning("going on without records that are gone (accept_data_loss): %s", lost)
    if not brokers:
        log.warning("no partition to read: no topic matches %s", topics.describe())
    return report


# ----------------------------------------------------------------------------- replay


@dataclass(frozen=True)
class ReplayRange:
    """Offsets ``[start, end)`` of one partition that a replay reads again."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def records(self) -> int:
        return self.end - self.start

    def describe(self) -> str:
        return f"{self.topic}[{self.partition}] {self.start}..{self.end - 1}"


def timestamp_offsets(
    access: KafkaAccess,
    partitions: list[TopicPartition],
    *instants: datetime,
    timeout_s: float = BROKER_TIMEOUT_S,
) -> list[dict[TopicPartition, int]]:
    """For each instant, per partition, the first offset whose Kafka timestamp is at or after
    it; -1 where no record is that recent. One admin client for all of them."""
    from confluent_kafka import KafkaException
    from confluent_kafka import TopicPartition as KafkaPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    if not partitions:
        return [{} for _ in instants]
    admin = AdminClient({**access.client_config(), "log_level": 0})
    found: list[dict[TopicPartition, int]] = []
    try:
        for instant in instants:
            spec = OffsetSpec.for_timestamp(int(instant.timestamp() * 1000))
            requests = {KafkaPartition(topic, partition): spec for topic, partition in partitions}
            answers = admin.list_offsets(requests, request_timeout=timeout_s)
            found.append(
                {
                    (p.topic, p.partition): answers[p].result(timeout=timeout_s).offset
                    for p in answers
                }
            )
    except KafkaException as exc:
        raise SourceUnavailable(
            f"Kafka at {access.bootstrap_servers} did not give offsets by time: "
            f"{_kafka_error_text(exc)}."
        ) from None
    return found


def replay_plan(
    brokers: dict[TopicPartition, Watermarks],
    first: dict[TopicPartition, int],
    after: dict[TopicPartition, int],
    read_up_to: dict[TopicPartition, int] | None,
    start: datetime,
) -> list[ReplayRange]:
    """What a replay of ``[start, end)`` reads, from the brokers' offsets by time (``first``:
    at ``start``, ``after``: at the end; -1 is "none that recent").

    Only offsets the stream has already read (below ``read_up_to``, its checkpoint) are
    replayed: whatever comes after is the stream's, so no record can land twice. Raises
    ``KafkaReplayUnavailable`` for a partition whose records before the earliest it still
    holds may have had timestamps in the range (timestamps are taken as growing with offsets).
    """
    ranges: list[ReplayRange] = []
    gone: list[str] = []
    for tp, marks in sorted(brokers.items()):
        read = (read_up_to or {}).get(tp, 0)
        if read <= 0:
            continue  # bronze has read nothing of it yet: all of it is the stream's
        begin = marks.latest if first.get(tp, -1) < 0 else first[tp]
        end = min(marks.latest if after.get(tp, -1) < 0 else after[tp], read)
        if marks.earliest > 0 and begin <= marks.earliest:
            gone.append(
                f"{tp[0]}[{tp[1]}] no longer holds offsets 0..{marks.earliest - 1}, and records "
                f"from {start.isoformat()} may have been among them"
            )
        elif begin < end:
            ranges.append(ReplayRange(tp[0], tp[1], begin, end))
    for tp in sorted(set(read_up_to or {}) - set(brokers)):
        gone.append(f"{tp[0]}[{tp[1]}] is gone from the brokers")
    if gone:
        raise KafkaReplayUnavailable("Refused to replay: " + "; ".join(gone) + ".")
    return ranges


def plan_replay(
    access: KafkaAccess,
    topics: KafkaSubscription,
    start: datetime,
    end: datetime,
    read_up_to: dict[TopicPartition, int] | None,
) -> list[ReplayRange]:
    """The offset ranges of the records timestamped in ``[start, end)`` that the stream has
    read, after checking that the brokers still hold all of them (see ``replay_plan``)."""
    brokers = broker_offsets(access, topics)
    first, after = timestamp_offsets(access, sorted(brokers), start, end)
    return replay_plan(brokers, first, after, read_up_to, start)


def offsets_json(ranges: list[ReplayRange], bound: str) -> str:
    """Spark's ``startingOffsets``/``endingOffsets`` JSON for ``ranges`` (bound start|end)."""
    data: dict[str, dict[str, int]] = {}
    for r in ranges:
        data.setdefault(r.topic, {})[str(r.partition)] = getattr(r, bound)
    return json.dumps(data, sort_keys=True)


# Spark's KAFKA_DATA_LOSS message (its error class is not in the text the driver sees).
_SPARK_DATA_LOSS = re.compile(
    r"Some data may have been lost because they are not available in Kafka any more"
    r".*?Reason:\s*(.*?)\s*(?:SQLSTATE|\n===|$)",
    re.S,
)


def from_spark_error(message: str) -> KafkaOffsetsLost | None:
    """Spark's own data-loss failure (``failOnDataLoss``) as ``KafkaOffsetsLost``."""
    match = _SPARK_DATA_LOSS.search(message)
    if match is None:
        return None
    reason = " ".join(match.group(1).split()).rstrip(".")
    return KafkaOffsetsLost(f"Spark stopped reading Kafka: {reason}.")
