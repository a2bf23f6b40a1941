"""Small file operations through Hadoop's FileSystem, so local paths and s3a:// behave alike."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession


def _fs_and_path(spark: SparkSession, location: str) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    path = jvm.org.apache.hadoop.fs.Path(location)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path


def exists(spark: SparkSession, location: str) -> bool:
    fs, path = _fs_and_path(spark, location)
    return bool(fs.exists(path))


def mkdirs(spark: SparkSession, location: str) -> None:
    fs, path = _fs_and_path(spark, location)
    fs.mkdirs(path)


def read_text(spark: SparkSession, location: str) -> str | None:
    fs, path = _fs_and_path(spark, location)
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        data = jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
    finally:
        stream.close()
    return bytes(data).decode("utf-8")


def write_text(spark: SparkSession, location: str, text: str, *, overwrite: bool = False) -> None:
    fs, path = _fs_and_path(spark, location)
    stream = fs.create(path, overwrite)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


def list_names(spark: SparkSession, location: str) -> list[str]:
    fs, path = _fs_and_path(spark, location)
    if not fs.exists(path):
        return []
    return sorted(str(status.getPath().getName()) for status in fs.listStatus(path))
