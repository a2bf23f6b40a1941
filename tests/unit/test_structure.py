"""The shape of the code: no import cycle among the project's modules (counting imports inside
functions too), and the light package never imports the Spark side."""

from __future__ import annotations

import ast
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
# Where each import root lives: (folder, the folder its module names are relative to).
PACKAGES = (
    ("include/lakehouse", "include"),
    ("jobs", "."),
    ("plugins/lakehouse_airflow", "plugins"),
    ("dags", "."),
    ("pipelines", "."),
)


def modules() -> dict[str, Path]:
    found = {}
    for folder, base in PACKAGES:
        for path in (PROJECT / folder).rglob("*.py"):
            parts = path.relative_to(PROJECT / base).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports, anywhere in it (``TYPE_CHECKING`` blocks too:
    harmless at run time, but a cycle there is still a tangle)."""
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            named.add(node.module)
            named.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
    return {name for name in named if name in known}


def test_no_import_cycle() -> None:
    known = modules()
    graph = {name: imports(path, known) - {name} for name, path in known.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        path.append(name)
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, path)
        path.pop()
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    assert len(known) > 50
    assert cycles == []


def test_the_light_package_never_imports_the_spark_side() -> None:
    known = modules()
    light = {n: p for n, p in known.items() if n.split(".")[0] == "lakehouse"}
    spark_side = {
        f"{name}: {target}"
        for name, path in light.items()
        for target in imports(path, known)
        if target.split(".")[0] == "jobs"
    }
    assert spark_side == set()
