"""What every layer job shares: arguments, the availableNow query, progress, run log, summary.

A job module supplies one function ``body(ctx) -> StreamResult`` that builds its query and
hands it to ``run_stream``; ``run_job`` does the rest:

* parses the common arguments and checks them before Spark starts;
* refuses to start while a checkpoint restore of the pipeline is unfinished;
* logs one progress line per micro-batch while the query runs (rows, rows/s, duration);
* appends one row per run to the ``ops/run_log`` Delta table (status, rows, offsets);
* writes the summary as JSON (``--summary-file``) for the Airflow task to return;
* turns a ``LakehouseError`` into exit code 2 and one ``ERROR [Name] ...`` line.

The pieces that are not about streams (``job_settings``, ``start_spark``, ``RunRecord``,
``append_run_log``, ``write_summary``, ``refusal``) serve the maintenance job too.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter

from jobs import storage
from jobs.session import build_spark
from jobs.tables import ensure_table
from lakehouse.checkpoints import restore_marker
from lakehouse.errors import LakehouseError, RestoreInProgress
from lakehouse.locks import table_locks
from lakehouse.params import RunParams
from lakehouse.pipelines import RUN_LOG, get_pipeline
from lakehouse.preflight import check_root_writable
from lakehouse.settings import Settings
from lakehouse.specs import PipelineSpec, StreamSpec

log = logging.getLogger("lakehouse")

POLL_INTERVAL_S = 2


@dataclass(frozen=True)
class JobArgs:
    pipeline: str
    root: str | None
    run_id: str
    summary_file: str | None
    params: RunParams = field(default_factory=RunParams)

    @property
    def max_files_per_trigger(self) -> int | None:
        return self.params.max_files_per_trigger

    @property
    def max_offsets_per_trigger(self) -> int | None:
        return self.params.max_offsets_per_trigger


def parse_args(argv: Sequence[str], layer: str) -> JobArgs:
    parser = argparse.ArgumentParser(prog=f"jobs/{layer}.py", description=f"Run the {layer} layer.")
    parser.add_argument("--pipeline", required=True, help="pipeline name, e.g. orders")
    parser.add_argument("--root", help="lakehouse root (default: LAKEHOUSE_ROOT)")
    parser.add_argument("--run-id", default=None, help="the orchestrator's run id, for the run log")
    parser.add_argument("--summary-file", help="write the run summary here as JSON")
    parser.add_argument(
        "--mode", default="incremental", help="incremental, reprocess, full_refresh"
    )
    parser.add_argument("--reprocess-from", help="reprocess window start, ISO-8601 with zone")
    parser.add_argument("--reprocess-to", help="reprocess window end (exclusive)")
    parser.add_argument("--max-files-per-trigger", type=int)
    parser.add_argument("--max-offsets-per-trigger", type=int)
    parser.add_argument("--kafka-replay-from", help="Kafka replay: first record timestamp")
    parser.add_argument("--kafka-replay-to", help="Kafka replay: end timestamp (exclusive)")
    parser.add_argument(
        "--accept-data-loss",
        action="store_true",
        help="Kafka: go on past records that aged out before they were read (this run only)",
    )
    ns = parser.parse_args(list(argv))
    return JobArgs(
        pipeline=ns.pipeline,
        root=ns.root,
        run_id=ns.run_id or f"manual__{datetime.now(UTC):%Y%m%dT%H%M%S}_{uuid.uuid4().hex[:6]}",
        summary_file=ns.summary_file,
        params=RunParams.parse(
            {
                "mode": ns.mode,
                "reprocess_from": ns.reprocess_from,
                "reprocess_to": ns.reprocess_to,
                "max_files_per_trigger": ns.max_files_per_trigger,
                "max_offsets_per_trigger": ns.max_offsets_per_trigger,
                "accept_data_loss": ns.accept_data_loss,
                "kafka_replay_from": ns.kafka_replay_from,
                "kafka_replay_to": ns.kafka_replay_to,
            }
        ),
    )


@dataclass
class BatchCounters:
    """Figures a ``foreachBatch`` function adds up; written into the summary."""

    rows_out: int = 0
    rows_quarantined: int = 0
    batches_written: int = 0


@dataclass
class StreamResult:
    query_id: str
    batches: int = 0
    rows_in: int = 0
    rows_out: int | None = None
    rows_quarantined: int = 0
    source_start: str | None = None
    source_end: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class JobContext:
    spark: SparkSession
    settings: Settings
    pipeline: PipelineSpec
    stream: StreamSpec
    args: JobArgs
    counters: BatchCounters = field(default_factory=BatchCounters)

    def path(self, table: str) -> str:
        return self.settings.path(table)

    @property
    def checkpoint(self) -> str:
        return self.settings.path(self.stream.checkpoint)

    @property
    def query_name(self) -> str:
        return f"{self.pipeline.name}_{self.stream.layer}"


def checkpoint_query_id(spark: SparkSession, checkpoint: str) -> str:
    """The persistent query id in ``<checkpoint>/metadata``, created now for a new checkpoint.

    ``foreachBatch`` writers use it as their Delta ``txnAppId``, as Delta's own streaming
    sink does: a replayed batch of the same query is skipped, and a new checkpoint (a new
    id) can never be mistaken for an old one whose batch ids it would reuse.
    """
    location = f"{checkpoint}/metadata"
    text = storage.read_text(spark, location)
    if text is None:
        storage.mkdirs(spark, checkpoint)
        storage.write_text(spark, location, json.dumps({"id": str(uuid.uuid4())}))
        text = storage.read_text(spark, location)
    assert text is not None
    return str(json.loads(text.splitlines()[0])["id"])


def _offsets_text(source: Any, key: str) -> str | None:
    """A source's offsets as JSON. PySpark 4's ``SourceProgress`` gives ``str()`` of the
    parsed value (a Python repr, or ``"None"``); its ``json`` has the real thing."""
    raw = json.loads(source.json) if hasattr(source, "json") else dict(source)
    value = raw.get(key)
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def run_stream(ctx: JobContext, writer: DataStreamWriter) -> StreamResult:
    """Run ``writer`` with ``availableNow`` to completion, logging each micro-batch."""
    query = (
        writer.option("checkpointLocation", ctx.checkpoint)
        .queryName(ctx.query_name)
        .trigger(availableNow=True)
        .start()
    )
    log.info("query %s started (id %s, checkpoint %s)", ctx.query_name, query.id, ctx.checkpoint)
    result = StreamResult(query_id=str(query.id))
    seen: set[int] = set()

    def report() -> None:
        for progress in query.recentProgress:
            batch_id = int(progress["batchId"])
            if batch_id in seen:
                continue
            seen.add(batch_id)
            rows = int(progress.get("numInputRows") or 0)
            sources = progress.get("sources") or [{}]
            if rows == 0:
                continue  # e.g. the empty batch a stateful query runs before it stops
            result.batches += 1
            result.rows_in += rows
            if result.source_start is None:
                result.source_start = _offsets_text(sources[0], "startOffset")
            result.source_end = _offsets_text(sources[0], "endOffset")
            duration_s = (progress.get("durationMs") or {}).get("triggerExecution", 0) / 1000
            log.info(
                "batch %d: %d rows in %.1fs (%.0f rows/s)",
                batch_id,
                rows,
                duration_s,
                float(progress.get("processedRowsPerSecond") or 0.0),
            )

    try:
        while not query.awaitTermination(POLL_INTERVAL_S):
            report()
    finally:
        report()
        if query.isActive:
            query.stop()
    return result


@dataclass
class RunRecord:
    """One row of ``ops/run_log``: a layer run (``action`` "stream") or a maintenance action."""

    pipeline: str
    layer: str
    run_id: str
    status: str
    started_at: datetime
    action: str = "stream"
    ended_at: datetime | None = None
    query_id: str | None = None
    rows_in: int | None = None
    rows_out: int | None = None
    rows_quarantined: int | None = None
    batches: int | None = None
    source_start: str | None = None
    source_end: str | None = None
    spark_master: str | None = None
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float | None:
        if self.ended_at is None:
            return None
        return round((self.ended_at - self.started_at).total_seconds(), 3)

    def summary(self) -> dict[str, Any]:
        data = asdict(self)
        data["started_at"] = self.started_at.isoformat()
        data["ended_at"] = self.ended_at.isoformat() if self.ended_at else None
        data["duration_s"] = self.duration_s
        seconds = self.duration_s or 0
        data["rows_per_s"] = round((self.rows_in or 0) / seconds, 1) if seconds else None
        return data


def append_run_log(spark: SparkSession, settings: Settings, record: RunRecord) -> None:
    location = ensure_table(spark, settings, RUN_LOG)
    row = (
        record.pipeline,
        record.layer,
        record.action,
        record.run_id,
        record.query_id,
        record.status,
        record.started_at.replace(tzinfo=None),
        record.ended_at.replace(tzinfo=None) if record.ended_at else None,
        record.duration_s,
        record.rows_in,
        record.rows_out,
        record.rows_quarantined,
        record.batches,
        record.source_start,
        record.source_end,
        record.spark_master,
        record.error,
        json.dumps(record.details, sort_keys=True, default=str),
    )
    spark.createDataFrame([row], RUN_LOG.schema).write.format("delta").mode("append").save(location)


def configure_logging() -> None:
    logging.basicConfig(
        stream=sys.stdout,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s [%(name)s] %(message)s",
        force=True,
    )
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def refusal(exc: LakehouseError) -> str:
    """Print the one-line refusal the task log ends with; return it for the record."""
    print(f"ERROR [{exc.code}] {exc}", file=sys.stderr, flush=True)
    return f"{exc.code}: {exc}"


def job_settings(root: str | None) -> Settings:
    settings = Settings.from_env()
    return settings.with_root(root) if root else settings


def start_spark(app_name: str, settings: Settings) -> SparkSession:
    """The job's session, once the root is known to be writable."""
    check_root_writable(settings)
    return build_spark(app_name, settings)


def check_no_restore_in_progress(spark: SparkSession, settings: Settings, pipeline: str) -> None:
    marker = settings.path(restore_marker(pipeline))
    text = storage.read_text(spark, marker)
    if text is not None:
        raise RestoreInProgress(
            f"a checkpoint restore of pipeline {pipeline} is unfinished: {text}"
        )


def write_summary(path: str | None, summary: dict[str, Any]) -> None:
    log.info("SUMMARY %s", json.dumps(summary, sort_keys=True, default=str))
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(summary, handle, sort_keys=True, default=str)


def run_job(
    argv: Sequence[str] | None,
    layer: str,
    body: Callable[[JobContext], StreamResult],
) -> int:
    """Run one layer job; returns the process exit code (0 ok, 1 failed, 2 refused)."""
    configure_logging()
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv, layer)
    except LakehouseError as exc:
        refusal(exc)
        return 2
    started = datetime.now(UTC)
    record = RunRecord(args.pipeline, layer, args.run_id, "started", started)
    spark: SparkSession | None = None
    exit_code = 0
    try:
        settings = job_settings(args.root)
        pipeline = get_pipeline(args.pipeline)
        stream = pipeline.stream(layer)
        args.params.check_against(pipeline)
        spark = start_spark(f"lakehouse-{pipeline.name}-{layer}", settings)
        record.spark_master = spark.sparkContext.master
        ctx = JobContext(spark, settings, pipeline, stream, args)
        owner = f"{pipeline.name}.{layer} run {args.run_id}"
        locked = args.params.locked_tables(pipeline, layer)
        with table_locks(settings, locked, owner, settings.lock_wait_s):
            # A restore holds these locks while it works; one that died leaves its marker.
            check_no_restore_in_progress(spark, settings, pipeline.name)
            t0 = time.monotonic()
            result = body(ctx)
        record.status = "succeeded"
        record.query_id = result.query_id
        record.batches = result.batches
        record.rows_in = result.rows_in
        record.rows_out = result.rows_out if result.rows_out is not None else ctx.counters.rows_out
        record.rows_quarantined = result.rows_quarantined or ctx.counters.rows_quarantined
        record.source_start, record.source_end = result.source_start, result.source_end
        record.details = {"stream_s": round(time.monotonic() - t0, 3), **result.details}
    except LakehouseError as exc:
        exit_code, record.status, record.error = 2, "refused", refusal(exc)
    except Exception as exc:
        exit_code, record.status = 1, "failed"
        record.error = f"{type(exc).__name__}: {str(exc)[:2000]}"
        log.exception("%s %s failed", args.pipeline, layer)
    finally:
        record.ended_at = datetime.now(UTC)
        if spark is not None:
            try:
                append_run_log(spark, settings, record)
            except Exception:
                log.exception("could not append to the run log")
        write_summary(args.summary_file, record.summary())
    return exit_code
