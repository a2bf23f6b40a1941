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


def test_writes_into_an_empty_table_are_idempotent_appends(lake: Lake) -> None:
    """A first load MERGEs into a table with no file: written as the append it amounts to,
    with the batch's transaction id, so the same batch again changes nothing."""
    from jobs.delta_state import table_version
    from jobs.delta_writes import replace_scope, upsert_newer

    spark = lake.spark
    location = lake.settings.path("silver/empty_then_merged")
    spark.createDataFrame([], SCHEMA).write.format("delta").save(location)
    batch_df = spark.createDataFrame([(1, "a", "x"), (2, "a", "y")], SCHEMA)

    upsert_newer(batch_df, location, "t.k = s.k", "s.v > t.v", "query-1", 0)
    assert rows(lake, location) == {(1, "a", "x"), (2, "a", "y")}
    assert lake.delta("silver/empty_then_merged").history(1)[0]["operation"] == "WRITE"
    version = table_version(spark, location)
    upsert_newer(batch_df, location, "t.k = s.k", "s.v > t.v", "query-1", 0)  # a replay
    assert table_version(spark, location) == version
    # Once the table holds files, the next batch is a MERGE: newer rows win, others stay.
    later_df = spark.createDataFrame([(1, "a", "w"), (2, "a", "z")], SCHEMA)
    upsert_newer(later_df, location, "t.k = s.k", "s.v > t.v", "query-1", 1)
    assert rows(lake, location) == {(1, "a", "x"), (2, "a", "z")}
    assert lake.delta("silver/empty_then_merged").history(1)[0]["operation"] == "MERGE"

    gold = lake.settings.path("gold/empty_then_replaced")
    spark.createDataFrame([], SCHEMA).write.format("delta").save(gold)
    empty_df = spark.createDataFrame([], SCHEMA)
    assert not replace_scope(empty_df, gold, None, ("part",), ("k",), app_id="q", batch_id=0)
    assert table_version(spark, gold) == 0  # nothing to write commits nothing
    assert replace_scope(batch_df, gold, None, ("part",), ("k",), app_id="q", batch_id=0)
    assert rows(lake, gold) == {(1, "a", "x"), (2, "a", "y")}
    # Again: the table holds the rows now, and nothing differs.
    assert not replace_scope(batch_df, gold, None, ("part",), ("k",), app_id="q", batch_id=0)
    assert table_version(spark, gold) == 1


def test_commit_metrics_come_from_the_commit_files_as_the_history_gives_them(lake: Lake) -> None:
    """Bronze's rows written and a MERGE's figures are read from the commit files (no Spark
    job); where log cleanup removed a commit file, from what the history still holds."""
    from pathlib import Path

    from delta.tables import DeltaTable

    from jobs.delta_writes import commits_metrics, last_commit_metrics, rows_written_since

    spark = lake.spark
    location = lake.settings.path("bronze/metrics")
    spark.sql(
        f"CREATE TABLE delta.`{location}` ({SCHEMA}) USING DELTA "
        "TBLPROPERTIES ('delta.checkpointInterval' = '3')"
    )
    first_df = spark.createDataFrame([(1, "a", "x"), (2, "a", "y")], SCHEMA)
    first_df.write.format("delta").mode("append").save(location)
    spark.createDataFrame([(3, "b", "z")], SCHEMA).write.format("delta").mode("append").save(
        location
    )
    later_df = spark.createDataFrame([(1, "a", "w"), (4, "b", "v")], SCHEMA)
    DeltaTable.forPath(spark, location).alias("t").merge(
        later_df.alias("s"), "t.k = s.k"
    ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()

    history = {
        int(r["version"]): (str(r["operation"]), dict(r["operationMetrics"] or {}))
        for r in DeltaTable.forPath(spark, location).history().collect()
    }
    assert sorted(history) == [0, 1, 2, 3]
    assert commits_metrics(spark, location, -1) == [history[v] for v in (0, 1, 2, 3)]
    assert commits_metrics(spark, location, 3) == []
    assert rows_written_since(spark, location, 0, ("WRITE",)) == 3
    assert rows_written_since(spark, location, 1, ("WRITE",)) == 1
    merged = last_commit_metrics(spark, location)
    assert merged == history[3][1]
    assert (merged["numTargetRowsUpdated"], merged["numTargetRowsInserted"]) == ("1", "1")

    # Log cleanup after the checkpoint of version 3: the older commit files are gone.
    log = Path(location) / "_delta_log"
    assert (log / "00000000000000000003.checkpoint.parquet").exists()
    for version in (0, 1):
        (log / f"{version:020d}.json").unlink()
    assert commits_metrics(spark, location, -1) == [history[2], history[3]]
    assert rows_written_since(spark, location, -1, ("WRITE",)) == 1


def test_a_merge_puts_the_sessions_settings_back(lake: Lake) -> None:
    """The batch's transaction id and the source setting hold for its MERGE alone: the next
    write of a shared driver's session is neither taken for a replay nor uncopied."""
    from jobs.delta_writes import upsert_newer

    spark = lake.spark
    location = lake.settings.path("silver/settings_back")
    spark.createDataFrame([(1, "a", "x")], SCHEMA).write.format("delta").save(location)
    keys = (
        "spark.databricks.delta.write.txnAppId",
        "spark.databricks.delta.write.txnVersion",
        "spark.databricks.delta.merge.materializeSource",
    )
    spark.conf.set(keys[2], "auto")
    try:
        batch_df = spark.createDataFrame([(1, "a", "y")], SCHEMA)
        upsert_newer(batch_df, location, "t.k = s.k", "s.v > t.v", "query-1", 0)
        assert rows(lake, location) == {(1, "a", "y")}
        assert [spark.conf.get(k, None) for k in keys] == [None, None, "auto"]
    finally:
        spark.conf.unset(keys[2])
