"""Calls to the brokers: the pre-flight check of the offsets, and offsets by time.

Before Spark starts, ``check_offsets`` compares what the checkpoint still has to read with
what the brokers still hold. Records that aged out (retention) before bronze read them are
data loss: the check raises ``KafkaOffsetsLost`` naming every partition and offset range that
is gone, instead of letting Spark fail on it later (or, with ``failOnDataLoss`` off, skip it
in silence). confluent-kafka is imported inside the functions.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lakehouse.errors import (
    KafkaAuthenticationFailed,
    KafkaOffsetsLost,
    KafkaTopicNotFound,
    SourceUnavailable,
)
from lakehouse.kafka.access import KafkaAccess
from lakehouse.kafka.offsets import (
    ReplayRange,
    TopicPartition,
    Watermarks,
    lost_offsets,
    replay_plan,
)
from lakehouse.specs import KafkaSubscription

BROKER_TIMEOUT_S = 10.0

log = logging.getLogger("lakehouse.kafka")


def _kafka_error_text(exc: BaseException) -> str:
    error = exc.args[0] if exc.args else exc
    text = error.str() if hasattr(error, "str") else str(error)
    return str(text)


def broker_offsets(
    access: KafkaAccess, topics: KafkaSubscription, timeout_s: float = BROKER_TIMEOUT_S
) -> dict[TopicPartition, Watermarks]:
    """Earliest and latest offsets of every partition the subscription reads.

    Raises ``SourceUnavailable`` when no broker answers, ``KafkaAuthenticationFailed`` when
    the brokers refuse the login and ``KafkaTopicNotFound`` when a listed topic is missing.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka import TopicPartition as KafkaPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    seen: list[Any] = []
    # librdkafka's own log lines would repeat the errors below; keep them out of task logs
    # and collect the errors instead: a refused login is only told there.
    config: dict[str, Any] = {**access.client_config(), "log_level": 0, "error_cb": seen.append}
    admin = AdminClient(config)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            metadata = admin.list_topics(timeout=min(1.0, timeout_s))
            break
        except KafkaException as exc:
            admin.poll(0)  # serves error_cb
            refused = [e for e in seen if e.code() == KafkaError._AUTHENTICATION]
            if refused:
                raise KafkaAuthenticationFailed(
                    f"Kafka at {access.describe()} refused the login: {refused[0].str()}."
                ) from None
            if time.monotonic() >= deadline:
                raise SourceUnavailable(
                    f"No Kafka broker answers at {access.describe()} (waited "
                    f"{timeout_s:.0f}s): {_kafka_error_text(exc)}."
                ) from None
    if topics.topics:
        missing = [t for t in topics.topics if t not in metadata.topics]
        if missing:
            raise KafkaTopicNotFound(
                f"Kafka topic{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                f"{'do' if len(missing) > 1 else 'does'} not exist on {access.bootstrap_servers}."
            )
    names = sorted(t for t in metadata.topics if topics.matches(t))
    partitions = [
        KafkaPartition(topic, partition)
        for topic in names
        for partition in sorted(metadata.topics[topic].partitions)
    ]
    if not partitions:
        return {}
    try:
        earliest = admin.list_offsets(
            {p: OffsetSpec.earliest() for p in partitions}, request_timeout=timeout_s
        )
        latest = admin.list_offsets(
            {p: OffsetSpec.latest() for p in partitions}, request_timeout=timeout_s
        )
        return {
            (p.topic, p.partition): Watermarks(
                earliest[p].result(timeout=timeout_s).offset,
                latest[p].result(timeout=timeout_s).offset,
            )
            for p in partitions
        }
    except KafkaException as exc:
        raise SourceUnavailable(
            f"Kafka at {access.bootstrap_servers} did not give its offsets: "
            f"{_kafka_error_text(exc)}."
        ) from None


@dataclass
class PreflightReport:
    """What the pre-flight check saw; kept in the run log's details."""

    partitions: int
    backlog: int
    lost: list[str]
    check_ms: float

    def details(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kafka_partitions": self.partitions,
            "kafka_backlog": self.backlog,
            "kafka_preflight_ms": round(self.check_ms, 1),
        }
        if self.lost:
            data["kafka_lost_offsets_accepted"] = self.lost
        return data


def check_offsets(
    access: KafkaAccess,
    topics: KafkaSubscription,
    start: dict[TopicPartition, int] | None,
    *,
    accept_data_loss: bool = False,
    timeout_s: float = BROKER_TIMEOUT_S,
) -> PreflightReport:
    """The pre-flight check: raise ``KafkaOffsetsLost`` if records the checkpoint has not
    read are gone from the brokers (unless ``accept_data_loss``, for the one run that goes
    on without them), ``SourceUnavailable`` / ``KafkaTopicNotFound`` as ``broker_offsets``."""
    t0 = time.perf_counter()
    brokers = broker_offsets(access, topics, timeout_s)
    lost = lost_offsets(start, brokers)
    backlog = sum(
        max(0, m.latest - max(m.earliest, (start or {}).get(tp, 0))) for tp, m in brokers.items()
    )
    report = PreflightReport(len(brokers), backlog, lost, (time.perf_counter() - t0) * 1000)
    if lost and not accept_data_loss:
        raise KafkaOffsetsLost(
            f"Records of {topics.describe()} aged out of Kafka before bronze read them: "
            + "; ".join(lost)
            + "."
        )
    if lost:
        log.warning("going on without records that are gone (accept_data_loss): %s", lost)
    if not brokers:
        log.warning("no partition to read: no topic matches %s", topics.describe())
    return report


def timestamp_offsets(
    access: KafkaAccess,
    partitions: list[TopicPartition],
    *instants: datetime,
    timeout_s: float = BROKER_TIMEOUT_S,
) -> list[dict[TopicPartition, int]]:
    """For each instant, per partition, the first offset whose Kafka timestamp is at or after
    it; -1 where no record is that recent. One admin client for all of them."""
    from confluent_kafka import KafkaException
    from confluent_kafka import TopicPartition as KafkaPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    if not partitions:
        return [{} for _ in instants]
    admin = AdminClient({**access.client_config(), "log_level": 0})
    found: list[dict[TopicPartition, int]] = []
    try:
        for instant in instants:
            spec = OffsetSpec.for_timestamp(int(instant.timestamp() * 1000))
            requests = {KafkaPartition(topic, partition): spec for topic, partition in partitions}
            answers = admin.list_offsets(requests, request_timeout=timeout_s)
            found.append(
                {
                    (p.topic, p.partition): answers[p].result(timeout=timeout_s).offset
                    for p in answers
                }
            )
    except KafkaException as exc:
        raise SourceUnavailable(
            f"Kafka at {access.bootstrap_servers} did not give offsets by time: "
            f"{_kafka_error_text(exc)}."
        ) from None
    return found


def plan_replay(
    access: KafkaAccess,
    topics: KafkaSubscription,
    start: datetime,
    end: datetime,
    read_up_to: dict[TopicPartition, int] | None,
) -> list[ReplayRange]:
    """The offset ranges of the records timestamped in ``[start, end)`` that the stream has
    read, after checking that the brokers still hold all of them (see ``replay_plan``)."""
    brokers = broker_offsets(access, topics)
    first, after = timestamp_offsets(access, sorted(brokers), start, end)
    return replay_plan(brokers, first, after, read_up_to, start)
