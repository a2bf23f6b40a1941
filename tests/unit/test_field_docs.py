"""A model's field descriptions are the docstrings under its fields (lakehouse.field_docs)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, Field

from lakehouse.field_docs import DescribedModel, described
from lakehouse.params import MaintenanceParams, RunParams, param_schemas
from lakehouse.settings import PipelineSettings, Settings


class Top(BaseModel):
    """Not a field's description."""

    plain: int = 1
    """An integer,
        over two lines."""
    explicit: str = Field("x", description="given by Field")
    """not taken: the field has a description already"""
    bare: bool = False
    constant: ClassVar[int] = 3
    """not a field: a class variable"""


def schema_descriptions(model: type[BaseModel]) -> dict[str, str | None]:
    properties = model.model_json_schema()["properties"]
    return {name: prop.get("description") for name, prop in properties.items()}


def test_a_top_level_models_docstrings_become_its_descriptions_and_schemas() -> None:
    described(Top)
    expected = {"plain": "An integer,\nover two lines.", "explicit": "given by Field", "bare": None}
    assert {n: f.description for n, f in Top.model_fields.items()} == expected
    assert schema_descriptions(Top) == expected


def test_a_model_inside_a_function_is_read_from_its_own_lines() -> None:
    class Inner(BaseModel):
        size: int = 2
        """How big."""

    described(Inner)
    assert Inner.model_fields["size"].description == "How big."
    assert schema_descriptions(Inner) == {"size": "How big."}


def test_a_model_without_source_gets_no_descriptions_and_no_error() -> None:
    namespace = {"__name__": "made_by_exec", "BaseModel": BaseModel}
    exec('class Made(BaseModel):\n    a: int = 1\n    """doc"""\n', namespace)
    made = namespace["Made"]
    described(made)
    assert made.model_fields["a"].description is None


def test_the_projects_models_carry_their_docstrings_to_the_form_and_the_readme() -> None:
    small = "OPTIMIZE: a file below this size is small."
    assert MaintenanceParams.model_fields["small_file_mb"].description == small
    assert param_schemas(MaintenanceParams)["small_file_mb"]["description"] == small
    # A field without a docstring has no description, in the form too.
    assert "description" not in param_schemas(MaintenanceParams)["keep_backups"]
    assert all(f.description for f in RunParams.model_fields.values())
    assert PipelineSettings.model_fields["kafka_topics"].description == (
        "topics to read, comma-separated, instead of the declared ones"
    )
    assert Settings.model_fields["run_driver_keep_s"].description


class Early(DescribedModel):
    """Described as it is made, before ``Later`` exists."""

    later: Later | None = None
    """A type defined below."""


class Later(BaseModel):
    n: int = 0


def test_a_model_naming_a_type_defined_after_it_is_described_and_resolved_later() -> None:
    assert Early.model_fields["later"].description == "A type defined below."
    assert Early(later=Later(n=2)).later == Later(n=2)
    assert schema_descriptions(Early) == {"later": "A type defined below."}
