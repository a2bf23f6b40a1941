"""Small file operations through Hadoop's FileSystem, so local paths and s3a:// behave alike.

On an object store a folder is only a prefix of its files' keys; some S3-compatible servers
(SeaweedFS among them) keep listing a folder whose last file was deleted, as an empty one.
S3A then says it exists, and a rename onto it would move the source *into* it. So here a
folder is what it holds: ``has_files`` says whether anything is there, and ``rename`` clears
an empty folder out of the way of its target (moving file by file into one the store will
not let go of).
"""

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


def file_size(spark: SparkSession, location: str) -> int | None:
    """Size of the file at ``location``; None when there is none (or it is a folder)."""
    fs, path = _fs_and_path(spark, location)
    if not fs.exists(path):
        return None
    status = fs.getFileStatus(path)
    return None if status.isDirectory() else int(status.getLen())


def list_tree(spark: SparkSession, location: str) -> dict[str, int]:
    """Every file under ``location`` (recursively) as relative path -> size in bytes."""
    fs, path = _fs_and_path(spark, location)
    if not fs.exists(path):
        return {}
    base = str(fs.makeQualified(path).toUri().getPath()).rstrip("/")
    found: dict[str, int] = {}
    files = fs.listFiles(path, True)
    while files.hasNext():
        status = files.next()
        full = str(status.getPath().toUri().getPath())
        found[full[len(base) + 1 :]] = int(status.getLen())
    return found


def copy_tree(spark: SparkSession, source: str, target: str) -> None:
    """Copy the folder ``source`` to ``target`` (which must hold nothing yet)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    src_fs, src = _fs_and_path(spark, source)
    dst_fs, dst = _fs_and_path(spark, target)
    if has_files(spark, target):
        raise FileExistsError(target)
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    if _clear(spark, target):
        dst_fs.mkdirs(dst.getParent())
        if not jvm.org.apache.hadoop.fs.FileUtil.copy(src_fs, src, dst_fs, dst, False, False, conf):
            raise OSError(f"could not copy {source} to {target}")
        return
    for relative in list_tree(spark, source):  # into an empty folder the store keeps
        file_src = _fs_and_path(spark, f"{source}/{relative}")[1]
        file_dst = _fs_and_path(spark, f"{target}/{relative}")[1]
        if not jvm.org.apache.hadoop.fs.FileUtil.copy(
            src_fs, file_src, dst_fs, file_dst, False, True, conf
        ):
            raise OSError(f"could not copy {source}/{relative} to {target}/{relative}")


def has_files(spark: SparkSession, location: str) -> bool:
    """Whether ``location`` is a file, or a folder with a file somewhere under it."""
    fs, path = _fs_and_path(spark, location)
    if not fs.exists(path):
        return False
    return bool(fs.getFileStatus(path).isFile() or fs.listFiles(path, True).hasNext())


def _clear(spark: SparkSession, target: str) -> bool:
    """Remove the folder ``target`` if it holds nothing; whether it is gone now (an object
    store may keep listing an empty folder)."""
    fs, dst = _fs_and_path(spark, target)
    if fs.exists(dst):
        fs.delete(dst, True)
    return not bool(fs.exists(dst))


def rename(spark: SparkSession, source: str, target: str) -> None:
    """Move ``source`` to ``target`` (a new name, or a folder that holds nothing), creating
    the target's parent."""
    fs, src = _fs_and_path(spark, source)
    _, dst = _fs_and_path(spark, target)
    if has_files(spark, target):
        raise OSError(f"could not move {source} to {target}: the target holds files")
    if not _clear(spark, target):  # an empty folder the store keeps listing: file by file
        for relative in list_tree(spark, source):
            file_dst = _fs_and_path(spark, f"{target}/{relative}")[1]
            fs.mkdirs(file_dst.getParent())
            if not fs.rename(_fs_and_path(spark, f"{source}/{relative}")[1], file_dst):
                raise OSError(f"could not move {source}/{relative} to {target}/{relative}")
        fs.delete(src, True)
        return
    fs.mkdirs(dst.getParent())
    if not fs.rename(src, dst):
        raise OSError(f"could not move {source} to {target}")


def delete(spark: SparkSession, location: str) -> bool:
    fs, path = _fs_and_path(spark, location)
    return bool(fs.delete(path, True))


class HadoopStorage:
    """``lakehouse.fs.Storage`` over Hadoop's FileSystem: what the light side reads, read
    inside a job with the job's own file system settings (s3a credentials included)."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def list_names(self, location: str) -> list[str]:
        return list_names(self.spark, location)

    def read_text(self, location: str) -> str | None:
        return read_text(self.spark, location)

    def file_sizes(self, location: str) -> dict[str, int]:
        fs, path = _fs_and_path(self.spark, location)
        if not fs.exists(path):
            return {}
        return {
            str(status.getPath().getName()): int(status.getLen())
            for status in fs.listStatus(path)
            if status.isFile()
        }

    def write_bytes(self, location: str, data: bytes) -> None:
        fs, path = _fs_and_path(self.spark, location)
        stream = fs.create(path, True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()

    def list_tree(self, location: str) -> dict[str, int]:
        return list_tree(self.spark, location)

    def delete_tree(self, location: str) -> None:
        delete(self.spark, location)

    def delete_file(self, location: str) -> None:
        delete(self.spark, location)
