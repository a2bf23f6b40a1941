"""``replace_scope``: the rows of a scope become exactly the new rows, in one MERGE that
touches nothing else, and nothing to change commits nothing."""

from __future__ import annotations

from typing import Any

from tests.lake import Lake

SCHEMA = "k INT, part STRING, v STRING"


def rows(lake: Lake, location: str) -> set[tuple[Any, ...]]:
    return {tuple(r) for r in lake.spark.read.format("delta").load(location).collect()}


def test_replace_scope_changes_only_what_differs(lake: Lake) -> None:
    from jobs.delta_state import table_version
    from jobs.delta_writes import last_commit_metrics, replace_scope

    spark = lake.spark
    location = lake.settings.path("gold/replaced")
    held = [(1, "a", None), (2, "a", "x"), (3, "a", "y"), (5, "b", "kept")]
    spark.createDataFrame(held, SCHEMA).write.format("delta").save(location)

    # Scope "a": 1 is the same (a null equals a null), 2 changed, 3 gone, 4 new; 5 is out of
    # the scope, so its absence from the new rows leaves it alone.
    new_df = spark.createDataFrame([(1, "a", None), (2, "a", "z"), (4, "a", "w")], SCHEMA)
    scope_df = spark.createDataFrame([("a",)], "part STRING")
    assert replace_scope(new_df, location, scope_df, ("part",), ("k",))
    assert rows(lake, location) == {(1, "a", None), (2, "a", "z"), (4, "a", "w"), (5, "b", "kept")}
    metrics = last_commit_metrics(spark, location)
    assert (
        metrics["numTargetRowsUpdated"],
        metrics["numTargetRowsInserted"],
        metrics["numTargetRowsDeleted"],
    ) == ("1", "1", "1")

    # The same again: nothing differs, nothing is committed.
    version = table_version(spark, location)
    assert not replace_scope(new_df, location, scope_df, ("part",), ("k",))
    assert table_version(spark, location) == version

    # No scope: the whole table becomes the new rows.
    assert replace_scope(new_df, location, None, ("part",), ("k",))
    assert rows(lake, location) == {(1, "a", None), (2, "a", "z"), (4, "a", "w")}
