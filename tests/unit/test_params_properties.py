"""Properties of the run params: every value the schema accepts is one the jobs can run, and
every value refused is refused before anything runs.

Hypothesis generates raw params (as a trigger form or ``dag_run.conf`` would carry them: JSON
values, right and wrong, near the bounds) for the three params models and checks that

* ``parse`` either refuses with ``InvalidRunParams`` or returns a model whose command line
  (``job_args``) reads back through the jobs' own argparse (``add_arguments`` /
  ``from_namespace``) to the same values, and whose instants convert to UTC as the jobs
  convert them (``datetime.timestamp``, ``utctimetuple``: where ``9999-12-31T23:59:59-23:59``
  used to overflow in silver);
* the DAG's ``Param`` JSON schema of each field (validated as Airflow validates it) accepts a
  value exactly when the model's field does; a run the form accepts can then only be refused
  by a check across fields, which the ``plan`` task makes before any layer runs;
* a refused run changes nothing: a layer job given refused params exits 2 before Spark starts
  and leaves no table and no run log under its root.
"""

from __future__ import annotations

import argparse
import calendar
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from lakehouse.errors import InvalidRunParams
from lakehouse.params import (
    Action,
    MaintenanceParams,
    Mode,
    ParamsModel,
    RestoreParams,
    RunParams,
    param_schemas,
)
from lakehouse.specs import Layer

MODELS: list[type[ParamsModel]] = [RunParams, MaintenanceParams, RestoreParams]

# -- values ---------------------------------------------------------------------------------


def _two(low: int, high: int) -> st.SearchStrategy[str]:
    return st.integers(low, high).map(lambda n: f"{n:02d}")


@st.composite
def instant_texts(draw: st.DrawFn) -> str:
    """ISO-8601-like texts around every edge: years past 2999 and before 1970, impossible
    dates, zones of +/-23:59, no zone, fractions of 7 digits."""
    year = draw(st.sampled_from([1969, 1970, 2026, 2999, 3000, 9999]) | st.integers(0, 10001))
    date = f"{year:04d}-{draw(_two(0, 13))}-{draw(_two(0, 32))}"
    time = f"{draw(_two(0, 24))}:{draw(_two(0, 60))}"
    if draw(st.booleans()):
        time += f":{draw(_two(0, 60))}"
        if draw(st.booleans()):
            time += "." + draw(st.text("0123456789", min_size=1, max_size=7))
    zone = draw(
        st.sampled_from(["Z", "", "z", "+00:00"])
        | st.builds(lambda s, h, m: f"{s}{h}:{m}", st.sampled_from("+-"), _two(0, 24), _two(0, 60))
    )
    separator = draw(st.sampled_from(["T", "T", "T", " ", "t"]))
    tail = draw(st.sampled_from(["", "", "", "\n", " "]))
    return f"{date}{separator}{time}{zone}{tail}"


JUNK = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)


def ints_near(*bounds: int) -> st.SearchStrategy[Any]:
    edges = [b + d for b in bounds for d in (-1, 0, 1)]
    return st.sampled_from(edges) | st.integers(min(edges), max(edges))


def names(*choices: str) -> st.SearchStrategy[str]:
    return st.sampled_from(choices) | st.sampled_from(choices).map(str.upper)


def lists_of(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(values, max_size=4) | values


TABLE_NAMES = names("silver/orders", "bronze/orders_events", "ops/run_log") | st.sampled_from(
    ["", "-x", "a,b", "../etc", "silver/orders\n", "Silver/orders"]
)

FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "mode": names(*(m.value for m in Mode)),
    "reprocess_from": instant_texts(),
    "reprocess_to": instant_texts(),
    "kafka_replay_from": instant_texts(),
    "kafka_replay_to": instant_texts(),
    "layers": lists_of(names(*(layer.value for layer in Layer), "platinum")),
    "layer": names(*(layer.value for layer in Layer)),
    "max_files_per_trigger": ints_near(1, 100_000),
    "max_offsets_per_trigger": ints_near(1, 50_000_000),
    "accept_data_loss": st.booleans(),
    "dry_run": st.booleans(),
    "actions": lists_of(names(*(a.value for a in Action))),
    "tables": lists_of(TABLE_NAMES),
    "retention_hours": ints_near(0, 168, 87_600),
    "keep_backups": ints_near(1, 1000),
    "small_file_mb": st.floats(-1, 2 * 1024 * 1024) | ints_near(0, 1024 * 1024),
    "min_small_files": ints_near(2, 1_000_000),
    "pipeline": st.sampled_from(["orders", "customers", "a1_b", "Orders", "1x", "", "orders\n"]),
    "backup_id": st.sampled_from(
        ["latest", "20261126T011049573276Z", "2026", "../x", "latest\n", "LATEST"]
    ),
}


def value_for(name: str) -> st.SearchStrategy[Any]:
    return FIELD_VALUES[name] | JUNK


@st.composite
def raw_params(draw: st.DrawFn, model: type[ParamsModel]) -> dict[str, Any]:
    chosen = draw(st.lists(st.sampled_from(sorted(model.model_fields)), unique=True, max_size=6))
    raw = {name: draw(value_for(name)) for name in chosen}
    if model is RestoreParams and "pipeline" not in raw and draw(st.booleans()):
        raw["pipeline"] = "orders"
    if draw(st.integers(0, 9)) == 0:
        raw["unknown_param"] = draw(JUNK)
    return raw


# -- the two sides ----------------------------------------------------------------------------


def field_accepts(model: type[ParamsModel], name: str, value: Any) -> bool:
    """The model's check of one field alone (its type and bounds, no cross-field rule)."""
    info = model.model_fields[name]
    adapter: TypeAdapter[Any] = TypeAdapter(Annotated[info.annotation, info])
    if value is None and info.is_required():
        return False
    try:
        adapter.validate_python(value)
    except ValidationError:
        return False
    return True


def schema_accepts(model: type[ParamsModel], name: str, value: Any) -> bool:
    """The DAG Param of this field, validated as Airflow validates a trigger."""
    from airflow.sdk import Param
    from airflow.sdk.definitions.param import ParamValidationError

    schema = dict(param_schemas(model)[name])
    default = schema.pop("default")
    try:
        Param(default, **schema).resolve(value)
    except (ParamValidationError, ValueError, TypeError):
        return False
    return True


def job_round_trip(model: type[ParamsModel], params: ParamsModel, job: str | None) -> None:
    """``params`` on ``job``'s command line, read back as the job reads it."""
    if isinstance(params, RestoreParams):
        from jobs import maintenance
        from jobs.runtime import job_parser

        parser = job_parser("maintenance", "", one_pipeline=False)
        maintenance.add_arguments(parser)
        namespace = parser.parse_args(["--pipeline", params.pipeline, *params.job_args()])
        assert maintenance.parse(namespace) == params
        return
    parser = argparse.ArgumentParser(exit_on_error=False)
    model.add_arguments(parser)
    args = params.job_args(job)
    again = model.from_namespace(parser.parse_args(args))
    for name in model.job_fields(job):
        assert getattr(again, name) == getattr(params, name), (name, args)


def instants_convert(params: ParamsModel) -> None:
    for value in params.__dict__.values():
        if isinstance(value, datetime):
            assert value.tzinfo is not None
            value.astimezone(UTC)
            value.timestamp()
            calendar.timegm(value.utctimetuple())  # what PySpark does with a literal


# -- properties -------------------------------------------------------------------------------


PROPERTY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
Test = Callable[[type[ParamsModel], st.DataObject], None]


def every_model(test: Test) -> Test:
    """Run ``test(model, data)`` for each params model on 400 drawn examples."""
    drawn = PROPERTY(given(data=st.data())(test))
    marked: Test = pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)(drawn)
    return marked


@every_model
def test_parse_accepts_only_what_the_jobs_run(
    model: type[ParamsModel], data: st.DataObject
) -> None:
    raw = data.draw(raw_params(model))
    try:
        params = model.parse(raw)
    except InvalidRunParams:
        return
    instants_convert(params)
    jobs: list[str | None] = [None]
    if isinstance(params, RunParams):
        jobs += [str(layer) for layer in params.layers]
    for job in jobs:
        job_round_trip(model, params, job)


@every_model
def test_the_dag_schema_accepts_a_field_exactly_when_the_model_does(
    model: type[ParamsModel], data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(sorted(model.model_fields)))
    value = data.draw(value_for(name))
    if value is None and not model.model_fields[name].is_required():
        # An unset param: the form sends the default (None for the optional ones).
        value = model.model_fields[name].default
        value = list(value) if isinstance(value, tuple) else value
        value = getattr(value, "value", value)
    assert schema_accepts(model, name, value) == field_accepts(model, name, value), (name, value)


@every_model
def test_a_run_the_form_accepts_is_refused_only_by_a_rule_across_fields(
    model: type[ParamsModel], data: st.DataObject
) -> None:
    """What parse refuses and the form lets through is a combination (a window backwards, a
    mode without its window): the plan task refuses it before any layer runs."""
    raw = data.draw(raw_params(model))
    if "unknown_param" in raw:
        with pytest.raises(InvalidRunParams, match="unknown parameters"):
            model.parse(raw)
        return
    form_ok = all(schema_accepts(model, k, v) for k, v in raw.items() if v is not None)
    try:
        model.parse(raw)
    except InvalidRunParams:
        if form_ok:
            assert all(field_accepts(model, k, v) for k, v in raw.items() if v is not None)
        return
    assert form_ok, raw


def test_the_far_future_window_of_the_issue_is_refused_by_form_and_model() -> None:
    window = {
        "mode": "reprocess",
        "reprocess_from": "2026-01-01T00:00:00Z",
        "reprocess_to": "9999-12-31T23:59:59-23:59",
    }
    assert not schema_accepts(RunParams, "reprocess_to", window["reprocess_to"])
    with pytest.raises(InvalidRunParams, match="reprocess_to"):
        RunParams.parse(window)
    # The latest instant accepted still converts (year 3000 in UTC).
    latest = RunParams.parse({**window, "reprocess_to": "2999-12-31T23:59:59-23:59"})
    instants_convert(latest)


def test_an_aware_datetime_outside_the_years_is_refused_too() -> None:
    """Python callers may pass datetimes; the same bounds hold for them."""
    from datetime import timedelta, timezone

    far = datetime(9999, 12, 31, 23, 59, tzinfo=timezone(-timedelta(hours=23, minutes=59)))
    with pytest.raises(InvalidRunParams, match="reprocess_to"):
        RunParams.parse(
            {"mode": "reprocess", "reprocess_from": "2026-01-01T00:00:00Z", "reprocess_to": far}
        )


# -- a refused run changes nothing --------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [
            "--mode",
            "reprocess",
            "--reprocess-from",
            "2026-01-01T00:00:00Z",
            "--reprocess-to",
            "9999-12-31T23:59:59-23:59",
        ],
        [
            "--mode",
            "reprocess",
            "--reprocess-from",
            "2026-01-02T00:00:00Z",
            "--reprocess-to",
            "2026-01-01T00:00:00Z",
        ],
        ["--mode", "rewind"],
        ["--max-files-per-trigger", "0"],
        ["--kafka-replay-from", "2026-01-01T00:00:00Z"],
    ],
)
def test_a_refused_layer_run_exits_2_before_spark_and_leaves_nothing(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from jobs import runtime

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark was started for a refused run")

    monkeypatch.setattr(runtime, "build_spark", no_spark)
    root = tmp_path / "lake"
    code = runtime.run_layer(
        ["--pipeline", "orders", "--root", str(root), *argv],
        Layer.SILVER,
        lambda ctx: pytest.fail("the body ran"),  # type: ignore[arg-type,return-value]
    )
    assert code == 2
    assert "ERROR [InvalidRunParams]" in capsys.readouterr().err
    assert not root.exists() or not any(root.rglob("*"))
