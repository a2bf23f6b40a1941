"""A project-local Airflow: its home under ``.airflow/``, its database migrated, its connection.

Idempotent: the database is migrated when Airflow's version changed since the last run, and
the Spark connection is created only when it is missing, so a user's edits survive.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

from lakehouse.local.env import airflow_home, subprocess_env
from lakehouse.settings import Settings

SPARK_CONN_ID = "lakehouse_spark"
KAFKA_CONN_ID = "lakehouse_kafka"


def _airflow(settings: Settings, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["airflow", *args],
        env=subprocess_env(settings),
        capture_output=True,
        text=True,
        check=check,
    )


def init(settings: Settings) -> None:
    home = airflow_home(settings)
    home.mkdir(parents=True, exist_ok=True)
    stamp = home / ".migrated"
    airflow_version = version("apache-airflow")
    if not stamp.exists() or stamp.read_text().strip() != airflow_version:
        print(f"migrating the Airflow database in {home} ...", flush=True)
        result = _airflow(settings, "db", "migrate", check=False)
        if result.returncode != 0:
            sys.stderr.write(result.stdout[-3000:] + result.stderr[-3000:])
            raise SystemExit("airflow db migrate failed")
        stamp.write_text(airflow_version)
    conn_stamp = home / ".connections"
    if conn_stamp.exists():
        pass
    elif _airflow(settings, "connections", "get", SPARK_CONN_ID, check=False).returncode != 0:
        _airflow(
            settings,
            "connections",
            "add",
            SPARK_CONN_ID,
            "--conn-type",
            "spark",
            "--conn-host",
            "local[*]",
            "--conn-description",
            "Where Spark jobs run; LAKEHOUSE_SPARK_MASTER overrides it.",
        )
        print(f"created Airflow connection {SPARK_CONN_ID} (local Spark)")
    conn_stamp.touch()
    print(f"Airflow home ready: {home}")


if __name__ == "__main__":
    init(Settings.from_env())
