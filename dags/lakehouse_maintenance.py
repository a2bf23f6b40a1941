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
from airflow.sdk import chain, dag, task

from lakehouse.params import DEFAULT_RETENTION_HOURS, Action, MaintenanceParams
from lakehouse.registry import registry
from lakehouse.settings import Settings
from lakehouse_airflow.operators import MaintenanceJobOperator
from lakehouse_airflow.params import dag_params

if TYPE_CHECKING:
    from airflow.sdk import Context

SETTINGS = Settings.from_env()  # environment variables only: no I/O at parse time
TABLES = [t.name for t in registry(SETTINGS).tables]
FLOOR = SETTINGS.vacuum_floor_hours
PARAMS = dag_params(
    MaintenanceParams,
    {
        # What only this deployment knows: its tables and its retention floor.
        "tables": {"items": {"type": "string", "enum": TABLES}},
        "retention_hours": {"default": max(DEFAULT_RETENTION_HOURS, FLOOR), "minimum": FLOOR},
    },
)


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

        ctx: Context = context  # type: ignore[assignment]
        try:
            settings = Settings.from_env()
            params: MaintenanceParams = MaintenanceParams.parse(dict(ctx["params"]))
            params.check_against(registry(settings).tables, settings.vacuum_floor_hours)
        except LakehouseError as exc:
            raise AirflowFailException(f"[{exc.code}] {exc}") from None
        description = params.describe()
        print(f"lakehouse_maintenance: {description}")
        return {"actions": list(params.actions), "description": description}

    actions = [
        MaintenanceJobOperator(
            task_id=str(action),
            action=action,
            max_active_tis_per_dag=1,
            # An action left out by the params is skipped; the next one still runs.
            trigger_rule="none_failed",
            doc_md=f"`jobs/maintenance.py --actions {action}`",
        )
        for action in Action
    ]
    chain(plan(), *actions)


lakehouse_maintenance()
