"""JVM jars: resolved once from Maven Central into a local cache, then handed to Spark.

``make setup`` calls ``resolve_all``; sessions and spark-submit get the cached files through
``spark.jars``, so no session start ever downloads anything. Sets: ``spark`` (Delta, the
Kafka source), ``s3`` (s3a), ``kafka`` (the local broker). Jars that Spark already ships
(by artifact name, whatever the version) are left out, exactly as ``--packages`` would keep
Spark's own copies first.

The project's own JVM code (``jvm/src``: the record validator) is compiled here too, against
the jars pyspark ships, into a jar named by a hash of its sources and the Spark version: a
change to either builds a new one, and every session carries it with the others.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from functools import cache
from importlib.metadata import version
from pathlib import Path

from lakehouse.errors import JarsMissing
from lakehouse.settings import Settings

# Spark and Delta are the installed Python packages' versions (the lock pins them); the
# broker is only a test and development service, pinned here.
SCALA_BINARY = "2.13"
KAFKA_BROKER_VERSION = "4.1.1"


def pyspark_dir() -> Path:
    """The installed pyspark's folder (its ``jars`` and ``bin``), found without importing
    pyspark: an Airflow task process that submits a job would otherwise import it only for
    this, on every layer task (0.2-0.7 s)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise JarsMissing(
            "pyspark is not installed in this Python environment.",
            "Install the project's requirements (`make setup`, or `pip install -r "
            "requirements.txt` in the environment that runs Airflow).",
        )
    return Path(next(iter(spec.submodule_search_locations)))


def hadoop_version() -> str:
    """The Hadoop client pyspark ships (``jars/hadoop-client-api-<version>.jar``): hadoop-aws
    must be the same release, and brings the AWS SDK v2 bundle it was built against."""
    jars = pyspark_dir() / "jars"
    for jar in jars.glob("hadoop-client-api-*.jar"):
        return jar.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    raise JarsMissing(f"pyspark ships no Hadoop client in {jars}.")


@cache
def jar_sets() -> dict[str, tuple[str, ...]]:
    """Maven coordinates per jar set, for the installed Spark, Delta and Hadoop."""
    spark = version("pyspark")
    delta = version("delta-spark")
    # Delta publishes one jar per Spark minor version: delta-spark_<spark minor>_<scala>.
    spark_minor = ".".join(spark.split(".")[:2])
    return {
        "spark": (
            f"io.delta:delta-spark_{spark_minor}_{SCALA_BINARY}:{delta}",
            f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{spark}",
        ),
        # s3a:// (S3AFileSystem) with the AWS SDK v2 bundle it needs. A set of its own because
        # the bundle weighs 640 MB, which a standalone cluster copies into the work folder of
        # every application: jobs carry it only when their root is on s3a (``spark_jars``).
        "s3": (f"org.apache.hadoop:hadoop-aws:{hadoop_version()}",),
        "kafka": (
            f"org.apache.kafka:kafka_{SCALA_BINARY}:{KAFKA_BROKER_VERSION}",
            "org.apache.logging.log4j:log4j-slf4j2-impl:2.24.3",
            "org.slf4j:slf4j-api:2.0.17",
        ),
    }


# Some parent POMs name extra repositories; only Maven Central is reachable and trusted.
_MAVEN_SETTINGS = """<settings>
  <mirrors>
    <mirror><id>central</id><mirrorOf>*</mirrorOf><url>https://repo1.maven.org/maven2</url></mirror>
  </mirrors>
</settings>
"""


def jar_dir(settings: Settings, jar_set: str) -> Path:
    return settings.jar_cache / jar_set


def jar_files(settings: Settings, jar_set: str) -> list[Path]:
    """The cached jars of ``jar_set``; raises ``JarsMissing`` if setup has not resolved them."""
    directory = jar_dir(settings, jar_set)
    marker = directory / ".resolved"
    if not marker.exists() or marker.read_text().split() != list(jar_sets()[jar_set]):
        raise JarsMissing(f"The {jar_set} jars are not resolved in {directory}.")
    return sorted(directory.glob("*.jar"))


def spark_jars(settings: Settings) -> list[str]:
    """The jars a Spark session or job gets: the project's, Delta and Kafka, and s3a for a
    root on S3."""
    jars = [project_jar(settings, must_exist=True), *jar_files(settings, "spark")]
    if settings.root.startswith("s3a://"):
        jars += jar_files(settings, "s3")
    return [str(p) for p in jars]


def _artifact(file_name: str) -> str:
    return re.sub(r"-\d[\w.\-]*\.jar$", "", file_name)


def _spark_bundled_artifacts() -> set[str]:
    return {_artifact(p.name) for p in (pyspark_dir() / "jars").glob("*.jar")}


def _pom(coordinates: tuple[str, ...]) -> str:
    deps = []
    for coordinate in coordinates:
        group, artifact, version = coordinate.split(":")
        deps.append(
            f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version></dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>lakehouse.local</groupId><artifactId>jars</artifactId><version>1</version>"
        f"<packaging>pom</packaging><dependencies>{''.join(deps)}</dependencies></project>"
    )


def resolve(settings: Settings, jar_set: str, maven_repo: Path) -> list[Path]:
    """Resolve ``jar_set`` with Maven into the cache; a no-op when already resolved."""
    try:
        return jar_files(settings, jar_set)
    except JarsMissing:
        pass
    coordinates = jar_sets()[jar_set]
    target = jar_dir(settings, jar_set)
    if shutil.which("mvn") is None:
        raise JarsMissing("Maven (mvn) is needed once to resolve jars.", "Install Maven and rerun.")
    skip = _spark_bundled_artifacts() if jar_set in ("spark", "s3") else set()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "pom.xml").write_text(_pom(coordinates))
        (work / "settings.xml").write_text(_MAVEN_SETTINGS)
        print(f"resolving {jar_set} jars: {', '.join(coordinates)}", flush=True)
        result = subprocess.run(
            [
                "mvn",
                "-q",
                "-B",
                "-s",
                str(work / "settings.xml"),
                f"-Dmaven.repo.local={maven_repo}",
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={work / 'out'}",
            ],
            cwd=work,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            sys.stderr.write(result.stdout[-4000:] + result.stderr[-4000:])
            raise JarsMissing(
                f"Maven could not resolve {jar_set} jars.",
                "Check that Maven Central (repo1.maven.org) is reachable and rerun `make setup`.",
            )
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for jar in sorted((work / "out").glob("*.jar")):
            if _artifact(jar.name) not in skip:
                shutil.copy2(jar, target / jar.name)
    (target / ".resolved").write_text("\n".join(coordinates) + "\n")
    return jar_files(settings, jar_set)


def _project_sources(settings: Settings) -> list[Path]:
    return sorted((settings.project_dir / "jvm" / "src").rglob("*.java"))


def project_jar(settings: Settings, *, must_exist: bool = False) -> Path:
    """Where the jar of the project's JVM code for these sources and this Spark is (built by
    ``build_project_jar``); ``must_exist`` raises ``JarsMissing`` when it is not built."""
    sources = _project_sources(settings)
    digest = hashlib.sha256(version("pyspark").encode())
    for source in sources:
        digest.update(source.relative_to(settings.project_dir).as_posix().encode())
        digest.update(source.read_bytes())
    jar = jar_dir(settings, "lakehouse") / f"lakehouse-jvm-{digest.hexdigest()[:12]}.jar"
    if must_exist and not jar.exists():
        raise JarsMissing(f"The project's JVM code ({len(sources)} sources) is not built: {jar}.")
    return jar


def _javac() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "javac").exists():
        return str(Path(java_home) / "bin" / "javac")
    found = shutil.which("javac")
    if found is None:
        raise JarsMissing(
            "A Java compiler (javac) is needed once to build the project's JVM code.",
            "Install a JDK 17 or newer (e.g. openjdk-17-jdk-headless) and rerun `make setup`.",
        )
    return found


def build_project_jar(settings: Settings) -> Path:
    """Compile ``jvm/src`` into ``project_jar`` (Java 17 bytecode); a no-op when it is built."""
    jar = project_jar(settings)
    if jar.exists():
        return jar
    spark_jars_dir = pyspark_dir() / "jars"
    classpath = [str(p) for p in sorted(spark_jars_dir.glob("*.jar"))]
    sources = _project_sources(settings)
    print(f"compiling the project's JVM code ({len(sources)} sources)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        classes = Path(tmp) / "classes"
        javac = [_javac(), "--release", "17", "-Xlint:all,-path,-serial", "-Werror"]
        result = subprocess.run(
            [*javac, "-cp", os.pathsep.join(classpath), "-d", str(classes), *map(str, sources)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            sys.stderr.write(result.stdout + result.stderr)
            raise JarsMissing(
                "The project's JVM code (jvm/src) did not compile.",
                "The compiler's messages are above: fix the source and rerun `make setup`.",
            )
        jar.parent.mkdir(parents=True, exist_ok=True)
        partial = jar.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for path in sorted(classes.rglob("*.class")):
                archive.write(path, path.relative_to(classes).as_posix())
        partial.replace(jar)
    return jar


# What ``make setup`` resolves. The s3 set (640 MB) is resolved by ``make s3-up``, or here
# when the root is already on s3a.
SETUP_SETS = ("spark", "kafka")


def resolve_all(settings: Settings, jar_sets_wanted: tuple[str, ...] | None = None) -> None:
    """Resolve ``jar_sets_wanted`` (default: what setup needs, and s3 for an s3a root)."""
    wanted = jar_sets_wanted or (
        (*SETUP_SETS, "s3") if settings.root.startswith("s3a://") else SETUP_SETS
    )
    maven_repo = settings.project_dir / ".cache" / "m2"
    for jar_set in wanted:
        files = resolve(settings, jar_set, maven_repo)
        print(f"{jar_set} jars: {len(files)} in {jar_dir(settings, jar_set)}")
    print(f"the project's JVM code: {build_project_jar(settings)}")
