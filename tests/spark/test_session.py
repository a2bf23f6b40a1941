"""The session's warm-up job (``jobs.session.start_warm_up``), which a run's driver starts
beside its first request."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from jobs.session import WARM_UP_GROUP, start_warm_up


def test_the_warm_up_runs_its_jobs_in_its_own_group_and_thread(spark: SparkSession) -> None:
    context = spark.sparkContext
    tracker = context.statusTracker()
    before = set(tracker.getJobIdsForGroup(WARM_UP_GROUP))
    context.setJobGroup("the-caller", "the caller's own")
    try:
        thread = start_warm_up(spark)
        thread.join(120)
        assert not thread.is_alive()
        warm_up = set(tracker.getJobIdsForGroup(WARM_UP_GROUP)) - before
        assert warm_up, "the warm-up ran no Spark job"
        assert {tracker.getJobInfo(j).status for j in warm_up} == {"SUCCEEDED"}
        # Its group is its thread's: the caller's jobs stay in the caller's.
        assert context.getLocalProperty("spark.jobGroup.id") == "the-caller"
        caller_before = set(tracker.getJobIdsForGroup("the-caller"))
        assert spark.range(3).count() == 3
        assert set(tracker.getJobIdsForGroup("the-caller")) > caller_before
        assert set(tracker.getJobIdsForGroup(WARM_UP_GROUP)) - before == warm_up
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        context.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]


def test_a_failed_warm_up_is_not_the_callers_failure() -> None:
    broken: Any = object()  # no sparkContext: the warm-up's first call fails
    thread = start_warm_up(broken)
    thread.join(30)
    assert not thread.is_alive()
