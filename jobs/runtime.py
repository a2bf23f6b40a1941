"""What every job shares: its command line, its run-log rows, its summary and exit code.

``run_main`` is the one wrapper around a job's body, for the layer jobs and for maintenance:

* parses the common arguments and the job's own (from its params model) before Spark starts;
  a refusal there is exit code 2 and one ``ERROR [Name] ...`` line;
* runs the body, which starts Spark when it needs it and appends one ``ops/run_log`` row per
  thing it did (a layer run, a maintenance action);
* turns a ``LakehouseError`` into exit code 2 and a ``refused`` row, anything else into exit
  code 1 and a ``failed`` row;
* writes the summary as JSON (``--summary-file``) for the Airflow task to return.

``run_layer`` is the body of a layer job: checks, locks, the restore guard, and one
``body(ctx) -> StreamResult`` supplied by the layer's module, which builds its query and hands
it to ``run_stream`` (availableNow, one progress line per micro-batch).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from jobs import run_markers, storage
from jobs.delta_state import (
    appends_only,
    logged_versions,
    prefetch_state,
    table_version,
)
from jobs.delta_writes import alongside
from jobs.guards import check_checkpoint
from jobs.session import build_spark, interpreted
from jobs.tables import ensure_table
from lakehouse import runlog
from lakehouse.authz import ACCEPT_DATA_LOSS, require_grant
from lakehouse.backups import restore_marker
from lakehouse.checkpoints import Checkpoint, DeltaPosition, RederiveMarker
from lakehouse.errors import ConfigurationError, LakehouseError, RestoreInProgress
from lakehouse.locks import check_held, on_any_lost, table_locks
from lakehouse.params import RunParams
from lakehouse.pending import Pending, pending_input, whole_tables
from lakehouse.preflight import check_root_writable
from lakehouse.registry import registry
from lakehouse.secrets import (
    MaskingFormatter,
    mask,
    remember,
    remember_environment,
    secret_values,
)
from lakehouse.settings import Settings
from lakehouse.specs import RUN_LOG, Layer, PipelineSpec, StreamSpec, schema_fields

log = logging.getLogger("lakehouse")

POLL_INTERVAL_S = 2
P = TypeVar("P")


# -- arguments --------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobArgs:
    """The arguments every job takes."""

    pipeline: str
    root: str | None
    run_id: str
    summary_file: str | None

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> JobArgs:
        return cls(
            pipeline=ns.pipeline,
            root=ns.root,
            run_id=ns.run_id or f"manual__{datetime.now(UTC):%Y%m%dT%H%M%S}_{uuid.uuid4().hex[:6]}",
            summary_file=ns.summary_file,
        )


def job_parser(
    prog: str, description: str, *, one_pipeline: bool = True
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    if one_pipeline:
        parser.add_argument("--pipeline", required=True, help="pipeline name, e.g. orders")
    else:
        parser.add_argument("--pipeline", default="all", help="one pipeline (default: all)")
    parser.add_argument("--root", help="lakehouse root (default: LAKEHOUSE_ROOT)")
    parser.add_argument("--run-id", default=None, help="the orchestrator's run id, for the run log")
    parser.add_argument("--summary-file", help="write the run summary here as JSON")
    return parser


# -- run log ----------------------------------------------------------------------------------


def spark_error_text(exc: BaseException) -> str:
    """An error's message with the JVM's whole chain of causes: a Spark failure inside a
    task arrives wrapped (``TASK_WRITE_FAILED``, ``STREAM_FAILED``), its cause named only in
    the ``Caused by:`` lines of the JVM stack trace."""
    return f"{exc}\n{getattr(exc, '_stackTrace', None) or ''}"


def root_cause(exc: BaseException) -> str | None:
    """The innermost ``Caused by:`` line of a JVM failure, when there is one."""
    lines = (line.strip() for line in spark_error_text(exc).splitlines())
    causes = [
        line.removeprefix("Caused by:").strip() for line in lines if line.startswith("Caused by:")
    ]
    return causes[-1] if causes else None


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
    error_code: str | None = None  # in the summary; the run log's ``error`` starts with it
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float | None:
        if self.ended_at is None:
            return None
        return round((self.ended_at - self.started_at).total_seconds(), 3)

    def fail(self, exc: BaseException) -> None:
        """Mark the record refused (a named error) or failed (anything else)."""
        if isinstance(exc, LakehouseError):
            self.status, self.error_code, self.error = "refused", exc.code, refusal(exc)
        else:
            self.status, self.error_code = "failed", type(exc).__name__
            self.error = f"{type(exc).__name__}: {str(exc)[:2000]}"
            cause = root_cause(exc)
            if cause and cause not in self.error:
                self.error += f" Caused by: {cause[:1000]}"
        # The text goes to the run log and the summary (XCom): never a secret.
        self.error = mask(self.error)

    def summary(self) -> dict[str, Any]:
        data = asdict(self)
        data["started_at"] = self.started_at.isoformat()
        data["ended_at"] = self.ended_at.isoformat() if self.ended_at else None
        data["duration_s"] = self.duration_s
        seconds = self.duration_s or 0
        data["rows_per_s"] = round((self.rows_in or 0) / seconds, 1) if seconds else None
        return data


def append_run_log(spark: SparkSession, settings: Settings, record: RunRecord) -> None:
    """Append ``record`` to ``ops/run_log``: the row by delta-rs (no Spark job for one row),
    under the run log's lease as every write is; the table made, or given the columns and
    properties it lacks, by Spark first, when delta-rs finds it is not ready."""
    if not runlog.is_ready(settings):
        ensure_table(spark, settings, RUN_LOG)
    values = {name: getattr(record, name) for name, _ in schema_fields(RUN_LOG.schema)}
    runlog.append_row(settings, **values)


# -- the wrapper ------------------------------------------------------------------------------


def configure_logging() -> None:
    logging.basicConfig(
        stream=sys.stdout,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s [%(name)s] %(message)s",
        force=True,
    )
    # Whatever a job logs (an exception's text, a traceback) is masked on its way out.
    for handler in logging.getLogger().handlers:
        handler.setFormatter(
            MaskingFormatter(handler.formatter._fmt if handler.formatter else None)
        )
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def refusal(exc: LakehouseError) -> str:
    """Print the one-line refusal the task log ends with; return it for the record."""
    print(f"ERROR [{exc.code}] {mask(str(exc))}", file=sys.stderr, flush=True)
    return f"{exc.code}: {exc}"


def write_summary(path: str | None, summary: dict[str, Any]) -> None:
    log.info("SUMMARY %s", json.dumps(summary, sort_keys=True, default=str))
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(summary, handle, sort_keys=True, default=str)


@dataclass
class JobRun:
    """One run of a job: its arguments, settings, Spark session and run-log rows."""

    args: JobArgs
    layer: str
    action: str  # "stream" for a layer run, "maintenance" for a maintenance run
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    settings: Settings | None = None
    spark: SparkSession | None = None
    records: list[RunRecord] = field(default_factory=list)

    def load_settings(self) -> Settings:
        settings = Settings.from_env()
        self.settings = settings.with_root(self.args.root) if self.args.root else settings
        return self.settings

    def start_spark(self, app_name: str) -> SparkSession:
        """The job's session, once the root is known to be writable."""
        assert self.settings is not None
        check_root_writable(self.settings)
        self.spark = build_spark(app_name, self.settings)
        # What this job must never write out: secret settings and the S3 key it holds.
        remember(*secret_values(dict(self.spark.sparkContext.getConf().getAll())))
        remember_environment()
        return self.spark

    def new_record(self, layer: str | None = None, action: str | None = None) -> RunRecord:
        return RunRecord(
            self.args.pipeline,
            layer or self.layer,
            self.args.run_id,
            "started",
            datetime.now(UTC),
            action or self.action,
        )

    def log(self, record: RunRecord) -> None:
        """Close ``record`` and append it to the run log (when Spark runs)."""
        record.ended_at = record.ended_at or datetime.now(UTC)
        self.records.append(record)
        if self.spark is None or self.settings is None:
            return
        record.spark_master = record.spark_master or self.spark.sparkContext.master
        try:
            append_run_log(self.spark, self.settings, record)
        except Exception:
            log.exception("could not append to the run log")

    @property
    def exit_code(self) -> int:
        """0 when everything succeeded or was skipped, 1 when something failed, 2 when
        something was refused with a named error."""
        statuses = {r.status for r in self.records}
        return 1 if "failed" in statuses else 2 if "refused" in statuses else 0

    def summary(self) -> dict[str, Any]:
        if self.action == "stream" and len(self.records) == 1:
            return self.records[0].summary()
        errors = [r for r in self.records if r.error]
        return {
            "run_id": self.args.run_id,
            "pipeline": self.args.pipeline,
            "actions": [r.summary() for r in self.records if r.action != self.action],
            "status": {0: "succeeded", 1: "failed", 2: "refused"}[self.exit_code],
            "error": errors[0].error if errors else None,
            "error_code": errors[0].error_code if errors else None,
            "started_at": self.started_at.isoformat(),
            "duration_s": round((datetime.now(UTC) - self.started_at).total_seconds(), 3),
        }


def run_main(
    argv: Sequence[str] | None,
    *,
    prog: str,
    description: str,
    layer: str,
    action: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    parse: Callable[[argparse.Namespace], P],
    body: Callable[[JobRun, P], None],
    one_pipeline: bool = True,
) -> int:
    """Run one job; returns the process exit code (0 ok, 1 failed, 2 refused)."""
    configure_logging()
    parser = job_parser(prog, description, one_pipeline=one_pipeline)
    add_arguments(parser)
    try:
        namespace = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
        args = JobArgs.from_namespace(namespace)
        parsed = parse(namespace)
    except LakehouseError as exc:
        refusal(exc)
        return 2
    run = JobRun(args, layer, action)
    try:
        body(run, parsed)
    except Exception as exc:
        record = run.new_record()
        record.fail(exc)
        if not isinstance(exc, LakehouseError):
            log.exception("%s %s failed", args.pipeline, layer)
        run.log(record)
    finally:
        write_summary(args.summary_file, run.summary())
    return run.exit_code


# -- layer jobs -------------------------------------------------------------------------------


@dataclass
class BatchCounters:
    """Figures a ``foreachBatch`` function adds up; written into the summary."""

    rows_out: int = 0
    rows_quarantined: int = 0
    batches_written: int = 0
    expectations: Counter[str] = field(default_factory=Counter)


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
    """What a layer's body works with."""

    spark: SparkSession
    settings: Settings
    pipeline: PipelineSpec
    stream: StreamSpec
    args: JobArgs
    params: RunParams
    counters: BatchCounters = field(default_factory=BatchCounters)
    # A named error raised inside a micro-batch; Spark reports it as a query failure.
    failure: LakehouseError | None = None

    def path(self, table: str) -> str:
        return self.settings.path(table)

    def guarded(
        self, write_batch: Callable[[DataFrame, int], None]
    ) -> Callable[[DataFrame, int], None]:
        """``write_batch`` for ``foreachBatch``: a named error it raises ends the run under
        its own name, not as Spark's query failure."""

        def guarded_batch(batch_df: DataFrame, batch_id: int) -> None:
            try:
                # Fenced: a writer that lost its lease neither writes nor lets Spark record
                # the batch as committed (``commits/<batch>`` follows this function).
                check_held()
                write_batch(batch_df, batch_id)
                check_held()
            except LakehouseError as exc:
                self.failure = exc
                raise

        return guarded_batch

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
    reader = Checkpoint(storage.HadoopStorage(spark), checkpoint)
    query_id = reader.query_id()
    if query_id is None:
        storage.mkdirs(spark, checkpoint)
        storage.write_text(spark, reader.path("metadata"), json.dumps({"id": str(uuid.uuid4())}))
        query_id = reader.query_id()
    assert query_id is not None
    return query_id


def _offsets_text(source: Any, key: str) -> str | None:
    """A source's offsets as JSON. PySpark 4's ``SourceProgress`` gives ``str()`` of the
    parsed value (a Python repr, or ``"None"``); its ``json`` has the real thing."""
    raw = json.loads(source.json) if hasattr(source, "json") else dict(source)
    value = raw.get(key)
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def read_delta_stream(ctx: JobContext, index: int, **options: str) -> DataFrame:
    """Source ``index`` of the layer's stream (``ctx.stream.sources``) as a streaming
    DataFrame with Delta's ``options``.

    Until its first micro-batch is behind it, a stream over a table that was only ever
    appended to starts from version 0's commit instead of the latest snapshot
    (``delta_state.appends_only``): the same files, read from the log without the snapshot's
    Spark jobs. A first batch already planned is replayed as it was planned, from its
    recorded offsets; after it, Delta reads only the checkpoint."""
    location = ctx.path(ctx.stream.sources[index])
    reader = ctx.spark.readStream.format("delta").options(**options)
    if _starts_from_log(ctx, index, location):
        log.info("%s: read from its log (version 0 on), not its snapshot", location)
        reader = reader.option("startingVersion", "0")
    return reader.load(location)


def _starts_from_log(ctx: JobContext, index: int, location: str) -> bool:
    checkpoint = Checkpoint(storage.HadoopStorage(ctx.spark), ctx.checkpoint)
    last = checkpoint.log().last_offsets
    if last is not None and last > 0:
        return False  # Delta only asks where to start while batch 0 is the latest
    position = DeltaPosition.from_offset(checkpoint.offsets(0).source(index)) if last == 0 else None
    if position is not None:
        return not position.is_starting_version and 0 in logged_versions(ctx.spark, location)
    return appends_only(ctx.spark, location, change_feed=ctx.stream.read_change_feed)


def run_stream(
    ctx: JobContext,
    make_writer: Callable[[], DataStreamWriter],
    pending: Pending | None = None,
) -> StreamResult:
    """Run the writer ``make_writer`` gives with ``availableNow`` to completion, logging each
    micro-batch. What it will read (``pending``, when the body knows it: bronze's Kafka
    check) is worked out first, as a scheduled run's skip is (``lakehouse.pending``: the
    checkpoint against the landing files or the tables' logs): a stream over Delta tables
    with nothing new is not started at all (a query's start and stop cost a second or more;
    its checkpoint would not move), and an input known to be small is evaluated without
    generated code (``jobs.session.interpreted``)."""
    if pending is None:
        pending = pending_input(ctx.settings, ctx.pipeline, ctx.stream.layer)
    if ctx.stream.sources and pending.nothing:
        log.info("query %s not started: %s", ctx.query_name, pending.description)
        check_held()
        return StreamResult(query_id=checkpoint_query_id(ctx.spark, ctx.checkpoint))
    interpret = pending.small and ctx.settings.interpret_small_inputs
    with interpreted(ctx.spark, interpret):
        result = _run_query(ctx, make_writer)
    result.details["generated_code"] = not interpret
    return result


def left_to_rederivation(batch_df: DataFrame, batch_id: int) -> None:
    """A micro-batch of the catch-up before a re-derivation of everything (under the layer's
    marker): it only moves the checkpoint, since the re-derivation that follows writes its
    records with every other one."""
    log.info("batch %d: left to the re-derivation of everything that follows", batch_id)


def rederive_marker(ctx: JobContext) -> RederiveMarker:
    """This layer's re-derivation marker (``lakehouse.checkpoints.RederiveMarker``)."""
    return RederiveMarker(storage.HadoopStorage(ctx.spark), ctx.path(ctx.stream.rederive_marker))


def unfinished_rederive_spec(ctx: JobContext) -> dict[str, Any] | None:
    """What a re-derivation of this layer that was left unfinished had to do, or None."""
    return rederive_marker(ctx).spec()


@contextmanager
def under_rederive_marker(ctx: JobContext, spec: dict[str, Any]) -> Iterator[None]:
    """Around a re-derivation that is not one commit (several writes, or writes a catch-up
    before it left to it): its marker holds ``spec`` until it is done, so a run that dies
    on the way leaves the marker, and the layer's next run, whatever its mode, does the same
    re-derivation first (re-derivations are idempotent)."""
    marker = rederive_marker(ctx)
    marker.put({**spec, "run_id": ctx.args.run_id})
    yield
    marker.clear()


@contextmanager
def rederiving(ctx: JobContext, tables: Sequence[str], details: dict[str, Any]) -> Iterator[None]:
    """Around a re-derivation (a reprocess or a full refresh) that reads all of ``tables``:
    evaluated without generated code when they are small, as a small increment is (a
    reprocess of a few days validates only their keys' events, and at 100,000 events took a
    quarter to a third less time; a full refresh the same time); ``details`` (the
    re-derivation's run-log figures) records which way it ran."""
    interpret = (
        ctx.settings.interpret_small_inputs
        and whole_tables(ctx.settings, ctx.stream.layer, tables).small
    )
    with interpreted(ctx.spark, interpret):
        yield
    details["generated_code"] = not interpret


def _run_query(ctx: JobContext, make_writer: Callable[[], DataStreamWriter]) -> StreamResult:
    targets = [ctx.path(t) for t in ctx.stream.targets]
    appended = {ctx.path(t) for t in ctx.stream.appended}
    with alongside(lambda: prefetch_state(ctx.spark, targets, appended), "delta-state-prefetch"):
        return _await_query(ctx, make_writer)


def _await_query(ctx: JobContext, make_writer: Callable[[], DataStreamWriter]) -> StreamResult:
    query = (
        make_writer()
        .option("checkpointLocation", ctx.checkpoint)
        .queryName(ctx.query_name)
        .trigger(availableNow=True)
        .start()
    )
    log.info("query %s started (id %s, checkpoint %s)", ctx.query_name, query.id, ctx.checkpoint)
    # A lost lease stops the query at once, whatever it is doing (bronze's Delta sink has no
    # hook before its commit); the check below then names the loss.
    on_any_lost(lambda _: query.stop() if query.isActive else None)
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
    except Exception:
        if ctx.failure is not None:
            raise ctx.failure from None
        raise
    finally:
        report()
        if query.isActive:
            query.stop()
    check_held()
    return result


def check_no_restore_in_progress(spark: SparkSession, settings: Settings, *pipelines: str) -> None:
    """Refuse while a restore of one of ``pipelines`` is unfinished (a restore resets the
    streams downstream of it, in other pipelines too: a layer checks its own pipeline and
    every pipeline it reads from)."""
    for pipeline in pipelines:
        text = storage.read_text(spark, settings.path(restore_marker(pipeline)))
        if text is not None:
            raise RestoreInProgress(
                f"a checkpoint restore of pipeline {pipeline} is unfinished: {text}"
            )


def log_killed_run(job: JobRun, marker: dict[str, Any]) -> None:
    """Append the run-log row of a run that started and never ended (``jobs.run_markers``);
    it is not one of this run's records (the summary stays this run's)."""
    assert job.spark is not None and job.settings is not None
    record = job.new_record()
    record.run_id = str(marker.get("run_id") or "unknown")
    record.status, record.error_code = "killed", "Killed"
    record.started_at = run_markers.started_at(marker) or record.started_at
    record.ended_at = None
    record.error = (
        "Killed: the run started and never ended (killed, or its machine lost); found by run "
        f"{job.args.run_id}. What it had committed stays; the next run resumed from the "
        "checkpoint."
    )
    record.details = {"detected_by": job.args.run_id, "marker": marker}
    log.warning("%s", record.error.replace("the run", f"run {record.run_id}", 1))
    try:
        append_run_log(job.spark, job.settings, record)
    except Exception:
        log.exception("could not append to the run log")


def run_layer(
    argv: Sequence[str] | None, layer: Layer, body: Callable[[JobContext], StreamResult]
) -> int:
    """``main`` of a layer job: ``jobs/<layer>.py --pipeline <name> [run params]``."""

    def run(job: JobRun, params: RunParams) -> None:
        settings = job.load_settings()
        pipelines = registry(settings)
        pipeline = pipelines.get(job.args.pipeline)
        if layer not in pipeline.layers:
            raise ConfigurationError(f"pipeline {pipeline.name} has no {layer} layer.")
        stream = pipeline.stream(layer)
        params.check_against(pipeline)
        if params.accept_data_loss:
            require_grant(ACCEPT_DATA_LOSS, job.args.run_id)  # given by Airflow, or refused
        spark = job.start_spark(f"lakehouse-{pipeline.name}-{layer}")
        ctx = JobContext(spark, settings, pipeline, stream, job.args, params)
        owner = f"{pipeline.name}.{layer} run {job.args.run_id}"
        record = job.new_record()
        with (
            table_locks(
                settings, params.locked_tables(pipeline, layer), owner, settings.lock_wait_s
            ) as locks,
            run_markers.running(
                spark,
                settings,
                pipeline.name,
                layer,
                job.args.run_id,
                record.started_at,
                lambda left: log_killed_run(job, left),
            ),
        ):
            # A restore holds these locks while it works; one that died leaves its marker.
            upstream = pipelines.upstream_of(pipeline)
            check_no_restore_in_progress(spark, settings, pipeline.name, *upstream)
            check_checkpoint(spark, settings, stream, params)
            t0 = time.monotonic()
            result = body(ctx)
            locks.check()  # a run that lost its lease on the way is not a success
        record.status = "succeeded"
        record.query_id = result.query_id
        record.batches = result.batches
        record.rows_in = result.rows_in
        record.rows_out = result.rows_out if result.rows_out is not None else ctx.counters.rows_out
        record.rows_quarantined = result.rows_quarantined or ctx.counters.rows_quarantined
        record.source_start, record.source_end = result.source_start, result.source_end
        record.details = {"stream_s": round(time.monotonic() - t0, 3), **result.details}
        record.details["leases"] = locks.describe()
        # Which Spark application ran it (one per pipeline run when the tasks share a driver).
        record.details["spark_app"] = spark.sparkContext.applicationId
        # What the run left its tables at (the asset events of the Airflow task carry it).
        record.details["table_versions"] = {
            table: table_version(spark, ctx.path(table)) for table in stream.targets
        }
        job.log(record)

    return run_main(
        argv,
        prog=layer.job,
        description=f"Run the {layer} layer of a pipeline.",
        layer=layer,
        action="stream",
        add_arguments=RunParams.add_arguments,
        parse=RunParams.from_namespace,
        body=run,
    )
