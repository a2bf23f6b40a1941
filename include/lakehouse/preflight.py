"""Cheap checks that run before a JVM starts, so misconfiguration fails fast and says why.

Without them a missing Java surfaces as "Java gateway process exited", an unwritable root
as a stack trace deep inside Hadoop, and a dead master as minutes of silent retries.
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from lakehouse.errors import JavaNotFound, LakehouseRootNotWritable, SparkMasterUnreachable
from lakehouse.settings import Settings

if TYPE_CHECKING:
    from lakehouse.s3 import S3Config


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
        raise JavaNotFound(f"JAVA_HOME={java_home} has no bin/java.")
    found = shutil.which("java")
    if not found:
        raise JavaNotFound("No Java runtime: JAVA_HOME is unset and `java` is not on PATH.")
    return found


def check_root_writable(settings: Settings, s3: S3Config | None = None) -> None:
    """Create the root if needed and prove it can be written: a file on a disk, an object on
    an object store (where a wrong key, endpoint or bucket shows up here, in a second, and
    not as a stack trace deep inside Hadoop)."""
    if not settings.root_is_local:
        _check_uri_writable(settings, s3)
        return
    root = settings.local_path("")
    probe = root / f".write-probe-{uuid.uuid4().hex}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise LakehouseRootNotWritable(
            f"Cannot write to LAKEHOUSE_ROOT={settings.root}: {exc.strerror or exc}."
        ) from None


def _check_uri_writable(settings: Settings, s3: S3Config | None) -> None:
    from lakehouse.errors import LakehouseError
    from lakehouse.fs import storage_for

    probe = settings.path(f"_probes/write-{uuid.uuid4().hex}")
    try:
        storage = storage_for(settings, s3)
        storage.write_bytes(probe, b"ok")
        storage.delete_file(probe)
    except (OSError, LakehouseError) as exc:
        raise LakehouseRootNotWritable(
            f"Cannot write to LAKEHOUSE_ROOT={settings.root}: {str(exc)[:300]}"
        ) from None


def check_master(master: str, timeout_s: float = 5.0) -> None:
    """For a standalone master, prove that something listens at host:port."""
    if not master.startswith("spark://"):
        return
    for address in master.removeprefix("spark://").split(","):
        parts = urlsplit(f"//{address}")
        host, port = parts.hostname or "", parts.port or 7077
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return
        except OSError:
            continue
    raise SparkMasterUnreachable(f"No Spark master answers at {master} (waited {timeout_s:.0f}s).")


def check_all(settings: Settings, master: str) -> None:
    java_executable()
    check_root_writable(settings)
    check_master(master)
