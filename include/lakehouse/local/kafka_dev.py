"""Kafka chores for the demo and the tests: topics, partitions, SCRAM users, producing events.

Producers here wait for every record to be acknowledged (``acks=all``, idempotent), so a
record that ``produce`` counted is on the broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewPartitions,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from lakehouse.kafka.access import KafkaAccess

TIMEOUT_S = 30.0


def _config(where: str | KafkaAccess) -> dict[str, Any]:
    # librdkafka's notices (a broker still loading, a queue purged at close) are retried or
    # harmless; errors still show (3 = LOG_ERR), and failures raise below in any case.
    quiet = {"log_level": 3}
    if isinstance(where, KafkaAccess):
        return {**where.client_config(), **quiet}
    return {"bootstrap.servers": where, **quiet}


def admin(where: str | KafkaAccess) -> AdminClient:
    return AdminClient(_config(where))


def create_topic(
    where: str | KafkaAccess,
    topic: str,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    *,
    exist_ok: bool = False,
) -> None:
    """Create ``topic`` and wait until it is there."""
    client = admin(where)  # kept alive until the result is in
    futures = client.create_topics(
        [NewTopic(topic, partitions, 1, config=dict(config or {}))],
        operation_timeout=TIMEOUT_S,
    )
    try:
        futures[topic].result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        if not (exist_ok and exc.args[0].name() == "TOPIC_ALREADY_EXISTS"):
            raise


def topic_exists(where: str | KafkaAccess, topic: str) -> bool:
    return topic in admin(where).list_topics(timeout=TIMEOUT_S).topics


def add_partitions(where: str | KafkaAccess, topic: str, total: int) -> None:
    """Grow ``topic`` to ``total`` partitions."""
    client = admin(where)
    futures = client.create_partitions([NewPartitions(topic, total)], operation_timeout=TIMEOUT_S)
    futures[topic].result(timeout=TIMEOUT_S)


def alter_topic_config(where: str | KafkaAccess, topic: str, config: Mapping[str, str]) -> None:
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in config.items()
        ],
    )
    client = admin(where)
    futures = client.incremental_alter_configs([resource])
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)


def upsert_scram_user(
    where: str | KafkaAccess, user: str, password: str, mechanism: str = "SCRAM-SHA-512"
) -> None:
    """Create or change a SCRAM user on the broker (KRaft keeps it in its metadata)."""
    kind = {
        "SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
        "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512,
    }[mechanism]
    client = admin(where)
    futures = client.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, ScramCredentialInfo(kind, 4096), password.encode())]
    )
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)


def _offsets(where: str | KafkaAccess, topic: str, latest: bool) -> dict[int, int]:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    client = admin(where)
    metadata = client.list_topics(topic, timeout=TIMEOUT_S)
    partitions = [TopicPartition(topic, p) for p in metadata.topics[topic].partitions]
    spec = OffsetSpec.latest() if latest else OffsetSpec.earliest()
    result = client.list_offsets({p: spec for p in partitions})
    return {p.partition: result[p].result(timeout=TIMEOUT_S).offset for p in partitions}


def earliest_offsets(where: str | KafkaAccess, topic: str) -> dict[int, int]:
    """Each partition's earliest offset still on the broker."""
    return _offsets(where, topic, latest=False)


def latest_offsets(where: str | KafkaAccess, topic: str) -> dict[int, int]:
    """Each partition's next offset (how many records it ever had)."""
    return _offsets(where, topic, latest=True)


Record = bytes | None | tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, int]


def produce(where: str | KafkaAccess, topic: str, records: Iterable[Record]) -> int:
    """Send ``records`` (a value; ``(key, value)``; or ``(key, value, partition)``) and wait
    until the broker acknowledged all of them. Returns how many were sent."""
    producer = Producer(
        {
            **_config(where),
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 10_000,
        }
    )
    failures: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    count = 0
    for record in records:
        key: bytes | None = None
        partition: int | None = None
        if isinstance(record, tuple):
            key, value = record[0], record[1]
            if len(record) == 3:
                partition = record[2]
        else:
            value = record
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)  # the local queue is full: let deliveries drain it
        count += 1
    remaining = producer.flush(TIMEOUT_S)
    if remaining or failures:
        raise RuntimeError(
            f"producing to {topic}: {remaining} records unsent, failures {failures[:3]}"
        )
    return count
