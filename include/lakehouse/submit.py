"""Spark settings and the spark-submit command, built in one place for every caller.

The in-process session factory (``jobs.session``), the Airflow operator and the tests all
take their Spark configuration from ``spark_conf`` and their command from ``SubmitSpec``,
so a job behaves the same under ``pytest``, ``airflow dags test`` and a real cluster.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from lakehouse.fs import write_private
from lakehouse.jars import spark_jars
from lakehouse.jvm import BASE_JVM_OPTIONS, driver_java_options, with_quick_jit
from lakehouse.secrets import PROTECTED_SPARK_CONF, REDACTION_REGEX
from lakehouse.settings import Settings

LOCAL_MASTER = "local[*]"
# FileContext's file system for local paths, from the project's jar (``base_spark_conf``).
LOCAL_FILE_CONTEXT_FS = "lakehouse.fs.LocalFs"
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")

# Re-exported: the regex lives with the other secret rules (lakehouse.secrets).
__all__ = ["REDACTION_REGEX"]


def _escape(text: str) -> str:
    """A value or key in ``java.util.Properties`` syntax (ASCII; ``\\uXXXX`` for the rest)."""
    out = []
    for char in text:
        if char in "\\=:#! ":
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif not 0x20 <= ord(char) < 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


def write_properties(path: Path, conf: Mapping[str, str]) -> Path:
    """Write ``conf`` as a Spark properties file at ``path``, created new and readable by its
    owner only (spark-submit ``--properties-file``)."""
    lines = [f"{_escape(key)}={_escape(value)}\n" for key, value in sorted(conf.items())]
    return write_private(path, "".join(lines))


def s3a_conf(settings: Settings) -> dict[str, str]:
    """Hadoop S3A settings for an S3-compatible endpoint (``AWS_ENDPOINT_URL``), or none.

    Credentials are deliberately absent; they stay in ``AWS_ACCESS_KEY_ID`` and
    ``AWS_SECRET_ACCESS_KEY``. Spark copies those from its environment into the Hadoop
    configuration (``fs.s3a.access.key``/``secret.key``, hidden by ``spark.redaction.regex``)
    and S3A's default chain (``fs.s3a.aws.credentials.provider`` unset) takes them from there,
    or through its ``EnvironmentVariableCredentialsProvider``; both checked on Hadoop 3.4.2.
    So the secret is never in the Spark configuration or on a spark-submit command line.
    """
    if settings.s3_endpoint is None:
        return {}
    prefix = "spark.hadoop.fs.s3a."
    return {
        f"{prefix}endpoint": settings.s3_endpoint,
        f"{prefix}endpoint.region": settings.s3_region,
        # Buckets as the first path segment: a local server has no per-bucket host names.
        f"{prefix}path.style.access": "true",
        f"{prefix}connection.ssl.enabled": str(settings.s3_endpoint.startswith("https://")).lower(),
    }


def spark_conf(settings: Settings) -> dict[str, str]:
    """Spark and Delta settings every session of this project uses (jars excluded), with the
    deployment's extra settings (``LAKEHOUSE_SPARK_CONF``); the safety settings always win."""
    return {**base_spark_conf(settings), **settings.extra_spark_conf, **PROTECTED_SPARK_CONF}


def base_spark_conf(settings: Settings) -> dict[str, str]:
    """The project's own settings, which hold no secret (so they may go on a command line)."""
    partitions = str(settings.shuffle_partitions)
    conf = {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # All timestamps are UTC, in SQL and in the JVM.
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": driver_java_options(settings, LOG4J_CONFIG),
        "spark.executor.extraJavaOptions": BASE_JVM_OPTIONS,
        # 200 shuffle partitions and 50 Delta snapshot partitions are pure overhead on small
        # machines; both scale with the cores here.
        "spark.sql.shuffle.partitions": partitions,
        "spark.default.parallelism": partitions,
        "spark.databricks.delta.snapshotPartitions": partitions,
        # VACUUM lists a table's folders in this many tasks (10,000 by default: half an hour
        # of task overhead on a two-core machine for a table of a few hundred files).
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": partitions,
        # A write partitioned by a column most batches hold one value of (bronze's ingest
        # date) keeps a file open per value instead of sorting every row by it first (up to
        # two values in a task, a batch across midnight; more fall back to the sort).
        "spark.sql.maxConcurrentOutputFileWriters": "2",
        "spark.ui.showConsoleProgress": "false",
        # PySpark's call-site capture makes every DataFrame function call several more JVM
        # round trips (session, configuration, origin set and cleared): building silver's
        # validation took 7,279 of them, 2,099 without; its error messages name the query,
        # not the Python line.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        "spark.sql.streaming.numRecentProgressUpdates": "1000",
        # Safety switches stay on: VACUUM refuses short retention, missing files fail loudly.
        "spark.databricks.delta.retentionDurationCheck.enabled": "true",
        "spark.sql.files.ignoreMissingFiles": "false",
        "spark.sql.streaming.stopTimeout": "60s",
        "spark.redaction.regex": REDACTION_REGEX,
        # Checkpoint and Delta log commits on a local root without a process per file: the
        # project's jar (jvm/src/lakehouse/fs/LocalFs.java) sets permissions and checks for
        # links in the JVM, where Hadoop without its native library runs chmod and readlink.
        "spark.hadoop.fs.AbstractFileSystem.file.impl": LOCAL_FILE_CONTEXT_FS,
        **s3a_conf(settings),
    }
    return conf


# Development tools (local services, the demo) never run on a cluster.
_NOT_SHIPPED = ("lakehouse/local/",)


def code_digest(sources: Iterable[tuple[str, bytes]]) -> str:
    """Content hash of the project's code, as ``(archive name, bytes)`` pairs in name order."""
    digest = hashlib.sha256()
    for name, data in sources:
        digest.update(name.encode())
        digest.update(data)
    return digest.hexdigest()[:12]


def running_code_version() -> str:
    """``<version>+<digest>`` of the ``lakehouse`` and ``jobs`` code this process imported
    (from the checkout or from the ``--py-files`` zip alike); recorded in backup manifests."""
    from importlib.resources import files
    from importlib.resources.abc import Traversable

    from lakehouse import __version__

    def walk(node: Traversable, prefix: str) -> Iterator[tuple[str, bytes]]:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.is_dir() and child.name != "__pycache__":
                if not f"{prefix}{child.name}/".startswith(_NOT_SHIPPED):
                    yield from walk(child, f"{prefix}{child.name}/")
            elif child.name.endswith(".py"):
                yield f"{prefix}{child.name}", child.read_bytes()

    sources = [
        *sorted(walk(files("lakehouse"), "lakehouse/")),
        *sorted(walk(files("jobs"), "jobs/")),
    ]
    return f"{__version__}+{code_digest(sources)}"


def job_path(settings: Settings, job: str) -> str:
    """The Spark application ``jobs/<job>.py`` (a layer, ``maintenance`` or ``warmup``)."""
    return str(settings.project_dir / "jobs" / f"{job}.py")


# A fixed timestamp keeps the archive identical for identical code.
_ZIP_TIME = (2020, 1, 1, 0, 0, 0)
# PEP 552: bytecode that names its source's hash and is used without checking it.
_UNCHECKED_HASH = (0b01).to_bytes(4, "little")


def code_archive(settings: Settings) -> Path:
    """A zip of ``lakehouse`` and ``jobs`` for ``--py-files``, named by its content hash.

    Every run's driver imports the project's code from it, as executors on a real cluster
    do; building it is cheap and happens only when the code changed. The development-only
    ``lakehouse.local`` stays out. Beside each module goes its bytecode for this Python
    (``compiled``): Python imports from a zip without writing bytecode anywhere, so each
    driver compiled every module again. A Python of another version finds the bytecode's
    version wrong and compiles the source, as before.
    """
    sources: list[tuple[Path, str]] = []
    for package, directory in (
        ("lakehouse", settings.project_dir / "include" / "lakehouse"),
        ("jobs", settings.project_dir / "jobs"),
    ):
        found = [
            (p, name)
            for p in directory.rglob("*.py")
            for name in [f"{package}/{p.relative_to(directory).as_posix()}"]
            if not name.startswith(_NOT_SHIPPED)
        ]
        sources += sorted(found, key=lambda item: item[1])
    digest = code_digest((name, path.read_bytes()) for path, name in sources)
    target = settings.project_dir / "build" / f"lakehouse-{digest}.zip"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, name in sources:
            source = path.read_bytes()
            archive.writestr(zipfile.ZipInfo(name, date_time=_ZIP_TIME), source)
            bytecode = compiled(source, f"{target}/{name}")
            archive.writestr(zipfile.ZipInfo(f"{name}c", date_time=_ZIP_TIME), bytecode)
    partial.replace(target)
    return target


def compiled(source: bytes, filename: str) -> bytes:
    """``source``'s bytecode as a ``.pyc`` for this Python, in the form a zip import uses
    without comparing it with the source (an archive is built whole and named by its code),
    and which names ``filename`` in tracebacks, as compiling the source there would."""
    code = compile(source, filename, "exec", dont_inherit=True)
    header = importlib.util.MAGIC_NUMBER + _UNCHECKED_HASH + importlib.util.source_hash(source)
    return header + marshal.dumps(code)


@dataclass(frozen=True)
class SubmitSpec:
    """Everything spark-submit needs for one job run."""

    application: str
    args: tuple[str, ...]
    name: str
    conf: dict[str, str] = field(default_factory=dict)
    jars: tuple[str, ...] = ()
    py_files: tuple[str, ...] = ()
    driver_memory: str = "2g"
    # The deployment's extra settings: for a properties file, never for the command line.
    properties: dict[str, str] = field(default_factory=dict, repr=False)

    def with_quick_jit(self) -> SubmitSpec:
        """The same run, its driver with the quick compiler only: for an input known to be
        small (``lakehouse.jvm``)."""
        key = "spark.driver.extraJavaOptions"
        return replace(self, conf={**self.conf, key: with_quick_jit(self.conf.get(key, ""))})

    def write_properties(self, folder: Path) -> Path | None:
        """The extra settings as ``folder/spark.properties`` (owner-only), if there are any."""
        if not self.properties:
            return None
        return write_properties(folder / "spark.properties", self.properties)

    def argv(
        self, master: str, spark_submit: str = "spark-submit", properties_file: Path | None = None
    ) -> list[str]:
        """The spark-submit command; ``properties_file`` from ``write_properties`` when the
        spec has extra settings (Spark then still reads ``spark-defaults.conf``)."""
        if self.properties and properties_file is None:
            raise ValueError("the extra Spark settings need a properties file (write_properties)")
        command = [spark_submit, "--master", master, "--name", self.name]
        command += ["--driver-memory", self.driver_memory]
        if properties_file is not None:
            command += ["--properties-file", str(properties_file), "--load-spark-defaults"]
        for key, value in sorted(self.conf.items()):
            command += ["--conf", f"{key}={value}"]
        if self.jars:
            command += ["--jars", ",".join(self.jars)]
        if self.py_files:
            command += ["--py-files", ",".join(self.py_files)]
        return [*command, self.application, *self.args]


def job_submit_spec(
    settings: Settings,
    pipeline: str,
    job: str,
    *,
    run_id: str,
    summary_file: str | None = None,
    extra_args: tuple[str, ...] = (),
) -> SubmitSpec:
    """The spark-submit spec for one job of one pipeline (``jobs/<job>.py``)."""
    args = ["--pipeline", pipeline, "--root", settings.root, "--run-id", run_id]
    if summary_file:
        args += ["--summary-file", summary_file]
    return SubmitSpec(
        application=job_path(settings, job),
        args=(*args, *extra_args),
        name=f"lakehouse-{pipeline}-{job}",
        # A --conf would win over the file: leave out what the extra settings replace.
        conf={
            k: v
            for k, v in base_spark_conf(settings).items()
            if k not in settings.extra_spark_conf or k in PROTECTED_SPARK_CONF
        },
        properties=dict(settings.extra_spark_conf),
        jars=tuple(spark_jars(settings)),
        py_files=(str(code_archive(settings)),),
        driver_memory=settings.driver_memory,
    )
