"""Bronze: every raw record, exactly once, as text with where it came from.

Reads the landing folder (JSON Lines files) or Kafka as a stream and appends each record to
``bronze/<pipeline>_events`` through Delta's streaming sink, which commits the data and the
micro-batch id atomically: a replayed batch is skipped, so nothing lands twice. Nothing is
parsed away: the record's text is kept as is (invalid UTF-8 keeps its bytes too).

* Files: a record is a non-blank line; its file and modification time are kept.
* Kafka: a record is a message value, whatever it holds: an empty or blank value is a record
  (silver quarantines it as ``not_json``), and so is a null value (a tombstone), kept with a
  null ``raw_value``; bronze has exactly one row per offset read. Topic, partition, offset,
  Kafka timestamp and key are kept. A new checkpoint starts from the earliest offsets, a
  partition added later is read from its start, and ``maxOffsetsPerTrigger`` splits a backlog
  into micro-batches. Before the query starts, ``lakehouse.kafka.brokers.check_offsets``
  compares the checkpoint with the brokers; records that aged out unread stop the run with
  ``KafkaOffsetsLost`` (as does Spark's own ``failOnDataLoss``, should they age out later).
* Kafka replay (params ``kafka_replay_from``/``kafka_replay_to``): after the stream has caught
  up, the records whose Kafka timestamp is in the range and that the stream has already read
  are read again as a batch and MERGEd into bronze on (topic, partition, offset): only the
  missing ones are added, and the streaming checkpoint is never moved. A range the brokers
  may no longer hold is refused with ``KafkaReplayUnavailable`` before anything is written.

Run by ``spark-submit jobs/bronze.py --pipeline orders``.
"""

from __future__ import annotations

import jobs  # noqa: F401  first: a spark-submit driver then imports the installed pyspark

# isort: split
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs import storage
from jobs.delta_state import table_version
from jobs.delta_writes import last_commit_metrics, match_on, rows_written_since
from jobs.runtime import JobContext, StreamResult, run_layer, run_stream, spark_error_text
from jobs.tables import ensure_table
from jobs.transforms import filter_not_blank, with_kafka_lineage, with_raw_record
from jobs.validation import with_stored_hints
from lakehouse.checkpoints import Checkpoint
from lakehouse.errors import ConfigurationError, InvalidRunParams
from lakehouse.kafka import brokers, offsets
from lakehouse.kafka.access import KafkaAccess
from lakehouse.pending import Pending, kafka_backlog
from lakehouse.settings import SourceKind
from lakehouse.specs import BRONZE_SCHEMA, Layer, RecordSpec, schema_fields

BRONZE_FIELDS = schema_fields(BRONZE_SCHEMA)

log = logging.getLogger("lakehouse.bronze")


def read_landing_files(ctx: JobContext) -> DataFrame:
    """Landing files as a stream of lines. Names starting with ``.`` or ``_`` are ignored
    (Spark's rule for hidden files), so writers can stage a file and rename it in."""
    landing = ctx.path(ctx.pipeline.landing)
    storage.mkdirs(ctx.spark, landing)
    max_files = ctx.params.max_files_per_trigger or ctx.settings.max_files_per_trigger
    lines_df = (
        ctx.spark.readStream.format("text")
        # Only \n ends a line (a \r\n line loses its \r below); a lone \r is data.
        .option("lineSep", "\n")
        .option("maxFilesPerTrigger", max_files)
        .load(landing)
    )
    records_df = with_raw_record(lines_df).select(
        "raw_value",
        "raw_bytes",
        F.lit("file").alias("source"),
        F.col("_metadata.file_path").alias("source_file"),
        F.col("_metadata.file_modification_time").alias("source_file_modified_at"),
    )
    return filter_not_blank(records_df)


def read_kafka(ctx: JobContext) -> tuple[DataFrame, dict[str, Any], Pending]:
    """The pipeline's topics as a stream of records, after the pre-flight offset check (and
    what it found to read)."""
    access = KafkaAccess.for_job(ctx.settings)
    topics = ctx.settings.pipeline(ctx.pipeline).subscription
    accept_loss = ctx.params.accept_data_loss
    start = checkpoint_offsets(ctx)
    report = brokers.check_offsets(access, topics, start, accept_data_loss=accept_loss)
    log.info(
        "kafka: %s on %s, %d partitions, %d records to read (checked in %.0f ms)",
        topics.describe(),
        access.describe(),
        report.partitions,
        report.backlog,
        report.check_ms,
    )
    max_offsets = ctx.params.max_offsets_per_trigger or ctx.settings.max_offsets_per_trigger
    kafka_df = (
        ctx.spark.readStream.format("kafka")
        .options(**access.spark_options(), **topics.spark_options())
        # Only for a new checkpoint: later runs resume from it; new partitions start at 0.
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "false" if accept_loss else "true")
        .option("maxOffsetsPerTrigger", max_offsets)
        .load()
    )
    records_df = with_kafka_lineage(with_raw_record(kafka_df, strip_line_end=False))
    return records_df, report.details(), kafka_backlog(Layer.BRONZE, report)


def to_bronze(records_df: DataFrame, record: RecordSpec) -> DataFrame:
    """Source records in the bronze shape, with their time and key hints; missing lineage
    columns are null."""
    ingested_at = F.current_timestamp()
    records_df = with_stored_hints(records_df, record).withColumn("ingested_at", ingested_at)
    records_df = records_df.withColumn("ingest_date", F.to_date("ingested_at"))
    return records_df.select(
        *[
            F.col(name) if name in records_df.columns else F.lit(None).cast(type_ddl).alias(name)
            for name, type_ddl in BRONZE_FIELDS
        ]
    )


def record(ctx: JobContext) -> RecordSpec:
    assert ctx.pipeline.record is not None, f"{ctx.pipeline.name} declares no record"
    return ctx.pipeline.record


def checkpoint_offsets(ctx: JobContext) -> dict[offsets.TopicPartition, int] | None:
    """Where the Kafka stream resumes, read from its checkpoint with Spark's file system."""
    return offsets.checkpoint_offsets(Checkpoint(storage.HadoopStorage(ctx.spark), ctx.checkpoint))


def plan_kafka_replay(ctx: JobContext, access: KafkaAccess) -> list[offsets.ReplayRange]:
    """The replay's offset ranges, as far as the stream has read; ``KafkaReplayUnavailable``
    if the brokers may no longer hold the start of the range."""
    params = ctx.params
    assert params.kafka_replay_from is not None and params.kafka_replay_to is not None
    return brokers.plan_replay(
        access,
        ctx.settings.pipeline(ctx.pipeline).subscription,
        params.kafka_replay_from,
        params.kafka_replay_to,
        checkpoint_offsets(ctx),
    )


def replay_kafka(ctx: JobContext, location: str) -> dict[str, Any]:
    """Add the records timestamped in the replay range that bronze is missing (see above)."""
    from delta.tables import DeltaTable

    params = ctx.params
    assert params.kafka_replay_from is not None and params.kafka_replay_to is not None
    access = KafkaAccess.for_job(ctx.settings)
    ranges = plan_kafka_replay(ctx, access)
    window = f"[{params.kafka_replay_from.isoformat()}, {params.kafka_replay_to.isoformat()})"
    details: dict[str, Any] = {
        "window": window,
        "ranges": [r.describe() for r in ranges],
        "records_read": 0,
        "rows_added": 0,
    }
    if not ranges:
        log.info("kafka replay %s: no record bronze has read is in that range", window)
        return details
    log.info(
        "kafka replay %s: reading %d records again (%s)",
        window,
        sum(r.records for r in ranges),
        ", ".join(details["ranges"]),
    )
    assign: dict[str, list[int]] = {}
    for r in ranges:
        assign.setdefault(r.topic, []).append(r.partition)
    kafka_df = (
        ctx.spark.read.format("kafka")
        .options(**access.spark_options())
        .option("assign", json.dumps(assign, sort_keys=True))
        .option("startingOffsets", offsets.offsets_json(ranges, "start"))
        .option("endingOffsets", offsets.offsets_json(ranges, "end"))
        .option("failOnDataLoss", "true")
        .load()
    )
    records_df = to_bronze(
        with_kafka_lineage(with_raw_record(kafka_df, strip_line_end=False)), record(ctx)
    ).withColumn("replayed_at", F.current_timestamp())
    # The range's timestamps may not all fall inside the window (Kafka timestamps need not
    # grow with offsets); the offsets are what was asked of the brokers, all of them count.
    version_before = table_version(ctx.spark, location)
    key = match_on(("kafka_topic", "kafka_partition", "kafka_offset"))
    try:
        (
            DeltaTable.forPath(ctx.spark, location)
            .alias("t")
            .merge(records_df.alias("s"), f"t.source = 'kafka' AND {key}")
            .whenNotMatchedInsertAll()
            .execute()
        )
    except Exception as exc:
        lost = offsets.from_spark_error(spark_error_text(exc))
        if lost is None:
            raise
        raise lost from None
    details["records_read"] = sum(r.records for r in ranges)
    if table_version(ctx.spark, location) != version_before:  # a MERGE that adds nothing
        metrics = last_commit_metrics(ctx.spark, location)  # commits nothing
        details["records_read"] = int(metrics.get("numSourceRows", details["records_read"]))
        details["rows_added"] = int(metrics.get("numTargetRowsInserted", 0))
    log.info(
        "kafka replay %s: %d records read, %d were missing from bronze and were added",
        window,
        details["records_read"],
        details["rows_added"],
    )
    return details


def read_source(ctx: JobContext) -> tuple[DataFrame, dict[str, Any], Pending | None]:
    """The source's records, what was learnt about it before the query (for the log) and
    what is to read, when that was learnt too (else ``run_stream`` works it out)."""
    source = ctx.settings.pipeline(ctx.pipeline).source
    if source == SourceKind.FILE:
        return read_landing_files(ctx), {}, None
    if source == SourceKind.KAFKA:
        return read_kafka(ctx)
    raise ConfigurationError(f"source {source!r} is not supported by the bronze job.")


def body(ctx: JobContext) -> StreamResult:
    target = ctx.pipeline.table(ctx.stream.targets[0])
    replay = ctx.params.kafka_replay_from is not None
    source = ctx.settings.pipeline(ctx.pipeline).source
    if replay and source != SourceKind.KAFKA:
        variable = f"LAKEHOUSE_{ctx.pipeline.name.upper()}_SOURCE"
        raise InvalidRunParams(
            f"Refused to run: a Kafka replay needs the Kafka source ({variable}=kafka, "
            f"not {source})."
        )
    if replay:
        # Refuses before the stream writes anything.
        plan_kafka_replay(ctx, KafkaAccess.for_job(ctx.settings))
    # The source first: a refusal of its pre-flight check leaves no trace, not even a table.
    records_df, details, pending = read_source(ctx)
    location = ensure_table(ctx.spark, ctx.settings, target)
    writer = (
        to_bronze(records_df, record(ctx))
        .writeStream.format("delta")
        .outputMode("append")
        .partitionBy(*target.partition_by)
        .option("path", location)
    )
    version_before = table_version(ctx.spark, location)
    try:
        try:
            result = run_stream(ctx, lambda: writer, pending)
        except Exception as exc:
            if not _is_spark_55271(exc):
                raise
            log.warning(
                "Spark's Kafka source failed after replaying the micro-batch an earlier run "
                "left unfinished (SPARK-55271); the batch is committed, starting again"
            )
            result = run_stream(ctx, lambda: writer, pending)
            details["restarted_after"] = "SPARK-55271"
    except Exception as exc:
        # Spark's failOnDataLoss failure, under the name the pre-flight check uses.
        lost = offsets.from_spark_error(spark_error_text(exc))
        if lost is None:
            raise
        raise lost from None
    result.rows_out = rows_written_since(ctx.spark, location, version_before, ("STREAMING UPDATE",))
    result.details.update(details)
    if replay:
        result.details["kafka_replay"] = replay_kafka(ctx, location)
        result.rows_out += result.details["kafka_replay"]["rows_added"]
    return result


def _is_spark_55271(exc: Exception) -> bool:
    """Spark 4.1.1's Kafka source throws a NullPointerException from its progress metrics
    when a restarted query replays a micro-batch the previous run left unfinished (after a
    crash or a failed batch): the batch is already committed, data and checkpoint agree, and
    a new start of the query goes on normally (SPARK-55271, fixed after 4.1.1)."""
    text = spark_error_text(exc)
    return "KafkaMicroBatchStream" in text and 'scala.Option.get()" is null' in text


def main(argv: Sequence[str] | None = None) -> int:
    return run_layer(argv, Layer.BRONZE, body)


if __name__ == "__main__":
    sys.exit(main())
