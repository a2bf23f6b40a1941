"""DAG ``Param``s from the project's params models (``lakehouse.params``), so that the trigger
form, the jobs' command line and the checks are declared once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import Param

from lakehouse.params import ParamsModel, param_schemas


def dag_params(
    model: type[ParamsModel],
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    exclude: Sequence[str] = (),
) -> dict[str, Param]:
    """One ``Param`` per field of ``model``: its default, type, bounds, choices, pattern,
    title, description and form section; ``overrides`` adds what only the deployment knows
    (the VACUUM floor, the table names), ``exclude`` leaves out what does not apply."""
    params = {}
    for name, schema in param_schemas(model, overrides, exclude).items():
        schema = dict(schema)
        default = schema.pop("default")
        params[name] = Param(default, **schema)
    return params
