"""Offset arithmetic, without brokers or Spark: what a checkpoint resumes from, what is lost,
which ranges a replay reads, and Spark's own data-loss failure under our name.

The checkpoint's state comes from its ``offsets/`` and ``commits/`` logs (Spark's write-ahead
log: ``offsets/<n>`` is written before batch ``n`` runs, ``commits/<n>`` after it committed),
so the next run starts where the last committed batch ended.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lakehouse.checkpoints import Checkpoint
from lakehouse.errors import CheckpointInconsistent, KafkaOffsetsLost, KafkaReplayUnavailable

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Watermarks:
    """A partition's earliest offset still held, and the offset its next record gets."""

    earliest: int
    latest: int


def parse_kafka_offsets(data: Any, where: str) -> dict[TopicPartition, int]:
    """``{"topic": {"0": 12, ...}}`` (JSON text or parsed) as offsets per partition."""
    try:
        if isinstance(data, str):
            data = json.loads(data)
        return {
            (topic, int(partition)): int(offset)
            for topic, partitions in data.items()
            for partition, offset in partitions.items()
        }
    except (ValueError, AttributeError, TypeError):
        raise CheckpointInconsistent(
            f"{where} does not hold Kafka offsets: this checkpoint was written by another "
            "source (the landing files?). A root's bronze stream cannot change its source."
        ) from None


def checkpoint_offsets(checkpoint: Checkpoint) -> dict[TopicPartition, int] | None:
    """Where the next run of a Kafka stream starts, per partition; ``None`` for a new stream.

    That is the end of the last committed batch; with no committed batch yet, the offsets the
    stream started from (``sources/0/0``).
    """
    committed = checkpoint.committed_offsets()
    if committed is not None:
        offset = committed.source(0)
        if offset is None:
            raise CheckpointInconsistent(
                f"offsets/{committed.batch_id} in the checkpoint is incomplete."
            )
        return parse_kafka_offsets(offset, f"offsets/{committed.batch_id}")
    initial = checkpoint.initial_offset(0)
    return None if initial is None else parse_kafka_offsets(initial, "sources/0/0")


def lost_offsets(
    start: dict[TopicPartition, int] | None, brokers: dict[TopicPartition, Watermarks]
) -> list[str]:
    """What the next run cannot read any more, one sentence per partition; [] if nothing.

    ``start`` is where the checkpoint resumes (``None``: a new stream, which starts from the
    earliest offsets and so loses nothing). A partition the checkpoint has not seen yet (added
    since, or a new topic matching a pattern) is read from offset 0.
    """
    if start is None:
        return []
    lost = []
    for (topic, partition), marks in sorted(brokers.items()):
        resume = start.get((topic, partition), 0)
        if marks.earliest > resume:
            lost.append(
                f"{topic}[{partition}] offsets {resume}..{marks.earliest - 1} "
                f"({marks.earliest - resume} records; the earliest left is {marks.earliest})"
            )
        elif marks.latest < resume:
            lost.append(
                f"{topic}[{partition}] ends at offset {marks.latest} but was already read up to "
                f"{resume}: the topic was deleted and created again, or truncated"
            )
    for topic, partition in sorted(set(start) - set(brokers)):
        lost.append(
            f"{topic}[{partition}] is gone (read up to offset {start[(topic, partition)]}; "
            "whatever came after it is lost)"
        )
    return lost


@dataclass(frozen=True)
class ReplayRange:
    """Offsets ``[start, end)`` of one partition that a replay reads again."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def records(self) -> int:
        return self.end - self.start

    def describe(self) -> str:
        return f"{self.topic}[{self.partition}] {self.start}..{self.end - 1}"


def replay_plan(
    brokers: dict[TopicPartition, Watermarks],
    first: dict[TopicPartition, int],
    after: dict[TopicPartition, int],
    read_up_to: dict[TopicPartition, int] | None,
    start: datetime,
) -> list[ReplayRange]:
    """What a replay of ``[start, end)`` reads, from the brokers' offsets by time (``first``:
    at ``start``, ``after``: at the end; -1 is "none that recent").

    Only offsets the stream has already read (below ``read_up_to``, its checkpoint) are
    replayed: whatever comes after is the stream's, so no record can land twice. Raises
    ``KafkaReplayUnavailable`` for a partition whose records before the earliest it still
    holds may have had timestamps in the range (timestamps are taken as growing with offsets).
    """
    ranges: list[ReplayRange] = []
    gone: list[str] = []
    for tp, marks in sorted(brokers.items()):
        read = (read_up_to or {}).get(tp, 0)
        if read <= 0:
            continue  # bronze has read nothing of it yet: all of it is the stream's
        begin = marks.latest if first.get(tp, -1) < 0 else first[tp]
        end = min(marks.latest if after.get(tp, -1) < 0 else after[tp], read)
        if marks.earliest > 0 and begin <= marks.earliest:
            gone.append(
                f"{tp[0]}[{tp[1]}] no longer holds offsets 0..{marks.earliest - 1}, and records "
                f"from {start.isoformat()} may have been among them"
            )
        elif begin < end:
            ranges.append(ReplayRange(tp[0], tp[1], begin, end))
    for tp in sorted(set(read_up_to or {}) - set(brokers)):
        gone.append(f"{tp[0]}[{tp[1]}] is gone from the brokers")
    if gone:
        raise KafkaReplayUnavailable("Refused to replay: " + "; ".join(gone) + ".")
    return ranges


def offsets_json(ranges: list[ReplayRange], bound: str) -> str:
    """Spark's ``startingOffsets``/``endingOffsets`` JSON for ``ranges`` (bound start|end)."""
    data: dict[str, dict[str, int]] = {}
    for r in ranges:
        data.setdefault(r.topic, {})[str(r.partition)] = getattr(r, bound)
    return json.dumps(data, sort_keys=True)


# Spark's KAFKA_DATA_LOSS message, in the failure or among its causes (a read inside a
# write task arrives as TASK_WRITE_FAILED, the data loss in its "Caused by:" lines).
_SPARK_DATA_LOSS = re.compile(
    r"Some data may have been lost because they are not available in Kafka any more"
    r".*?Reason:\s*(.*?)\s*(?:SQLSTATE|\n===|\n\s+at |$)",
    re.S,
)


def from_spark_error(message: str) -> KafkaOffsetsLost | None:
    """Spark's own data-loss failure (``failOnDataLoss``) as ``KafkaOffsetsLost``."""
    match = _SPARK_DATA_LOSS.search(message)
    if match is None:
        return None
    reason = " ".join(match.group(1).split()).rstrip(".")
    return KafkaOffsetsLost(f"Spark stopped reading Kafka: {reason}.")
