"""The lakehouse's Airflow plugin: the API server middleware that grants, or refuses, the run
requests that only a permitted user may make (a checkpoint restore, accept_data_loss); see
``lakehouse_airflow.authz``."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from lakehouse_airflow.authz import GrantMiddleware


class LakehousePlugin(AirflowPlugin):
    name = "lakehouse"
    fastapi_root_middlewares = [  # noqa: RUF012 (Airflow's plugin interface)
        {"middleware": GrantMiddleware, "args": [], "kwargs": {}, "name": "lakehouse grants"}
    ]
