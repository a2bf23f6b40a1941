"""The light side's view of the lakehouse root: list folders and read small files, anywhere.

Checkpoints, backups, the dry-run report and the pre-flight checks read a few small files
under the root. ``Storage`` is the little they need; ``storage_for(settings)`` gives the one
that fits the root: the local disk for a path, pyarrow's file systems for a URI (``s3a://``
is read as ``s3://``). The Spark side implements the same protocol over Hadoop's FileSystem
(``jobs.storage.HadoopStorage``), so one checkpoint reader serves both.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
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


def storage_for(settings: Settings) -> Storage:
    """The storage of the settings' root."""
    if settings.root_is_local:
        return LocalStorage()
    from pyarrow import fs

    uri = settings.root
    if uri.startswith("s3a://") or uri.startswith("s3n://"):
        uri = "s3://" + uri.split("://", 1)[1]
    filesystem, _ = fs.FileSystem.from_uri(uri)
    return ArrowStorage(filesystem)
