"""Declarations: what the registry loads, and what it refuses, by file and field, without
stopping the other pipelines."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lakehouse.errors import DeclarationError
from lakehouse.registry import load, registry
from lakehouse.specs import (
    Expectation,
    FieldSpec,
    Gold,
    GoldInput,
    History,
    LatestState,
    Layer,
    PipelineSpec,
    RecordSpec,
    Source,
    StreamSpec,
)
from tests import PROJECT_DIR

RECORD = RecordSpec(
    fields=(FieldSpec("event_id", "id"), FieldSpec("k", "id"), FieldSpec("at", "timestamp")),
    key="k",
    time="at",
)
HEADER = "from lakehouse.specs import *\n"


def declare(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def events_pipeline(name: str, table: str = "silver/e") -> str:
    return f"""
        PIPELINE = PipelineSpec(
            name="{name}",
            source=Source(landing="landing/{name}", bronze="bronze/{name}_events"),
            record=RecordSpec(
                fields=(FieldSpec("event_id", "id"), FieldSpec("k", "id"),
                        FieldSpec("at", "timestamp")),
                key="k", time="at",
            ),
            silver=AppendOnly(table="{table}", quarantine="silver/{name}_quarantine"),
        )
    """


def test_the_example_pipelines_load_with_their_tables_and_streams() -> None:
    lakehouse = registry()
    assert lakehouse.errors == {}
    assert sorted(lakehouse.pipelines) == ["customers", "orders", "segment_sales"]
    customers = lakehouse.get("customers")
    assert [t.name for t in customers.tables] == [
        "bronze/customers_events",
        "silver/customers_history",
        "silver/customers_quarantine",
        "silver/customers_changes",
    ]
    assert customers.stream("silver").checkpoint == "_checkpoints/silver/customers_history"
    # What each stream only appends to (no table state rebuilt for its writes); it merges
    # into its other targets.
    assert customers.stream("bronze").appended == ("bronze/customers_events",)
    assert customers.stream("silver").appended == ("silver/customers_quarantine",)
    assert lakehouse.get("orders").stream("gold").appended == ()
    assert lakehouse.get("segment_sales").reads == ("silver/orders", "silver/customers_history")
    assert lakehouse.upstream_of(lakehouse.get("segment_sales")) == ["orders", "customers"]
    assert lakehouse.get("orders").origin == str(PROJECT_DIR / "pipelines" / "orders.py")


def test_a_stream_that_appends_to_a_table_it_does_not_write_is_refused() -> None:
    with pytest.raises(DeclarationError, match="stream silver appends to a table it does not"):
        StreamSpec(Layer.SILVER, ("silver/p", "silver/p_q"), ("bronze/p",), appended=("gold/p",))


def test_a_rule_on_an_unknown_column_is_refused_by_field() -> None:
    with pytest.raises(DeclarationError, match=r"expectations\[0\] \(odd\)\.when: unknown .*'kk'"):
        PipelineSpec(
            name="p",
            source=Source(landing="landing/p", bronze="bronze/p"),
            record=RECORD,
            expectations=(Expectation("odd", "kk IS NULL AND startswith(k, 'x')", "warn"),),
            silver=LatestState(table="silver/p", quarantine="silver/p_q"),
        )


def test_a_gold_key_must_be_in_its_output_and_its_sql_read_declared_inputs() -> None:
    touches = GoldInput("p", "silver/p", touches="SELECT k FROM {changes}")
    with pytest.raises(DeclarationError, match=r"key \['day'\] is not in its output"):
        Gold(table="gold/g", schema="k STRING", key=("day",), sql="SELECT 1", inputs=(touches,))
    with pytest.raises(DeclarationError, match="reads undeclared inputs"):
        Gold(
            table="gold/g",
            schema="k STRING",
            key=("k",),
            sql="SELECT * FROM {q}",
            inputs=(touches,),
        )
    with pytest.raises(DeclarationError, match="give sql or function"):
        Gold(table="gold/g", schema="k STRING", key=("k",), inputs=(touches,))
    with pytest.raises(DeclarationError, match=r"touches must read \{changes\}"):
        Gold(
            table="gold/g",
            schema="k STRING",
            key=("k",),
            sql="SELECT k FROM {p}",
            inputs=(GoldInput("p", "silver/p", touches="SELECT k FROM {p}"),),
        )


def test_a_history_tracks_fields_of_its_record() -> None:
    with pytest.raises(DeclarationError, match=r"op/tracked name unknown fields \['name'\]"):
        PipelineSpec(
            name="p",
            source=Source(landing="landing/p", bronze="bronze/p"),
            record=RECORD,
            silver=History(
                table="silver/p",
                quarantine="silver/q",
                changes="silver/c",
                op="k",
                tracked=("name",),
            ),
        )


def test_broken_declarations_are_reported_by_file_and_the_others_load(tmp_path: Path) -> None:
    good = declare(tmp_path, "good", events_pipeline("good"))
    declare(tmp_path, "clash", events_pipeline("clash", table="silver/e"))  # good writes it too
    declare(tmp_path, "misnamed", events_pipeline("other_name", table="silver/m"))
    declare(tmp_path, "typo", "PIPELINE = PipelineSpec(name='typo', sorce=None)\n")
    declare(tmp_path, "nothing", "X = 1\n")
    declare(
        tmp_path,
        "stray",
        """
        PIPELINE = PipelineSpec(name="stray", gold=Gold(
            table="gold/s", schema="k STRING", key=("k",), sql="SELECT k FROM {x}",
            inputs=(GoldInput("x", "silver/nobody", touches="SELECT k FROM {changes}"),),
        ))
        """,
    )
    declare(tmp_path, "_helpers", "raise RuntimeError('a helper module is not a pipeline')\n")
    lakehouse = load([tmp_path])
    assert sorted(lakehouse.pipelines) == []  # good and clash write one table: both refused
    errors = {Path(f).stem: m for f, m in lakehouse.errors.items()}
    assert sorted(errors) == ["clash", "good", "misnamed", "nothing", "stray", "typo"]
    assert "silver/e is also written by clash" in errors["good"]
    assert errors["good"].startswith(str(good))
    assert "name: 'other_name' must be the file's name ('misnamed')" in errors["misnamed"]
    assert "unexpected keyword argument 'sorce'" in errors["typo"]
    assert "declares no PIPELINE" in errors["nothing"]
    assert "['silver/nobody'] are not tables of any pipeline" in errors["stray"]

    (tmp_path / "clash.py").unlink()
    lakehouse = load([tmp_path])
    assert sorted(lakehouse.pipelines) == ["good"]


def test_pipelines_that_read_each_other_are_refused(tmp_path: Path) -> None:
    for name, other in (("left", "right"), ("right", "left")):
        declare(
            tmp_path,
            name,
            f"""
            PIPELINE = PipelineSpec(name="{name}", gold=Gold(
                table="gold/{name}", schema="k STRING", key=("k",), sql="SELECT k FROM {{x}}",
                inputs=(GoldInput("x", "gold/{other}", touches="SELECT k FROM {{changes}}"),),
            ))
            """,
        )
    lakehouse = load([tmp_path])
    assert lakehouse.pipelines == {}
    assert all("read each other (a cycle)" in m for m in lakehouse.errors.values())


def test_a_broken_declaration_gets_a_dag_that_fails_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    declare(tmp_path, "good", events_pipeline("good"))
    declare(
        tmp_path,
        "bad",
        events_pipeline("bad", table="silver/b").replace(
            "silver=", 'expectations=(Expectation("x", "nope > 1", "drop"),),\n            silver='
        ),
    )
    monkeypatch.setenv("LAKEHOUSE_PIPELINES_DIR", str(tmp_path))
    dagbag = DagBag(dag_folder=str(PROJECT_DIR / "dags" / "pipelines.py"))
    assert dagbag.import_errors == {}
    assert sorted(dagbag.dags) == ["bad_pipeline", "good_pipeline"]
    broken = dagbag.dags["bad_pipeline"]
    assert "broken-declaration" in broken.tags
    assert "bad.py" in broken.doc_md and "expectations[0] (x).when: unknown column(s) ['nope']" in (
        broken.doc_md
    )
    assert [t.task_id for t in broken.tasks] == ["declaration"]
