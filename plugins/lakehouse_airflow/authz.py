"""Authorization by Airflow's auth manager: who may restore or accept data loss.

See ``lakehouse.authz`` for the design. Here is the Airflow side:

* ``permitted``: the rule, asked of the auth manager with the user object (never a name):
  the user may trigger the DAG (``is_authorized_dag`` POST on its runs) **and** may change
  the connection the action concerns (``is_authorized_connection`` PUT: ``lakehouse_spark``
  for a restore, ``lakehouse_kafka`` for going on past lost records). Whoever may repoint
  the jobs at another cluster or broker may rewind or skip their data; nobody else. With the
  simple auth manager that is the roles ``op`` and ``admin``; with FAB, the roles granted
  ``can_edit`` on Connections (and, per DAG, ``can_create`` on its DAG Runs).
* ``GrantMiddleware``: on the API server, a run request that needs a grant (``POST
  /api/v2/dags/<dag>/dagRuns``, which the UI's trigger form uses too) is checked against
  ``permitted`` and refused with 403, or given a grant in its run id. Backfills never get one.
* ``check_run``: in the task, the grant is verified again (``lakehouse.authz.verify_run``)
  and, where the auth manager can look the user up by name (the simple one), the
  permission too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakehouse import authz
from lakehouse.errors import NotAuthorized

if TYPE_CHECKING:
    from airflow.sdk import Context

SPARK_CONN_ID = "lakehouse_spark"
KAFKA_CONN_ID = "lakehouse_kafka"
CONNECTION_OF = {authz.RESTORE: SPARK_CONN_ID, authz.ACCEPT_DATA_LOSS: KAFKA_CONN_ID}

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_TRIGGER = re.compile(r"^/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?$")
_BACKFILL = re.compile(r"^/api/v2/backfills/?$")


def grant_key() -> bytes:
    """The grant key of this Airflow deployment (``[api_auth] jwt_secret``, derived)."""
    from airflow.configuration import conf

    return authz.derive_key(conf.get("api_auth", "jwt_secret", fallback="") or "")


def permitted(auth_manager: Any, user: Any, actions: list[str], dag_id: str) -> bool:
    """Whether Airflow's auth manager lets ``user`` take ``actions`` in a run of ``dag_id``."""
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        ConnectionDetails,
        DagAccessEntity,
        DagDetails,
    )

    if not auth_manager.is_authorized_dag(
        method="POST", access_entity=DagAccessEntity.RUN, details=DagDetails(id=dag_id), user=user
    ):
        return False
    return all(
        auth_manager.is_authorized_connection(
            method="PUT", details=ConnectionDetails(conn_id=CONNECTION_OF[action]), user=user
        )
        for action in actions
    )


def _token(scope: Scope) -> str | None:
    headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
    bearer = headers.get("authorization", "")
    if bearer.lower().startswith("bearer "):
        return bearer[7:].strip()
    for part in headers.get("cookie", "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == "_token":
            return value
    return None


class GrantMiddleware:
    """ASGI middleware of the API server: refuse or grant the run requests that need it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        trigger, backfill = _TRIGGER.match(path), _BACKFILL.match(path)
        if not trigger and not backfill:
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            request = None
        if not isinstance(request, dict):
            await self.app(scope, _replay(body), send)
            return
        if backfill:
            dag_id, conf = str(request.get("dag_id")), request.get("dag_run_conf") or {}
        else:
            dag_id, conf = trigger["dag_id"], request.get("conf") or {}  # type: ignore[index]
        actions = authz.privileged_actions(dag_id, conf if isinstance(conf, dict) else {})
        if not actions:
            await self.app(scope, _replay(body), send)
            return
        if backfill:
            await _refuse(send, f"{' and '.join(actions)} is refused in a backfill.")
            return
        problem, body = await self._grant(scope, dag_id, request, actions)
        if problem:
            await _refuse(send, problem)
            return
        await self.app(_with_length(scope, body), _replay(body), send)

    async def _grant(
        self, scope: Scope, dag_id: str, request: dict[str, Any], actions: list[str]
    ) -> tuple[str | None, bytes]:
        from airflow.api_fastapi.app import get_auth_manager

        auth_manager = get_auth_manager()
        token = _token(scope)
        try:
            user = await auth_manager.get_user_from_token(token) if token else None
        except Exception:
            user = None
        what = " and ".join(actions)
        if user is None:
            return f"{what} needs an authenticated user.", b""
        if not permitted(auth_manager, user, actions, dag_id):
            return (
                f"{what} is not permitted to {user.get_name()}: it needs a user whom Airflow "
                f"allows to trigger {dag_id} and to edit the connection "
                f"{', '.join(CONNECTION_OF[a] for a in actions)} (README, 'Who may do what').",
                b"",
            )
        base = str(request.get("dag_run_id") or f"manual__{datetime.now(UTC):%Y%m%dT%H%M%S%f}")
        request["dag_run_id"] = authz.granted_run_id(
            grant_key(), dag_id, base, user.get_name(), request.get("conf") or {}
        )
        return None, json.dumps(request).encode()


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _with_length(scope: Scope, body: bytes) -> Scope:
    headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
    return {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}


async def _refuse(send: Send, detail: str) -> None:
    body = json.dumps({"detail": f"[NotAuthorized] {detail}"}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _lookup_user(name: str) -> Any | None:
    """The user named ``name`` as the auth manager knows it, where it can say without a
    request (the simple auth manager's configured users); else None."""
    try:
        from airflow.api_fastapi.app import create_auth_manager

        manager = create_auth_manager()
    except Exception:
        return None
    users = getattr(manager, "get_users", None)
    if users is None:
        return None
    for user in users():
        if user.get_name() == name:
            return manager, user
    return manager, None


def check_run(context: Context) -> authz.Grant | None:
    """In the task: the run's grant, or None when it needs none; ``NotAuthorized`` else."""
    dag_run = context["dag_run"]
    run_type = getattr(dag_run, "run_type", "")
    grant = authz.verify_run(
        grant_key(),
        str(dag_run.dag_id),
        str(dag_run.run_id),
        getattr(dag_run, "triggering_user_name", None),
        getattr(dag_run, "conf", None),
        run_type=str(getattr(run_type, "value", run_type)),
        clear_number=int(getattr(dag_run, "clear_number", 0) or 0),
    )
    if grant is None:
        return None
    found = _lookup_user(grant.user)
    if found is not None:
        manager, user = found
        if user is None or not permitted(manager, user, list(grant.actions), grant.dag_id):
            raise NotAuthorized(
                f"{' and '.join(grant.actions)} was granted to {grant.user}, who is no longer "
                "permitted it."
            )
    return grant
