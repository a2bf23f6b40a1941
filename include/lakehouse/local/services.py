"""Local services as plain processes: a Spark standalone master and worker, a Kafka broker,
an S3 server.

Spark and Kafka are the services ``docker-compose.yaml`` runs as containers, started here
from the pyspark distribution and from Apache Kafka's jars in the local jar cache, so
development, tests and CI need no Docker. The S3 server is SeaweedFS (``weed mini``), built
once from source (``lakehouse.local.seaweedfs``). Each service keeps its pid, log and data under
``.services/`` (ignored by git); ``up`` waits until the service answers, ``down`` stops it
and its children.

The Kafka broker listens where ``LAKEHOUSE_KAFKA_BOOTSTRAP`` points (``127.0.0.1:9092`` by
default), its KRaft controller on the next port and a ``SASL_PLAINTEXT`` listener (PLAIN and
SCRAM) on the one after, for trying credentials the way a secured cluster asks for them.

The S3 server listens on 127.0.0.1:``LAKEHOUSE_S3_PORT`` (8333) and its internal master,
volume, filer and admin servers on the next four ports (each with a gRPC port 10000 above). It knows
one identity, made at the first start (``.services/s3/credentials.json``); anonymous requests
are refused. ``up`` creates the bucket ``lakehouse``.

    python -m lakehouse.local.services up spark|kafka|s3
    python -m lakehouse.local.services down spark|kafka|s3
    python -m lakehouse.local.services status
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lakehouse.errors import ConfigurationError, LakehouseError, S3Error
from lakehouse.fs import write_private
from lakehouse.jars import jar_dir, jar_files, pyspark_dir, resolve_all
from lakehouse.local import seaweedfs
from lakehouse.local.env import subprocess_env
from lakehouse.preflight import java_executable
from lakehouse.s3 import S3Client, S3Config
from lakehouse.settings import Settings

SPARK_MASTER_URL = "spark://127.0.0.1:7077"
SPARK_MASTER_UI_PORT = 8090
SPARK_WORKER_UI_PORT = 8091
# The local broker's SASL user for PLAIN; its password is made at the first start.
KAFKA_PLAIN_USER = "lakehouse"
# Written and deleted by `up s3` to prove the server takes writes.
S3_PROBE_KEY = "_lakehouse/up-probe"


@dataclass(frozen=True)
class Process:
    name: str
    argv: list[str]
    ready: Callable[[], bool]
    env: dict[str, str]
    timeout_s: float = 90.0
    # Ports it listens on: taken by another process, starting it would only fail obscurely.
    ports: tuple[int, ...] = ()
    # One-time work before the first start (after the port check), e.g. formatting storage.
    prepare: Callable[[], None] | None = None
    # Work once it answers, at every `up` (so idempotent), e.g. creating a bucket.
    after_ready: Callable[[], None] | None = None


def services_dir(settings: Settings) -> Path:
    return settings.project_dir / ".services"


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _pid_file(settings: Settings, name: str) -> Path:
    return services_dir(settings) / f"{name}.pid"


def _running_pid(settings: Settings, name: str) -> int | None:
    pid_file = _pid_file(settings, name)
    if not pid_file.exists():
        return None
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError, PermissionError):
        pid_file.unlink(missing_ok=True)
        return None
    return pid


def _start(settings: Settings, process: Process) -> float:
    """Start ``process`` unless it runs; wait until ready. Returns seconds waited."""
    t0 = time.monotonic()
    if _running_pid(settings, process.name) is not None and process.ready():
        if process.after_ready is not None:
            process.after_ready()
        return 0.0
    taken = [port for port in process.ports if _port_open(port)]
    if taken and _running_pid(settings, process.name) is None:
        raise ConfigurationError(
            f"{process.name}: port {', '.join(map(str, taken))} on 127.0.0.1 is taken by a "
            f"process that {settings.project_dir} did not start.",
            "Stop that process, or (for Kafka) set LAKEHOUSE_KAFKA_BOOTSTRAP to "
            "127.0.0.1:<a free port>; the broker also takes the next two ports (for S3: "
            "LAKEHOUSE_S3_PORT, the server takes the next four and each one 10000 above).",
        )
    if process.prepare is not None:
        process.prepare()
    log_path = services_dir(settings) / f"{process.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log_file:
        child = subprocess.Popen(
            process.argv,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=process.env,
            start_new_session=True,
        )
    _pid_file(settings, process.name).write_text(str(child.pid))
    while time.monotonic() - t0 < process.timeout_s:
        if child.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{process.name} exited with {child.returncode}:\n{tail}")
        if process.ready():
            if process.after_ready is not None:
                process.after_ready()
            return time.monotonic() - t0
        time.sleep(0.5)
    _stop(settings, process.name)
    raise RuntimeError(
        f"{process.name} did not become ready in {process.timeout_s:.0f}s; see {log_path}"
    )


def _stop(settings: Settings, name: str, timeout_s: float = 30.0) -> bool:
    pid = _running_pid(settings, name)
    if pid is None:
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            # Reap it if this process started it: a zombie would still answer kill(pid, 0).
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break
        except ChildProcessError:
            pass  # started by another process (`make spark-up`)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.3)
    else:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _pid_file(settings, name).unlink(missing_ok=True)
    return True


# -------------------------------------------------------------------------------- spark


def _spark_class() -> str:
    return str(pyspark_dir() / "bin" / "spark-class")


def _spark_workers_alive() -> int:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{SPARK_MASTER_UI_PORT}/json/", timeout=2
        ) as response:
            state = json.load(response)
    except OSError:
        return 0
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


def spark_processes(settings: Settings) -> list[Process]:
    java_executable()
    env = subprocess_env(settings, SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1")
    work_dir = services_dir(settings) / "spark-work"
    cores = os.environ.get("LAKEHOUSE_WORKER_CORES", str(os.cpu_count() or 2))
    memory = os.environ.get("LAKEHOUSE_WORKER_MEMORY", "3g")
    master = Process(
        "spark-master",
        [
            _spark_class(),
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            "7077",
            "--webui-port",
            str(SPARK_MASTER_UI_PORT),
        ],
        ready=lambda: _port_open(7077) and _port_open(SPARK_MASTER_UI_PORT),
        env=env,
    )
    worker = Process(
        "spark-worker",
        [
            _spark_class(),
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--webui-port",
            str(SPARK_WORKER_UI_PORT),
            "--cores",
            cores,
            "--memory",
            memory,
            "--work-dir",
            str(work_dir),
            SPARK_MASTER_URL,
        ],
        ready=lambda: _spark_workers_alive() > 0,
        env=env,
    )
    return [master, worker]


# -------------------------------------------------------------------------------- kafka


@dataclass(frozen=True)
class KafkaPorts:
    """Where the local broker listens: clients, its KRaft controller, SASL clients."""

    broker: int
    controller: int
    sasl: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker}"

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl}"


def kafka_ports(settings: Settings) -> KafkaPorts:
    """The local broker's ports, from ``LAKEHOUSE_KAFKA_BOOTSTRAP`` (default 9092)."""
    brokers = settings.kafka_brokers
    host, _, port = brokers.rpartition(":")
    if "," in brokers or host not in ("127.0.0.1", "localhost"):
        raise ConfigurationError(
            f"LAKEHOUSE_KAFKA_BOOTSTRAP={brokers} is not one broker on this machine; the local "
            "broker listens on 127.0.0.1:<port>.",
            "Unset LAKEHOUSE_KAFKA_BOOTSTRAP (127.0.0.1:9092) or set it to 127.0.0.1:<port>.",
        )
    return KafkaPorts(int(port), int(port) + 1, int(port) + 2)


def _kafka_process_name(ports: KafkaPorts) -> str:
    return f"kafka-{ports.broker}"


def kafka_dir(settings: Settings) -> Path:
    return services_dir(settings) / "kafka"


def kafka_plain_password(settings: Settings) -> str:
    """The password of the local broker's PLAIN user, made once and kept 0600."""
    path = kafka_dir(settings) / "plain-password"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, secrets.token_urlsafe(18))
    return path.read_text().strip()


def _kafka_properties(data_dir: Path, ports: KafkaPorts, plain_password: str) -> str:
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.bootstrap.servers=127.0.0.1:{ports.controller}",
            f"listeners=PLAINTEXT://{ports.bootstrap},CONTROLLER://127.0.0.1:{ports.controller},"
            f"SASL_PLAINTEXT://{ports.sasl_bootstrap}",
            f"advertised.listeners=PLAINTEXT://{ports.bootstrap},"
            f"SASL_PLAINTEXT://{ports.sasl_bootstrap}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map="
            "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT",
            # Clients of the SASL listener prove who they are; SCRAM users are added at run
            # time through the admin API (the tests do), the PLAIN user is fixed here.
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={plain} required "
            f'user_{KAFKA_PLAIN_USER}="{plain_password}";',
            f"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config={scram} required;",
            f"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={scram} required;",
            f"log.dirs={data_dir}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            # Tests shrink retention per topic; the broker must act on it within a second.
            "log.retention.check.interval.ms=500",
            "log.segment.delete.delay.ms=0",
            "auto.create.topics.enable=false",
            "",
        ]
    )


def _kafka_ready(bootstrap: str) -> bool:
    host, _, port = bootstrap.rpartition(":")
    if not _port_open(int(port), host):
        return False
    try:
        from confluent_kafka.admin import AdminClient

        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=2)
        return bool(metadata.brokers)
    except Exception:
        return False


def kafka_processes(settings: Settings) -> list[Process]:
    java = java_executable()
    jar_files(settings, "kafka")  # a named error if setup has not resolved them
    ports = kafka_ports(settings)
    # One folder per port: a KRaft log remembers its controller's address.
    base = kafka_dir(settings) / str(ports.broker)
    data_dir = base / "data"
    config = base / "server.properties"
    base.mkdir(parents=True, exist_ok=True)
    # The file holds the PLAIN user's password: readable by this user only.
    properties = _kafka_properties(data_dir, ports, kafka_plain_password(settings))
    write_private(config, properties, replace=True)
    classpath = f"{jar_dir(settings, 'kafka')}/*"
    jvm = [java, "-Xmx768m", "-Xms256m", "-cp", classpath]

    def format_storage() -> None:
        if (data_dir / "meta.properties").exists():
            return
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        subprocess.run(
            [
                *jvm,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(config),
                "--standalone",
            ],
            check=True,
            capture_output=True,
        )

    env = subprocess_env(settings)
    return [
        Process(
            _kafka_process_name(ports),
            [*jvm, "kafka.Kafka", str(config)],
            lambda: _kafka_ready(ports.bootstrap),
            env,
            120.0,
            ports=(ports.broker, ports.controller, ports.sasl),
            prepare=format_storage,
        )
    ]


# ----------------------------------------------------------------------------------- s3


@dataclass(frozen=True)
class S3Server:
    """The local S3 server: where it answers and the identity that may use it."""

    port: int
    credentials: seaweedfs.LocalCredentials

    @property
    def endpoint(self) -> str:
        return seaweedfs.endpoint_url(self.port)

    @property
    def internal_ports(self) -> tuple[int, int, int, int]:
        """SeaweedFS's master, volume, filer and admin HTTP ports."""
        return (self.port + 1, self.port + 2, self.port + 3, self.port + 4)

    @property
    def metrics_port(self) -> int:
        """Where the server's Prometheus metrics are (requests per S3 action, among others)."""
        return self.port + 5

    @property
    def ports(self) -> tuple[int, ...]:
        http = (self.port, *self.internal_ports)
        return (*http, *(p + 10000 for p in http), self.metrics_port)

    def config(self) -> S3Config:
        return S3Config(
            self.endpoint,
            self.credentials.access_key_id,
            self.credentials.secret_access_key,
            seaweedfs.REGION,
        )

    def client(self, timeout_s: float = 10.0) -> S3Client:
        return S3Client(self.config(), seaweedfs.BUCKET, timeout_s=timeout_s)

    def request_counts(self) -> dict[str, int]:
        """S3 requests served since the server started, per kind (GET, PUT, HEAD, LIST,
        DELETE, ...), from its Prometheus metrics: take two and subtract to count a run's."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        counts: dict[str, int] = {}
        for match in re.finditer(
            r'^SeaweedFS_s3_request_total\{[^}]*type="(\w+)"[^}]*\} (\S+)$', text, re.MULTILINE
        ):
            counts[match.group(1)] = counts.get(match.group(1), 0) + int(float(match.group(2)))
        return counts


def s3_server(settings: Settings) -> S3Server:
    """The local S3 server's port and credentials (made at the first call)."""
    credentials = seaweedfs.local_credentials(settings, create=True)
    assert credentials is not None
    return S3Server(seaweedfs.s3_port(), credentials)


def _s3_process_name(server: S3Server) -> str:
    return f"s3-{server.port}"


def _s3_identities(credentials: seaweedfs.LocalCredentials) -> str:
    # SeaweedFS's static identities file: with any identity configured, a request without
    # a valid signature is refused (no identity named "anonymous" is declared).
    return json.dumps(
        {
            "identities": [
                {
                    "name": "lakehouse",
                    "credentials": [
                        {
                            "accessKey": credentials.access_key_id,
                            "secretKey": credentials.secret_access_key,
                        }
                    ],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                }
            ]
        },
        indent=2,
    )


def _s3_ready(server: S3Server) -> bool:
    """A signed request gets an answer: HEAD of the bucket is 200, or 404 before it exists."""
    if not _port_open(server.port):
        return False
    try:
        server.client(timeout_s=5.0).bucket_exists()
    except S3Error:
        return False
    return True


def _s3_bucket_writable(server: S3Server) -> None:
    """Create the bucket if needed, then wait until an object can be written.

    After a restart the master refuses to place new data for a 15 s warm-up (three of its
    fixed 5 s pulses, not configurable) while the gateway already answers; a first write
    then hangs that long. A probe write makes `up` return only once writes are served.
    """
    client = server.client(timeout_s=60.0)
    if not client.bucket_exists():
        client.create_bucket()
    client.put(S3_PROBE_KEY, b"up")
    client.delete(S3_PROBE_KEY)


def s3_processes(settings: Settings) -> list[Process]:
    # Spark reaches the server through s3a: its jars come with the server.
    resolve_all(settings, ("s3",))
    server = s3_server(settings)
    weed = seaweedfs.weed_binary(settings)
    # One folder per port, as for Kafka: the filer and volume servers record their address.
    base = seaweedfs.s3_dir(settings) / str(server.port)
    data_dir = base / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    identities = base / "identities.json"
    write_private(identities, _s3_identities(server.credentials), replace=True)
    master, volume, filer, admin = server.internal_ports
    argv = [
        str(weed),
        # Its log to its output (the service's log file) only: by default it also writes
        # files of its own into /tmp, two per start, which nobody removes.
        "-logtostderr",
        "mini",
        f"-dir={data_dir}",
        # -ip is the address the parts advertise to each other; without it the master hands
        # out the machine's other address and the S3 gateway dials itself there.
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-s3.port={server.port}",
        f"-master.port={master}",
        f"-volume.port={volume}",
        f"-filer.port={filer}",
        # mini always runs its admin server (maintenance workers); without the UI it only
        # serves them, on loopback.
        f"-admin.port={admin}",
        f"-metricsPort={server.metrics_port}",
        f"-s3.config={identities}",
        # Only S3: no WebDAV, admin UI, Iceberg or Lance endpoints, no IAM API, no telemetry.
        "-webdav=false",
        "-admin.ui=false",
        "-admin.port.legacy=0",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-s3.iam=false",
        "-master.telemetry=false",
    ]
    return [
        Process(
            _s3_process_name(server),
            argv,
            lambda: _s3_ready(server),
            subprocess_env(settings),
            60.0,
            ports=server.ports,
            after_ready=lambda: _s3_bucket_writable(server),
        )
    ]


# ------------------------------------------------------------------------------ commands

SERVICES: dict[str, Callable[[Settings], list[Process]]] = {
    "spark": spark_processes,
    "kafka": kafka_processes,
    "s3": s3_processes,
}


def up(settings: Settings, service: str) -> float:
    """Start ``service`` (all its processes) unless running; returns seconds to ready."""
    return sum(_start(settings, process) for process in SERVICES[service](settings))


def down(settings: Settings, service: str) -> None:
    if service == "kafka":
        names = [_kafka_process_name(kafka_ports(settings))]
    elif service == "s3":
        names = [_s3_process_name(s3_server(settings))]
    else:
        names = ["spark-worker", "spark-master"]
    for name in names:
        _stop(settings, name)


def _owner_file(settings: Settings, service: str) -> Path:
    return services_dir(settings) / f"{service}.owner"


def claim(settings: Settings, service: str, pid: int) -> None:
    """Record that process ``pid`` (a test session) started ``service`` and will stop it."""
    _owner_file(settings, service).write_text(str(pid))


def release(settings: Settings, service: str) -> None:
    _owner_file(settings, service).unlink(missing_ok=True)


def left_behind(settings: Settings, service: str) -> bool:
    """Whether ``service`` was started by a process that died without stopping it (a test
    session killed mid-way): whoever starts it next may stop it. A service started by hand
    (``make kafka-up``) has no owner and is never left behind."""
    try:
        pid = int(_owner_file(settings, service).read_text().strip())
    except (FileNotFoundError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def is_up(settings: Settings, service: str) -> bool:
    if service == "spark":
        return _running_pid(settings, "spark-master") is not None and _spark_workers_alive() > 0
    if service == "s3":
        server = s3_server(settings)
        return _running_pid(settings, _s3_process_name(server)) is not None and _s3_ready(server)
    ports = kafka_ports(settings)
    return _running_pid(settings, _kafka_process_name(ports)) is not None and _kafka_ready(
        ports.bootstrap
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lakehouse-services")
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("service", nargs="?", choices=sorted(SERVICES))
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    services = [args.service] if args.service else sorted(SERVICES)
    for service in services:
        if args.command == "up":
            try:
                seconds = up(settings, service)
            except LakehouseError as exc:
                print(f"ERROR [{exc.code}] {exc}", file=sys.stderr)
                return 2
            where = SPARK_MASTER_URL
            if service == "kafka":
                ports = kafka_ports(settings)
                where = f"{ports.bootstrap} (SASL_PLAINTEXT on {ports.sasl_bootstrap})"
            elif service == "s3":
                where = f"{s3_server(settings).endpoint}, bucket {seaweedfs.BUCKET}"
            print(f"{service} is up at {where} (ready after {seconds:.1f}s)")
        elif args.command == "down":
            down(settings, service)
            print(f"{service} is down")
        else:
            print(f"{service}: {'up' if is_up(settings, service) else 'down'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
