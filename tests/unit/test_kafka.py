"""Kafka without a broker: offset arithmetic, checkpoints, the connection's settings, topic
subscriptions, and Spark's data-loss failure under our name."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lakehouse.checkpoints import Checkpoint
from lakehouse.errors import CheckpointInconsistent, ConfigurationError, KafkaReplayUnavailable
from lakehouse.fs import LocalStorage
from lakehouse.kafka import offsets
from lakehouse.kafka.access import KafkaAccess
from lakehouse.kafka.offsets import ReplayRange, Watermarks
from lakehouse.registry import get_pipeline
from lakehouse.settings import Settings
from lakehouse.specs import KafkaSubscription

ORDERS = get_pipeline("orders")


def test_a_replay_plan_stays_below_the_checkpoint_and_refuses_what_may_be_gone() -> None:
    start = datetime(2026, 11, 2, tzinfo=UTC)
    brokers = {
        ("t", 0): Watermarks(0, 100),
        ("t", 1): Watermarks(0, 50),
        ("t", 2): Watermarks(0, 30),  # not read by the stream yet: the stream's
        ("t", 3): Watermarks(0, 10),  # no record in the range
    }
    first = {("t", 0): 20, ("t", 1): 40, ("t", 2): 0, ("t", 3): -1}
    after = {("t", 0): 60, ("t", 1): -1, ("t", 2): 10, ("t", 3): -1}
    read = {("t", 0): 80, ("t", 1): 45, ("t", 3): 10}
    assert offsets.replay_plan(brokers, first, after, read, start) == [
        ReplayRange("t", 0, 20, 60),
        ReplayRange("t", 1, 40, 45),  # 45..49 are the next stream run's
    ]
    aged = {**brokers, ("t", 0): Watermarks(20, 100)}  # 0..19 are gone: they may be in range
    with pytest.raises(KafkaReplayUnavailable, match=r"t\[0\] no longer holds offsets 0..19"):
        offsets.replay_plan(aged, first, after, read, start)
    later = {**first, ("t", 0): 21}  # offset 20 is older than the range: nothing is missing
    assert offsets.replay_plan(aged, later, after, read, start)[0] == ReplayRange("t", 0, 21, 60)
    assert offsets.offsets_json(offsets.replay_plan(brokers, first, after, read, start), "end") == (
        '{"t": {"0": 60, "1": 45}}'
    )


def test_lost_offsets_name_every_partition_and_range() -> None:
    brokers = {
        ("t", 0): Watermarks(120, 300),  # aged out: 100..119
        ("t", 1): Watermarks(0, 50),  # fine
        ("t", 2): Watermarks(0, 40),  # recreated: the checkpoint read up to 90
        ("t", 3): Watermarks(7, 9),  # added later, its first 7 records already gone
        ("t", 4): Watermarks(0, 5),  # added later, complete
    }
    start = {("t", 0): 100, ("t", 1): 50, ("t", 2): 90, ("u", 0): 12}
    assert offsets.lost_offsets(start, brokers) == [
        "t[0] offsets 100..119 (20 records; the earliest left is 120)",
        "t[2] ends at offset 40 but was already read up to 90: the topic was deleted and "
        "created again, or truncated",
        "t[3] offsets 0..6 (7 records; the earliest left is 7)",
        "u[0] is gone (read up to offset 12; whatever came after it is lost)",
    ]
    assert offsets.lost_offsets(None, brokers) == [], "a new stream starts at the earliest"


def write_checkpoint(folder: Path, files: dict[str, str]) -> Checkpoint:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return Checkpoint(LocalStorage(), str(folder))


def test_checkpoint_offsets_resume_after_the_last_committed_batch(tmp_path: Path) -> None:
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'
    files = {
        "sources/0/0": '\x00v1\n{"t":{"0":0}}',
        "offsets/0": f'v1\n{meta}\n{{"t":{{"0":10}}}}',
        "offsets/1": f'v1\n{meta}\n{{"t":{{"0":25,"1":3}}}}',  # planned, never committed
        "commits/0": 'v1\n{"nextBatchWatermarkMs":0}',
    }
    checkpoint = write_checkpoint(tmp_path / "a", files)
    assert offsets.checkpoint_offsets(checkpoint) == {("t", 0): 10}
    no_commit = {k: v for k, v in files.items() if not k.startswith("commits")}
    assert offsets.checkpoint_offsets(write_checkpoint(tmp_path / "b", no_commit)) == {("t", 0): 0}
    assert offsets.checkpoint_offsets(write_checkpoint(tmp_path / "c", {})) is None
    from_files = {**files, "offsets/0": f'v1\n{meta}\n{{"logOffset":3}}'}
    with pytest.raises(CheckpointInconsistent, match="written by another source"):
        offsets.checkpoint_offsets(write_checkpoint(tmp_path / "d", from_files))


def test_connection_fields_become_client_settings_without_showing_secrets() -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"
    access = KafkaAccess.from_connection(
        host="b1.example:9093,b2.example:9093",
        port=None,
        login="svc",
        password='p"a\\ss',
        extra={"sasl_mechanism": "SCRAM-SHA-256", "ssl_ca_pem": pem},
        bootstrap_override=None,
        default_bootstrap="127.0.0.1:9092",
    )
    assert access.security_protocol == "SASL_SSL"  # a login never travels in plain text
    assert access.spark_options() == {
        "kafka.bootstrap.servers": "b1.example:9093,b2.example:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="svc" password="p\\"a\\\\ss";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.certificates": pem,
        "kafka.ssl.endpoint.identification.algorithm": "https",
    }
    assert access.client_config()["sasl.password"] == 'p"a\\ss'
    assert access.client_config()["ssl.ca.pem"] == pem
    assert access.secrets == ('p"a\\ss',)
    assert "a\\ss" not in repr(access) and "a\\ss" not in access.describe()

    override = KafkaAccess.from_connection(
        host="b1.example",
        port=9093,
        login=None,
        password=None,
        extra={},
        bootstrap_override="127.0.0.1:19092",
        default_bootstrap="x:1",
    )
    assert override.bootstrap_servers == "127.0.0.1:19092"
    for login, extra, problem in [
        (None, {"security_protocol": "SASL_PLAINTEXT"}, "needs a login and a password"),
        ("u", {"sasl_mechanism": "GSSAPI"}, "sasl_mechanism 'GSSAPI' is not one of"),
        ("u", {"sasl_password": "x"}, "unknown extra fields ['sasl_password']"),
        (None, {"ssl_ca_pem": pem}, "['ssl_ca_pem'] need the SSL or SASL_SSL protocol"),
    ]:
        with pytest.raises(ConfigurationError, match=re.escape(problem)):
            KafkaAccess.from_connection(
                host="h:1",
                port=None,
                login=login,
                password=login and "secret-pw",
                extra=extra,
                bootstrap_override=None,
                default_bootstrap="x:1",
            )


def test_spark_data_loss_errors_get_the_named_error() -> None:
    message = (  # as Spark 4.1 words it
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: Some data may "
        "have been lost because they are not available in Kafka any more;\neither the data "
        "was aged out by Kafka or the topic may have been deleted before all the data in the"
        "\ntopic was processed.\nIf you don't want your streaming query to fail on such "
        "cases, set the source option failOnDataLoss to false.\nReason: Could not read "
        "records in offset [10, 21) for topic partition t-0\nwith consumer group g-executor. "
        "SQLSTATE: XXKST\n=== Streaming Query ===\nIdentifier: orders_bronze"
    )
    lost = offsets.from_spark_error(message)
    assert lost is not None and lost.code == "KafkaOffsetsLost"
    assert str(lost).startswith(
        "Spark stopped reading Kafka: Could not read records in offset [10, 21) for topic "
        "partition t-0 with consumer group g-executor. What to do: Nothing was written."
    )
    # A read inside a write task: the data loss is a cause, under the JVM's "Caused by:".
    wrapped = (
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
        "[TASK_WRITE_FAILED] Task failed while writing rows to file:/lake/bronze/orders_events."
        " SQLSTATE: 58030 SQLSTATE: XXKST\n=== Streaming Query ===\n"
        "org.apache.spark.sql.streaming.StreamingQueryException: ...\n\tat org.apache.spark."
        "Foo.bar(Foo.scala:1)\nCaused by: org.apache.spark.SparkException: [KAFKA_DATA_LOSS."
        "COULD_NOT_READ_OFFSET_RANGE] Some data may have been lost because they are not "
        "available in Kafka any more;\neither the data was aged out by Kafka or the topic may "
        "have been deleted before all the data in the\ntopic was processed.\nReason: Could "
        "not read records in offset [10, 21) for topic partition t-0\nwith consumer group "
        "g-executor.\n\tat org.apache.spark.sql.kafka010.KafkaExceptions(Foo.scala:2)\n"
    )
    lost = offsets.from_spark_error(wrapped)
    assert lost is not None
    assert str(lost).startswith(
        "Spark stopped reading Kafka: Could not read records in offset [10, 21) for topic "
        "partition t-0 with consumer group g-executor. What to do:"
    )
    assert offsets.from_spark_error("[DELTA_CONCURRENT_APPEND] ...") is None


def test_topic_subscriptions_are_checked() -> None:
    assert KafkaSubscription(("a.b", "c")).spark_options() == {"subscribe": "a.b,c"}
    assert KafkaSubscription(pattern=r"orders\..*").matches("orders.eu")
    assert not KafkaSubscription(pattern=r"orders\..*").matches("xorders.eu")
    assert not KafkaSubscription(pattern=r".*").matches("__consumer_offsets")
    for topics, pattern, problem in [
        ((), None, "exactly one"),
        (("a",), "a", "exactly one"),
        (("bad topic",), None, "not valid topic names"),
        ((), "(", "not a regular expression"),
    ]:
        with pytest.raises(ConfigurationError, match=problem):
            KafkaSubscription(topics, pattern)
    both = {"LAKEHOUSE_ORDERS_KAFKA_TOPICS": "a", "LAKEHOUSE_ORDERS_KAFKA_TOPIC_PATTERN": "a.*"}
    with pytest.raises(ConfigurationError, match="not both"):
        Settings.from_env({"LAKEHOUSE_ROOT": "/tmp/lake", **both}).pipeline(ORDERS)
    with pytest.raises(ConfigurationError, match="use host:port"):
        Settings.from_env({"LAKEHOUSE_ROOT": "/tmp/lake", "LAKEHOUSE_KAFKA_BOOTSTRAP": "kafka://b"})
    settings = Settings.from_env(
        {"LAKEHOUSE_ROOT": "/tmp/lake", "LAKEHOUSE_ORDERS_KAFKA_TOPICS": "a, b"}
    )
    assert settings.pipeline(ORDERS).subscription == KafkaSubscription(("a", "b"))
    default = Settings.from_env({"LAKEHOUSE_ROOT": "/tmp/lake"})
    assert default.pipeline(ORDERS).subscription == KafkaSubscription(("orders.events",))
