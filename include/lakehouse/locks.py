"""One writer per table: an exclusive lock a job holds while it writes.

Airflow's ``max_active_runs=1`` is not a lock: a manual trigger, a backfill, a retry next to a
zombie, or a maintenance run can all start while another writer runs. Every job therefore
takes the locks of the tables it writes before it starts Spark's query (which also pins the
table's checkpoint), and holds them until it ends. A second writer waits up to
``wait_s`` and then stops with ``ConcurrentRun``, which Airflow retries later.

On a local root (one machine, the embedded default and the standalone cluster in client
mode) the lock is an OS file lock (``flock``) on ``<root>/_locks/<table>.lock``: the kernel
releases it when the holder dies, however it dies, so a crash never leaves a stale lock.
The holder's identity is written into the file for the error message.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from typing import IO

from lakehouse.errors import ConcurrentRun
from lakehouse.settings import Settings

LOCK_DIR = "_locks"

log = logging.getLogger("lakehouse.locks")


def _holder(handle: IO[str]) -> str:
    try:
        handle.seek(0)
        owner = json.loads(handle.read() or "{}")
    except (OSError, ValueError):
        return "another process"
    return f"{owner.get('owner', '?')} (pid {owner.get('pid', '?')} on {owner.get('host', '?')})"


@contextmanager
def _table_lock(settings: Settings, table: str, owner: str, wait_s: float) -> Iterator[None]:
    path = settings.local_path(f"{LOCK_DIR}/{table.replace('/', '__')}.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+", encoding="utf-8")
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ConcurrentRun(
                        f"{table} is being written by {_holder(handle)}; waited {wait_s:.0f}s."
                    ) from None
                time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))
        handle.seek(0)
        handle.truncate()
        handle.write(
            json.dumps(
                {
                    "owner": owner,
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "since": datetime.now(UTC).isoformat(),
                }
            )
        )
        handle.flush()
        yield
    finally:
        handle.close()  # closing releases the lock


@contextmanager
def table_locks(
    settings: Settings, tables: Sequence[str], owner: str, wait_s: float = 60.0
) -> Iterator[None]:
    """Hold the write locks of ``tables`` (taken in a fixed order: no deadlocks)."""
    if not settings.root_is_local:
        # A kernel lock holds on one machine only; on an object store the writers of a table
        # are kept apart only by Airflow (one task instance per layer task at a time).
        log.warning("no table lock on %s: writers must be kept apart by Airflow", settings.root)
        yield
        return
    with ExitStack() as stack:
        for table in sorted(set(tables)):
            stack.enter_context(_table_lock(settings, table, owner, wait_s))
        yield
