"""
### lakehouse_restore (admin only)

Puts one layer's streaming checkpoint back from a backup made by `lakehouse_maintenance`,
together with its tables: each table the layer writes goes back (`RESTORE TABLE ... TO
VERSION AS OF`) to the version in the backup's manifest, and every layer downstream is reset
(its checkpoint moved aside, its tables emptied), in its pipeline and in every pipeline that
reads its tables, so that their next runs rebuild them. The restored checkpoint gets a new
query id, so no replayed batch is skipped.

Before changing anything the job checks that the backup, the tables and the source can agree
(same tables, the backed-up versions still readable with all their files, every source
version the checkpoint will read still there); if not it stops with `CheckpointInconsistent`
and the reasons, and nothing is changed.

**Params**: `pipeline`, `layer`, `backup_id` (an id from the backups folder, or `latest`),
`dry_run` (true by default: only run the checks). Never scheduled. A restore that changes
anything needs a grant from Airflow's auth manager (a user who may trigger this DAG and edit
the `lakehouse_spark` connection: roles op and admin with the simple auth manager), given when
the run is triggered through the UI or the REST API; runs from the CLI or cleared runs are
refused. See the README, "Who may do what".
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pendulum
from airflow.sdk import dag, task

from lakehouse.params import RestoreParams
from lakehouse.registry import registry
from lakehouse.settings import Settings
from lakehouse.specs import Layer
from lakehouse_airflow.operators import MaintenanceJobOperator
from lakehouse_airflow.params import dag_params

if TYPE_CHECKING:
    from airflow.sdk import Context

PIPELINES = sorted(registry(Settings.from_env()).pipelines)  # environment variables only
PARAMS = dag_params(
    RestoreParams,
    {
        "pipeline": {"enum": PIPELINES, "default": PIPELINES[0] if PIPELINES else None},
        "layer": {"enum": [str(layer) for layer in Layer]},
    },
)


@dag(
    dag_id="lakehouse_restore",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=6),
    tags=["lakehouse", "maintenance", "admin"],
    doc_md=__doc__,
    params=PARAMS,
    default_args={"owner": "data-platform", "retries": 1, "retry_delay": timedelta(minutes=2)},
)
def lakehouse_restore() -> None:
    @task(retries=0)
    def plan(**context: Any) -> str:
        """Say what the run will do, and who asked for it."""
        ctx: Context = context  # type: ignore[assignment]
        params, dag_run = ctx["params"], ctx["dag_run"]
        what = "check" if params.get("dry_run", True) else "restore"
        line = (
            f"{what} {params['pipeline']}.{params['layer']} from backup {params['backup_id']}, "
            f"triggered by {getattr(dag_run, 'triggering_user_name', None) or 'unknown'}"
        )
        print(f"lakehouse_restore: {line}")
        return line

    restore = MaintenanceJobOperator(
        task_id="restore",
        action="restore",
        max_active_tis_per_dag=1,
        doc_md="`jobs/maintenance.py --restore <layer> --backup-id <id>`",
    )
    plan() >> restore


lakehouse_restore()
