"""Operators that run the project's Spark jobs with spark-submit and return their summaries.

``LakehouseSubmitOperator`` is a thin layer over the Spark provider's ``SparkSubmitOperator``.
At execution time (never at parse time) it builds the command from ``lakehouse.submit``: the
job file, its arguments, the Spark and Delta settings, the cached jars and the project's code
as ``--py-files``. It runs cheap pre-flight checks first, so a missing Java, an unwritable
root or a dead master fail in a second with a message that says what to do. When the job
ends it reads the summary the job wrote, logs it, and returns it (XCom) for the next tasks
and the UI. Two kinds of job run through it:

* ``LakehouseJobOperator``: one layer of a pipeline (``jobs/<layer>.py``);
* ``MaintenanceJobOperator``: one maintenance action (``jobs/maintenance.py``): optimize,
  vacuum, backup, or restore (a restore that changes anything, like ``accept_data_loss``, only
  with a grant Airflow's auth manager gave: ``lakehouse_airflow.authz``).

Where the job runs: ``LAKEHOUSE_SPARK_MASTER`` if set, else the ``lakehouse_spark``
connection, else local Spark in the task's process.

A layer that reads Kafka gets its brokers and credentials from the ``lakehouse_kafka``
connection, resolved here at execute time: its secrets are masked in the task log and handed
to the job in a file only this user can read, deleted when the task ends, whose path travels
in the job's environment (never on the spark-submit command line, in a param, a rendered
template or XCom). The operator also runs the Kafka pre-flight check before spark-submit, so
records that aged out unread, a missing topic or a broker that does not answer fail the task
before any JVM starts.

A root on S3 gets its credentials the same way, from the ``lakehouse_s3`` connection
(``lakehouse_airflow.s3_access``), or from the worker's ``AWS_*`` variables without it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from lakehouse import errors
from lakehouse.authz import GRANT_FILE_ENV, Grant
from lakehouse.jars import pyspark_dir
from lakehouse.jvm import compiles_quickly
from lakehouse.kafka.access import ACCESS_FILE_ENV, KafkaAccess
from lakehouse.params import Action, MaintenanceParams, RestoreParams, RunParams
from lakehouse.registry import get_pipeline, registry
from lakehouse.run_driver import RunDriver, fingerprint
from lakehouse.run_driver import start as start_driver
from lakehouse.secrets import mask_all, secret_values
from lakehouse.settings import Settings, SourceKind
from lakehouse.submit import LOCAL_MASTER, SubmitSpec, job_submit_spec
from lakehouse_airflow.authz import check_run
from lakehouse_airflow.run_params import effective_params
from lakehouse_airflow.s3_access import S3_CONN_ID, s3_access, s3_job_env

if TYPE_CHECKING:
    import subprocess

    from airflow.sdk import Context

    from lakehouse.s3 import S3Config

SPARK_CONN_ID = "lakehouse_spark"
KAFKA_CONN_ID = "lakehouse_kafka"


def _failure(exc: errors.LakehouseError) -> AirflowException:
    """The task failure for a refusal: final when a retry cannot help, else retried."""
    kind = AirflowException if exc.retryable else AirflowFailException
    return kind(f"[{exc.code}] {exc}")


class LakehouseSparkSubmitHook(SparkSubmitHook):
    """The provider's hook with the master chosen by the project's settings."""

    def __init__(self, *, master: str | None, **kwargs: Any) -> None:
        self._master_override = master
        super().__init__(**kwargs)

    def _resolve_connection(self) -> dict[str, Any]:
        data = super()._resolve_connection()
        if self._master_override:
            data["master"] = self._master_override
        elif not self._connection_exists():
            data["master"] = LOCAL_MASTER  # the provider would fall back to yarn
        return data

    def _build_spark_common_args(self) -> list[str]:
        args = super()._build_spark_common_args()
        if self._properties_file:
            # Without this, a properties file replaces spark-defaults.conf instead of adding.
            args.append("--load-spark-defaults")
        return args

    def _connection_exists(self) -> bool:
        try:
            self.get_connection(self._conn_id)
        except Exception:
            return False
        return True


class LakehouseSubmitOperator(SparkSubmitOperator):
    """Run ``jobs/<job>.py`` for ``pipeline`` with spark-submit.

    Parameters
    ----------
    pipeline, job
        The pipeline (see ``lakehouse.registry``) and the job module under ``jobs/``.
    job_args
        Extra arguments for the job (templated).

    Subclasses turn the run's params into the job's arguments (``params_args``) and say what
    a summary means (``summary_line``).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "job_args")
    ui_color = "#e8f4fa"

    def __init__(
        self,
        *,
        pipeline: str,
        job: str,
        job_args: Sequence[str] = (),
        conn_id: str = SPARK_CONN_ID,
        s3_conn_id: str = S3_CONN_ID,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("name", f"lakehouse-{pipeline}-{job}")
        # The application's path is set at execute time, from the worker's settings.
        super().__init__(application=f"jobs/{job}.py", conn_id=conn_id, **kwargs)
        self.pipeline = pipeline
        self.job = job
        self.job_args = list(job_args)
        self.s3_conn_id = s3_conn_id
        self._settings: Settings | None = None
        self._properties_file: str | None = None
        self._secrets: list[str] = []
        # The run's grant for a privileged action (lakehouse_airflow.authz), for the job.
        self._grant: Grant | None = None
        self._s3: S3Config | None = None
        # Set by a subclass that knows the run's input is small (lakehouse.pending: Pending.small).
        self._quick_jit = False

    @property
    def what(self) -> str:
        return f"{self.pipeline}.{self.job}"

    def params_args(self, context: Context, settings: Settings) -> list[str]:
        """The job's arguments from the run's params; raise AirflowSkipException to skip."""
        return []

    def before_spark(self, settings: Settings) -> None:
        """Last checks once the params and the machine are fine; raise AirflowSkipException
        to skip the task without starting Spark."""

    def job_env(self, settings: Settings, scratch: Path) -> dict[str, str]:
        """Environment for the job; ``scratch`` is a private folder deleted after the task."""
        return {}

    def summary_line(self, summary: dict[str, Any]) -> str:
        return f"{self.what}: {summary.get('status')} in {summary.get('duration_s') or 0.0:.1f}s"

    def _submit_env(self) -> dict[str, str]:
        """What spark-submit gets on top of the task's environment."""
        env_vars = dict(self.env_vars or {})
        if shutil.which("spark-submit") is None:
            # Not on PATH (e.g. a worker started outside `make env`): use pyspark's own.
            env_vars["PATH"] = f"{_pyspark_bin()}{os.pathsep}{os.environ.get('PATH', '')}"
        return env_vars

    def _get_hook(self) -> SparkSubmitHook:
        settings = self._settings or Settings.from_env()
        env_vars = self._submit_env()
        return LakehouseSparkSubmitHook(
            master=settings.spark_master,
            conf=self.conf,
            conn_id=self._conn_id,
            properties_file=self._properties_file,
            py_files=self.py_files,
            jars=self.jars,
            driver_memory=self._driver_memory,
            name=self.name,
            application_args=self.application_args,
            env_vars=env_vars or None,
            verbose=self._verbose,
            status_poll_interval=self._status_poll_interval,
        )

    def execute(self, context: Context) -> dict[str, Any]:  # type: ignore[override]
        from lakehouse import preflight

        try:
            # An S3 root's credentials from the lakehouse_s3 connection (masked at once).
            settings, self._s3 = s3_access(Settings.from_env(), self.s3_conn_id, self.log)
            self._settings = settings
            params_args = self.params_args(context, settings)
            preflight.java_executable()
            preflight.check_root_writable(settings, self._s3)
            self.before_spark(settings)
        except errors.LakehouseError as exc:
            raise _failure(exc) from None
        with tempfile.TemporaryDirectory(prefix="lakehouse-") as tmp:
            try:
                extra_env = {
                    **self.job_env(settings, Path(tmp)),
                    **s3_job_env(settings, self._s3, Path(tmp)),
                }
            except errors.LakehouseError as exc:
                raise _failure(exc) from None
            if self._grant is not None:
                extra_env[GRANT_FILE_ENV] = str(self._grant.write(Path(tmp) / "grant.json"))
            if extra_env:
                self.env_vars = {**(self.env_vars or {}), **extra_env}
            summary_file = Path(tmp) / "summary.json"
            spec = job_submit_spec(
                settings,
                self.pipeline,
                self.job,
                run_id=str(context["run_id"]),
                summary_file=str(summary_file),
                extra_args=(*params_args, *(str(a) for a in self.job_args)),
            )
            self._hand_over_extra_conf(spec, Path(tmp))
            self.application = spec.application
            self.application_args = list(spec.args)
            # The quick compiler is the submitted driver's choice, not part of what a run's
            # shared driver must match (``run_job``).
            self.conf = dict((spec.with_quick_jit() if self._quick_jit else spec).conf)
            self.jars = ",".join(spec.jars)
            self.py_files = ",".join(spec.py_files)
            self._driver_memory = spec.driver_memory
            self._hook = self._get_hook()
            master = self._hook._connection["master"]
            try:
                preflight.check_master(master)
            except errors.LakehouseError as exc:
                raise _failure(exc) from None
            self.log.info("running %s on %s", self.what, master)
            try:
                self.run_job(context, spec, master)
            except AirflowException:
                summary = self._read_summary(summary_file)
                if summary and summary.get("error"):
                    message = f"{self.what} {summary['status']}: {summary['error']}"
                    if errors.is_retryable(summary.get("error_code")):
                        raise AirflowException(message) from None
                    raise AirflowFailException(message) from None
                raise
            summary = self._read_summary(summary_file)
        if summary is None:
            raise AirflowException(f"{self.what} finished without a summary.")
        self.log.info("%s", self.summary_line(summary))
        self.annotate_outlets(context, summary)
        return summary

    def run_job(self, context: Context, spec: SubmitSpec, master: str) -> None:
        """Run the job as ``spec`` says; a failure raises ``AirflowException``."""
        super().execute(context)

    def annotate_outlets(self, context: Context, summary: dict[str, Any]) -> None:
        """Put what the job wrote on the asset events of this task's outlets."""

    def _hand_over_extra_conf(self, spec: SubmitSpec, scratch: Path) -> None:
        """The deployment's extra Spark settings go to spark-submit in an owner-only file in
        the task's scratch folder (deleted with it), their secret values masked in the task
        log; the job's own environment does not carry them again."""
        from airflow.sdk.log import mask_secret

        self._secrets += secret_values(spec.properties)
        for secret in self._secrets:
            mask_secret(secret)
        path = spec.write_properties(scratch)
        self._properties_file = str(path) if path else None
        if path:
            self.env_vars = {**(self.env_vars or {}), "LAKEHOUSE_SPARK_CONF": "{}"}

    def _read_summary(self, path: Path) -> dict[str, Any] | None:
        """The job's summary, every secret this task knows masked (it becomes the XCom)."""
        summary = _read_summary(path)
        return None if summary is None else dict(mask_all(summary, self._secrets))


class LakehouseJobOperator(LakehouseSubmitOperator):
    """Run ``jobs/<layer>.py`` for ``pipeline``: one layer of the pipeline.

    The run's params (``mode``, ``reprocess_from``/``reprocess_to``, ``layers``, rate limits)
    are read from the task context and passed on; a layer the params leave out is skipped.
    """

    def __init__(
        self,
        *,
        pipeline: str,
        layer: str,
        kafka_conn_id: str = KAFKA_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(pipeline=pipeline, job=layer, **kwargs)
        self.layer = layer
        self.kafka_conn_id = kafka_conn_id
        self._params = RunParams()
        self._run_id = ""
        # The run's shared driver (lakehouse.run_driver), once this task has used it.
        self._driver: RunDriver | None = None
        self._last_layer = False

    def execute(self, context: Context) -> dict[str, Any]:  # type: ignore[override]
        try:
            return super().execute(context)
        except AirflowSkipException:
            if self._last_layer:  # nothing left for the run's driver to do
                _run_driver(context, "", self._settings or Settings.from_env()).stop()
            raise

    def run_job(self, context: Context, spec: SubmitSpec, master: str) -> None:
        """Run the layer in the run's warm driver (started by the run's first layer task),
        or with a spark-submit of its own where a driver cannot serve: a master in cluster
        deploy mode or on YARN or Kubernetes, ``LAKEHOUSE_RUN_DRIVER_IDLE_S=0``, or a
        driver started with other Spark settings."""
        assert self._settings is not None and self._hook is not None
        deploy_mode = self._hook._connection.get("deploy_mode")
        local_driver = master.startswith(("local", "spark://")) and deploy_mode != "cluster"
        if not local_driver or self._settings.run_driver_idle_s == 0:
            return super().run_job(context, spec, master)
        # What the driver runs with: a task that would submit with other settings (another
        # master, other jars or code, other S3 credentials, another environment for the
        # jobs' settings) must not use it.
        s3 = self._s3.hadoop_credentials() if self._s3 else None
        lakehouse_env = sorted((k, v) for k, v in os.environ.items() if k.startswith("LAKEHOUSE_"))
        driver = _run_driver(
            context,
            fingerprint(
                [
                    master,
                    spec.conf,
                    spec.jars,
                    spec.py_files,
                    spec.driver_memory,
                    spec.properties,
                    s3,
                    lakehouse_env,
                ]
            ),
            self._settings,
        )
        self._driver = driver
        try:
            code = driver.run(
                self.job,
                spec.args,
                self.env_vars or {},
                last=self._last_layer,
                start=lambda log_file: self._start_driver(spec, master, driver, log_file),
                out=lambda line: self.log.info("%s", line),
            )
        except errors.LakehouseError as exc:
            raise _failure(exc) from None
        if code is None:
            self.log.info("the run's driver runs other Spark settings: submitting %s", self.what)
            return super().run_job(context, spec, master)
        if code != 0:
            raise AirflowException(f"{self.what} exited with code {code}")

    def _start_driver(
        self, spec: SubmitSpec, master: str, driver: RunDriver, log_file: Path
    ) -> subprocess.Popen[bytes]:
        """spark-submit the run's driver with this task's settings (and its choice of the
        quick compiler)."""
        assert self._settings is not None
        properties = Path(self._properties_file) if self._properties_file else None
        driver_spec = driver.submit_spec(
            replace(spec, conf=dict(self.conf or {})),
            self._settings,
            self.pipeline,
            task_env=self.env_vars or {},
        )
        argv = driver_spec.argv(master, properties_file=properties)
        self.log.info("Spark-Submit cmd (the run's driver): %s", " ".join(argv))
        return start_driver(argv, {**os.environ, **self._submit_env()}, log_file)

    def on_kill(self) -> None:
        if self._driver is not None:
            self._driver.kill()
        super().on_kill()

    def params_args(self, context: Context, settings: Settings) -> list[str]:
        params = self._params = effective_params(context, get_pipeline(self.pipeline))
        self._run_id = str(context["run_id"])
        if self.layer not in params.layers:
            raise AirflowSkipException(f"{self.layer} is not among this run's layers")
        mine = get_pipeline(self.pipeline).layers
        self._last_layer = self.layer == [layer for layer in params.layers if layer in mine][-1]
        if params.dry_run:
            raise AirflowSkipException("dry run: the plan task says what this layer would do")
        if params.accept_data_loss and self.layer == "bronze":
            self._grant = check_run(context)
        return params.job_args(self.layer)

    def before_spark(self, settings: Settings) -> None:
        if not self._reads_kafka(settings):  # Kafka sources decide once connected (job_env)
            self._skip_if_idle(settings, self._params)

    def job_env(self, settings: Settings, scratch: Path) -> dict[str, str]:
        if not self._reads_kafka(settings):
            return {}
        access_file = scratch / "kafka-access.json"
        access = self._kafka_access(settings)
        access.write(access_file)
        self._check_kafka(settings, access, self._params)
        self._skip_if_idle(settings, self._params, access)
        # The path only: the job reads the settings from the file.
        return {ACCESS_FILE_ENV: str(access_file)}

    def _skip_if_idle(
        self, settings: Settings, params: RunParams, kafka: KafkaAccess | None = None
    ) -> None:
        """Skip the layer, without starting a JVM, when it has nothing to do: nothing new in
        its input since its checkpoint's last commit, and no re-derivation left unfinished
        (an incremental run; every other mode does work). The
        decision is a run-log row too, written with delta-rs. Input known to be small starts
        the driver with the quick compiler (``Pending.small``), unless the driver is kept
        between runs (``lakehouse.jvm.compiles_quickly``)."""
        from lakehouse.params import Mode
        from lakehouse.pending import pending_input, unfinished_rederivation
        from lakehouse.runlog import append_row, now

        if params.mode != Mode.INCREMENTAL or params.accept_data_loss or params.kafka_replay_from:
            return
        started = now()
        pipeline = get_pipeline(self.pipeline)
        pending = unfinished_rederivation(
            settings, pipeline, self.layer, self._s3
        ) or pending_input(settings, pipeline, self.layer, kafka, s3=self._s3)
        if not pending.nothing:
            self._quick_jit = compiles_quickly(pending.small, settings.run_driver_keep_s)
            speed = "; a small input: the driver JVM compiles quickly" if self._quick_jit else ""
            self.log.info("%s: %s%s", self.what, pending.description, speed)
            return
        reason = f"nothing new: {pending.description}"
        append_row(
            settings,
            self._s3,
            pipeline=self.pipeline,
            layer=self.layer,
            action="stream",
            run_id=self._run_id,
            status="skipped",
            started_at=started,
            ended_at=now(),
            rows_in=0,
            details={"reason": reason, "jvm_started": False},
        )
        raise AirflowSkipException(f"{self.what}: {reason}; no JVM started")

    def _reads_kafka(self, settings: Settings) -> bool:
        pipeline = get_pipeline(self.pipeline)
        stream = pipeline.stream(self.layer)
        return stream.reads_raw_source and settings.pipeline(pipeline).source == SourceKind.KAFKA

    def _kafka_access(self, settings: Settings) -> KafkaAccess:
        """Brokers and credentials from the Kafka connection, its secrets masked at once."""
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException
        from airflow.sdk.log import mask_secret

        try:
            conn = BaseHook.get_connection(self.kafka_conn_id)
        except AirflowNotFoundException:
            self.log.info("no connection %s: Kafka without security", self.kafka_conn_id)
            return KafkaAccess(bootstrap_servers=settings.kafka_brokers)
        if conn.password:
            mask_secret(conn.password)
        extra = conn.extra_dejson  # masks the extras whose names say they are secret
        access = KafkaAccess.from_connection(
            host=conn.host,
            port=conn.port,
            login=conn.login,
            password=conn.password,
            extra=extra,
            bootstrap_override=settings.kafka_bootstrap,
            default_bootstrap=settings.kafka_brokers,
        )
        for secret in access.secrets:
            mask_secret(secret)
        self._secrets += access.secrets
        self.log.info("Kafka: %s (connection %s)", access.describe(), self.kafka_conn_id)
        return access

    def _check_kafka(self, settings: Settings, access: KafkaAccess, params: RunParams) -> None:
        """The pre-flight offset check, before any JVM starts (the job checks again, with
        Spark's file system)."""
        from lakehouse.checkpoints import Checkpoint
        from lakehouse.fs import storage_for
        from lakehouse.kafka.brokers import check_offsets
        from lakehouse.kafka.offsets import checkpoint_offsets

        pipeline = get_pipeline(self.pipeline)
        checkpoint = Checkpoint(
            storage_for(settings, self._s3), settings.path(pipeline.stream(self.layer).checkpoint)
        )
        report = check_offsets(
            access,
            settings.pipeline(pipeline).subscription,
            checkpoint_offsets(checkpoint),
            accept_data_loss=params.accept_data_loss,
        )
        self.log.info(
            "Kafka pre-flight: %d partitions, %d records to read, checked in %.0f ms",
            report.partitions,
            report.backlog,
            report.check_ms,
        )

    def annotate_outlets(self, context: Context, summary: dict[str, Any]) -> None:
        """Each table asset's event carries the table's version after this run (and the run
        log's run id): a pipeline that Airflow schedules on these assets knows what it was
        started for."""
        versions = (summary.get("details") or {}).get("table_versions") or {}
        events = context.get("outlet_events")
        if events is None:
            return
        for asset in self.outlets or []:
            table = str(getattr(asset, "uri", "")).removeprefix("lakehouse://")
            if table in versions:
                events[asset].extra = {
                    "table": table,
                    "version": versions[table],
                    "run_id": summary.get("run_id"),
                }

    def summary_line(self, summary: dict[str, Any]) -> str:
        return (
            f"{self.what}: {summary.get('rows_in')} rows in, {summary.get('rows_out')} out, "
            f"{summary.get('rows_quarantined')} quarantined, {summary.get('batches')} "
            f"micro-batches, {summary.get('duration_s') or 0.0:.1f}s "
            f"({summary.get('rows_per_s')} rows/s)"
        )


class MaintenanceJobOperator(LakehouseSubmitOperator):
    """Run one maintenance ``action`` of ``jobs/maintenance.py`` for ``pipeline``.

    ``optimize``, ``vacuum`` and ``backup`` read the maintenance params (``actions``,
    ``tables``, ``retention_hours``, ``keep_backups``, ``dry_run``) and are skipped when
    ``actions`` leaves them out. ``restore`` reads ``layer``, ``backup_id`` and ``dry_run``,
    and, unless it only checks, refuses a run without a valid grant (``lakehouse_airflow.authz``).
    """

    ACTIONS = (*(str(a) for a in Action), "restore")

    def __init__(self, *, action: str, pipeline: str = "all", **kwargs: Any) -> None:
        if action not in self.ACTIONS:
            raise ValueError(f"action {action!r} is not one of {self.ACTIONS}")
        kwargs.setdefault("name", f"lakehouse-{action}")
        super().__init__(pipeline=pipeline, job="maintenance", **kwargs)
        self.action = action

    @property
    def what(self) -> str:
        return f"{self.pipeline}.{self.action}"

    def params_args(self, context: Context, settings: Settings) -> list[str]:
        raw = dict(context["params"])
        if self.action == "restore":
            args = restore_args(context, raw, settings)
            self.pipeline = str(raw.get("pipeline"))  # the job's --pipeline
            if "--dry-run" not in args:
                self._grant = check_run(context)
            return args
        params: MaintenanceParams = MaintenanceParams.parse(raw)
        params.check_against(registry(settings).tables, settings.vacuum_floor_hours)
        if self.action not in params.actions:
            raise AirflowSkipException(f"{self.action} is not among this run's actions")
        return params.only(Action(self.action)).job_args()

    def summary_line(self, summary: dict[str, Any]) -> str:
        lines = [super().summary_line(summary)]
        for action in summary.get("actions") or []:
            details = action.get("details") or {}
            lines.append(
                f"  {action.get('action')} {details.get('target')}: {action.get('status')}, "
                f"{details.get('reason') or action.get('error') or ''}"
            )
        return "\n".join(lines)


def _run_driver(context: Context, fingerprint_: str, settings: Settings) -> RunDriver:
    """The shared driver of this DAG run (on this machine), or the DAG's kept one."""
    return RunDriver.of(context["dag"].dag_id, str(context["run_id"]), fingerprint_, settings)


def restore_args(context: Context, raw: dict[str, Any], settings: Settings) -> list[str]:
    """Arguments of a restore (who may ask for one is checked by ``check_run``)."""
    params: RestoreParams = RestoreParams.parse(raw)
    pipeline = registry(settings).get(params.pipeline)
    if params.layer not in pipeline.layers:
        raise errors.InvalidRunParams(
            f"{pipeline.name} has no {params.layer} layer; its layers: "
            f"{', '.join(pipeline.layers)}."
        )
    return params.job_args()


def _read_summary(path: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def _pyspark_bin() -> str:
    try:
        return str(pyspark_dir() / "bin")
    except errors.JarsMissing as exc:
        raise _failure(exc) from None
