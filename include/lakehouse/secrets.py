"""Secrets kept out of sight: which Spark settings are secret, how extra settings reach
spark-submit without a command line, which settings nobody may change, and masking.

* **Extra Spark settings** (``LAKEHOUSE_SPARK_CONF``) may hold secrets (an
  ``fs.s3a.secret.key``, a JAAS line). A command line is world-readable (``ps``) and ends up
  in the task log, so they go to spark-submit in a properties file that only its owner can
  read (``lakehouse.submit.write_properties``), never as ``--conf``.
* **Safety settings** (``PROTECTED_SPARK_CONF``): Spark's log redaction, failing on missing
  files, Delta's VACUUM retention check. Setting any of them is refused by name: each one, if
  relaxed, silently un-hides secrets or drops data.
* **Masking** (``mask``): every value this process knows to be secret (``remember``) and every
  ``key=value`` whose key names a secret is replaced by ``***`` before an error is logged,
  written to ``ops/run_log`` or returned as a summary (XCom).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

# Spark hides the value of every setting or source option whose key or value matches this, in
# logs, plans, the UI and event logs. Spark's default (the first four) misses the Kafka
# source's SASL login (its value does say "password", its key not) and TLS key and truststore
# options.
REDACTION_REGEX = (
    r"(?i)secret|password|token|access[.]?key|sasl[.]jaas|ssl[.]key|keystore|"
    r"truststore[.]certificates"
)
_SECRET_KEY = re.compile(REDACTION_REGEX)

# Settings the project fixes and nobody may override: each, relaxed, loses data or secrets.
PROTECTED_SPARK_CONF: dict[str, str] = {
    # Replacing the regex replaces Spark's default too, so a custom one can un-redact.
    "spark.redaction.regex": REDACTION_REGEX,
    # ignoreMissingFiles=true turns a VACUUMed file under a lagging stream into silent loss.
    "spark.sql.files.ignoreMissingFiles": "false",
    # Without the check, VACUUM accepts any retention, down to files a stream still needs.
    "spark.databricks.delta.retentionDurationCheck.enabled": "true",
}
MASK = "***"
# Shorter values would mask ordinary words (a password "true" is a configuration problem).
_MIN_SECRET_LEN = 4

_remembered: set[str] = set()


def is_secret_key(key: str) -> bool:
    """Whether Spark (with the project's regex) treats the setting ``key`` as secret."""
    return bool(_SECRET_KEY.search(key))


def secret_values(conf: Mapping[str, str]) -> list[str]:
    """The values of the settings in ``conf`` whose keys or values name a secret."""
    return [v for k, v in conf.items() if v and (is_secret_key(k) or is_secret_key(v))]


def protected_keys(conf: Iterable[str]) -> list[str]:
    """The keys of ``conf`` that would change a safety setting (case as Spark reads them)."""
    fixed = {k.lower() for k in PROTECTED_SPARK_CONF}
    return sorted(k for k in conf if k.strip().lower() in fixed)


def remember(*values: str | None) -> None:
    """Mask these values in everything ``mask`` sees from now on, in this process."""
    _remembered.update(v for v in values if v and len(v) >= _MIN_SECRET_LEN)


def remember_environment(env: Mapping[str, str] | None = None) -> None:
    """The secrets a job may hold in its environment (S3's); the extra Spark settings come
    from its Spark configuration (``secret_values``)."""
    env = os.environ if env is None else env
    remember(env.get("AWS_SECRET_ACCESS_KEY"), env.get("AWS_SESSION_TOKEN"))


# key=value or key: value, where the key names a secret (the value up to a space or quote).
_PAIR = re.compile(
    r"(?P<key>[\w.\-]*(?:" + REDACTION_REGEX.removeprefix("(?i)") + r")[\w.\-]*)"
    r"(?P<sep>\s*[=:]\s*)(?P<quote>[\"']?)(?P<value>[^\s\"',;)}]+)",
    re.IGNORECASE,
)


def mask(text: str | None, secrets: Iterable[str] = ()) -> str | None:
    """``text`` with every known secret, and every value of a secret-named key, as ``***``."""
    if not text:
        return text
    for secret in sorted({*_remembered, *secrets}, key=len, reverse=True):
        if len(secret) >= _MIN_SECRET_LEN:
            text = text.replace(secret, MASK)
    return _PAIR.sub(lambda m: f"{m['key']}{m['sep']}{m['quote']}{MASK}", text)


def mask_all(value: Any, secrets: Iterable[str] = ()) -> Any:
    """``mask`` over every string in a JSON-like value (a summary, a run-log row)."""
    secrets = tuple(secrets)
    if isinstance(value, str):
        return mask(value, secrets)
    if isinstance(value, dict):
        return {k: mask_all(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(mask_all(v, secrets) for v in value)
    return value


class MaskingFormatter(logging.Formatter):
    """A log formatter that masks its whole output, tracebacks included."""

    def format(self, record: logging.LogRecord) -> str:
        return mask(super().format(record)) or ""
