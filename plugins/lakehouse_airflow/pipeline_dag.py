"""The DAG of a declared pipeline: ``<name>_pipeline``, built from its declaration.

``plan`` checks the run's params and says what the run will do (a dry run stops there), then
one task per layer runs its job with spark-submit, in pipeline order. Each layer task's
outlets are the tables it writes, as Airflow assets; a pipeline that reads other pipelines'
tables (a gold on their silver) is scheduled by those assets instead of a cron, and runs
when one of them changes. A declaration that does not load still gets a DAG of that name: it
does nothing but fail with the reason, so the mistake is seen in the UI, by name.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pendulum
from airflow.sdk import DAG, CronDataIntervalTimetable, chain, task

from lakehouse.params import RunParams
from lakehouse.settings import Settings
from lakehouse.specs import Layer, PipelineSpec
from lakehouse_airflow.assets import table_asset
from lakehouse_airflow.operators import LakehouseJobOperator
from lakehouse_airflow.params import dag_params

if TYPE_CHECKING:
    from airflow.sdk import Context

START = pendulum.datetime(2026, 1, 1, tz="UTC")
DEFAULT_ARGS = {
    "owner": "data-platform",
    "retries": 2,
    "retry_delay": timedelta(minutes=1),
    "retry_exponential_backoff": 2.0,
}
# Params that only a bronze layer takes.
_BRONZE_PARAMS = (
    "max_files_per_trigger",
    "max_offsets_per_trigger",
    "accept_data_loss",
    "kafka_replay_from",
    "kafka_replay_to",
)


def dag_id(pipeline: str) -> str:
    return f"{pipeline}_pipeline"


def _schedule(pipeline: PipelineSpec, settings: Settings) -> Any:
    """Assets for a pipeline that reads other pipelines' tables, else its cron."""
    if pipeline.reads:
        assets = [table_asset(t) for t in pipeline.reads]
        schedule: Any = assets[0]
        for asset in assets[1:]:
            schedule = schedule | asset
        return schedule
    cron = settings.pipeline(pipeline).schedule
    # Interval semantics: a scheduled run covers [previous tick, this tick); a backfill run
    # re-derives exactly its interval.
    return CronDataIntervalTimetable(cron, timezone="UTC") if cron else None


def _doc(pipeline: PipelineSpec) -> str:
    rows = "\n".join(
        f"| `{s.layer}` | {', '.join(s.sources) or 'the source'} | {', '.join(s.targets)} |"
        for s in pipeline.streams
    )
    reads = (
        f"\n\nRuns when {' or '.join(f'`{t}`' for t in pipeline.reads)} changes (Airflow assets)."
        if pipeline.reads
        else ""
    )
    return (
        f"### {dag_id(pipeline.name)}\n\n{pipeline.description}\n\n"
        f"Declared in `{pipeline.origin}`.{reads}\n\n"
        "| task | reads | writes |\n| --- | --- | --- |\n"
        f"| `plan` | the run's params | nothing: checks them and says what the run will do |\n"
        f"{rows}\n\n{pipeline.doc or ''}"
    )


def pipeline_dag(pipeline: PipelineSpec, settings: Settings) -> DAG:
    """``<name>_pipeline`` for ``pipeline``."""
    layers = [str(layer) for layer in pipeline.layers]
    overrides: dict[str, dict[str, Any]] = {
        "layers": {"default": layers, "items": {"type": "string", "enum": layers}}
    }
    exclude = () if Layer.BRONZE in pipeline.layers else _BRONZE_PARAMS
    with DAG(
        dag_id=dag_id(pipeline.name),
        schedule=_schedule(pipeline, settings),
        start_date=START,
        catchup=False,
        max_active_runs=1,
        dagrun_timeout=timedelta(hours=6),
        tags=["lakehouse", "pipeline", pipeline.name],
        doc_md=_doc(pipeline),
        params=dag_params(RunParams, overrides, exclude=exclude),
        default_args=DEFAULT_ARGS,
    ) as dag:
        name = pipeline.name

        @task(retries=0)
        def plan(**context: Any) -> dict[str, Any]:
            """Check the params once more (the schema ran at trigger time) and say what the
            run will do."""
            from airflow.sdk.exceptions import AirflowFailException

            from lakehouse.errors import LakehouseError
            from lakehouse.registry import get_pipeline
            from lakehouse_airflow.run_params import effective_params

            ctx: Context = context  # type: ignore[assignment]
            try:
                spec = get_pipeline(name)
                params = effective_params(ctx, spec)
            except LakehouseError as exc:
                raise AirflowFailException(f"[{exc.code}] {exc}") from None
            report = [params.describe()]
            if params.dry_run:
                from lakehouse.pending import dry_run_report
                from lakehouse_airflow.s3_access import s3_access

                try:
                    settings, s3 = s3_access(Settings.from_env())
                except LakehouseError as exc:
                    raise AirflowFailException(f"[{exc.code}] {exc}") from None
                report = dry_run_report(settings, spec, params, s3)
                report.append("dry run: nothing was changed; the layer tasks are skipped")
            for line in report:
                print(line)
            return {"mode": str(params.mode), "layers": list(params.layers), "report": report}

        jobs = [
            LakehouseJobOperator(
                task_id=str(stream.layer),
                pipeline=name,
                layer=stream.layer,
                max_active_tis_per_dag=1,
                # A layer left out by the params is skipped; the next one still runs.
                trigger_rule="none_failed",
                outlets=[table_asset(t) for t in stream.targets],
                doc_md=f"`{stream.job}`: writes {', '.join(stream.targets)}.",
            )
            for stream in pipeline.streams
        ]
        chain(plan(), *jobs)
    return dag


def broken_declaration_dag(origin: str, message: str) -> DAG:
    """A DAG named after a declaration that did not load, failing with the reason."""
    name = Path(origin).stem
    with DAG(
        dag_id=dag_id(name),
        schedule=None,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["lakehouse", "pipeline", "broken-declaration"],
        doc_md=f"### {dag_id(name)}: the declaration did not load\n\n```\n{message}\n```\n\n"
        "Fix the file; the other pipelines run without it.",
        default_args={"owner": "data-platform", "retries": 0},
    ) as dag:

        @task(task_id="declaration")
        def declaration() -> None:
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(f"[DeclarationError] {message}")

        declaration()
    return dag
