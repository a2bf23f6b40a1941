"""
### orders_pipeline

Order events into Delta tables, bronze -> silver -> gold, as scheduled **availableNow**
Spark Structured Streaming jobs: each task takes everything that arrived since its last run,
commits it exactly once, and stops. Nothing runs between runs.

| task | reads | writes |
| --- | --- | --- |
| `plan` | the run's params | nothing: checks them and says what the run will do |
| `bronze` | landing files (`landing/orders/`) or Kafka `orders.events` | `bronze/orders_events` |
| `silver` | bronze (stream) | `silver/orders`, `silver/orders_quarantine` |
| `gold` | silver's change feed (stream) | `gold/sales_hourly` |

Every layer run appends to `ops/run_log` and returns its summary (rows in and out,
quarantined, micro-batches, rows per second) as the task's XCom.

**Params**: `mode` is `incremental` (default, what scheduled runs use), `reprocess`
(re-derive silver and gold from bronze for `event_ts` in `[reprocess_from, reprocess_to)`)
or `full_refresh` (rebuild silver and gold from all of bronze). A bad value refuses the run
before anything starts. Schedule: `LAKEHOUSE_ORDERS_SCHEDULE` (every 3 hours by default).

**Kafka** (`LAKEHOUSE_ORDERS_SOURCE=kafka`): brokers and credentials come from the
`lakehouse_kafka` connection. Records that aged out of a topic before bronze read them fail
the run with `KafkaOffsetsLost`; `accept_data_loss` lets one run go on without them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pendulum
from airflow.sdk import CronDataIntervalTimetable, chain, dag, task

from lakehouse.params import RunParams
from lakehouse.pipelines import ORDERS
from lakehouse.settings import Settings
from lakehouse_airflow.assets import TABLE_ASSETS
from lakehouse_airflow.operators import LakehouseJobOperator
from lakehouse_airflow.params import dag_params

if TYPE_CHECKING:
    from airflow.sdk import Context

SETTINGS = Settings.from_env()  # environment variables only: no I/O at parse time
SCHEDULE_CRON = SETTINGS.pipeline(ORDERS).schedule
# Interval semantics: a scheduled run covers [previous tick, this tick); a backfill run
# re-derives exactly its interval.
SCHEDULE = CronDataIntervalTimetable(SCHEDULE_CRON, timezone="UTC") if SCHEDULE_CRON else None


@dag(
    dag_id="orders_pipeline",
    schedule=SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=6),
    tags=["lakehouse", "orders", "streaming"],
    doc_md=__doc__,
    params=dag_params(RunParams),
    default_args={
        "owner": "data-platform",
        "retries": 2,
        "retry_delay": timedelta(minutes=1),
        "retry_exponential_backoff": 2.0,
    },
)
def orders_pipeline() -> None:
    @task(retries=0)
    def plan(**context: Any) -> dict[str, Any]:
        """Check the params once more (the schema ran at trigger time) and say what will run."""
        from airflow.sdk.exceptions import AirflowFailException

        from lakehouse.errors import InvalidRunParams
        from lakehouse_airflow.run_params import effective_params

        ctx: Context = context  # type: ignore[assignment]
        try:
            params = effective_params(ctx, ORDERS)
        except InvalidRunParams as exc:
            raise AirflowFailException(str(exc)) from None
        report = [params.describe()]
        if params.dry_run:
            from lakehouse.pending import dry_run_report

            report = dry_run_report(Settings.from_env(), ORDERS, params)
            report.append("dry run: nothing was changed; the layer tasks are skipped")
        for line in report:
            print(line)
        return {"mode": params.mode, "layers": list(params.layers), "report": report}

    layers = [
        LakehouseJobOperator(
            task_id=stream.layer,
            pipeline=ORDERS.name,
            layer=stream.layer,
            max_active_tis_per_dag=1,
            # A layer left out by the params is skipped; the next one still runs.
            trigger_rule="none_failed",
            outlets=[TABLE_ASSETS[t] for t in stream.targets],
            doc_md=f"`{stream.job}`: writes {', '.join(stream.targets)}.",
        )
        for stream in ORDERS.streams
    ]
    chain(plan(), *layers)


orders_pipeline()
