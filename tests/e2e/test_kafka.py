"""Kafka as the source, against the real local broker (started by the ``kafka_broker``
fixture): the contract over runs and a killed run, offsets that aged out, partitions and
topics that appear, two topics, a missing topic, a dead broker, SASL credentials, and
Airflow reading the broker over SASL onto an ``s3a://`` root with only its connections.

Every test uses topics of its own, named with a random suffix, so tests never see each
other's records and can run against a broker that has been up for a long time.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import sqlite3
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lakehouse.kafka import brokers
from lakehouse.kafka.access import ACCESS_FILE_ENV, KafkaAccess
from lakehouse.local import kafka_dev
from lakehouse.local.env import subprocess_env
from lakehouse.local.services import KafkaPorts, S3Server
from lakehouse.s3 import split_uri
from lakehouse.sample_data import OrderEventGenerator
from lakehouse.settings import Settings
from tests.e2e.processes import descendants, processes
from tests.lake import Lake
from tests.oracle import comparable, expected_tables

pytestmark = pytest.mark.kafka


# --------------------------------------------------------------------------- helpers


@dataclass
class KafkaLake:
    """A lake whose bronze reads its own topic(s) on the local broker."""

    lake: Lake
    ports: KafkaPorts
    topic: str

    @property
    def bootstrap(self) -> str:
        return self.ports.bootstrap

    def create(self, topic: str | None = None, partitions: int = 1, **config: str) -> str:
        topic = topic or self.topic
        kafka_dev.create_topic(self.bootstrap, topic, partitions, config)
        return topic

    def produce(self, records: list, topic: str | None = None) -> int:
        return kafka_dev.produce(self.bootstrap, topic or self.topic, records)

    def lineage(self) -> Counter:
        """(topic, partition, offset) of every bronze row: each must appear once."""
        columns = ["kafka_topic", "kafka_partition", "kafka_offset"]
        return Counter(self.lake.rows("bronze/orders_events", columns))

    def run_log(self, *columns: str) -> list[tuple]:
        """Columns of the run log, oldest run first."""
        rows = self.lake.table("ops/run_log").orderBy("started_at").select(*columns).collect()
        return [tuple(row) for row in rows]


def keyed(lines: list[bytes]) -> list[tuple[bytes | None, bytes]]:
    """Events keyed by order id, as a producer keeps an order's events in one partition."""
    records = []
    for line in lines:
        try:
            key = str(json.loads(line)["order_id"]).encode()
        except (ValueError, KeyError, TypeError):
            key = None
        records.append((key, line))
    return records


def three_deliveries(
    kafka_lake: KafkaLake, seed: int, orders: int
) -> tuple[list[list[bytes]], list[datetime]]:
    """Three deliveries of order events into a new topic of two partitions, keyed, their
    Kafka timestamps (producer time) apart; returns them and the two instants between them.
    Pauses around each boundary, as the timestamps are the clock's."""
    kafka_lake.create(partitions=2)
    generator = OrderEventGenerator(seed=seed)
    deliveries = [generator.batch(orders) for _ in range(3)]
    bounds = []
    for i, lines in enumerate(deliveries):
        if i:
            time.sleep(0.05)
            bounds.append(datetime.now(UTC))
            time.sleep(0.05)
        kafka_lake.produce(keyed(lines))
    return deliveries, bounds


def offsets(partitions: dict[int, int], topic: str) -> Counter:
    return Counter((topic, p, o) for p, n in partitions.items() for o in range(n))


@pytest.fixture
def kafka_lake(lake: Lake, kafka_broker: KafkaPorts) -> KafkaLake:
    topic = f"orders.events.{uuid.uuid4().hex[:10]}"
    mp = lake.monkeypatch
    mp.setenv("LAKEHOUSE_ORDERS_SOURCE", "kafka")
    mp.setenv("LAKEHOUSE_KAFKA_BOOTSTRAP", kafka_broker.bootstrap)
    mp.setenv("LAKEHOUSE_ORDERS_KAFKA_TOPICS", topic)
    mp.delenv("LAKEHOUSE_ORDERS_KAFKA_TOPIC_PATTERN", raising=False)
    mp.delenv(ACCESS_FILE_ENV, raising=False)
    return KafkaLake(lake, kafka_broker, topic)


# ----------------------------------------------------------------- against the broker


@pytest.mark.parametrize("lake", ["local", "s3"], indirect=True)
def test_contract_holds_over_runs_and_a_killed_run(kafka_lake: KafkaLake) -> None:
    lake = kafka_lake.lake
    kafka_lake.create(partitions=3)
    generator = OrderEventGenerator(seed=41)
    delivered: list[bytes | None] = []

    # Run 1: a first delivery, every layer.
    first = generator.batch(60)
    kafka_lake.produce(keyed(first))
    delivered += first
    lake.run_all()
    assert lake.contract_view() == comparable(expected_tables(delivered))

    # Run 2: a backlog in small micro-batches; the driver is killed after its second batch.
    # Message values are records whatever they hold: empty, blank, a lone \r, no value.
    second = generator.batch(150) + generator.flush_late() + [b"", b"  ", b"\r", None]
    kafka_lake.produce([*keyed([v for v in second if v is not None]), (b"tombstone", None)])
    delivered += second
    process = lake.submit("orders", "bronze", "--max-offsets-per-trigger", "40")
    seen = lake.read_until(process, "batch 1:")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    killed_at = sum(kafka_lake.lineage().values())
    assert len(first) < killed_at < len(delivered), "".join(seen[-20:])

    # Run again: the rest arrives, nothing twice.
    lake.run_all()
    assert lake.contract_view() == comparable(expected_tables(delivered))
    lineage = kafka_lake.lineage()
    assert set(lineage.values()) == {1}, "an offset landed twice"
    assert sum(lineage.values()) == len(delivered)
    assert {p for _, p, _ in lineage} == {0, 1, 2}
    tombstones = lake.rows("bronze/orders_events", ["raw_value", "raw_bytes", "kafka_key"])
    assert [r for r in tombstones if r[0] is None] == [(None, None, "tombstone")]


def test_offsets_that_aged_out_stop_bronze_with_a_named_error(kafka_lake: KafkaLake) -> None:
    lake = kafka_lake.lake
    kafka_lake.create(partitions=1)
    kafka_lake.produce([b'{"n": %d}' % i for i in range(10)])
    assert lake.run("bronze") == 0
    version = lake.version("bronze/orders_events")

    # 10..19 arrive and age out unread: retention drops to 100 ms (the broker checks every
    # 500 ms) until the partition is empty, then goes back to a week; 20 arrives after.
    kafka_lake.produce([b'{"n": %d}' % i for i in range(10, 20)])
    kafka_dev.alter_topic_config(kafka_lake.bootstrap, kafka_lake.topic, {"retention.ms": "100"})
    deadline = time.monotonic() + 60
    while kafka_dev.earliest_offsets(kafka_lake.bootstrap, kafka_lake.topic) != {0: 20}:
        assert time.monotonic() < deadline, "the broker did not delete the old records"
        time.sleep(0.25)
    week_ms = str(7 * 24 * 3600 * 1000)
    kafka_dev.alter_topic_config(kafka_lake.bootstrap, kafka_lake.topic, {"retention.ms": week_ms})
    kafka_lake.produce([b'{"n": 20}'])

    # The pre-flight check names the lost range before the query starts.
    assert lake.run("bronze") == 2
    errors = [e for (e,) in kafka_lake.run_log("error") if e]
    assert errors[-1].startswith(
        f"KafkaOffsetsLost: Records of topic {kafka_lake.topic} aged out of Kafka before "
        f"bronze read them: {kafka_lake.topic}[0] offsets 10..19 (10 records;"
    ), errors[-1]
    assert "accept_data_loss=true" in errors[-1]
    assert lake.version("bronze/orders_events") == version

    # Without the pre-flight check, Spark's own failOnDataLoss stops it: the same error.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(brokers, "check_offsets", lambda *a, **k: brokers.PreflightReport(1, 11, [], 0))
        assert lake.run("bronze") == 2
    errors = [e for (e,) in kafka_lake.run_log("error") if e]
    assert errors[-1].startswith("KafkaOffsetsLost: Spark stopped reading Kafka"), errors[-1]
    assert f"{kafka_lake.topic}-0" in errors[-1]
    assert lake.version("bronze/orders_events") == version

    # A run told to accept the loss reads what is left and records what it skipped.
    assert lake.run("bronze", "--accept-data-loss", *lake.granted("accept_data_loss")) == 0
    values = sorted(r[0] for r in lake.rows("bronze/orders_events", ["raw_value"]))
    assert values == sorted([f'{{"n": {i}}}' for i in range(10)] + ['{"n": 20}'])
    status, details_json = kafka_lake.run_log("status", "details")[-1]
    assert status == "succeeded"
    details = json.loads(details_json)
    assert details["kafka_lost_offsets_accepted"] == [
        f"{kafka_lake.topic}[0] offsets 10..19 (10 records; the earliest left is 20)"
    ]


def test_two_topics_a_pattern_and_what_appears_later(kafka_lake: KafkaLake) -> None:
    lake, mp = kafka_lake.lake, kafka_lake.lake.monkeypatch
    prefix = kafka_lake.topic
    a, b, c, other = (f"{prefix}.{s}" for s in ("a", "b", "c", "other"))
    # A second lake reads the topics by pattern, and starts before any of them exists:
    # nothing to read is not an error.
    by_pattern = Lake(lake.spark, lake.settings.with_root(lake.root.parent / "lake2"), mp)
    mp.delenv("LAKEHOUSE_ORDERS_KAFKA_TOPICS")
    mp.setenv("LAKEHOUSE_ORDERS_KAFKA_TOPIC_PATTERN", rf"{prefix.replace('.', '[.]')}[.](a|b|c)")
    assert by_pattern.run("bronze") == 0
    assert by_pattern.table("bronze/orders_events").count() == 0

    kafka_lake.create(a, partitions=1)
    kafka_lake.create(b)
    kafka_lake.create(other)
    kafka_lake.produce([b'{"t": "a%d"}' % i for i in range(6)], a)
    kafka_lake.produce([b'{"t": "b%d"}' % i for i in range(3)], b)
    kafka_lake.produce([b'{"t": "x"}'], other)

    # Two topics by name into one bronze table.
    mp.delenv("LAKEHOUSE_ORDERS_KAFKA_TOPIC_PATTERN")
    mp.setenv("LAKEHOUSE_ORDERS_KAFKA_TOPICS", f"{a},{b}")
    assert lake.run("bronze") == 0
    by_topic = Counter(t for (t,) in lake.rows("bronze/orders_events", ["kafka_topic"]))
    assert by_topic == {a: 6, b: 3}

    # By pattern: the topics that appeared since the first run are read from their start.
    mp.delenv("LAKEHOUSE_ORDERS_KAFKA_TOPICS")
    mp.setenv("LAKEHOUSE_ORDERS_KAFKA_TOPIC_PATTERN", rf"{prefix.replace('.', '[.]')}[.](a|b|c)")
    assert by_pattern.run("bronze") == 0
    # Then partitions are added to a, and a new topic c matches: all read from their start.
    kafka_dev.add_partitions(kafka_lake.bootstrap, a, 3)
    kafka_lake.create(c)
    kafka_lake.produce(
        [(None, b'{"t": "a-p%d-%d"}' % (p, i), p) for p in (0, 1, 2) for i in range(2)], a
    )
    kafka_lake.produce([b'{"t": "c%d"}' % i for i in range(2)], c)
    assert by_pattern.run("bronze") == 0
    lineage = Counter(
        by_pattern.rows("bronze/orders_events", ["kafka_topic", "kafka_partition", "kafka_offset"])
    )
    assert lineage == offsets({0: 8, 1: 2, 2: 2}, a) + offsets({0: 3}, b) + offsets({0: 2}, c)


def test_a_kafka_replay_adds_only_what_bronze_misses_and_refuses_a_range_that_is_gone(
    kafka_lake: KafkaLake,
) -> None:
    lake = kafka_lake.lake
    # Three deliveries, their Kafka timestamps apart: the middle one is replayed later.
    deliveries, bounds = three_deliveries(kafka_lake, seed=53, orders=15)
    delivered = [line for lines in deliveries for line in lines]
    assert lake.run("bronze") == 0
    complete = kafka_lake.lineage()
    assert sum(complete.values()) == len(delivered)

    # Rows of the middle delivery go missing from bronze (a bad manual fix, say).
    bronze = lake.settings.path("bronze/orders_events")
    start, end = (b.isoformat() for b in bounds)
    window = f"kafka_timestamp >= '{start}' AND kafka_timestamp < '{end}'"
    lake.spark.sql(f"DELETE FROM delta.`{bronze}` WHERE {window}")
    assert sum(kafka_lake.lineage().values()) == len(delivered) - len(deliveries[1])

    replay = (
        "--kafka-replay-from",
        bounds[0].isoformat(),
        "--kafka-replay-to",
        bounds[1].isoformat(),
    )
    assert lake.run("bronze", *replay) == 0
    assert kafka_lake.lineage() == complete, "each offset exactly once again"
    details = json.loads(kafka_lake.run_log("details")[-1][0])["kafka_replay"]
    middle = len(deliveries[1])
    assert (details["records_read"], details["rows_added"]) == (middle, middle)

    # Again: the range is read, nothing is added.
    assert lake.run("bronze", *replay) == 0
    assert kafka_lake.lineage() == complete
    details = json.loads(kafka_lake.run_log("details")[-1][0])["kafka_replay"]
    assert (details["records_read"], details["rows_added"]) == (middle, 0)
    for layer in ("silver", "gold"):
        assert lake.run(layer) == 0
    assert lake.contract_view() == comparable(expected_tables(delivered))

    # The partitions age out; a replay that starts before what is left is refused up front.
    kafka_dev.alter_topic_config(kafka_lake.bootstrap, kafka_lake.topic, {"retention.ms": "100"})
    latest = kafka_dev.latest_offsets(kafka_lake.bootstrap, kafka_lake.topic)
    deadline = time.monotonic() + 60
    while kafka_dev.earliest_offsets(kafka_lake.bootstrap, kafka_lake.topic) != latest:
        assert time.monotonic() < deadline, "the broker did not delete the old records"
        time.sleep(0.25)
    week_ms = str(7 * 24 * 3600 * 1000)
    kafka_dev.alter_topic_config(kafka_lake.bootstrap, kafka_lake.topic, {"retention.ms": week_ms})
    kafka_lake.produce([(b"late", b'{"n": 1}', 0)])
    version = lake.version("bronze/orders_events")
    assert lake.run("bronze", *replay) == 2
    error = [e for (e,) in kafka_lake.run_log("error") if e][-1]
    assert error.startswith(
        f"KafkaReplayUnavailable: Refused to replay: {kafka_lake.topic}[0] no longer holds "
        f"offsets 0..{latest[0] - 1}, and records from {bounds[0].isoformat()} may have been"
    ), error
    assert lake.version("bronze/orders_events") == version, "refused before the stream ran"


def scram_user(kafka_lake: KafkaLake, mechanism: str) -> tuple[str, str]:
    """A new SCRAM user on the broker, with a canary password: (user, password)."""
    user, password = f"user-{uuid.uuid4().hex[:6]}", f"canary-{secrets.token_hex(12)}"
    kafka_dev.upsert_scram_user(kafka_lake.bootstrap, user, password, mechanism)
    return user, password


def scram_access(kafka_lake: KafkaLake, mechanism: str, user: str, password: str) -> KafkaAccess:
    return KafkaAccess(
        bootstrap_servers=kafka_lake.ports.sasl_bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        username=user,
        password=password,
    )


def test_a_missing_topic_a_dead_broker_or_a_bad_login_stops_bronze_with_a_named_error(
    kafka_lake: KafkaLake, tmp_path: Path
) -> None:
    lake, mp = kafka_lake.lake, kafka_lake.lake.monkeypatch
    assert lake.run("bronze") == 2  # the topic was never created
    kafka_lake.create()
    user, password = scram_user(kafka_lake, "SCRAM-SHA-512")
    wrong = scram_access(kafka_lake, "SCRAM-SHA-512", user, "not-" + password)
    mp.setenv(ACCESS_FILE_ENV, str(wrong.write(tmp_path / "wrong.json")))
    assert lake.run("bronze") == 2
    mp.delenv(ACCESS_FILE_ENV)
    mp.setenv("LAKEHOUSE_KAFKA_BOOTSTRAP", "127.0.0.1:1")
    t0 = time.monotonic()
    assert lake.run("bronze") == 2
    assert time.monotonic() - t0 < 60

    errors = [e for (e,) in kafka_lake.run_log("error")]
    assert [e.split(":", 1)[0] for e in errors] == [
        "KafkaTopicNotFound",
        "KafkaAuthenticationFailed",
        "SourceUnavailable",
    ], errors
    assert f"{kafka_lake.topic} does not exist on {kafka_lake.bootstrap}." in errors[0]
    assert f"as {user} (SCRAM-SHA-512) refused the login" in errors[1]
    assert "Authentication failed" in errors[1]
    assert "No Kafka broker answers at 127.0.0.1:1 over PLAINTEXT (waited 10s)" in errors[2]
    assert all("What to do:" in e for e in errors)
    assert not (lake.root / "bronze" / "orders_events").exists(), "a refused run wrote nothing"


def test_sasl_credentials_from_the_access_file_work_and_stay_hidden(
    kafka_lake: KafkaLake, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    lake = kafka_lake.lake
    kafka_lake.create()
    kafka_lake.produce([b'{"sasl": %d}' % i for i in range(3)])
    user, password = scram_user(kafka_lake, "SCRAM-SHA-256")
    path = scram_access(kafka_lake, "SCRAM-SHA-256", user, password).write(tmp_path / "access.json")
    assert path.stat().st_mode & 0o777 == 0o600
    lake.monkeypatch.setenv(ACCESS_FILE_ENV, str(path))
    assert lake.run("bronze") == 0
    assert lake.table("bronze/orders_events").count() == 3  # the credential works

    shown = capfd.readouterr()
    assert f"as {user} (SCRAM-SHA-256)" in shown.out
    leaks = {
        "output": password in shown.out + shown.err,
        "run log": password in repr(lake.rows("ops/run_log")),
        "lake files": any(
            password.encode() in p.read_bytes() for p in lake.root.rglob("*") if p.is_file()
        ),
    }
    assert leaks == dict.fromkeys(leaks, False)


def airflow_dags_test(
    settings: Settings,
    root: str,
    tmp_path: Path,
    connections: dict[str, dict[str, object]],
    drop: tuple[str, ...] = (),
    **env: str,
) -> tuple[subprocess.Popen[str], Path]:
    """``airflow dags test orders_pipeline`` on ``root`` with ``connections`` from a secrets
    backend (a file only its owner reads), task logs under ``tmp_path/logs`` and the tasks'
    temporary folder (returned with the process) under ``tmp_path``. Variables named or
    prefixed by ``drop`` are left out of its environment."""
    path = tmp_path / "connections.json"
    path.write_text(json.dumps(connections))
    path.chmod(0o600)
    task_tmp = tmp_path / "task-tmp"
    task_tmp.mkdir()
    environment = subprocess_env(
        settings,
        LAKEHOUSE_ROOT=root,
        AIRFLOW__SECRETS__BACKEND="airflow.secrets.local_filesystem.LocalFilesystemBackend",
        AIRFLOW__SECRETS__BACKEND_KWARGS=json.dumps({"connections_file_path": str(path)}),
        AIRFLOW__LOGGING__BASE_LOG_FOLDER=str(tmp_path / "logs"),
        TMPDIR=str(task_tmp),
        **env,
    )
    for key in [k for k in environment if k.startswith((*drop, "LAKEHOUSE_FAULT"))]:
        del environment[key]
    process = subprocess.Popen(
        ["airflow", "dags", "test", "orders_pipeline"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return process, task_tmp


@pytest.mark.slow
@pytest.mark.airflow
@pytest.mark.parametrize("lake", ["s3"], indirect=True)
def test_airflow_on_s3_reads_kafka_over_sasl_and_no_secret_shows_anywhere(
    kafka_lake: KafkaLake, s3_server: S3Server, tmp_path: Path
) -> None:
    """The whole DAG through Airflow and spark-submit as a deployment runs it: the root on
    ``s3a://`` and bronze reading Kafka over SASL, with nothing but the ``lakehouse_s3`` and
    ``lakehouse_kafka`` connections' credentials (from a secrets backend; no ``AWS_*`` and no
    broker address in any environment). The tables hold the contract. Three canaries, the S3
    secret key, the Kafka password and a secret Spark setting in LAKEHOUSE_SPARK_CONF (where a
    deployment puts an s3a key of its own), must not appear in the task logs, the rendered
    fields or XCom (Airflow's database), the command line or environment of any process
    Airflow starts (the Spark setting: in the environment of the job's processes; the worker's
    own environment is where it lives), the run log or any object of the lake, and the access
    and properties files must be gone afterwards."""
    from lakehouse.local import services
    from lakehouse.local.env import airflow_home

    lake = kafka_lake.lake
    settings = Settings.from_env()
    s3 = s3_server.config()
    kafka_password = services.kafka_plain_password(settings)
    kafka_lake.create(partitions=2)
    records = OrderEventGenerator(seed=43).batch(60)
    kafka_lake.produce(keyed(records))

    spark_canary = f"spark-canary-{secrets.token_hex(12)}"
    # An s3a key for another bucket: a secret setting that does not change this lake's access.
    spark_conf = {
        "spark.hadoop.fs.s3a.bucket.another-bucket.secret.key": spark_canary,
        "spark.executor.memory": "1g",
    }
    connections: dict[str, dict[str, object]] = {
        "lakehouse_kafka": {
            "conn_type": "generic",
            "host": kafka_lake.ports.sasl_bootstrap,
            "login": services.KAFKA_PLAIN_USER,
            "password": kafka_password,
            "extra": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"},
        },
        "lakehouse_s3": {
            "conn_type": "aws",
            "login": s3.access_key_id,
            "password": s3.secret_access_key,
            "extra": {"endpoint_url": s3.endpoint, "region_name": s3.region},
        },
    }
    canaries = (kafka_password, s3.secret_access_key, spark_canary)
    process, task_tmp = airflow_dags_test(
        settings,
        lake.settings.root,
        tmp_path,
        connections,
        # The connections are the only way in: they name the brokers and the S3 endpoint.
        drop=("AWS_", "LAKEHOUSE_S3_PORT", "LAKEHOUSE_KAFKA_BOOTSTRAP"),
        LAKEHOUSE_SPARK_CONF=json.dumps(spark_conf),
    )
    exposed: list[str] = []
    driver_submits: set[int] = set()

    def watch() -> None:
        # Airflow and everything it starts (not the S3 server or the broker, which know
        # their own secrets).
        while process.poll() is None:
            family = descendants(process.pid)
            for pid, (cmdline, environ) in processes().items():
                if pid not in family:
                    continue
                job = "SparkSubmit" in cmdline or "jobs/" in cmdline
                for index, canary in enumerate(canaries):
                    in_environ = canary.encode() in environ and (job or canary != spark_canary)
                    if canary in cmdline or in_environ:
                        exposed.append(f"{index}: {cmdline[:300]}")
                # The run's layers run in its shared driver (jobs/driver.py).
                if "jobs/driver.py" in cmdline and "SparkSubmit" in cmdline:
                    driver_submits.add(pid)
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    output, _ = process.communicate(timeout=1500)
    watcher.join(timeout=10)
    assert process.returncode == 0 and "state=success" in output, output[-6000:]
    assert lake.contract_view() == comparable(expected_tables(records))

    # The run went through the SASL listener and to S3 with the connections' logins...
    assert f"Kafka: {kafka_lake.ports.sasl_bootstrap} over SASL_PLAINTEXT as lakehouse (PLAIN)" in (
        output
    )
    assert f"S3: {s3.endpoint} as {s3.access_key_id} (connection lakehouse_s3)" in output
    assert driver_submits, "the process watcher never saw the run driver's spark-submit"
    # ...and their secrets are nowhere to be seen.
    database = b"".join(
        p.read_bytes() for p in airflow_home(settings).glob("airflow.db*") if p.is_file()
    )
    client = s3_server.client()
    lake_prefix = split_uri(lake.settings.root)[1]
    lake_objects = [client.get(key) or b"" for key in client.list(f"{lake_prefix}/")]

    def holds_a_secret(blobs: Iterable[bytes]) -> bool:
        return any(c.encode() in blob for blob in blobs for c in canaries)

    leaks = {
        "task output": holds_a_secret([output.encode()]),
        "task log files": holds_a_secret(
            p.read_bytes() for p in (tmp_path / "logs").rglob("*") if p.is_file()
        ),
        "Airflow database (XCom, rendered fields)": holds_a_secret([database]),
        "process command lines or environments": bool(exposed),
        "run log": holds_a_secret([repr(lake.rows("ops/run_log")).encode()]),
        "lake objects": holds_a_secret(lake_objects),
        "the access files, left behind": any(task_tmp.rglob("*-access.json")),
        "the Spark properties file, left behind": any(task_tmp.rglob("spark.properties")),
        "temporary files": holds_a_secret(
            p.read_bytes() for p in task_tmp.rglob("*") if p.is_file()
        ),
    }
    assert leaks == dict.fromkeys(leaks, False)
    assert len(lake_objects) > 20, "the lake's objects were searched"
    # The places searched are the right ones: they hold this run's summaries and fields.
    run_id = re.search(r"run_id=(manual__[^,\s]+)", output)
    assert run_id is not None
    with sqlite3.connect(airflow_home(settings) / "airflow.db") as db:
        summaries = dict(
            db.execute(
                "SELECT task_id, value FROM xcom WHERE dag_id = 'orders_pipeline' "
                "AND key = 'return_value' AND run_id = ?",
                (run_id.group(1),),
            ).fetchall()
        )
        fields = db.execute(
            "SELECT rendered_fields FROM rendered_task_instance_fields WHERE task_id = 'bronze' "
            "AND run_id = ?",
            (run_id.group(1),),
        ).fetchone()
    assert json.loads(summaries["bronze"])["rows_out"] == len(records)
    assert json.loads(summaries["silver"])["status"] == "succeeded"
    assert fields is not None


@pytest.mark.airflow
def test_the_operator_refuses_before_any_jvm_starts(kafka_lake: KafkaLake) -> None:
    """The operator's pre-flight check fails the task at once (no retry) and spark-submit
    never runs: here, for a topic that was never created."""
    lake = kafka_lake.lake
    result = subprocess.run(
        ["airflow", "tasks", "test", "orders_pipeline", "bronze"],
        env=subprocess_env(Settings.from_env(), LAKEHOUSE_ROOT=str(lake.root)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert "new_state=failed" in output, output[-3000:]
    assert (
        f"[KafkaTopicNotFound] Kafka topic {kafka_lake.topic} does not exist on "
        f"{kafka_lake.bootstrap}. What to do: Create the topic"
    ) in output
    assert "Spark-Submit cmd" not in output
    assert not lake.root.joinpath("ops").exists(), "no job ran, so no run was logged"


def test_a_replay_after_a_manual_delete_silver_had_read_is_exact(kafka_lake: KafkaLake) -> None:
    """Bronze loses rows silver had already judged (a manual DELETE): silver goes on (it
    skips the DELETE), the replay puts the rows back, and silver neither loses them nor
    quarantines them twice."""
    lake = kafka_lake.lake
    deliveries, bounds = three_deliveries(kafka_lake, seed=57, orders=20)
    delivered = [line for lines in deliveries for line in lines]
    lake.run_all()
    expected = comparable(expected_tables(delivered))
    assert lake.contract_view() == expected
    assert sum(expected["quarantine"].values()) > 0

    bronze = lake.settings.path("bronze/orders_events")
    start, end = (b.isoformat() for b in bounds)
    lake.spark.sql(
        f"DELETE FROM delta.`{bronze}` WHERE kafka_timestamp >= '{start}' AND "
        f"kafka_timestamp < '{end}'"
    )
    for layer in ("silver", "gold"):
        assert lake.run(layer) == 0, "the DELETE must not stop silver"
    view = lake.contract_view()
    assert {k: view[k] for k in ("quarantine", "silver", "gold")} == {
        k: expected[k] for k in ("quarantine", "silver", "gold")
    }
    replay = (
        "--kafka-replay-from",
        bounds[0].isoformat(),
        "--kafka-replay-to",
        bounds[1].isoformat(),
    )
    lake.run_all(*replay)
    assert lake.contract_view() == expected
    assert set(kafka_lake.lineage().values()) == {1}
