"""Bronze: every raw record, exactly once, as text with where it came from.

Reads the landing folder (JSON Lines files) as a stream and appends each non-blank line to
``bronze/<pipeline>_events`` through Delta's streaming sink, which commits the data and the
micro-batch id atomically: a replayed batch is skipped, so nothing lands twice. Nothing is
parsed away: the line's text is kept as is (invalid UTF-8 keeps its bytes too).

Run by ``spark-submit jobs/bronze.py --pipeline orders``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs import storage
from jobs.delta_writes import rows_written_since, table_version
from jobs.runtime import JobContext, StreamResult, run_job, run_stream
from jobs.tables import ensure_table
from jobs.transforms import filter_not_blank, with_raw_record
from lakehouse.errors import ConfigurationError
from lakehouse.pipelines import BRONZE_SCHEMA
from lakehouse.specs import schema_fields

BRONZE_FIELDS = schema_fields(BRONZE_SCHEMA)


def read_landing_files(ctx: JobContext) -> DataFrame:
    """Landing files as a stream of lines. Names starting with ``.`` or ``_`` are ignored
    (Spark's rule for hidden files), so writers can stage a file and rename it in."""
    landing = ctx.path(ctx.pipeline.landing)
    storage.mkdirs(ctx.spark, landing)
    max_files = ctx.args.max_files_per_trigger or ctx.settings.max_files_per_trigger
    lines_df = (
        ctx.spark.readStream.format("text")
        # Only \n ends a line (a \r\n line loses its \r below); a lone \r is data.
        .option("lineSep", "\n")
        .option("maxFilesPerTrigger", max_files)
        .load(landing)
    )
    return with_raw_record(lines_df).select(
        "raw_value",
        "raw_bytes",
        F.lit("file").alias("source"),
        F.col("_metadata.file_path").alias("source_file"),
        F.col("_metadata.file_modification_time").alias("source_file_modified_at"),
    )


def to_bronze(records_df: DataFrame) -> DataFrame:
    """Source records in the bronze shape: missing lineage columns are null."""
    ingested_at = F.current_timestamp()
    records_df = filter_not_blank(records_df).withColumn("ingested_at", ingested_at)
    records_df = records_df.withColumn("ingest_date", F.to_date("ingested_at"))
    return records_df.select(
        *[
            F.col(name) if name in records_df.columns else F.lit(None).cast(type_ddl).alias(name)
            for name, type_ddl in BRONZE_FIELDS
        ]
    )


def read_source(ctx: JobContext) -> DataFrame:
    source = ctx.settings.orders_source
    if source == "file":
        return read_landing_files(ctx)
    raise ConfigurationError(f"source {source!r} is not supported by the bronze job yet.")


def body(ctx: JobContext) -> StreamResult:
    target = ctx.pipeline.table(ctx.stream.targets[0])
    location = ensure_table(ctx.spark, ctx.settings, target)
    bronze_df = to_bronze(read_source(ctx))
    writer = (
        bronze_df.writeStream.format("delta")
        .outputMode("append")
        .partitionBy(*target.partition_by)
        .option("path", location)
    )
    version_before = table_version(ctx.spark, location)
    result = run_stream(ctx, writer)
    result.rows_out = rows_written_since(ctx.spark, location, version_before, ("STREAMING UPDATE",))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    return run_job(argv, "bronze", body)


if __name__ == "__main__":
    sys.exit(main())
