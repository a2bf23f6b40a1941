"""A real Airflow (API server, scheduler, DAG processor) in a scratch home: for the UI tests
and for `make bench`'s scheduled runs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakehouse.local.env import subprocess_env
from lakehouse.settings import Settings

PORT = 8080
API_ATTEMPTS = 5
# Airflow's answer to a database error it has no better name for (on SQLite: locked).
DATABASE_ERROR = re.compile(r'"reason":\s*"Database error"')


@dataclass
class AirflowServer:
    url: str
    home: Path
    env: dict[str, str]
    user: str = "admin"
    retry_wait_s: float = 2.0

    @property
    def password(self) -> str:
        return str(json.loads((self.home / "passwords.json").read_text())[self.user])

    def token(self) -> str:
        body = json.dumps({"username": self.user, "password": self.password}).encode()
        request = urllib.request.Request(
            f"{self.url}/auth/token", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return str(json.load(response)["access_token"])

    def api(self, method: str, path: str, payload: Any = None) -> Any:
        """One REST call. On SQLite, a write that meets the scheduler's (a backfill's or a
        DAG run's creation) waits for the database's busy timeout and fails, rolled back:
        Airflow answers 503 "Database is locked" for a backfill, and 500 "Database error"
        for a DAG run (its generic handler of database errors). Either is tried again, a few
        times, as any client of a 503 should."""
        for attempt in range(1, API_ATTEMPTS):
            try:
                return self._call(method, path, payload)
            except urllib.error.HTTPError as error:
                if not (
                    error.code == 503 or (error.code == 500 and DATABASE_ERROR.search(error.msg))
                ):
                    raise
                print(f"{method} {path}: {error.msg}; trying again ({attempt}/{API_ATTEMPTS - 1})")
                time.sleep(self.retry_wait_s * attempt)
        return self._call(method, path, payload)

    def _call(self, method: str, path: str, payload: Any) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            f"{self.url}/api/v2{path}",
            data,
            {"Content-Type": "application/json", "Authorization": f"Bearer {self.token()}"},
            method=method,
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                text = response.read()
        except urllib.error.HTTPError as error:
            # What the server said, in the error itself (its body can be read only once).
            error.msg = f"{error.msg}: {error.read().decode(errors='replace')[:300]}"
            raise
        return json.loads(text) if text else None

    def unpause(self, dag_id: str, deadline: float) -> None:
        """Unpause ``dag_id`` once the DAG processor has parsed it (by ``deadline``, a
        ``time.monotonic()``)."""
        while True:
            try:
                self.api("PATCH", f"/dags/{dag_id}?update_mask=is_paused", {"is_paused": False})
                return
            except urllib.error.HTTPError as error:
                if error.code != 404:
                    raise
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{dag_id} was not parsed in time") from None
                time.sleep(2)

    def wait_for_run(
        self, dag_id: str, run_id: str, timeout_s: float = 900, poll_s: float = 3
    ) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]
            if state in ("success", "failed"):
                return str(state)
            time.sleep(poll_s)
        raise TimeoutError(f"{dag_id} {run_id} did not finish in {timeout_s:.0f}s")


def _wait_http(url: str, timeout_s: float, processes: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for process in processes:
            if process.poll() is not None:
                raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(1)
    raise TimeoutError(f"{url} did not answer in {timeout_s:.0f}s")


@contextmanager
def airflow_server(
    home: Path, logs: Path, dags: Sequence[str] = ("orders_pipeline",), **env_overrides: str
) -> Iterator[AirflowServer]:
    """Migrate a fresh database in ``home`` and run the three services until the block ends.

    Only ``dags`` run: every DAG is paused when it is first parsed, and these are unpaused once
    they are. Another DAG would compete for the CPU and the table locks: the maintenance DAG
    on its schedule, and a pipeline scheduled by the assets of the one under test
    (``segment_sales_pipeline`` runs a Spark driver of its own whenever orders' silver
    changes)."""
    settings = Settings.from_env()
    home.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    env = subprocess_env(settings)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            "AIRFLOW__API__PORT": str(PORT),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{PORT}",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{PORT}/execution/",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            **env_overrides,
        }
    )
    subprocess.run(["airflow", "db", "migrate"], env=env, check=True, capture_output=True)
    processes: list[subprocess.Popen] = []
    url = f"http://127.0.0.1:{PORT}"

    def start(*service: str) -> None:
        log = open(logs / f"airflow-{service[0]}.log", "w")
        processes.append(
            subprocess.Popen(
                ["airflow", *service],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    try:
        # Tasks report to the API server: it must answer before the scheduler starts any.
        start("api-server", "--port", str(PORT))
        _wait_http(f"{url}/api/v2/monitor/health", 180, processes)
        start("scheduler")
        start("dag-processor")
        server = AirflowServer(url, home, env)
        deadline = time.monotonic() + 180
        for dag_id in dags:
            server.unpause(dag_id, deadline)
        yield server
    except BaseException:
        # The services' own account of what went wrong, before their scratch home goes.
        for path in sorted(logs.glob("airflow-*.log")):
            tail = path.read_text(errors="replace").splitlines()[-40:]
            print(f"--- last lines of {path.name}:", *tail, sep="\n", file=sys.stderr)
        raise
    finally:
        for process in processes:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
