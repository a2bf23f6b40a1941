"""Which driver a layer task uses: its run's (the default), or with
``LAKEHOUSE_RUN_DRIVER_KEEP_S`` its DAG's for the settings it runs, kept between runs."""

from __future__ import annotations

from lakehouse.run_driver import RunDriver
from lakehouse.settings import Settings
from lakehouse.submit import SubmitSpec


def drivers(env: dict[str, str]) -> dict[tuple[str, str, str], RunDriver]:
    settings = Settings.from_env(env)
    return {
        (dag, run, fp): RunDriver.of(dag, run, fp, settings)
        for dag in ("orders_pipeline", "customers_pipeline")
        for run in ("scheduled__1", "scheduled__2")
        for fp in ("settings-a", "settings-b")
    }


def test_each_run_has_its_own_driver_that_its_last_layer_stops() -> None:
    found = drivers({})
    # Named after the run: a task with other settings finds it, and is refused.
    names = {
        (dag, run): {d.name for (g, r, _), d in found.items() if (g, r) == (dag, run)}
        for dag, run, _ in found
    }
    assert all(len(one) == 1 for one in names.values())
    assert len(set().union(*names.values())) == 4
    assert {d.keep_s for d in found.values()} == {0}


def test_a_kept_driver_is_the_dags_for_its_settings_and_outlives_the_run() -> None:
    found = drivers({"LAKEHOUSE_RUN_DRIVER_KEEP_S": "900"})
    names = {
        (dag, fp): {d.name for (g, _, f), d in found.items() if (g, f) == (dag, fp)}
        for dag, _, fp in found
    }
    # The DAG's runs share it; another DAG, or other settings (other code), another one.
    assert all(len(shared) == 1 for shared in names.values())
    assert len(set().union(*names.values())) == 4
    kept = found[("orders_pipeline", "scheduled__1", "settings-a")]
    # It stops when nobody asked for keep_s, not after a run's last layer.
    spec = SubmitSpec(application="jobs/bronze.py", args=(), name="n")
    args = kept.submit_spec(spec, Settings.from_env(), "orders").args
    assert args[args.index("--idle-s") + 1] == "900"
    assert kept.stop() is False
