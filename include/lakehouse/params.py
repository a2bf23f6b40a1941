"""Run parameters of a pipeline run, checked the same way by the DAG and by the jobs.

The DAG's ``Param`` JSON schema rejects malformed values before a run is created; this module
checks them again (jobs can be started without Airflow) and checks what a schema cannot:
that a window ends after it starts, that a mode fits its parameters. Every problem is
reported at once in one ``InvalidRunParams``, and nothing has run when it is raised.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from lakehouse.errors import InvalidRunParams
from lakehouse.specs import PipelineSpec

MODES = ("incremental", "reprocess", "full_refresh")
LAYERS = ("bronze", "silver", "gold")
MAX_FILES_PER_TRIGGER = 100_000
MAX_OFFSETS_PER_TRIGGER = 50_000_000

# ISO-8601 with a zone, as the contract's windows require; no spaces, no paths, no quotes.
ISO_WITH_ZONE_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})$"
_ISO_WITH_ZONE = re.compile(ISO_WITH_ZONE_PATTERN)


def parse_instant(name: str, value: Any, problems: list[str]) -> datetime | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str) or not _ISO_WITH_ZONE.match(value):
        problems.append(
            f"{name}={value!r} is not an ISO-8601 time with a zone (2026-11-01T00:00:00Z)"
        )
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        problems.append(f"{name}={value!r} is not a real date and time")
        return None


def _bounded_int(name: str, value: Any, high: int, problems: list[str]) -> int | None:
    if value in (None, ""):
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"{name}={value!r} is not an integer")
        return None
    if not 1 <= value <= high:
        problems.append(f"{name}={value} is outside 1..{high}")
        return None
    return value


def _span(
    raw: Mapping[str, Any], prefix: str, problems: list[str]
) -> tuple[datetime | None, datetime | None]:
    """``<prefix>_from`` and ``<prefix>_to``, each parsed (a bad one is a problem)."""
    return (
        parse_instant(f"{prefix}_from", raw.get(f"{prefix}_from"), problems),
        parse_instant(f"{prefix}_to", raw.get(f"{prefix}_to"), problems),
    )


def _check_order(what: str, start: datetime, end: datetime, problems: list[str]) -> None:
    if end <= start:
        problems.append(f"{what} ends ({end.isoformat()}) before it starts ({start.isoformat()})")


def _window(
    mode: str, raw: Mapping[str, Any], problems: list[str]
) -> tuple[datetime | None, datetime | None]:
    start, end = _span(raw, "reprocess", problems)
    if mode == "reprocess":
        if start is None or end is None:
            problems.append("mode=reprocess needs both reprocess_from and reprocess_to")
        else:
            _check_order("the window", start, end, problems)
    elif raw.get("reprocess_from") or raw.get("reprocess_to"):
        problems.append(f"reprocess_from/reprocess_to only apply to mode=reprocess, not {mode}")
    return start, end


def _replay(
    raw: Mapping[str, Any], layers: tuple[str, ...], problems: list[str]
) -> tuple[datetime | None, datetime | None]:
    start, end = _span(raw, "kafka_replay", problems)
    given = [raw.get("kafka_replay_from"), raw.get("kafka_replay_to")]
    if not any(given):
        return None, None
    if not all(given):
        problems.append("a Kafka replay needs both kafka_replay_from and kafka_replay_to")
    elif start is not None and end is not None:
        _check_order("the Kafka replay", start, end, problems)
    if "bronze" not in layers:
        problems.append("a Kafka replay runs in bronze: include bronze in layers")
    return start, end


def _layers(mode: str, value: Any, problems: list[str]) -> tuple[str, ...]:
    if value is None:
        return LAYERS
    if not isinstance(value, Sequence) or isinstance(value, str):
        problems.append(f"layers={value!r} is not a list")
        return LAYERS
    unknown = [layer for layer in value if layer not in LAYERS]
    if unknown:
        problems.append(f"layers {unknown} are not among {', '.join(LAYERS)}")
    layers = tuple(layer for layer in LAYERS if layer in value)
    if not layers:
        problems.append("layers is empty: choose at least one of bronze, silver, gold")
    elif mode != "incremental" and layers == ("bronze",):
        problems.append(f"mode={mode} re-derives silver and gold; bronze alone has nothing to do")
    return layers


@dataclass(frozen=True)
class RunParams:
    mode: str = "incremental"
    reprocess_from: datetime | None = None
    reprocess_to: datetime | None = None
    layers: tuple[str, ...] = LAYERS
    max_files_per_trigger: int | None = None
    max_offsets_per_trigger: int | None = None
    accept_data_loss: bool = False
    kafka_replay_from: datetime | None = None
    kafka_replay_to: datetime | None = None
    dry_run: bool = False

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> RunParams:
        problems: list[str] = []
        unknown = sorted(set(raw) - {f.name for f in fields(cls)})
        if unknown:
            problems.append(f"unknown parameters {unknown}")
        mode = raw.get("mode") or "incremental"
        if mode not in MODES:
            problems.append(f"mode={mode!r} is not one of {', '.join(MODES)}")
        start, end = _window(mode, raw, problems)
        layers = _layers(mode, raw.get("layers"), problems)
        replay_from, replay_to = _replay(raw, layers, problems)
        dry_run = raw.get("dry_run", False)
        if not isinstance(dry_run, bool):
            problems.append(f"dry_run={dry_run!r} is not true or false")
        accept_data_loss = raw.get("accept_data_loss") or False
        if not isinstance(accept_data_loss, bool):
            problems.append(f"accept_data_loss={accept_data_loss!r} is not true or false")
        max_files = _bounded_int(
            "max_files_per_trigger",
            raw.get("max_files_per_trigger"),
            MAX_FILES_PER_TRIGGER,
            problems,
        )
        max_offsets = _bounded_int(
            "max_offsets_per_trigger",
            raw.get("max_offsets_per_trigger"),
            MAX_OFFSETS_PER_TRIGGER,
            problems,
        )
        if problems:
            raise InvalidRunParams("Refused to run: " + "; ".join(problems) + ".")
        return cls(
            mode=mode,
            reprocess_from=start,
            reprocess_to=end,
            layers=layers,
            max_files_per_trigger=max_files,
            max_offsets_per_trigger=max_offsets,
            accept_data_loss=bool(accept_data_loss),
            kafka_replay_from=replay_from,
            kafka_replay_to=replay_to,
            dry_run=bool(dry_run),
        )

    def check_against(self, pipeline: PipelineSpec) -> None:
        """Refuse what the pipeline's declarations forbid: ``full_refresh`` of a table declared
        ``allow_full_refresh=False``."""
        if self.mode != "full_refresh":
            return
        refused = [
            table
            for layer in self.layers
            if layer != "bronze"
            for table in pipeline.stream(layer).targets
            if not pipeline.table(table).allow_full_refresh
        ]
        if refused:
            raise InvalidRunParams(
                f"Refused to run: full_refresh is not allowed for {', '.join(refused)} "
                "(declared allow_full_refresh=False)."
            )

    def locked_tables(self, pipeline: PipelineSpec, layer: str) -> list[str]:
        """Tables a layer job holds while it runs: the ones it writes and, when it re-derives
        them, the one it reads (so that the input cannot move under the recompute)."""
        stream = pipeline.stream(layer)
        tables = list(stream.targets)
        if self.mode != "incremental" and stream.source_table:
            tables.append(stream.source_table)
        return tables

    def job_args(self, layer: str) -> list[str]:
        """Arguments for ``jobs/<layer>.py`` that carry these params."""
        args = ["--mode", self.mode]
        if self.reprocess_from and self.reprocess_to:
            args += ["--reprocess-from", self.reprocess_from.isoformat()]
            args += ["--reprocess-to", self.reprocess_to.isoformat()]
        if layer == "bronze" and self.max_files_per_trigger:
            args += ["--max-files-per-trigger", str(self.max_files_per_trigger)]
        if layer == "bronze" and self.max_offsets_per_trigger:
            args += ["--max-offsets-per-trigger", str(self.max_offsets_per_trigger)]
        if layer == "bronze" and self.accept_data_loss:
            args += ["--accept-data-loss"]
        if layer == "bronze" and self.kafka_replay_from and self.kafka_replay_to:
            args += ["--kafka-replay-from", self.kafka_replay_from.isoformat()]
            args += ["--kafka-replay-to", self.kafka_replay_to.isoformat()]
        return args

    def describe(self) -> str:
        what = {
            "incremental": "process what arrived since the last run",
            "reprocess": (
                f"re-derive silver and gold from bronze for event_ts in "
                f"[{self.reprocess_from}, {self.reprocess_to})"
            ),
            "full_refresh": "rebuild silver and gold from all of bronze",
        }[self.mode]
        loss = "; going on past Kafka records that are gone" if self.accept_data_loss else ""
        replay = (
            f"; bronze replays the Kafka records timestamped in [{self.kafka_replay_from}, "
            f"{self.kafka_replay_to}) that it is missing"
            if self.kafka_replay_from
            else ""
        )
        return f"{self.mode}: {what}; layers {', '.join(self.layers)}{loss}{replay}"
