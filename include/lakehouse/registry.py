"""The pipelines this deployment runs, discovered from its pipelines folders: the one source of
every pipeline, table and stream name.

Each ``<name>.py`` in a folder of ``LAKEHOUSE_PIPELINES_DIR`` (``<project>/pipelines`` by
default; several folders separated by ``:``) declares one pipeline as ``PIPELINE =
PipelineSpec(...)`` named like its file. Files starting with ``_`` are helpers, not
pipelines. A file that cannot be loaded, or whose declaration is wrong on its own or
together with the others (two pipelines writing one table, a gold reading a table nobody
writes, a cycle between pipelines), is reported by name in ``Registry.errors`` and left
out; the others load. Nothing here imports Spark: the DAG files read the registry.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from lakehouse.errors import ConfigurationError
from lakehouse.settings import Settings
from lakehouse.specs import RUN_LOG, PipelineSpec, StreamSpec, TableSpec

# The package the declarations are imported under: ``lakehouse_pipelines.<name>``.
PACKAGE = "lakehouse_pipelines"


@dataclass(frozen=True)
class Registry:
    """Every pipeline that loaded, and why the others did not (file -> message)."""

    pipelines: Mapping[str, PipelineSpec]
    errors: Mapping[str, str] = field(default_factory=dict)

    def get(self, name: str) -> PipelineSpec:
        try:
            return self.pipelines[name]
        except KeyError:
            broken = [m for f, m in self.errors.items() if Path(f).stem == name]
            if broken:
                raise ConfigurationError(f"pipeline {name!r} did not load: {broken[0]}") from None
            raise ConfigurationError(
                f"unknown pipeline {name!r}; known: {', '.join(sorted(self.pipelines))}."
            ) from None

    @property
    def tables(self) -> tuple[TableSpec, ...]:
        """Every table of every pipeline, and the run log."""
        return (*(t for p in self.pipelines.values() for t in p.tables), RUN_LOG)

    def table(self, name: str) -> TableSpec:
        for spec in self.tables:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def owner(self, table: str) -> PipelineSpec | None:
        """The pipeline that writes ``table`` (None for the run log)."""
        for pipeline in self.pipelines.values():
            if any(t.name == table for t in pipeline.tables):
                return pipeline
        return None

    @property
    def streams(self) -> tuple[StreamSpec, ...]:
        return tuple(s for p in self.pipelines.values() for s in p.streams)

    def consumers_of(self, table: str) -> tuple[StreamSpec, ...]:
        """Streams of any pipeline that read ``table``: their checkpoints pin the versions
        VACUUM must keep, and a restore of ``table`` resets them."""
        return tuple(s for s in self.streams if table in s.sources)

    def downstream_of(self, stream: StreamSpec) -> list[StreamSpec]:
        """Every stream that reads what ``stream`` writes, directly or further down."""
        found: list[StreamSpec] = []
        frontier = list(stream.targets)
        while frontier:
            table = frontier.pop(0)
            for consumer in self.consumers_of(table):
                if consumer not in found and consumer != stream:
                    found.append(consumer)
                    frontier.extend(consumer.targets)
        return found

    def upstream_of(self, pipeline: PipelineSpec) -> list[str]:
        """Pipelines whose tables ``pipeline`` reads, directly or further up."""
        found: list[str] = []
        frontier = [pipeline]
        while frontier:
            for table in frontier.pop(0).reads:
                owner = self.owner(table)
                if owner is not None and owner.name not in found:
                    found.append(owner.name)
                    frontier.append(owner)
        return found


def pipeline_dirs(settings: Settings) -> list[Path]:
    return [Path(p) for p in settings.pipelines_dir.split(os.pathsep) if p]


def _package() -> types.ModuleType:
    package = sys.modules.get(PACKAGE)
    if package is None:
        package = types.ModuleType(PACKAGE)
        package.__path__ = []
        sys.modules[PACKAGE] = package
    return package


def _load_file(path: Path) -> PipelineSpec:
    """Import one declaration file and return its ``PIPELINE``."""
    name = f"{PACKAGE}.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    _package()
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    pipeline = getattr(module, "PIPELINE", None)
    if not isinstance(pipeline, PipelineSpec):
        raise ConfigurationError("PIPELINE: the file declares no PIPELINE = PipelineSpec(...).")
    if pipeline.name != path.stem:
        raise ConfigurationError(
            f"name: {pipeline.name!r} must be the file's name ({path.stem!r}): the DAG is "
            f"{path.stem}_pipeline."
        )
    return replace(pipeline, origin=str(path), doc=(module.__doc__ or "").strip())


def _cross_checks(pipelines: dict[str, PipelineSpec]) -> dict[str, str]:
    """What is wrong between declarations, per pipeline name (they are left out)."""
    problems: dict[str, str] = {}
    writers: dict[str, list[str]] = {}
    for pipeline in pipelines.values():
        for spec in pipeline.tables:
            writers.setdefault(spec.name, []).append(pipeline.name)
    for written, names in writers.items():
        if len(names) > 1 or written == RUN_LOG.name:
            for name in names:
                others = [n for n in names if n != name] or ["the run log"]
                problems[name] = f"tables: {written} is also written by {', '.join(others)}"
    for pipeline in pipelines.values():
        unknown = [t for t in pipeline.reads if t not in writers]
        if unknown:
            problems.setdefault(
                pipeline.name, f"gold.inputs: {unknown} are not tables of any pipeline"
            )
    # A cycle: a pipeline that, through the tables it reads, ends up reading itself.
    reads = {p.name: {writers[t][0] for t in p.reads if t in writers} for p in pipelines.values()}
    for start in pipelines:
        seen, frontier = set(), list(reads[start])
        while frontier:
            name = frontier.pop()
            if name == start:
                problems.setdefault(start, "gold.inputs: the pipelines read each other (a cycle)")
                break
            if name not in seen:
                seen.add(name)
                frontier.extend(reads.get(name, ()))
    return problems


def load(dirs: Sequence[Path]) -> Registry:
    """Discover and check every declaration in ``dirs``."""
    pipelines: dict[str, PipelineSpec] = {}
    errors: dict[str, str] = {}
    for folder in dirs:
        for path in sorted(folder.glob("*.py")) if folder.is_dir() else []:
            if path.name.startswith("_"):
                continue
            try:
                pipeline = _load_file(path)
            except Exception as exc:  # any error in a user's file: report it, go on
                detail = str(exc).split(" What to do:")[0]
                errors[str(path)] = f"{path}: {type(exc).__name__}: {detail}"
                continue
            if pipeline.name in pipelines:
                first = pipelines[pipeline.name].origin
                errors[str(path)] = f"{path}: name: {pipeline.name!r} is also declared in {first}"
                continue
            pipelines[pipeline.name] = pipeline
    # Leaving a pipeline out can break those that read it: check until nothing changes.
    while problems := _cross_checks(pipelines):
        for name, problem in problems.items():
            origin = pipelines.pop(name).origin
            errors[origin] = f"{origin}: DeclarationError: {problem}"
    return Registry(pipelines, errors)


_CACHE: dict[tuple[str, ...], tuple[tuple[tuple[str, float], ...], Registry]] = {}


def registry(settings: Settings | None = None) -> Registry:
    """The registry of ``settings`` (from the environment by default), loaded again when a
    declaration file changed."""
    dirs = pipeline_dirs(settings or Settings.from_env())
    stamp = tuple(
        (str(p), p.stat().st_mtime) for d in dirs if d.is_dir() for p in sorted(d.glob("*.py"))
    )
    key = tuple(str(d) for d in dirs)
    cached = _CACHE.get(key)
    if cached is None or cached[0] != stamp:
        cached = (stamp, load(dirs))
        _CACHE[key] = cached
    return cached[1]


def get_pipeline(name: str, settings: Settings | None = None) -> PipelineSpec:
    return registry(settings).get(name)
