"""Runs that started and never ended: a marker per layer, so a killed run is not forgotten.

A layer job that is killed (``kill -9``, an OOM killer, a lost machine) cannot write its
``ops/run_log`` row: nothing of it runs any more. So every layer run writes a small marker,
``<root>/_runs/<pipeline>.<layer>.json`` (its run id and start), once it holds its table locks,
and removes it when it ends, however it ends, short of being killed. The next run of that
layer, holding the same locks (so the marker cannot belong to a run still going), finds the
marker and logs the killed run: a ``killed`` row with the killed run's id and start.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession

from jobs import storage
from lakehouse.settings import Settings

RUNS_DIR = "_runs"


def marker_path(settings: Settings, pipeline: str, layer: str) -> str:
    return settings.path(f"{RUNS_DIR}/{pipeline}.{layer}.json")


def claim(
    spark: SparkSession,
    settings: Settings,
    pipeline: str,
    layer: str,
    run_id: str,
    started_at: datetime,
) -> dict[str, Any] | None:
    """Write this run's marker; return the marker a killed run left, if any.

    Call while holding the layer's table locks."""
    path = marker_path(settings, pipeline, layer)
    text = storage.read_text(spark, path)
    left: dict[str, Any] | None = None
    if text is not None:
        try:
            left = dict(json.loads(text))
        except ValueError:
            left = {"run_id": None, "started_at": None, "unreadable": text[:200]}
    marker = {"run_id": run_id, "started_at": started_at.isoformat()}
    storage.write_text(spark, path, json.dumps(marker, sort_keys=True), overwrite=True)
    return left


def release(
    spark: SparkSession, settings: Settings, pipeline: str, layer: str, run_id: str
) -> None:
    """Remove this run's marker: it ended (succeeded, failed or refused). A run that lost its
    lease meanwhile (paused past it) finds a newer run's marker there, and leaves it."""
    path = marker_path(settings, pipeline, layer)
    text = storage.read_text(spark, path)
    try:
        mine = text is not None and json.loads(text).get("run_id") == run_id
    except ValueError:
        mine = False
    if mine:
        storage.delete(spark, path)


def started_at(marker: dict[str, Any]) -> datetime | None:
    text = marker.get("started_at")
    try:
        return datetime.fromisoformat(text).astimezone(UTC) if text else None
    except ValueError:
        return None


@contextmanager
def running(
    spark: SparkSession,
    settings: Settings,
    pipeline: str,
    layer: str,
    run_id: str,
    started: datetime,
    on_killed: Callable[[dict[str, Any]], None],
) -> Iterator[None]:
    """This run's marker while the block runs; ``on_killed`` gets a killed run's marker."""
    left = claim(spark, settings, pipeline, layer, run_id, started)
    if left is not None:
        on_killed(left)
    try:
        yield
    finally:
        release(spark, settings, pipeline, layer, run_id)
