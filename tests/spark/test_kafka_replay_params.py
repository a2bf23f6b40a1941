"""A Kafka replay is checked before it runs: by the params, and by the job on a files root."""

from __future__ import annotations

import re

import pytest

from lakehouse.errors import InvalidRunParams
from lakehouse.params import RunParams
from tests.lake import Lake


def test_a_kafka_replay_is_checked_before_it_runs(lake: Lake) -> None:
    replay = {"kafka_replay_from": "2026-11-02T00:00:00Z", "kafka_replay_to": "2026-11-03T00:00Z"}
    assert RunParams.parse(replay).job_args("bronze")[-4:] == [
        "--kafka-replay-from", "2026-11-02T00:00:00+00:00",
        "--kafka-replay-to", "2026-11-03T00:00:00+00:00",
    ]  # fmt: skip
    assert "--kafka-replay-from" not in RunParams.parse(replay).job_args("silver")
    for bad, problem in (
        ({"kafka_replay_from": "2026-11-02T00:00:00Z"}, "needs both"),
        (
            {**replay, "kafka_replay_to": "2026-11-01T00:00:00Z"},
            "ends (2026-11-01T00:00:00+00:00) before",
        ),
        ({**replay, "layers": ["silver", "gold"]}, "include bronze in layers"),
        ({**replay, "kafka_replay_to": "../etc"}, "not an ISO-8601 time"),
    ):
        with pytest.raises(InvalidRunParams, match=re.escape(problem)):
            RunParams.parse(bad)
    # The files source has no replay: refused by the job before anything is written.
    assert lake.run("bronze", "--kafka-replay-from", "2026-11-02T00:00:00Z",
                    "--kafka-replay-to", "2026-11-03T00:00:00Z") == 2  # fmt: skip
    (error,) = lake.rows("ops/run_log", ["error"])
    assert error[0].startswith("InvalidRunParams: Refused to run: a Kafka replay needs the Kafka")
