"""The one Spark session factory, for jobs and tests alike.

Under ``spark-submit`` the master and jars come from the command line; run in-process (tests,
a notebook), the factory sets them from the settings. Either way the Spark and Delta settings
are the same ones, from ``lakehouse.submit.spark_conf``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from threading import Thread

from pyspark.sql import SparkSession

from lakehouse.jars import spark_jars
from lakehouse.preflight import java_executable
from lakehouse.s3 import ACCESS_FILE_ENV, S3Config
from lakehouse.settings import Settings
from lakehouse.submit import LOCAL_MASTER, spark_conf

log = logging.getLogger("lakehouse.session")


def launched_by_spark_submit() -> bool:
    # spark-submit starts the JVM first and hands its gateway port to the Python driver.
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_spark(
    app_name: str,
    settings: Settings,
    *,
    master: str | None = None,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """Get or create the session for ``app_name`` with Delta, UTC and right-sized shuffles."""
    builder = SparkSession.builder.appName(app_name)
    if not launched_by_spark_submit():
        java_executable()  # a named error instead of "Java gateway process exited"
        builder = builder.master(master or settings.spark_master or LOCAL_MASTER)
        builder = builder.config("spark.jars", ",".join(spark_jars(settings)))
        builder = builder.config("spark.driver.memory", settings.driver_memory)
        builder = builder.config("spark.ui.enabled", "false")
    for key, value in {**spark_conf(settings), **(extra_conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    apply_s3_access(spark)
    return spark


WARM_UP_GROUP = "lakehouse-warm-up"


def start_warm_up(spark: SparkSession) -> Thread:
    """Run a tiny first Spark job (a shuffle of 64 numbers) in a thread of its own, beside
    whatever the new session does next.

    A JVM's first Spark job pays once for what every later one reuses (the scheduler's and
    the executors' first tasks and shuffle, the classes and compiled code of running them):
    some 1.6 s on 2 cores, which a run's first layer otherwise paid on its own path, after
    its setup (leases, the tables' logs, the stream's start). Beside that setup it saves a
    run's driver about half a second to a second (docs/performance.md). Its failure is
    not the run's: the run's own first job meets whatever broke it, and says so. The job is
    in the group ``WARM_UP_GROUP``, set in its own thread only."""
    from pyspark import InheritableThread

    def run() -> None:
        try:
            spark.sparkContext.setJobGroup(WARM_UP_GROUP, "lakehouse: the driver's warm-up")
            spark.range(64).selectExpr("id % 4 AS k").groupBy("k").count().collect()
        except Exception as exc:  # the run's first job reports it
            log.debug("warm-up job failed: %s", exc)

    thread = InheritableThread(target=run, name="spark-warm-up", daemon=True)
    thread.start()
    return thread


def apply_s3_access(spark: SparkSession) -> None:
    """Credentials the Airflow operator handed this job in its S3 access file (from the
    ``lakehouse_s3`` connection), set on the running JVM's Hadoop configuration before any
    s3a file system exists: never in the Spark configuration or on a command line, and
    hidden by ``spark.redaction.regex`` where Spark lists Hadoop properties. Without the file
    S3A takes ``AWS_*`` from the environment, as Spark copies them in."""
    if not os.environ.get(ACCESS_FILE_ENV):
        return
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in S3Config.from_env().hadoop_credentials().items():
        hadoop.set(key, value)


# Spark generates and compiles Java code for the projections and predicates of every task
# (besides each query stage), and on a small input that costs more than the work: a layer run
# of ~200 new records spent about half of its JVM time there. Evaluated without it, the three
# layers of a 1 % delivery took about a third less time, 100,000 events the same time (2
# cores, one warm session). Whole-stage code generation stays on: turning it off too saved
# nothing more. The setting is internal to Spark (its own tests run every expression both
# ways); ``LAKEHOUSE_INTERPRET_SMALL_INPUTS=false`` leaves Spark's default.
_INTERPRETED = {"spark.sql.codegen.factoryMode": "NO_CODEGEN"}


@contextmanager
def session_conf(spark: SparkSession, values: dict[str, str]) -> Iterator[None]:
    """Set ``values`` on the session for the work inside, then put back what was there (a
    setting that was not set is unset again)."""
    before: dict[str, str | None] = {key: spark.conf.get(key, None) for key in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


@contextmanager
def interpreted(spark: SparkSession, enabled: bool) -> Iterator[None]:
    """Evaluate the queries started inside without generated code (when ``enabled``: the
    input is known to be small), then put the session's own settings back, so the next job
    of a shared driver starts from them. A streaming query keeps the settings it started
    with."""
    if not enabled:
        yield
        return
    with session_conf(spark, _INTERPRETED):
        yield
