"""DAG integrity: every DAG file parses cheaply and follows the project's policy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import PROJECT_DIR

DAG_FILES = sorted((PROJECT_DIR / "dags").glob("*.py"))
# The one file that makes a DAG per declared pipeline; every other file makes one DAG.
GENERATOR = PROJECT_DIR / "dags" / "pipelines.py"
PIPELINE_DAGS = ("orders_pipeline", "customers_pipeline", "segment_sales_pipeline")
HEAVY_MODULES = ("pyspark", "delta", "deltalake", "pandas", "pyarrow", "confluent_kafka")


@pytest.fixture(scope="module")
def dagbag():  # type: ignore[no-untyped-def]
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(PROJECT_DIR / "dags"))


def test_no_import_errors(dagbag) -> None:  # type: ignore[no-untyped-def]
    assert dagbag.import_errors == {}, "\n".join(
        f"{path}: {error}" for path, error in dagbag.import_errors.items()
    )


@pytest.mark.parametrize("path", DAG_FILES, ids=lambda p: p.name)
def test_dag_policy(path: Path, dagbag) -> None:  # type: ignore[no-untyped-def]
    dags = [d for d in dagbag.dags.values() if Path(d.fileloc).resolve() == path.resolve()]
    if path == GENERATOR:
        assert sorted(d.dag_id for d in dags) == sorted(PIPELINE_DAGS)
        for dag in dags:  # each names the declaration it comes from
            name = dag.dag_id.removesuffix("_pipeline")
            assert f"pipelines/{name}.py" in dag.doc_md, dag.dag_id
    else:
        assert len(dags) == 1, f"{path.name} must define exactly one DAG"
        assert dags[0].dag_id == path.stem, f"{path.name}: dag_id must equal the file stem"
    for dag in dags:
        check_policy(path, dag)


def check_policy(path: Path, dag) -> None:  # type: ignore[no-untyped-def]
    assert dag.tags, f"{path.name}: tag the DAG"
    assert dag.doc_md and len(dag.doc_md) > 100, f"{path.name}: doc_md explains the DAG"
    assert dag.catchup is False, f"{path.name}: catchup must be off"
    assert str(dag.start_date.tzinfo) == "UTC", f"{path.name}: start_date must be UTC"
    assert dag.max_active_runs == 1, f"{path.name}: one active run at a time"
    for task in dag.tasks:
        if task.task_type.endswith("JobOperator"):
            assert task.retries >= 1, f"{path.name}:{task.task_id} needs retries"
            assert task.max_active_tis_per_dag == 1, f"{path.name}:{task.task_id}"


def test_dag_files_import_nothing_heavy() -> None:
    code = (
        "import importlib.util, json, sys\n"
        f"for path in {[str(p) for p in DAG_FILES]!r}:\n"
        "    spec = importlib.util.spec_from_file_location('dag_' + str(abs(hash(path))), path)\n"
        "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        f"print(json.dumps(sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_pipeline_dags_follow_their_declarations(dagbag) -> None:  # type: ignore[no-untyped-def]
    def order(dag_id: str) -> dict[str, list[str]]:
        return {t.task_id: sorted(t.upstream_task_ids) for t in dagbag.dags[dag_id].tasks}

    assert order("orders_pipeline") == {
        "plan": [],
        "bronze": ["plan"],
        "silver": ["bronze"],
        "gold": ["silver"],
    }
    assert order("customers_pipeline") == {"plan": [], "bronze": ["plan"], "silver": ["bronze"]}
    assert order("segment_sales_pipeline") == {"plan": [], "gold": ["plan"]}
    outlets = {
        t.task_id: sorted(a.name for a in t.outlets) for t in dagbag.dags["orders_pipeline"].tasks
    }
    assert outlets["silver"] == ["lakehouse.silver.orders", "lakehouse.silver.orders_quarantine"]
    # Segment sales runs when either silver table it reads changes: Airflow assets.
    timetable = dagbag.dags["segment_sales_pipeline"].timetable
    assert type(timetable).__name__ == "AssetTriggeredTimetable"
    watched = sorted(a.name for a in timetable.asset_condition.objects)
    assert watched == ["lakehouse.silver.customers_history", "lakehouse.silver.orders"]
    # A gold-only pipeline's form has no Kafka or landing-file params, and one layer.
    params = dagbag.dags["segment_sales_pipeline"].params
    assert "kafka_replay_from" not in params and "max_files_per_trigger" not in params
    assert params["layers"] == ["gold"]


@pytest.mark.parametrize(
    ("params", "ok"),
    [
        ({}, True),
        (
            {
                "mode": "reprocess",
                "reprocess_from": "2026-11-01T00:00:00Z",
                "reprocess_to": "2026-11-02T00:00:00+01:00",
            },
            True,
        ),
        ({"mode": "full_refresh", "layers": ["silver", "gold"]}, True),
        ({"mode": "replay"}, False),
        ({"reprocess_from": "yesterday"}, False),
        ({"layers": ["bronze", "platinum"]}, False),
        ({"layers": []}, False),
        ({"max_files_per_trigger": 0}, False),
        ({"max_offsets_per_trigger": 10**12}, False),
        ({"accept_data_loss": True}, True),
        ({"accept_data_loss": "yes"}, False),
        (
            {"kafka_replay_from": "2026-11-02T00:00:00Z", "kafka_replay_to": "2026-11-03T00:00Z"},
            True,
        ),
        ({"kafka_replay_from": "2026-11-02 00:00"}, False),
    ],
)
def test_params_schema_rejects_bad_values_before_a_run(dagbag, params: dict, ok: bool) -> None:  # type: ignore[no-untyped-def]
    check_schema(dagbag.dags["orders_pipeline"], params, ok)


def check_schema(dag, params: dict, ok: bool) -> None:  # type: ignore[no-untyped-def]
    """The DAG's params schema accepts ``params`` exactly when ``ok``."""
    import copy

    from airflow.sdk.definitions.param import ParamsDict

    def resolve() -> None:
        merged = ParamsDict(copy.deepcopy(dag.params))
        for key, value in params.items():
            merged[key] = value
        merged.validate()

    if ok:
        resolve()
    else:
        with pytest.raises(
            Exception, match=r"(?i)invalid|not valid|enum|minimum|maximum|format|pattern"
        ):
            resolve()


def test_maintenance_dags_shape(dagbag) -> None:  # type: ignore[no-untyped-def]
    dag = dagbag.dags["lakehouse_maintenance"]
    order = {t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks}
    assert order == {
        "plan": [],
        "optimize": ["plan"],
        "vacuum": ["optimize"],
        "backup": ["vacuum"],
    }
    restore = dagbag.dags["lakehouse_restore"]
    assert type(restore.timetable).__name__ == "NullTimetable", "a restore is never scheduled"
    assert "admin" in restore.tags
    assert restore.params["dry_run"] is True, "a restore only checks unless told otherwise"


@pytest.mark.parametrize(
    ("dag_id", "params", "ok"),
    [
        ("lakehouse_maintenance", {}, True),
        ("lakehouse_maintenance", {"actions": ["vacuum"], "tables": ["silver/orders"]}, True),
        ("lakehouse_maintenance", {"retention_hours": 24}, False),  # below the 168 h floor
        ("lakehouse_maintenance", {"actions": ["shrink"]}, False),
        ("lakehouse_maintenance", {"tables": ["../../etc"]}, False),
        ("lakehouse_maintenance", {"keep_backups": 0}, False),
        ("lakehouse_restore", {"layer": "gold", "backup_id": "20261126T011049573276Z"}, True),
        ("lakehouse_restore", {"layer": "platinum"}, False),
        ("lakehouse_restore", {"backup_id": "../other"}, False),
    ],
)
def test_maintenance_params_are_checked_before_a_run(  # type: ignore[no-untyped-def]
    dagbag, dag_id: str, params: dict, ok: bool
) -> None:
    check_schema(dagbag.dags[dag_id], params, ok)
