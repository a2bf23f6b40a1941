"""Environment of a checkout: the project's venv on PATH, Airflow pointed at this project.

``make -s env`` prints these as shell exports; the demo and the tests pass the same mapping
to the Airflow processes they start, so all three see one configuration. Once the local S3
server has been set up (``make s3-up``), they include its endpoint and credentials as the
``AWS_*`` variables that S3A, delta-rs and ``lakehouse.s3`` read.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from lakehouse.local import seaweedfs
from lakehouse.settings import Settings

AIRFLOW_ADMIN_USER = "admin"


def venv_bin(settings: Settings) -> Path:
    return settings.project_dir / ".venv" / "bin"


def airflow_home(settings: Settings) -> Path:
    return settings.project_dir / ".airflow"


# See project_env; docker-compose.yaml sets the same.
MIN_HEARTBEAT_INTERVAL_S = "1"


def project_env(settings: Settings, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables for a shell or subprocess of this checkout (values in ``base`` win for the
    ``LAKEHOUSE_*`` settings, so a user's own choices are kept)."""
    base = dict(os.environ if base is None else base)
    home = airflow_home(settings)
    bin_dir = venv_bin(settings)
    path = base.get("PATH", "")
    if str(bin_dir) not in path.split(os.pathsep):
        path = f"{bin_dir}{os.pathsep}{path}" if path else str(bin_dir)
    python = bin_dir / "python" if (bin_dir / "python").exists() else Path(sys.executable)
    env = {
        "LAKEHOUSE_HOME": str(settings.project_dir),
        "LAKEHOUSE_ROOT": base.get("LAKEHOUSE_ROOT") or settings.root,
        "PATH": path,
        # Executors on the local standalone worker run the project's Python too.
        "PYSPARK_PYTHON": base.get("PYSPARK_PYTHON") or str(python),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(settings.project_dir / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(settings.project_dir / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{AIRFLOW_ADMIN_USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        # Parsing the DAG folder must stay cheap; a slow import is a bug, not a timeout.
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "60",
        # How long a task's supervisor can sleep before it notices the task has ended. Airflow
        # waits on the task's sockets for up to this interval, and a task whose sockets close
        # a moment before its process can be reaped (delta-rs leaves threads that take that
        # moment to die) is held for all of it: 5 s by default, on a layer that skipped in
        # 0.2 s. One second bounds that, for a heartbeat a second per running task.
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": MIN_HEARTBEAT_INTERVAL_S,
    }
    for key, value in base.items():
        if key.startswith("LAKEHOUSE_") and key not in env:
            env[key] = value
    env.update(local_s3_env(settings, base))
    return env


def local_s3_env(settings: Settings, base: Mapping[str, str]) -> dict[str, str]:
    """The local S3 server's ``AWS_*`` variables, once its credentials exist.

    A variable already set in ``base`` keeps its value; and if ``AWS_ENDPOINT_URL`` points
    elsewhere, nothing is added, so the local keys never get mixed with another endpoint.
    """
    credentials = seaweedfs.local_credentials(settings)
    if credentials is None:
        return {}
    local = {
        "AWS_ENDPOINT_URL": seaweedfs.endpoint_url(seaweedfs.s3_port(base)),
        "AWS_ACCESS_KEY_ID": credentials.access_key_id,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key,
        "AWS_REGION": seaweedfs.REGION,
    }
    if base.get("AWS_ENDPOINT_URL", local["AWS_ENDPOINT_URL"]) != local["AWS_ENDPOINT_URL"]:
        return {}
    return {key: base.get(key) or value for key, value in local.items()}


def shell_exports(env: Mapping[str, str]) -> str:
    return "\n".join(f"export {key}={shlex.quote(value)}" for key, value in sorted(env.items()))


def subprocess_env(settings: Settings, **overrides: str) -> dict[str, str]:
    """The full environment for a child process of this checkout."""
    env = dict(os.environ)
    env.update(project_env(settings))
    env.update(overrides)
    return env
