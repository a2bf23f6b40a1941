"""The context every maintenance action works in: Spark, the settings, the pipeline, the
table locks, and the run log row each action leaves."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession

from jobs.delta_state import Commit, TableState, history, is_delta_table, table_state
from jobs.runtime import JobRun, RunRecord
from jobs.storage import HadoopStorage
from lakehouse.checkpoints import Checkpoint
from lakehouse.locks import table_locks
from lakehouse.registry import Registry
from lakehouse.settings import Settings
from lakehouse.specs import StreamSpec, TableSpec

log = logging.getLogger("lakehouse.maintenance")

Outcome = tuple[str, dict[str, Any]]  # (status, details)


@dataclass(frozen=True)
class LockedTable:
    """A table read under its write lock: its snapshot, its history and the wait for it."""

    location: str
    state: TableState
    commits: dict[int, Commit]
    waited_s: float

    def details(self, spec: TableSpec, reason: str) -> dict[str, Any]:
        """The first fields of an action's run-log details on this table."""
        return {
            "table": spec.name,
            "reason": reason,
            "lock_wait_s": self.waited_s,
            "version": self.state.version,
        }


@dataclass
class ActionContext:
    """What an action may touch: every pipeline of the registry. ``dry_run``: measure and
    report, change nothing."""

    spark: SparkSession
    settings: Settings
    registry: Registry
    job: JobRun
    dry_run: bool = False
    # When the current action held which write locks (for its run-log row).
    lock_windows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def owner(self) -> str:
        return f"maintenance run {self.job.args.run_id}"

    def path(self, relative: str) -> str:
        return self.settings.path(relative)

    def checkpoint(self, stream: StreamSpec) -> Checkpoint:
        return Checkpoint(HadoopStorage(self.spark), self.settings.path(stream.checkpoint))

    @contextmanager
    def locked(self, tables: Sequence[str]) -> Iterator[float]:
        """Hold the write locks of ``tables``; yields how long it waited for them."""
        t0 = time.monotonic()
        with table_locks(self.settings, tables, self.owner, self.settings.lock_wait_s):
            waited_s = round(time.monotonic() - t0, 3)
            since = datetime.now(UTC)
            try:
                yield waited_s
            finally:
                self.lock_windows.append(
                    {
                        "tables": sorted(tables),
                        "waited_s": waited_s,
                        "from": since.isoformat(),
                        "to": datetime.now(UTC).isoformat(),
                    }
                )

    @contextmanager
    def locked_table(self, spec: TableSpec) -> Iterator[LockedTable | None]:
        """Hold the write lock of one table and read it; None for a table not created yet."""
        location = self.path(spec.name)
        if not is_delta_table(self.spark, location):
            yield None
            return
        with self.locked([spec.name]) as waited_s:
            state = table_state(self.spark, location)
            yield LockedTable(location, state, history(self.spark, location), waited_s)

    def act(
        self, action: str, pipeline: str, layer: str, what: str, work: Callable[[], Outcome]
    ) -> RunRecord:
        """Run one action, log one line and one run-log row for it, whatever happens."""
        record = self.job.new_record(layer, action)
        record.pipeline = pipeline
        self.lock_windows = []
        try:
            record.status, record.details = work()
        except Exception as exc:
            record.fail(exc)
            if record.status == "failed":
                log.exception("%s of %s failed", action, what)
        record.ended_at = datetime.now(UTC)
        record.details = {"target": what, **record.details, "locks": self.lock_windows}
        log.info(
            "%s %s: %s (%.1fs) %s",
            action,
            what,
            record.status,
            record.duration_s or 0.0,
            record.details.get("reason") or record.error or "",
        )
        self.job.log(record)
        return record
