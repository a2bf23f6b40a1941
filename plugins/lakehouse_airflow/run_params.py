"""The run's effective params: what the trigger form said, or, for a backfill run, its window.

Airflow's own backfill (``airflow backfill create``, or *Backfill* in the UI) creates one run
per schedule interval with default params. Such a run re-derives silver and gold for its data
interval: ``mode=reprocess`` with ``[data_interval_start, data_interval_end)`` as the event_ts
window. A backfill run whose params already ask for something else keeps them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lakehouse.params import RunParams
from lakehouse.specs import PipelineSpec

if TYPE_CHECKING:
    from airflow.sdk import Context


def _is_backfill(context: Context) -> bool:
    dag_run = context.get("dag_run")
    run_type = getattr(dag_run, "run_type", None)
    return str(getattr(run_type, "value", run_type)) == "backfill"


def effective_params(context: Context, pipeline: PipelineSpec) -> RunParams:
    """Parse and check the params of this run (raises ``InvalidRunParams``)."""
    raw: dict[str, Any] = dict(context["params"])
    if _is_backfill(context) and (raw.get("mode") or "incremental") == "incremental":
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        if start is not None and end is not None and end > start:
            raw.update(
                mode="reprocess",
                reprocess_from=start.isoformat(),
                reprocess_to=end.isoformat(),
            )
    params: RunParams = RunParams.parse(raw)
    params.check_against(pipeline)
    return params
