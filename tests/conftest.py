"""Shared fixtures: one Spark JVM per session, a fresh lakehouse root per test, the local
services. Nothing heavy is imported at module level: the unit tests never start a JVM.

Each folder marks its tests (``unit``, ``spark``, ``e2e``), so ``pytest -m unit`` or
``pytest tests/unit`` picks the fast ones.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lakehouse.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.local.services import KafkaPorts, S3Server
    from tests.lake import Lake

# PySpark turns timestamps into naive datetimes in the Python process's zone; pin it to UTC.
os.environ["TZ"] = "UTC"
time.tzset()

_FOLDER_MARKERS = {"unit": "unit", "spark": "spark", "e2e": "e2e"}
_S3_BUILD = pytest.StashKey[subprocess.Popen[bytes] | None]()
_SCRATCH = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """Spark's scratch folders (block stores, temporary and artifact folders) of every JVM
    this session starts, and of their children, go to a folder of the session's own, removed
    at its end: a JVM that a test kills on purpose (the kill matrix, a killed run or driver)
    never runs the shutdown hooks that remove its own, which would otherwise stay in /tmp."""
    scratch = Path(tempfile.mkdtemp(prefix="lakehouse-tests-spark-"))
    config.stash[_SCRATCH] = scratch
    os.environ["SPARK_LOCAL_DIRS"] = str(scratch)
    opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
    os.environ["SPARK_SUBMIT_OPTS"] = f"{opts} -Djava.io.tmpdir={scratch}".strip()


def pytest_unconfigure(config: pytest.Config) -> None:
    scratch = config.stash.get(_SCRATCH, None)
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks each test with its folder's marker, and runs the tests that need the local S3
    server after all the others (in their own order otherwise), so that on a fresh checkout
    the server's build has the whole rest of the session to finish on idle CPU."""
    for item in items:
        folder = Path(str(item.fspath)).parent.name
        marker = _FOLDER_MARKERS.get(folder)
        if marker:
            item.add_marker(marker)
    items.sort(key=_needs_s3_server)  # stable: False before True


def _needs_s3_server(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return "s3_server" in getattr(item, "fixturenames", ()) or (
        callspec is not None and callspec.params.get("lake") == "s3"
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    """When a selected test needs the local S3 server and its binary is not cached yet (a
    fresh checkout), start building it now, in the background on idle CPU, so that the tests
    before the first one that needs it (the last ones) run meanwhile."""
    if not session.config.option.collectonly and any(map(_needs_s3_server, session.items)):
        from lakehouse.local import seaweedfs

        session.config.stash[_S3_BUILD] = seaweedfs.start_background_build(Settings.from_env())


def pytest_sessionfinish(session: pytest.Session) -> None:
    build = session.config.stash.get(_S3_BUILD, None)
    if build is not None:
        from lakehouse.local import seaweedfs

        seaweedfs.stop_background_build(build)


@pytest.fixture(scope="session")
def base_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("lake-default")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")}
    env["LAKEHOUSE_ROOT"] = str(root)
    env["LAKEHOUSE_SHUFFLE_PARTITIONS"] = "2"
    return Settings.from_env(env)


@pytest.fixture(scope="session")
def spark(base_settings: Settings) -> Iterator[SparkSession]:
    from jobs.session import build_spark
    from lakehouse.jars import jar_files, resolve_all, spark_jars

    # With the s3a jars, whatever the root: a test may put its lake on the local S3 server
    # (``lake`` with the param "s3").
    resolve_all(base_settings, ("s3",))
    jars = [*spark_jars(base_settings), *map(str, jar_files(base_settings, "s3"))]
    session = build_spark(
        "lakehouse-tests",
        base_settings,
        master="local[2]",
        extra_conf={"spark.jars": ",".join(jars)},
    )
    yield session
    session.stop()


@pytest.fixture
def lake(
    request: pytest.FixtureRequest,
    spark: SparkSession,
    base_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Lake]:
    """A fresh root: a folder under ``tmp_path``, or with the param "s3"
    (``@pytest.mark.parametrize("lake", ["local", "s3"], indirect=True)``) a prefix of the
    local S3 server's bucket, emptied afterwards."""
    from tests.lake import Lake

    monkeypatch.setenv("LAKEHOUSE_SHUFFLE_PARTITIONS", "2")
    monkeypatch.setenv("LAKEHOUSE_ORDERS_SOURCE", "file")
    if getattr(request, "param", "local") == "local":
        yield Lake(spark, base_settings.with_root(tmp_path / "lake"), monkeypatch, tmp_path)
        return
    from tests.lake import s3_lake

    server: S3Server = request.getfixturevalue("s3_server")
    yield from s3_lake(spark, base_settings, server, tmp_path, monkeypatch)


def _service(service: str) -> Iterator[Settings]:
    """A local service (`make <service>-up`), started if it is not running and stopped again
    at the end if this session started it, or if a session that started it was killed before
    it could stop it (its owner file names a dead process). One that cannot start fails the
    tests that need it: they never skip."""
    from lakehouse.local import services

    settings = Settings.from_env()
    ours = services.left_behind(settings, service) or not services.is_up(settings, service)
    services.up(settings, service)
    if ours:
        services.claim(settings, service, os.getpid())
    try:
        yield settings
    finally:
        if ours:
            services.down(settings, service)
            services.release(settings, service)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaPorts]:
    """The local Kafka broker (`make kafka-up`)."""
    from lakehouse.local import services

    for settings in _service("kafka"):
        yield services.kafka_ports(settings)


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[str]:
    """The local standalone master and worker (`make spark-up`)."""
    from lakehouse.local import services

    for _ in _service("spark"):
        yield services.SPARK_MASTER_URL


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """The local S3 server (`make s3-up`; built first if its binary is not cached): its
    endpoint and credentials."""
    from lakehouse.local import services

    for settings in _service("s3"):
        yield services.s3_server(settings)
