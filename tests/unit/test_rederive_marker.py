"""The re-derivation marker: what a job puts down and what the idle check (no JVM) reads."""

from __future__ import annotations

from pathlib import Path

from lakehouse.checkpoints import RederiveMarker
from lakehouse.fs import LocalStorage
from lakehouse.pending import unfinished_rederivation
from lakehouse.registry import get_pipeline
from lakehouse.settings import Settings

ORDERS = get_pipeline("orders")


def test_a_marker_left_down_is_work_for_the_next_run_until_it_is_cleared(tmp_path: Path) -> None:
    settings = Settings.from_env().with_root(tmp_path)
    location = settings.path(ORDERS.stream("silver").rederive_marker)
    marker = RederiveMarker(LocalStorage(), location)
    assert marker.spec() is None
    assert unfinished_rederivation(settings, ORDERS, "silver") is None

    marker.put({"window": None, "run_id": "manual__1"})
    assert marker.spec() == {"window": None, "run_id": "manual__1"}
    pending = unfinished_rederivation(settings, ORDERS, "silver")
    assert pending is not None and not pending.nothing
    assert pending.description == (
        'a re-derivation to finish (left unfinished: {"window": null, "run_id": "manual__1"})'
    )
    # Gold has its own marker; bronze never re-derives, so nothing is read for it.
    assert unfinished_rederivation(settings, ORDERS, "gold") is None
    assert unfinished_rederivation(settings, ORDERS, "bronze") is None

    marker.clear()
    assert marker.spec() is None
    assert unfinished_rederivation(settings, ORDERS, "silver") is None
    marker.clear()  # clearing twice is nothing
