"""Environment of a checkout: the project's venv on PATH, Airflow pointed at this project.

``make -s env`` prints these as shell exports; the demo and the tests pass the same mapping
to the Airflow processes they start, so all three see one configuration.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from lakehouse.settings import Settings

AIRFLOW_ADMIN_USER = "admin"


def venv_bin(settings: Settings) -> Path:
    return settings.project_dir / ".venv" / "bin"


def airflow_home(settings: Settings) -> Path:
    return settings.project_dir / ".airflow"


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
    }
    for key, value in base.items():
        if key.startswith("LAKEHOUSE_") and key not in env:
            env[key] = value
    return env


def shell_exports(env: Mapping[str, str]) -> str:
    return "\n".join(f"export {key}={shlex.quote(value)}" for key, value in sorted(env.items()))


def subprocess_env(settings: Settings, **overrides: str) -> dict[str, str]:
    """The full environment for a child process of this checkout."""
    env = dict(os.environ)
    env.update(project_env(settings))
    env.update(overrides)
    return env
