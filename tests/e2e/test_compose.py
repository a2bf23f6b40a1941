"""docker-compose.yaml and docker/Dockerfile, checked without a Docker engine.

``tools/composecheck`` (Go) loads the compose file with compose-go, the library docker compose
itself uses (schema, interpolation, anchors, depends_on), and reads every Dockerfile a service
builds with BuildKit's parser and linter. It prints a JSON summary that names environment
variables but never prints their values. These tests hold that summary to the stack the README
promises. The first run downloads the Go modules (go.sum pins them) and compiles the tool; later
runs take about a second.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from lakehouse.local.env import MIN_HEARTBEAT_INTERVAL_S

PROJECT_DIR = Path(__file__).resolve().parents[2]  # the checkout (this file is in tests/e2e/)
TOOL_DIR = PROJECT_DIR / "tools" / "composecheck"
COMPOSE_FILE = PROJECT_DIR / "docker-compose.yaml"
GO_FALLBACK = Path("/usr/local/go/bin/go")

Summary = dict[str, Any]


def _go() -> str:
    go = shutil.which("go") or (str(GO_FALLBACK) if GO_FALLBACK.exists() else None)
    if go is None:
        pytest.fail(
            "Go (1.26 or newer) is needed to check docker-compose.yaml with tools/composecheck: "
            "install it (the official tarball into /usr/local/go, or your package manager's "
            "golang package) and put `go` on PATH."
        )
    return go


@pytest.fixture(scope="module")
def composecheck(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tool, built once (go.sum must be complete: the default -mod=readonly is kept)."""
    binary = tmp_path_factory.mktemp("composecheck") / "composecheck"
    result = subprocess.run(
        [_go(), "build", "-o", str(binary), "."],
        cwd=TOOL_DIR,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"go build failed:\n{result.stdout}{result.stderr}"
    return binary


def _run(binary: Path, compose_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), str(compose_file)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def stack(composecheck: Path) -> Summary:
    result = _run(composecheck, COMPOSE_FILE)
    assert result.returncode == 0, f"composecheck found problems:\n{result.stderr}"
    summary: Summary = json.loads(result.stdout)
    assert summary["problems"] == []
    return summary


def _by_command(stack: Summary, *words: str) -> list[str]:
    """Services whose command contains all ``words`` (in order, as whole arguments)."""
    found = []
    for name, service in stack["services"].items():
        command = service["command"]
        for i in range(len(command) - len(words) + 1):
            if tuple(command[i : i + len(words)]) == words:
                found.append(name)
                break
    return sorted(found)


def _one(names: list[str], what: str) -> str:
    assert len(names) == 1, f"expected one {what} service, found {names}"
    return names[0]


def _arg(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


@pytest.fixture(scope="module")
def roles(stack: Summary) -> dict[str, Any]:
    services = stack["services"]
    postgres = [n for n, s in services.items() if s["image"].startswith("postgres:")]
    kafka = [n for n, s in services.items() if s["image"].startswith("apache/kafka:")]
    return {
        "postgres": _one(postgres, "PostgreSQL"),
        "init": _one(_by_command(stack, "airflow", "db", "migrate"), "airflow db migrate"),
        "apiserver": _one(_by_command(stack, "airflow", "api-server"), "Airflow API server"),
        "scheduler": _one(_by_command(stack, "airflow", "scheduler"), "Airflow scheduler"),
        "dag_processor": _one(_by_command(stack, "airflow", "dag-processor"), "DAG processor"),
        "triggerer": _by_command(stack, "airflow", "triggerer"),
        "master": _one(_by_command(stack, "org.apache.spark.deploy.master.Master"), "Spark master"),
        "workers": _by_command(stack, "org.apache.spark.deploy.worker.Worker"),
        "kafka": _one(kafka, "Kafka broker"),
    }


def _airflow_services(roles: dict[str, Any]) -> list[str]:
    return [roles["apiserver"], roles["scheduler"], roles["dag_processor"], *roles["triggerer"]]


def test_the_promised_services_are_there(stack: Summary, roles: dict[str, Any]) -> None:
    assert roles["workers"], "at least one Spark worker"
    assert stack["services"][roles["postgres"]]["healthcheck"], "postgres needs a healthcheck"
    kafka_env = stack["services"][roles["kafka"]]["environment"]
    # KRaft: the broker is its own controller; no ZooKeeper anywhere.
    assert "KAFKA_PROCESS_ROLES" in kafka_env
    assert "KAFKA_CONTROLLER_QUORUM_VOTERS" in kafka_env
    assert not any("ZOOKEEPER" in name for name in kafka_env)
    assert stack["services"][roles["apiserver"]]["ports"], "the UI is published"


def test_airflow_waits_for_a_healthy_database_and_the_migration(
    stack: Summary, roles: dict[str, Any]
) -> None:
    services = stack["services"]
    init = services[roles["init"]]
    assert init["depends_on"][roles["postgres"]]["condition"] == "service_healthy"
    assert init["restart"] in ("", "no"), "the migration runs once"
    for name in _airflow_services(roles):
        depends_on = services[name]["depends_on"]
        assert depends_on.get(roles["postgres"], {}).get("condition") == "service_healthy", name
        assert (
            depends_on.get(roles["init"], {}).get("condition") == "service_completed_successfully"
        ), name


def test_airflow_points_jobs_at_the_spark_master_and_kafka(
    stack: Summary, roles: dict[str, Any]
) -> None:
    services = stack["services"]
    master_command = services[roles["master"]]["command"]
    master_port = int(_arg(master_command, "--port"))
    assert _arg(master_command, "--host") == roles["master"]
    for worker in roles["workers"]:
        assert f"spark://{roles['master']}:{master_port}" in services[worker]["command"]

    kafka_listeners = services[roles["kafka"]]["environment_refs"]["KAFKA_ADVERTISED_LISTENERS"]
    kafka_ports = {r["port"] for r in kafka_listeners if r["service"] == roles["kafka"]}

    api_port = services[roles["apiserver"]]["ports"][0]["target"]
    for name in [roles["init"], *_airflow_services(roles)]:
        refs = services[name]["environment_refs"]
        assert refs.get("LAKEHOUSE_SPARK_MASTER") == [
            {"service": roles["master"], "port": master_port, "scheme": "spark"}
        ], name
        bootstrap = refs.get("LAKEHOUSE_KAFKA_BOOTSTRAP")
        assert bootstrap and {r["service"] for r in bootstrap} == {roles["kafka"]}, name
        assert {r["port"] for r in bootstrap} <= kafka_ports, f"{name}: not an advertised port"
        # Airflow 3 task runners reach the API server for the Task Execution API.
        assert refs.get("AIRFLOW__CORE__EXECUTION_API_SERVER_URL") == [
            {"service": roles["apiserver"], "port": api_port, "scheme": "http"}
        ], name


def test_task_supervisors_notice_an_ended_task_as_the_local_ones_do(
    stack: Summary, roles: dict[str, Any]
) -> None:
    # LocalExecutor's supervisors run in the scheduler: with Airflow's default interval a
    # skipped layer could be held for 5 s after its 0.2 s of work.
    assert (
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL"
        in stack["services"][roles["scheduler"]]["environment"]
    )
    # The summary names variables without their values: the value from the file itself.
    scheduler = yaml.safe_load(COMPOSE_FILE.read_text())["services"][roles["scheduler"]]
    value = scheduler["environment"]["AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL"]
    assert value == MIN_HEARTBEAT_INTERVAL_S


def test_one_image_for_airflow_and_spark(stack: Summary, roles: dict[str, Any]) -> None:
    services = stack["services"]
    (dockerfile,) = stack["dockerfiles"]
    assert dockerfile["path"] == "docker/Dockerfile"
    assert dockerfile["warnings"] == []
    assert dockerfile["stages"][-1]["base"].startswith("apache/airflow:3.")
    built = {services[name]["image"] for name in dockerfile["services"]}
    assert len(built) == 1
    spark = [roles["master"], *roles["workers"]]
    assert {services[name]["image"] for name in spark} == built
    for name in spark:
        # The apache/airflow entrypoint runs `airflow <command>` for anything but bash and
        # python, so a Spark daemon in that image needs its own entrypoint.
        assert services[name]["entrypoint"], f"{name}: set an entrypoint for spark-class"


def test_tables_are_shared_by_drivers_and_executors(stack: Summary, roles: dict[str, Any]) -> None:
    services = stack["services"]

    def lake_mounts(name: str) -> set[str]:
        return {
            v["target"]
            for v in services[name]["volumes"]
            if v["type"] == "volume" and v["source"] == "lakehouse"
        }

    targets = [lake_mounts(name) for name in [*_airflow_services(roles), *roles["workers"]]]
    assert all(len(t) == 1 for t in targets) and len(set.union(*targets)) == 1, targets
    for name, service in services.items():
        # An empty SPARK_LOCAL_IP makes Java bind Spark to the loopback address.
        assert "SPARK_LOCAL_IP" not in service["environment"], name


SECRETS = {"POSTGRES_PASSWORD", "AIRFLOW_JWT_SECRET", "AIRFLOW_FERNET_KEY"}


def test_secrets_are_required_and_have_no_default(stack: Summary) -> None:
    # Policy: a secret (a variable named like PASSWORD/SECRET/TOKEN/FERNET/..., the password of
    # a URI such as the SQLAlchemy URL, or a "password" field in a JSON connection) may appear in
    # docker-compose.yaml only as a ${VAR:?message} interpolation: compose refuses to start
    # until it is set, so no usable secret ever ships in this file (a default would be one,
    # and an empty Fernet key stores connections unencrypted). composecheck reports literals as
    # problems (the `stack` fixture requires none); other variables keep a default.
    for name, service in stack["services"].items():
        unprotected = set(service["environment_secrets"]) - set(service["environment_interpolated"])
        assert not unprotected, f"{name}: {sorted(unprotected)}"
    variables = {v["name"]: v for v in stack["variables"]}
    assert SECRETS <= set(variables), sorted(variables)
    for name in SECRETS:
        assert variables[name]["required"] and not variables[name]["has_default"], name
    assert all(v["has_default"] or v["required"] for v in variables.values()), variables
    secret_holders = {
        name for name, service in stack["services"].items() if service["environment_secrets"]
    }
    assert secret_holders, "the database password at least is declared as a secret"


def test_ports_are_published_on_the_loopback_address_only(stack: Summary) -> None:
    published = [
        (name, port)
        for name, service in stack["services"].items()
        for port in service["ports"] or []
        if port.get("published")
    ]
    assert published, "the UI is published"
    assert all(port.get("host_ip") == "127.0.0.1" for _, port in published), published


# --- the tool itself catches what it should ------------------------------------------------

BAD_FILES = {
    "literal password": (
        "services:\n  db:\n    image: postgres:16\n"
        "    environment:\n      POSTGRES_PASSWORD: hunter2-literal\n",
        "POSTGRES_PASSWORD holds a literal secret",
    ),
    "password in a URL": (
        "services:\n  app:\n    image: busybox\n    environment:\n"
        "      DB_URL: postgresql://u:hunter2-literal@db/x\n",
        "DB_URL holds a literal secret",
    ),
    "variable without default": (
        "services:\n  db:\n    image: postgres:${PG_TAG}\n",
        "${PG_TAG} has no default",
    ),
    "secret with a default": (
        "services:\n  db:\n    image: postgres:16\n"
        "    environment:\n      POSTGRES_PASSWORD: ${PG_PASSWORD:-hunter2-literal}\n",
        "POSTGRES_PASSWORD holds a secret with a default",
    ),
    "unknown dependency": (
        "services:\n  app:\n    image: busybox\n    depends_on:\n      nope:\n"
        "        condition: service_healthy\n",
        "nope",
    ),
    "schema violation": (
        "services:\n  app:\n    image: busybox\n    imagee: busybox\n",
        "imagee",
    ),
    "healthy without a healthcheck": (
        "services:\n  a:\n    image: busybox\n  b:\n    image: busybox\n    depends_on:\n"
        "      a:\n        condition: service_healthy\n",
        "a has no healthcheck",
    ),
    "Dockerfile syntax": (
        "services:\n  app:\n    build: .\n",
        "Dockerfile",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_composecheck_rejects(case: str, composecheck: Path, tmp_path: Path) -> None:
    content, message = BAD_FILES[case]
    (tmp_path / "docker-compose.yaml").write_text(content)
    (tmp_path / "Dockerfile").write_text("FROM busybox\nRUN echo ok \\\nCOPY --chown= a\nBOGUS x\n")
    result = _run(composecheck, tmp_path / "docker-compose.yaml")
    assert result.returncode == 1, result.stdout + result.stderr
    assert message in result.stderr
    assert "hunter2-literal" not in result.stdout + result.stderr, "values are never printed"
