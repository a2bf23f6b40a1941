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
from airflow.sdk import CronDataIntervalTimetable, Param, dag, task

from lakehouse.params import (
    ISO_WITH_ZONE_PATTERN,
    LAYERS,
    MAX_FILES_PER_TRIGGER,
    MAX_OFFSETS_PER_TRIGGER,
    MODES,
)
from lakehouse.pipelines import ORDERS
from lakehouse.settings import Settings
from lakehouse_airflow.assets import TABLE_ASSETS
from lakehouse_airflow.operators import LakehouseJobOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

SETTINGS = Settings.from_env()  # environment variables only: no I/O at parse time
# Interval semantics: a scheduled run covers [previous tick, this tick); a backfill run
# re-derives exactly its interval.
SCHEDULE = (
    CronDataIntervalTimetable(SETTINGS.orders_schedule, timezone="UTC")
    if SETTINGS.orders_schedule
    else None
)


def instant_param(title: str, description: str, *, section: str) -> Param:
    """An optional point in time, ISO-8601 with a zone (the jobs check it again)."""
    return Param(
        None,
        type=["null", "string"],
        format="date-time",
        pattern=ISO_WITH_ZONE_PATTERN,
        title=title,
        description=description,
        section=section,
    )


PARAMS = {
    "mode": Param(
        "incremental",
        type="string",
        enum=list(MODES),
        title="Mode",
        description=(
            "incremental: what arrived since the last run. reprocess: re-derive silver and "
            "gold from bronze for the window below. full_refresh: rebuild silver and gold "
            "from all of bronze."
        ),
        section="What to run",
    ),
    "reprocess_from": instant_param(
        "Reprocess from (inclusive)",
        "For mode=reprocess: start of the event_ts window, ISO-8601 with zone.",
        section="Reprocess window",
    ),
    "reprocess_to": instant_param(
        "Reprocess to (exclusive)",
        "For mode=reprocess: end of the event_ts window, ISO-8601 with zone.",
        section="Reprocess window",
    ),
    "layers": Param(
        list(LAYERS),
        type="array",
        items={"type": "string", "enum": list(LAYERS)},
        uniqueItems=True,
        minItems=1,
        title="Layers",
        description="Which layers to run, in pipeline order.",
        section="What to run",
    ),
    "max_files_per_trigger": Param(
        None,
        type=["null", "integer"],
        minimum=1,
        maximum=MAX_FILES_PER_TRIGGER,
        title="Landing files per micro-batch",
        description="Raise for a catch-up; empty uses LAKEHOUSE_MAX_FILES_PER_TRIGGER.",
        section="Rate limits",
    ),
    "max_offsets_per_trigger": Param(
        None,
        type=["null", "integer"],
        minimum=1,
        maximum=MAX_OFFSETS_PER_TRIGGER,
        title="Kafka records per micro-batch",
        description="Raise for a catch-up; empty uses LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER.",
        section="Rate limits",
    ),
    "accept_data_loss": Param(
        False,
        type="boolean",
        title="Go on past lost Kafka records",
        description=(
            "Only after a KafkaOffsetsLost failure, once the loss is understood: bronze reads "
            "from the earliest offsets still on the brokers and records the lost ranges in "
            "ops/run_log. For this run only."
        ),
        section="Recovery",
    ),
    "kafka_replay_from": instant_param(
        "Replay Kafka from (inclusive)",
        (
            "Kafka source only: bronze re-reads the records whose Kafka timestamp is in "
            "[from, to) and adds the ones it is missing (none twice). Refused when the brokers "
            "no longer hold the start of that range. Any mode; bronze must run."
        ),
        section="Kafka replay",
    ),
    "kafka_replay_to": instant_param(
        "Replay Kafka to (exclusive)",
        "End of the Kafka replay range, ISO-8601 with zone.",
        section="Kafka replay",
    ),
    "dry_run": Param(
        False,
        type="boolean",
        title="Dry run",
        description="Only say what the run would do; change nothing.",
        section="What to run",
    ),
}


@dag(
    dag_id="orders_pipeline",
    schedule=SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=6),
    tags=["lakehouse", "orders", "streaming"],
    doc_md=__doc__,
    params=PARAMS,
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

    previous = plan()
    for layer in LAYERS:
        stream = ORDERS.stream(layer)
        job = LakehouseJobOperator(
            task_id=layer,
            pipeline=ORDERS.name,
            layer=layer,
            max_active_tis_per_dag=1,
            # A layer left out by the params is skipped; the next one still runs.
            trigger_rule="none_failed",
            outlets=[TABLE_ASSETS[t] for t in stream.targets],
            doc_md=f"`{stream.job}`: writes {', '.join(stream.targets)}.",
        )
        previous >> job
        previous = job


orders_pipeline()
