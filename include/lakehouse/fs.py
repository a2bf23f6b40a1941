"""The light side's view of the lakehouse root: list folders, read and write small files,
anywhere.

Checkpoints, backups, the dry-run report, the pre-flight checks, the demo's landing files
and the report read (or write) a few small files under the root. ``Storage`` is the little
they need; ``storage_for(settings)`` gives the one that fits the root: the local disk for a
path, pyarrow's file systems for a URI (``s3a://`` is S3, with the endpoint, region and
credentials of ``lakehouse.s3.S3Config``). Delta tables are read with delta-rs, which gets the
same access from ``delta_storage_options``. The Spark side implements the same protocol over
Hadoop's FileSystem (``jobs.storage.HadoopStorage``), so one checkpoint reader serves both.
The writer lock has its own, narrower store (``lakehouse.leases``): it needs create-if-absent,
which neither pyarrow nor delta-rs offers.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    from lakehouse.s3 import S3Config
    from lakehouse.settings import Settings


def write_private(path: Path, text: str, *, replace: bool = False) -> Path:
    """Write ``text`` to a local file only its owner can read (secrets handed to a job, the
    local services' credentials). Created new (``FileExistsError`` if it exists) unless
    ``replace``; the mode is set at creation, never widened after."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if replace else os.O_EXCL)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, 0o600)  # an older file created with a wider mode
    return path


class Storage(Protocol):
    """What the light side reads under the root. Missing things are empty, never errors."""

    def list_names(self, location: str) -> list[str]:
        """Names in the folder ``location``, sorted; [] when it does not exist."""
        ...

    def read_text(self, location: str) -> str | None:
        """The UTF-8 text of the file ``location``; None when it does not exist."""
        ...

    def file_sizes(self, location: str) -> dict[str, int]:
        """The files directly in the folder ``location`` (name -> bytes); {} when none."""
        ...

    def write_bytes(self, location: str, data: bytes) -> None:
        """Write the file ``location`` whole: readers see all of it or none of it."""
        ...

    def list_tree(self, location: str) -> dict[str, int]:
        """Every file under the folder ``location``, recursively (relative path -> bytes)."""
        ...

    def delete_tree(self, location: str) -> None:
        """Delete the folder ``location`` and everything under it (nothing if missing)."""
        ...

    def delete_file(self, location: str) -> None:
        """Delete the file ``location`` (nothing if missing)."""
        ...


def normalize_location(location: str) -> str:
    """One spelling per place: a local path for ``file:`` URIs and paths, else
    ``scheme://bucket/key`` without escapes (Spark logs file paths as escaped URIs)."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return str(Path(unquote(parsed.path if parsed.scheme else location)))
    return f"{parsed.scheme}://{parsed.netloc}{unquote(parsed.path)}"


class LocalStorage:
    """The local disk (paths, or ``file:`` URIs)."""

    @staticmethod
    def _path(location: str) -> Path:
        return Path(location.removeprefix("file://").removeprefix("file:"))

    def list_names(self, location: str) -> list[str]:
        folder = self._path(location)
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []

    def read_text(self, location: str) -> str | None:
        path = self._path(location)
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def file_sizes(self, location: str) -> dict[str, int]:
        folder = self._path(location)
        if not folder.is_dir():
            return {}
        return {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}

    def write_bytes(self, location: str, data: bytes) -> None:
        # Under a hidden name first (readers of landing folders skip those), then renamed in.
        path = self._path(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        staging.write_bytes(data)
        os.replace(staging, path)

    def list_tree(self, location: str) -> dict[str, int]:
        folder = self._path(location)
        if not folder.is_dir():
            return {}
        return {
            p.relative_to(folder).as_posix(): p.stat().st_size
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }

    def delete_tree(self, location: str) -> None:
        import shutil

        shutil.rmtree(self._path(location), ignore_errors=True)

    def delete_file(self, location: str) -> None:
        self._path(location).unlink(missing_ok=True)


class ArrowStorage:
    """Any file system pyarrow reaches by URI (S3 and its compatibles, GCS, HDFS)."""

    def __init__(self, filesystem: Any) -> None:
        self.filesystem = filesystem

    @staticmethod
    def _key(location: str) -> str:
        return location.split("://", 1)[1] if "://" in location else location

    def list_names(self, location: str) -> list[str]:
        from pyarrow import fs

        selector = fs.FileSelector(self._key(location), allow_not_found=True)
        return sorted(info.base_name for info in self.filesystem.get_file_info(selector))

    def read_text(self, location: str) -> str | None:
        from pyarrow import fs

        key = self._key(location)
        if self.filesystem.get_file_info(key).type != fs.FileType.File:
            return None
        with self.filesystem.open_input_stream(key) as stream:
            return bytes(stream.read()).decode("utf-8")

    def file_sizes(self, location: str) -> dict[str, int]:
        from pyarrow import fs

        selector = fs.FileSelector(self._key(location), allow_not_found=True)
        return {
            info.base_name: int(info.size or 0)
            for info in self.filesystem.get_file_info(selector)
            if info.type == fs.FileType.File
        }

    def write_bytes(self, location: str, data: bytes) -> None:
        # An object store's object appears whole when its upload completes.
        with self.filesystem.open_output_stream(self._key(location)) as stream:
            stream.write(data)

    def list_tree(self, location: str) -> dict[str, int]:
        from pyarrow import fs

        base = self._key(location).rstrip("/")
        selector = fs.FileSelector(base, allow_not_found=True, recursive=True)
        return {
            info.path[len(base) + 1 :]: int(info.size or 0)
            for info in self.filesystem.get_file_info(selector)
            if info.type == fs.FileType.File
        }

    def delete_tree(self, location: str) -> None:
        from pyarrow import fs

        key = self._key(location)
        if self.filesystem.get_file_info(key).type != fs.FileType.NotFound:
            self.filesystem.delete_dir(key)

    def delete_file(self, location: str) -> None:
        from pyarrow import fs

        key = self._key(location)
        if self.filesystem.get_file_info(key).type == fs.FileType.File:
            self.filesystem.delete_file(key)


def s3_filesystem(config: S3Config) -> Any:
    """pyarrow's S3 file system with ``config``'s endpoint, region and credentials
    (path-style requests, as the local server needs)."""
    from pyarrow import fs

    endpoint = urlparse(config.endpoint)
    return fs.S3FileSystem(
        access_key=config.access_key_id,
        secret_key=config.secret_access_key,
        session_token=config.session_token,
        region=config.region,
        endpoint_override=endpoint.netloc or None,
        scheme=endpoint.scheme or "https",
        force_virtual_addressing=False,
    )


def storage_for(settings: Settings, s3: S3Config | None = None) -> Storage:
    """The storage of the settings' root; an S3 root uses ``s3`` (default: ``S3Config.from_env``,
    the operator's access file or ``AWS_*``)."""
    if settings.root_is_local:
        return LocalStorage()
    from lakehouse.s3 import S3Config, is_s3_uri

    if is_s3_uri(settings.root):
        return ArrowStorage(s3_filesystem(s3 or S3Config.from_env()))
    from pyarrow import fs

    filesystem, _ = fs.FileSystem.from_uri(settings.root)
    return ArrowStorage(filesystem)


def delta_storage_options(settings: Settings, s3: S3Config | None = None) -> dict[str, str]:
    """delta-rs ``storage_options`` for tables under the settings' root ({} on local disk; for
    S3 the endpoint, region and credentials that Spark's s3a uses)."""
    from lakehouse.s3 import S3Config, is_s3_uri

    if settings.root_is_local or not is_s3_uri(settings.root):
        return {}
    return (s3 or S3Config.from_env()).storage_options()
