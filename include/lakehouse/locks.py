"""One writer per table: the write leases a job holds while it writes.

Airflow's ``max_active_runs=1`` is not a lock: a manual trigger, a backfill, a retry next to a
zombie, a maintenance run or a job started by hand can all start while another writer runs,
on this machine or another. Every job therefore takes the leases of the tables it writes
before it starts Spark's query (which also pins the table's checkpoint), and holds them until
it ends. A second writer waits up to ``wait_s`` and then stops with ``ConcurrentRun``, which
Airflow retries later.

The lease (``lakehouse.leases``) lives under ``<root>/_locks/<table>/``, in the same storage
as the tables, so it holds for drivers on different hosts alike: on a local or NFS disk and on
S3. A holder that dies loses it at once on its own machine (the kernel says its process is
gone) and after ``LAKEHOUSE_LOCK_LEASE_S`` without a heartbeat anywhere else. Before every
commit a job calls ``check_held()``: a holder whose lease ran out or was taken over stops
with ``LeaseLost`` instead of committing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakehouse.errors import LeaseLost
from lakehouse.leases import LOCK_DIR, Lease, store_for
from lakehouse.settings import Settings

if TYPE_CHECKING:
    from lakehouse.s3 import S3Config

__all__ = ["LOCK_DIR", "TableLocks", "check_held", "holds", "table_locks"]

log = logging.getLogger("lakehouse.locks")


@dataclass
class TableLocks:
    """The leases one holder holds, checked together."""

    leases: list[Lease] = field(default_factory=list)

    def check(self) -> None:
        """Raise ``LeaseLost`` unless every lease is still held."""
        for lease in self.leases:
            lease.check()

    def on_lost(self, callback: Callable[[LeaseLost], None]) -> None:
        for lease in self.leases:
            lease.on_lost(callback)

    def describe(self) -> dict[str, dict[str, object]]:
        """For run-log details: each table's lease generation and how it was taken."""
        return {
            lease.table: {
                "generation": lease.generation,
                "waited_s": lease.waited_s,
                "taken": lease.taken_because,
            }
            for lease in self.leases
        }


# What this process holds now, innermost last: ``check_held`` checks them all.
_held: list[TableLocks] = []


def check_held() -> None:
    """Raise ``LeaseLost`` if a lease this process holds was lost (no-op when it holds none).
    Every commit of a job goes through here first."""
    for locks in list(_held):
        locks.check()


def holds(table: str) -> bool:
    """Whether this process holds the write lease of ``table`` (its writer is running here)."""
    return any(lease.table == table for locks in _held for lease in locks.leases)


def on_any_lost(callback: Callable[[LeaseLost], None]) -> None:
    """Call ``callback`` as soon as a lease this process holds is lost."""
    for locks in list(_held):
        locks.on_lost(callback)


@contextmanager
def table_locks(
    settings: Settings,
    tables: Sequence[str],
    owner: str,
    wait_s: float = 60.0,
    s3: S3Config | None = None,
) -> Iterator[TableLocks]:
    """Hold the write leases of ``tables`` (taken in a fixed order: no deadlocks); ``s3``: the
    credentials of an S3 root (default the environment's)."""
    held = TableLocks()
    with ExitStack() as stack:
        for table in sorted(set(tables)):
            store = store_for(settings, table, s3)
            lease = Lease(store, table, owner, lease_s=settings.lock_lease_s)
            lease.acquire(wait_s)
            stack.callback(lease.release)
            lease.start_heartbeat()
            held.leases.append(lease)
        _held.append(held)
        try:
            yield held
        finally:
            _held.remove(held)
