"""Reaching the brokers: ``KafkaAccess`` holds the brokers and the security settings.

It holds them in one place (SASL PLAIN or SCRAM, TLS) and turns them into the two clients'
dialects: Spark's ``kafka.``-prefixed source options and librdkafka's configuration
(confluent-kafka, for the pre-flight check). The Airflow operator builds it from the
``lakehouse_kafka`` connection at execute time and hands it to the job in a file readable only
by its owner, whose path travels in the environment variable ``LAKEHOUSE_KAFKA_ACCESS_FILE``:
a secret never appears on a command line, in a param or in a rendered template. Without that
file (a job started by hand, the tests) the job reads ``LAKEHOUSE_KAFKA_BOOTSTRAP`` without
security.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from lakehouse.errors import ConfigurationError
from lakehouse.fs import write_private
from lakehouse.settings import Settings

ACCESS_FILE_ENV = "LAKEHOUSE_KAFKA_ACCESS_FILE"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


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
        return write_private(path, json.dumps(asdict(self)))

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
