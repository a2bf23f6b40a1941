"""
### lakehouse_maintenance

Keeps the lakehouse tables fast and small without ever breaking a stream. Daily by default
(`LAKEHOUSE_MAINTENANCE_SCHEDULE`), and safe to trigger at any time: every task holds the
write lock of the table it works on, so it waits for a pipeline task writing that table (or
the pipeline task waits for it).

- `plan` checks the params and says what the run will do.
- `optimize` compacts the partitions that changed since the last OPTIMIZE and hold many
  small files, Z-ordered by the table's declaration; healthy tables are skipped.
- `vacuum` reads the checkpoint of every stream that reads the table and raises the
  retention so that VACUUM keeps every file a lagging stream still needs (or skips the
  table); a dry run first; Delta's retention check stays on.
- `backup` copies every streaming checkpoint with a manifest of the table versions it
  agrees with, and keeps the newest `keep_backups`.

Every action appends a row to `ops/run_log` (`action`, and `details` with the table, files
and bytes removed and added, and why it ran or was skipped).

**Params**: `actions`, `tables` (empty: all), `retention_hours` (168 by default, never below
the floor `LAKEHOUSE_VACUUM_FLOOR_HOURS`), `keep_backups`, `dry_run`. Restoring a checkpoint
is the admin DAG `lakehouse_restore`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pendulum
from airflow.sdk import Param, dag, task

from lakehouse.maintenance import (
    ACTIONS,
    DEFAULT_KEEP_BACKUPS,
    DEFAULT_RETENTION_HOURS,
    MAX_KEEP_BACKUPS,
    MAX_RETENTION_HOURS,
    maintained_tables,
)
from lakehouse.pipelines import ORDERS
from lakehouse.settings import Settings
from lakehouse_airflow.operators import MaintenanceJobOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

SETTINGS = Settings.from_env()  # environment variables only: no I/O at parse time
TABLES = [t.name for t in maintained_tables(ORDERS)]

PARAMS = {
    "actions": Param(
        list(ACTIONS),
        type="array",
        items={"type": "string", "enum": list(ACTIONS)},
        uniqueItems=True,
        minItems=1,
        title="Actions",
        description="Which maintenance actions to run, in this order.",
        section="What to run",
    ),
    "tables": Param(
        [],
        type="array",
        items={"type": "string", "enum": TABLES},
        uniqueItems=True,
        title="Tables",
        description="Tables to OPTIMIZE and VACUUM; empty for every table.",
        section="What to run",
    ),
    "retention_hours": Param(
        max(DEFAULT_RETENTION_HOURS, SETTINGS.vacuum_floor_hours),
        type="integer",
        minimum=SETTINGS.vacuum_floor_hours,
        maximum=MAX_RETENTION_HOURS,
        title="VACUUM retention (hours)",
        description=(
            "Files removed from a table longer ago than this may be deleted. Raised for a "
            "table whose own deletedFileRetentionDuration is longer, and for a stream that "
            f"lags further behind; never below {SETTINGS.vacuum_floor_hours} h."
        ),
        section="VACUUM",
    ),
    "keep_backups": Param(
        DEFAULT_KEEP_BACKUPS,
        type="integer",
        minimum=1,
        maximum=MAX_KEEP_BACKUPS,
        title="Checkpoint backups to keep",
        section="Backups",
    ),
    "dry_run": Param(
        False,
        type="boolean",
        title="Dry run",
        description="Measure and report what would be done; change nothing.",
        section="What to run",
    ),
}


@dag(
    dag_id="lakehouse_maintenance",
    schedule=SETTINGS.maintenance_schedule,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=12),
    tags=["lakehouse", "maintenance"],
    doc_md=__doc__,
    params=PARAMS,
    default_args={
        "owner": "data-platform",
        "retries": 2,
        "retry_delay": timedelta(minutes=5),
        "retry_exponential_backoff": 2.0,
    },
)
def lakehouse_maintenance() -> None:
    @task(retries=0)
    def plan(**context: Any) -> dict[str, Any]:
        """Check the params once more (the schema ran at trigger time) and say what will run."""
        from airflow.sdk.exceptions import AirflowFailException

        from lakehouse.errors import LakehouseError
        from lakehouse.maintenance import MaintenanceParams

        ctx: Context = context  # type: ignore[assignment]
        try:
            params = MaintenanceParams.parse(
                dict(ctx["params"]), ORDERS, Settings.from_env().vacuum_floor_hours
            )
        except LakehouseError as exc:
            raise AirflowFailException(f"[{exc.code}] {exc}") from None
        description = params.describe()
        print(f"lakehouse_maintenance: {description}")
        return {"actions": list(params.actions), "description": description}

    previous = plan()
    for action in ACTIONS:
        job = MaintenanceJobOperator(
            task_id=action,
            pipeline=ORDERS.name,
            action=action,
            max_active_tis_per_dag=1,
            # An action left out by the params is skipped; the next one still runs.
            trigger_rule="none_failed",
            doc_md=f"`jobs/maintenance.py --actions {action}`",
        )
        previous >> job
        previous = job


lakehouse_maintenance()
