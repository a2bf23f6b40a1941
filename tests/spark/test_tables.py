"""Tables from their declarations: an existing table gets the declared properties it lacks,
set by its writer (under its lease) and by no one else."""

from __future__ import annotations

from jobs.delta_state import table_properties
from jobs.tables import ensure_table
from lakehouse.locks import table_locks
from lakehouse.specs import TableSpec
from tests.lake import Lake

OLD = TableSpec(name="bronze/declared", schema="id BIGINT, text STRING")
NEW = TableSpec(
    name="bronze/declared",
    schema="id BIGINT, text STRING",
    properties={"delta.dataSkippingStatsColumns": "id"},
)


def test_an_existing_table_gets_the_declared_properties_from_its_writer(lake: Lake) -> None:
    spark, settings = lake.spark, lake.settings
    location = ensure_table(spark, settings, OLD)
    assert "delta.dataSkippingStatsColumns" not in table_properties(spark, location)

    # A job that only reads the table (silver ensures its bronze exists) changes nothing.
    ensure_table(spark, settings, NEW)
    assert "delta.dataSkippingStatsColumns" not in table_properties(spark, location)

    with table_locks(settings, [NEW.name], "test writer", wait_s=5):
        ensure_table(spark, settings, NEW)
        version = lake.version(NEW.name)
        ensure_table(spark, settings, NEW)  # already as declared: no commit
        assert lake.version(NEW.name) == version
    assert table_properties(spark, location)["delta.dataSkippingStatsColumns"] == "id"
