"""S3 credentials from the Airflow connection ``lakehouse_s3``, for a root on S3.

An ``aws`` connection, read at execute time (never at parse time):

================================  ==========================================================
connection field                  what it is
================================  ==========================================================
login                             the access key id
password                          the secret access key
extra ``aws_session_token``       a session token, for temporary credentials
extra ``endpoint_url``            an S3-compatible endpoint (``AWS_ENDPOINT_URL`` wins)
extra ``region_name``             the region (``AWS_REGION`` wins)
================================  ==========================================================

The secrets are masked in the task log at once. The job gets them in a file only its user can
read, in the task's temporary folder (deleted when the task ends), whose path travels in
``LAKEHOUSE_S3_ACCESS_FILE``; the job sets them on its JVM's Hadoop configuration and signs its
lease requests with them. Nothing secret is ever on the spark-submit command line, in the
hook's environment variables (which the Spark provider turns into ``--conf`` options on YARN
and Kubernetes), in a param, a rendered template or XCom. Without the connection, the
``AWS_*`` variables of the worker are used (the local server of ``make s3-up``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lakehouse.errors import ConfigurationError
from lakehouse.s3 import ACCESS_FILE_ENV, S3Config, is_s3_uri
from lakehouse.settings import Settings

S3_CONN_ID = "lakehouse_s3"
# Extra fields of the connection and the variable each one stands for.
EXTRA_FIELDS = {
    "aws_session_token": "AWS_SESSION_TOKEN",
    "endpoint_url": "AWS_ENDPOINT_URL",
    "region_name": "AWS_REGION",
}


def s3_access(
    settings: Settings, conn_id: str = S3_CONN_ID, log: Any = None
) -> tuple[Settings, S3Config | None]:
    """For a root on S3: the settings with the connection's endpoint and region (where the
    environment sets none), and its credentials, masked; ``(settings, None)`` for any other
    root or without the connection.

    Raises
    ------
    ConfigurationError
        For a connection without a key pair, or with an extra field it does not know.
    """
    if settings.root_is_local or not is_s3_uri(settings.root):
        return settings, None
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException
    from airflow.sdk.log import mask_secret

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        if log is not None:
            log.info("no connection %s: S3 credentials from AWS_* of the worker", conn_id)
        return settings, None
    if conn.password:
        mask_secret(conn.password)
    extra = dict(conn.extra_dejson or {})
    if extra.get("aws_session_token"):
        mask_secret(str(extra["aws_session_token"]))
    unknown = sorted(set(extra) - set(EXTRA_FIELDS))
    if unknown:
        raise ConfigurationError(
            f"S3 connection {conn_id}: unknown extra fields {unknown}; known: "
            f"{sorted(EXTRA_FIELDS)}."
        )
    if not conn.login or not conn.password:
        raise ConfigurationError(
            f"S3 connection {conn_id} has no access key (login) or secret key (password)."
        )
    # What the environment sets wins over the connection.
    overrides = {
        variable: str(extra[name])
        for name, variable in EXTRA_FIELDS.items()
        if variable in ("AWS_ENDPOINT_URL", "AWS_REGION")
        and extra.get(name)
        and not os.environ.get(variable)
        and not (variable == "AWS_REGION" and os.environ.get("AWS_DEFAULT_REGION"))
    }
    if overrides:
        current = {"AWS_ENDPOINT_URL": settings.s3_endpoint or "", "AWS_REGION": settings.s3_region}
        settings = settings.with_env(**{**current, **overrides})
    endpoint = settings.s3_endpoint or f"https://s3.{settings.s3_region}.amazonaws.com"
    config = S3Config(
        endpoint,
        conn.login,
        conn.password,
        settings.s3_region,
        str(extra["aws_session_token"]) if extra.get("aws_session_token") else None,
    )
    if log is not None:
        log.info("S3: %s as %s (connection %s)", endpoint, conn.login, conn_id)
    return settings, config


def s3_job_env(settings: Settings, config: S3Config | None, scratch: Path) -> dict[str, str]:
    """Environment of a job for ``config`` (nothing without it): the access file's path, and
    the endpoint and region the job's settings must agree on. Never a secret."""
    if config is None:
        return {}
    access_file = config.write_access_file(scratch / "s3-access.json")
    env = {ACCESS_FILE_ENV: str(access_file), "AWS_REGION": settings.s3_region}
    if settings.s3_endpoint:
        env["AWS_ENDPOINT_URL"] = settings.s3_endpoint
    return env
