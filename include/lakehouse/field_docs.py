"""A pydantic model's field descriptions from the docstrings under its fields.

Pydantic's own ``use_attribute_docstrings`` finds a class's source by walking the call stack
and asking ``inspect.getmodule`` about every frame, which looks at the path of every loaded
module each time. In a process that has loaded Airflow's task runner (some 1,700 modules), the
settings and parameter models made a parse of ``dags/pipelines.py`` 0.49-0.52 s instead of
0.35-0.38 s, and each task's process parses its DAG file once. ``described`` parses each
model's module once instead, and gives the model the same descriptions (and, as pydantic's,
none where there is no source to read).
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from functools import cache
from typing import Any

from pydantic import BaseModel


@cache
def _module_classes(module: str) -> dict[str, ast.ClassDef]:
    """The classes at the top of ``module``'s source, by name (each module parsed once)."""
    tree = ast.parse(inspect.getsource(sys.modules[module]))
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _class_node(cls: type) -> ast.ClassDef:
    found = _module_classes(cls.__module__).get(cls.__qualname__)
    if found is not None:
        return found
    # A class inside another one or a function: its own lines.
    lines, _ = inspect.getsourcelines(cls)
    (node,) = ast.parse(textwrap.dedent("".join(lines))).body
    assert isinstance(node, ast.ClassDef), node
    return node


def attribute_docstrings(cls: type) -> dict[str, str]:
    """Each field of ``cls`` declared with an annotation and followed by a string literal:
    that string, cleaned as a docstring is (``inspect.cleandoc``)."""
    node = _class_node(cls)
    docs: dict[str, str] = {}
    for statement, after in zip(node.body, node.body[1:], strict=False):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[statement.target.id] = inspect.cleandoc(after.value.value)
    return docs


def described(model: Any) -> None:
    """Give each field of the pydantic ``model`` class that has no description the docstring
    under it, in its field information and its JSON schema."""
    try:
        docstrings = attribute_docstrings(model)
    except (OSError, KeyError, TypeError):  # no source (a class made by exec, code without it)
        return
    fields = model.model_fields
    docs = {
        name: doc
        for name, doc in docstrings.items()
        if name in fields and fields[name].description is None
    }
    for name, doc in docs.items():
        fields[name].description = doc
    if docs:
        # Types a model names before they are defined are left for pydantic to resolve later.
        model.model_rebuild(force=True, raise_errors=False)


class DescribedModel(BaseModel):
    """A model whose fields' descriptions are the docstrings under them (``described``)."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        described(cls)
