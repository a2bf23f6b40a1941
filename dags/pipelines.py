"""
### The pipeline DAGs: one `<name>_pipeline` per declaration

Every pipeline declared in the pipelines folder (`LAKEHOUSE_PIPELINES_DIR`, `pipelines/` by
default) gets its DAG here: `plan` then one task per layer (bronze, silver, gold), each a
scheduled **availableNow** Spark Structured Streaming job that takes everything that arrived
since its last run, commits it exactly once and stops. See each DAG's own description, and
the README's "Add a pipeline".

A declaration that does not load gets a DAG of its name that only fails with the reason;
the other DAGs load as usual.
"""

from __future__ import annotations

import logging

from lakehouse.registry import registry
from lakehouse.settings import Settings
from lakehouse_airflow.pipeline_dag import broken_declaration_dag, pipeline_dag

SETTINGS = Settings.from_env()  # environment variables only
REGISTRY = registry(SETTINGS)  # imports the declarations: no Spark, no I/O beyond them

for _pipeline in REGISTRY.pipelines.values():
    _dag = pipeline_dag(_pipeline, SETTINGS)
    globals()[_dag.dag_id] = _dag
for _origin, _message in REGISTRY.errors.items():
    logging.getLogger("lakehouse").error("pipeline declaration refused: %s", _message)
    _dag = broken_declaration_dag(_origin, _message)
    globals()[_dag.dag_id] = _dag
