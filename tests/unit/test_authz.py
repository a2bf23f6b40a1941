"""Who may restore or accept data loss: Airflow's auth manager decides, by role, never by a
name; the task and the job check the grant again."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lakehouse import authz
from lakehouse.errors import NotAuthorized

KEY = authz.derive_key("jwt-secret-of-this-deployment")
RESTORE_CONF = {"pipeline": "orders", "layer": "silver", "backup_id": "latest", "dry_run": False}


def simple_user(name: str, role: str) -> Any:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return SimpleAuthManagerUser(username=name, role=role)


@pytest.fixture
def manager() -> Any:
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    return SimpleAuthManager()


@pytest.mark.parametrize(
    ("role", "allowed"), [("viewer", False), ("user", False), ("op", True), ("admin", True)]
)
def test_the_simple_auth_managers_roles_decide(manager: Any, role: str, allowed: bool) -> None:
    from lakehouse_airflow.authz import permitted

    user = simple_user("someone", role)
    for actions, dag_id in (
        (["restore"], "lakehouse_restore"),
        (["accept_data_loss"], "orders_pipeline"),
    ):
        assert permitted(manager, user, actions, dag_id) is allowed, (role, actions)


def test_only_requests_that_lose_data_need_a_grant() -> None:
    assert authz.privileged_actions("lakehouse_restore", RESTORE_CONF) == ["restore"]
    assert authz.privileged_actions("lakehouse_restore", {**RESTORE_CONF, "dry_run": True}) == []
    assert authz.privileged_actions("lakehouse_restore", {"pipeline": "orders"}) == []
    assert authz.privileged_actions("orders_pipeline", {"accept_data_loss": True}) == [
        "accept_data_loss"
    ]
    assert authz.privileged_actions("orders_pipeline", {"mode": "reprocess"}) == []


def verify(run_id: str, user: str | None, conf: dict, **kw: Any) -> authz.Grant | None:
    options = {"run_type": "manual", "clear_number": 0, **kw}
    return authz.verify_run(KEY, "lakehouse_restore", run_id, user, conf, **options)


def test_a_granted_run_passes_and_every_way_around_it_is_refused() -> None:
    run_id = authz.granted_run_id(KEY, "lakehouse_restore", "manual__1", "ops", RESTORE_CONF)
    grant = verify(run_id, "ops", RESTORE_CONF)
    assert grant == authz.Grant("lakehouse_restore", run_id, "ops", ("restore",))
    # USER=admin airflow dags trigger ...: a run id without a grant, whatever the name.
    with pytest.raises(NotAuthorized, match="not created through Airflow's API"):
        verify("manual__2026-01-01T00:00:00+00:00", "admin", RESTORE_CONF)
    # The grant of one user or of other params does not carry over.
    with pytest.raises(NotAuthorized, match="does not match"):
        verify(run_id, "admin", RESTORE_CONF)
    with pytest.raises(NotAuthorized, match="does not match"):
        verify(run_id, "ops", {**RESTORE_CONF, "backup_id": "20260101T000000000000Z"})
    with pytest.raises(NotAuthorized, match="does not match"):
        other = authz.derive_key("another deployment")
        verify(authz.granted_run_id(other, "lakehouse_restore", "m", "ops", RESTORE_CONF), "ops",
               RESTORE_CONF)  # fmt: skip
    # Clearing an admin's earlier task instance re-runs it for whoever cleared it.
    with pytest.raises(NotAuthorized, match="cleared run"):
        verify(run_id, "ops", RESTORE_CONF, clear_number=1)
    with pytest.raises(NotAuthorized, match="scheduled run"):
        verify(run_id, "ops", RESTORE_CONF, run_type="scheduled")
    # A dry run needs none.
    assert verify("manual__3", None, {**RESTORE_CONF, "dry_run": True}) is None
    with pytest.raises(NotAuthorized, match="jwt_secret"):
        authz.derive_key("")


def test_the_task_checks_the_grant_and_the_users_role_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lakehouse_airflow import authz as airflow_authz

    monkeypatch.setattr(airflow_authz, "grant_key", lambda: KEY)
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "ops:op,peter:viewer")
    conf = {"accept_data_loss": True}

    def context(user: str, run_id: str) -> Any:
        dag_run = SimpleNamespace(
            dag_id="orders_pipeline", run_id=run_id, triggering_user_name=user, conf=conf,
            run_type="manual", clear_number=0,
        )  # fmt: skip
        return {"dag_run": dag_run}

    run_id = authz.granted_run_id(KEY, "orders_pipeline", "manual__1", "ops", conf)
    grant = airflow_authz.check_run(context("ops", run_id))
    assert grant is not None and grant.actions == ("accept_data_loss",)
    # A grant made for a user whose role no longer allows it is refused.
    demoted = authz.granted_run_id(KEY, "orders_pipeline", "manual__2", "peter", conf)
    with pytest.raises(NotAuthorized, match="no longer permitted"):
        airflow_authz.check_run(context("peter", demoted))
    with pytest.raises(NotAuthorized, match="not created through"):
        airflow_authz.check_run(context("admin", "manual__3"))


def test_the_jobs_refuse_the_flags_without_the_grant_of_their_run(tmp_path: Path) -> None:
    with pytest.raises(NotAuthorized, match="needs a grant"):
        authz.require_grant("restore", "r1", {})
    path = authz.Grant("lakehouse_restore", "r1", "ops", ("restore",)).write(tmp_path / "g.json")
    env = {authz.GRANT_FILE_ENV: str(path)}
    assert authz.require_grant("restore", "r1", env).user == "ops"
    with pytest.raises(NotAuthorized, match="not restore in run r2"):
        authz.require_grant("restore", "r2", env)
    with pytest.raises(NotAuthorized, match="not accept_data_loss"):
        authz.require_grant("accept_data_loss", "r1", env)


@pytest.mark.parametrize(
    "argv",
    [
        ["--pipeline", "orders", "--restore", "silver", "--backup-id", "latest"],
    ],
)
def test_a_restore_without_a_grant_exits_2_before_spark(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from jobs import maintenance, runtime

    monkeypatch.delenv(authz.GRANT_FILE_ENV, raising=False)
    monkeypatch.setattr(runtime, "build_spark", lambda *a, **k: pytest.fail("Spark started"))
    assert maintenance.main([*argv, "--root", str(tmp_path / "lake")]) == 2
    assert "ERROR [NotAuthorized]" in capsys.readouterr().err


def test_a_bronze_run_accepting_data_loss_without_a_grant_exits_2_before_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from jobs import bronze, runtime

    monkeypatch.delenv(authz.GRANT_FILE_ENV, raising=False)
    monkeypatch.setattr(runtime, "build_spark", lambda *a, **k: pytest.fail("Spark started"))
    root = tmp_path / "lake"
    assert bronze.main(["--pipeline", "orders", "--root", str(root), "--accept-data-loss"]) == 2
    assert "ERROR [NotAuthorized]" in capsys.readouterr().err
    assert not root.exists()


# -- the API server's middleware --------------------------------------------------------------


class FakeApp:
    def __init__(self) -> None:
        self.bodies: list[dict] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        self.bodies.append(json.loads(message["body"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def call(app: Any, path: str, body: dict, token: str | None) -> tuple[int, dict]:
    headers = [(b"content-type", b"application/json")]
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    scope = {"type": "http", "method": "POST", "path": path, "headers": headers}
    raw = json.dumps(body).encode()
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    status = sent[0]["status"]
    payload = json.loads(sent[1].get("body") or b"{}")
    return status, payload


def test_the_middleware_grants_permitted_users_and_refuses_the_others(
    manager: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.api_fastapi import app as airflow_app

    from lakehouse_airflow import authz as airflow_authz

    users = {"t-admin": simple_user("admin", "admin"), "t-user": simple_user("bob", "user")}

    async def from_token(token: str) -> Any:
        return users[token]

    monkeypatch.setattr(manager, "get_user_from_token", from_token)
    monkeypatch.setattr(airflow_app, "get_auth_manager", lambda: manager)
    monkeypatch.setattr(airflow_authz, "grant_key", lambda: KEY)
    inner = FakeApp()
    app = airflow_authz.GrantMiddleware(inner)
    trigger = "/api/v2/dags/lakehouse_restore/dagRuns"

    status, payload = call(app, trigger, {"conf": RESTORE_CONF}, "t-user")
    assert status == 403 and "not permitted to bob" in payload["detail"]
    status, _ = call(app, trigger, {"conf": RESTORE_CONF}, None)
    assert status == 403
    assert inner.bodies == [], "a refused request never reaches Airflow"

    status, _ = call(app, trigger, {"conf": RESTORE_CONF, "dag_run_id": "r1"}, "t-admin")
    assert status == 200
    run_id = inner.bodies[-1]["dag_run_id"]
    assert verify(run_id, "admin", RESTORE_CONF) is not None
    # A request that loses nothing passes untouched, for anybody.
    dry = {"conf": {**RESTORE_CONF, "dry_run": True}}
    assert call(app, trigger, dry, "t-user")[0] == 200 and inner.bodies[-1] == dry
    # accept_data_loss in a pipeline run, and in a backfill (never granted).
    path = "/api/v2/dags/orders_pipeline/dagRuns"
    assert call(app, path, {"conf": {"accept_data_loss": True}}, "t-user")[0] == 403
    assert call(app, path, {"conf": {"accept_data_loss": True}}, "t-admin")[0] == 200
    backfill = {"dag_id": "orders_pipeline", "dag_run_conf": {"accept_data_loss": True}}
    assert call(app, "/api/v2/backfills", backfill, "t-admin")[0] == 403
