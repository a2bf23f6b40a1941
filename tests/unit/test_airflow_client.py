"""The REST client of the UI tests and the bench: Airflow's 503 or 500 "Database error" on
SQLite (a backfill's or a DAG run's creation meeting a scheduler write, rolled back) is tried
again; any other error, or one that stays, is raised."""

from __future__ import annotations

import json
import threading
import urllib.error
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from lakehouse.local.airflow_server import API_ATTEMPTS, AirflowServer

# What Airflow 3 answers for a DAG run's insert that waited out SQLite's busy timeout.
DATABASE_DETAIL = {"reason": "Database error", "statement": "hidden", "orig_error": "hidden"}


class Airflow(BaseHTTPRequestHandler):
    """Answers the token request, then ``answers`` in turn for the REST calls."""

    answers: ClassVar[list[int]] = []
    calls: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/auth/token":
            self._reply(201, {"access_token": "t"})
            return
        type(self).calls.append(f"POST {self.path} {json.loads(body)}")
        code = type(self).answers.pop(0)
        answers = {503: {"detail": "Database is locked."}, 500: {"detail": DATABASE_DETAIL}}
        self._reply(code, answers.get(code, {"id": 7}))

    def _reply(self, code: int, payload: dict) -> None:
        text = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[AirflowServer]:
    (tmp_path / "passwords.json").write_text(json.dumps({"admin": "pw"}))
    Airflow.calls = []
    http = ThreadingHTTPServer(("127.0.0.1", 0), Airflow)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    try:
        yield AirflowServer(f"http://127.0.0.1:{http.server_port}", tmp_path, {}, retry_wait_s=0)
    finally:
        http.shutdown()


def test_a_locked_database_is_tried_again_with_the_same_request(server: AirflowServer) -> None:
    Airflow.answers = [503, 500, 200]
    assert server.api("POST", "/backfills", {"dag_id": "orders_pipeline"}) == {"id": 7}
    assert Airflow.calls == ["POST /api/v2/backfills {'dag_id': 'orders_pipeline'}"] * 3


def test_a_lock_that_stays_or_another_error_is_raised(server: AirflowServer) -> None:
    Airflow.answers = [503] * API_ATTEMPTS
    with pytest.raises(urllib.error.HTTPError) as locked:
        server.api("POST", "/backfills", {})
    assert locked.value.code == 503 and len(Airflow.calls) == API_ATTEMPTS

    for code in (409, 502):  # a conflict; a server error that is not the database's
        Airflow.calls, Airflow.answers = [], [code]
        with pytest.raises(urllib.error.HTTPError) as other:
            server.api("POST", "/backfills", {})
        assert other.value.code == code and len(Airflow.calls) == 1
