"""``make bench --only``: a benchmark that runs on another's lake brings it along, and an id
that names no benchmark is refused before any Spark session starts."""

from __future__ import annotations

import pytest

from jobs.bench import STEPS, UnknownBenchmark, main, selected


def test_nothing_asked_runs_everything() -> None:
    assert selected("") == set(STEPS)


@pytest.mark.parametrize(
    ("only", "runs"),
    [
        ("R1", {"b1", "r1"}),
        ("r1,b6", {"b1", "r1", "b6"}),
        ("b4", {"b1", "b4"}),
        ("B2a", {"b1"}),
        (" b6 , airflow ", {"b6", "airflow"}),
    ],
)
def test_dependencies_come_along(only: str, runs: set[str]) -> None:
    assert selected(only) == runs


def test_unknown_id_is_named() -> None:
    with pytest.raises(UnknownBenchmark, match="no benchmark b7, r2; choose from b1, b2a, r1, "):
        selected("b7,r1,r2")


def test_unknown_id_stops_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--only", "b9"])
    assert stopped.value.code == 2
    assert "no benchmark b9" in capsys.readouterr().err
