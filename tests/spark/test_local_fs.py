"""Commits on a local root start no process: checkpoints and Delta's log go through the
project's ``FileContext`` file system (``jvm/src/lakehouse/fs/LocalFs.java``), which sets
permissions and checks for links in the JVM where Hadoop without its native library runs
``chmod`` and ``readlink``, with the same outcome on disk."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from lakehouse.submit import LOCAL_FILE_CONTEXT_FS
from tests.lake import Lake
from tests.oracle import comparable, expected_tables

HADOOP_FILE_CONTEXT_FS = "org.apache.hadoop.fs.local.LocalFs"


def started_processes(spark: SparkSession, work: Callable[[], Any], scratch: Path) -> list[str]:
    """The command of every process the session's JVM started during ``work`` (JFR's
    ``jdk.ProcessStart`` events, recorded into a file in ``scratch``)."""
    jvm = spark._jvm
    assert jvm is not None
    recording = jvm.jdk.jfr.Recording()
    recording.enable("jdk.ProcessStart")
    recording.start()
    try:
        work()
    finally:
        recording.stop()
    dump = scratch / "processes.jfr"
    dump_path = jvm.java.io.File(str(dump)).toPath()
    recording.dump(dump_path)
    recording.close()
    events = jvm.jdk.jfr.consumer.RecordingFile.readAllEvents(dump_path)
    dump.unlink()
    return [str(events.get(i).getString("command")) for i in range(events.size())]


def file_context_fs(spark: SparkSession, implementation: str) -> Any:
    """A FileContext on the local file system with ``implementation`` for ``file:``."""
    jvm = spark._jvm
    assert jvm is not None
    conf = jvm.org.apache.hadoop.conf.Configuration(spark.sparkContext._jsc.hadoopConfiguration())
    conf.set("fs.AbstractFileSystem.file.impl", implementation)
    return jvm.org.apache.hadoop.fs.FileContext.getLocalFSFileContext(conf)


def test_the_sessions_file_context_is_the_projects(spark: SparkSession) -> None:
    jvm = spark._jvm
    assert jvm is not None
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    context = jvm.org.apache.hadoop.fs.FileContext.getLocalFSFileContext(conf)
    assert context.getDefaultFileSystem().getClass().getName() == LOCAL_FILE_CONTEXT_FS


def test_a_layer_run_commits_without_chmod_or_readlink(lake: Lake) -> None:
    """Bronze, silver and gold on a local root, a second delivery after a first: the tables
    the contract expects, and no ``readlink`` at all, no ``chmod`` of a checkpoint or Delta
    log file (data files and run markers go through Hadoop's FileSystem, which the project
    leaves as it is)."""
    delivered, commands = lake.second_delivery(
        41, lambda: started_processes(lake.spark, lake.run_all, lake.scratch)
    )
    assert lake.contract_view() == comparable(expected_tables(delivered))
    assert [c for c in commands if c.startswith("readlink")] == []
    assert [c for c in commands if "/_delta_log/" in c or "/_checkpoints/" in c] == []


def test_hadoops_own_file_context_starts_a_process_per_commit(
    spark: SparkSession, tmp_path: Path
) -> None:
    """What the project's file system saves, shown on Hadoop's: a rename starts ``readlink``."""
    jvm = spark._jvm
    assert jvm is not None
    source, target = tmp_path / "a", tmp_path / "b"
    source.write_text("x")
    hadoop = file_context_fs(spark, HADOOP_FILE_CONTEXT_FS)
    ours = file_context_fs(spark, LOCAL_FILE_CONTEXT_FS)
    rename_option = jvm.org.apache.hadoop.fs.Options.Rename
    no_options = spark.sparkContext._gateway.new_array(rename_option, 0)

    def rename(context: Any, src: Path, dst: Path) -> Callable[[], None]:
        return lambda: context.rename(
            jvm.org.apache.hadoop.fs.Path(str(src)),
            jvm.org.apache.hadoop.fs.Path(str(dst)),
            no_options,
        )

    assert any(
        c.startswith("readlink")
        for c in started_processes(spark, rename(hadoop, source, target), tmp_path)
    )
    assert started_processes(spark, rename(ours, target, source), tmp_path) == []
    assert source.read_text() == "x" and not target.exists()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o600, 0o755, 0o700, 0o444, 0o1777])
def test_permissions_and_link_status_are_hadoops(
    spark: SparkSession, tmp_path: Path, mode: int
) -> None:
    """The same mode on disk as Hadoop's raw local file system sets (a sticky bit goes to
    Hadoop's own code), and the same link status of a file, a symbolic link and a missing path."""
    jvm = spark._jvm
    assert jvm is not None
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    local = jvm.java.net.URI("file:///")
    ours = getattr(jvm, "lakehouse.fs.LocalFs$Raw")()
    hadoop = jvm.org.apache.hadoop.fs.RawLocalFileSystem()
    for fs in (ours, hadoop):
        fs.initialize(local, conf)
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission(mode)
    for name, fs in (("ours", ours), ("hadoop", hadoop)):
        path = tmp_path / name
        path.write_text(name)
        fs.setPermission(jvm.org.apache.hadoop.fs.Path(str(path)), permission)
    assert stat.S_IMODE(os.stat(tmp_path / "ours").st_mode) == mode
    assert stat.S_IMODE(os.stat(tmp_path / "hadoop").st_mode) == mode

    link = tmp_path / "link"
    link.symlink_to(tmp_path / "ours")

    def status(fs: Any, path: str) -> tuple[Any, ...]:
        found = fs.getFileLinkStatus(jvm.org.apache.hadoop.fs.Path(path))
        return (found.isSymlink(), found.isFile(), found.getLen(), str(found.getPath()))

    # With its scheme, as FileContext asks, and without.
    for form in ("file:{}", "{}"):
        for path in (tmp_path / "ours", link):
            assert status(ours, form.format(path)) == status(hadoop, form.format(path))
        for fs in (ours, hadoop):
            with pytest.raises(Exception, match="FileNotFoundException"):
                status(fs, form.format(tmp_path / "missing"))
    assert status(ours, str(link))[0] is True
