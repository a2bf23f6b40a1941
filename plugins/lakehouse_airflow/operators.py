"""``LakehouseJobOperator``: run one layer of a pipeline with spark-submit, return its summary.

A thin layer over the Spark provider's ``SparkSubmitOperator``. At execution time (never at
parse time) it builds the command from ``lakehouse.submit``: the job file, its arguments,
the Spark and Delta settings, the cached jars and the project's code as ``--py-files``. It
runs cheap pre-flight checks first, so a missing Java, an unwritable root or a dead master
fail in a second with a message that says what to do. When the job ends it reads the
summary the job wrote, logs it, and returns it (XCom) for the next tasks and the UI.

Where the job runs: ``LAKEHOUSE_SPARK_MASTER`` if set, else the ``lakehouse_spark``
connection, else local Spark in the task's process.

A layer that reads Kafka gets its brokers and credentials from the ``lakehouse_kafka``
connection, resolved here at execute time: its secrets are masked in the task log and handed
to the job in a file only this user can read, deleted when the task ends, whose path travels
in the job's environment (never on the spark-submit command line, in a param, a rendered
template or XCom). The operator also runs the Kafka pre-flight check before spark-submit, so
records that aged out unread, a missing topic or a broker that does not answer fail the task
before any JVM starts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from lakehouse import errors, kafka
from lakehouse.params import RunParams
from lakehouse.pipelines import get_pipeline
from lakehouse.settings import Settings
from lakehouse.submit import LOCAL_MASTER, job_submit_spec
from lakehouse_airflow.run_params import effective_params

if TYPE_CHECKING:
    from airflow.sdk import Context

SPARK_CONN_ID = "lakehouse_spark"
KAFKA_CONN_ID = "lakehouse_kafka"

# Refusals that a retry cannot fix: fail the task at once instead of retrying.
_NO_RETRY = {
    cls.__name__
    for cls in (
        errors.ConfigurationError,
        errors.InvalidRunParams,
        errors.JarsMissing,
        errors.JavaNotFound,
        errors.LakehouseRootNotWritable,
        errors.CheckpointInconsistent,
        errors.KafkaOffsetsLost,
        errors.KafkaTopicNotFound,
        errors.KafkaAuthenticationFailed,
    )
}


def _failure(exc: errors.LakehouseError) -> AirflowException:
    """The task failure for a refusal: final when a retry cannot help, else retried."""
    kind = AirflowFailException if exc.code in _NO_RETRY else AirflowException
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

    def _connection_exists(self) -> bool:
        try:
            self.get_connection(self._conn_id)
        except Exception:
            return False
        return True


class LakehouseJobOperator(SparkSubmitOperator):
    """Run ``jobs/<layer>.py`` for ``pipeline`` with spark-submit.

    Parameters
    ----------
    pipeline, layer
        Which stream of which pipeline (see ``lakehouse.pipelines``).
    job_args
        Extra arguments for the job (templated).

    The run's params (``mode``, ``reprocess_from``/``reprocess_to``, ``layers``, rate limits)
    are read from the task context and passed on; a layer the params leave out is skipped.
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "job_args")
    ui_color = "#e8f4fa"

    def __init__(
        self,
        *,
        pipeline: str,
        layer: str,
        job_args: Sequence[str] = (),
        conn_id: str = SPARK_CONN_ID,
        kafka_conn_id: str = KAFKA_CONN_ID,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("name", f"lakehouse-{pipeline}-{layer}")
        super().__init__(application=f"jobs/{layer}.py", conn_id=conn_id, **kwargs)
        self.pipeline = pipeline
        self.layer = layer
        self.job_args = list(job_args)
        self.kafka_conn_id = kafka_conn_id
        self._settings: Settings | None = None

    def _get_hook(self) -> SparkSubmitHook:
        settings = self._settings or Settings.from_env()
        env_vars = dict(self.env_vars or {})
        if shutil.which("spark-submit") is None:
            # Not on PATH (e.g. a worker started outside `make env`): use pyspark's own.
            env_vars["PATH"] = f"{_pyspark_bin()}{os.pathsep}{os.environ.get('PATH', '')}"
        return LakehouseSparkSubmitHook(
            master=settings.spark_master,
            conf=self.conf,
            conn_id=self._conn_id,
            py_files=self.py_files,
            jars=self.jars,
            driver_memory=self._driver_memory,
            name=self.name,
            application_args=self.application_args,
            env_vars=env_vars or None,
            verbose=self._verbose,
            status_poll_interval=self._status_poll_interval,
        )

    def execute(self, context: Context) -> dict[str, Any]:
        from lakehouse import preflight

        settings = self._settings = Settings.from_env()
        try:
            params = effective_params(context, get_pipeline(self.pipeline))
        except errors.LakehouseError as exc:
            raise AirflowFailException(f"[{exc.code}] {exc}") from None
        if self.layer not in params.layers:
            raise AirflowSkipException(f"{self.layer} is not among this run's layers")
        if params.dry_run:
            raise AirflowSkipException("dry run: the plan task says what this layer would do")
        try:
            preflight.java_executable()
            preflight.check_root_writable(settings)
        except errors.LakehouseError as exc:
            raise AirflowFailException(f"[{exc.code}] {exc}") from None
        with tempfile.TemporaryDirectory(prefix="lakehouse-") as tmp:
            if self._reads_kafka(settings):
                access_file = Path(tmp) / "kafka-access.json"
                try:
                    access = self._kafka_access(settings)
                    access.write(access_file)
                    self._check_kafka(settings, access, params)
                except errors.LakehouseError as exc:
                    raise _failure(exc) from None
                # The path only: the job reads the settings from the file.
                self.env_vars = {**(self.env_vars or {}), kafka.ACCESS_FILE_ENV: str(access_file)}
            summary_file = Path(tmp) / "summary.json"
            spec = job_submit_spec(
                settings,
                self.pipeline,
                self.layer,
                run_id=str(context["run_id"]),
                summary_file=str(summary_file),
                extra_args=(*params.job_args(self.layer), *(str(a) for a in self.job_args)),
            )
            self.application = spec.application
            self.application_args = list(spec.args)
            self.conf = dict(spec.conf)
            self.jars = ",".join(spec.jars)
            self.py_files = ",".join(spec.py_files)
            self._driver_memory = spec.driver_memory
            self._hook = self._get_hook()
            master = self._hook._connection["master"]
            try:
                preflight.check_master(master)
            except errors.LakehouseError as exc:
                raise AirflowException(f"[{exc.code}] {exc}") from None
            self.log.info("running %s.%s on %s", self.pipeline, self.layer, master)
            try:
                super().execute(context)
            except AirflowException:
                summary = _read_summary(summary_file)
                if summary and summary.get("error"):
                    code = str(summary["error"]).split(":", 1)[0]
                    message = (
                        f"{self.pipeline}.{self.layer} {summary['status']}: {summary['error']}"
                    )
                    if code in _NO_RETRY:
                        raise AirflowFailException(message) from None
                    raise AirflowException(message) from None
                raise
            summary = _read_summary(summary_file)
        if summary is None:
            raise AirflowException(f"{self.pipeline}.{self.layer} finished without a summary.")
        self.log.info(
            "%s.%s: %s rows in, %s out, %s quarantined, %s micro-batches, %.1fs (%s rows/s)",
            self.pipeline,
            self.layer,
            summary.get("rows_in"),
            summary.get("rows_out"),
            summary.get("rows_quarantined"),
            summary.get("batches"),
            summary.get("duration_s") or 0.0,
            summary.get("rows_per_s"),
        )
        return summary

    def _reads_kafka(self, settings: Settings) -> bool:
        stream = get_pipeline(self.pipeline).stream(self.layer)
        return stream.source_table is None and settings.orders_source == "kafka"

    def _kafka_access(self, settings: Settings) -> kafka.KafkaAccess:
        """Brokers and credentials from the Kafka connection, its secrets masked at once."""
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException
        from airflow.sdk.log import mask_secret

        try:
            conn = BaseHook.get_connection(self.kafka_conn_id)
        except AirflowNotFoundException:
            self.log.info("no connection %s: Kafka without security", self.kafka_conn_id)
            return kafka.KafkaAccess(bootstrap_servers=settings.kafka_brokers)
        if conn.password:
            mask_secret(conn.password)
        extra = conn.extra_dejson  # masks the extras whose names say they are secret
        access = kafka.KafkaAccess.from_connection(
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
        self.log.info("Kafka: %s (connection %s)", access.describe(), self.kafka_conn_id)
        return access

    def _check_kafka(
        self, settings: Settings, access: kafka.KafkaAccess, params: RunParams
    ) -> None:
        """The pre-flight offset check, before any JVM starts (local roots; the job checks
        again in any case, with Spark's file system)."""
        if not settings.root_is_local:
            return
        pipeline = get_pipeline(self.pipeline)
        checkpoint = settings.local_path(pipeline.stream(self.layer).checkpoint)
        report = kafka.check_offsets(
            access,
            kafka.subscription(pipeline, settings),
            kafka.checkpoint_offsets(*kafka.local_checkpoint(checkpoint)),
            accept_data_loss=params.accept_data_loss,
        )
        self.log.info(
            "Kafka pre-flight: %d partitions, %d records to read, checked in %.0f ms",
            report.partitions,
            report.backlog,
            report.check_ms,
        )


def _read_summary(path: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def _pyspark_bin() -> str:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise AirflowFailException("pyspark is not installed in Airflow's environment.")
    return str(Path(next(iter(spec.submodule_search_locations))) / "bin")
