"""Who may restore a checkpoint or go on past lost Kafka records: grants, made by Airflow.

Two run requests can lose data on purpose: a checkpoint restore (``lakehouse_restore`` with
``dry_run`` false) and ``accept_data_loss``. Neither is allowed by a name: a name is what
anybody can claim (``USER=admin airflow dags trigger``). Instead:

1. **At the API server**, where Airflow knows the authenticated user, the plugin's middleware
   (``lakehouse_airflow.authz``) asks Airflow's auth manager whether that user may do it, and
   refuses the request (403) otherwise. A permitted run gets a **grant**: its run id ends in an
   HMAC over the DAG, the run id, the user, the privileged actions and the run's conf, keyed by
   a secret only Airflow's own components hold (derived from ``[api_auth] jwt_secret``).
2. **In the task**, the operator refuses a privileged run whose run id carries no valid grant
   (a run made by the CLI, the scheduler, another DAG, or with other params), one that was
   cleared (``clear_number`` > 0: whoever cleared it is unknown), and, where the auth manager
   can look the user up, a user who lost the permission since.
3. **In the job**, ``--accept-data-loss`` and a restore that changes anything need the grant
   the operator hands over in an owner-only file (``LAKEHOUSE_GRANT_FILE``), for this run id:
   the jobs refuse the flag from anywhere else.

This module is the part both sides share: no Airflow import.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lakehouse.errors import NotAuthorized
from lakehouse.fs import write_private

GRANT_FILE_ENV = "LAKEHOUSE_GRANT_FILE"
RESTORE_DAG = "lakehouse_restore"
RESTORE, ACCEPT_DATA_LOSS = "restore", "accept_data_loss"
# The run id of a granted run: <base>.g<32 hex digits>; Airflow's run id pattern allows it.
_GRANTED = re.compile(r"^(?P<base>.+)\.g(?P<sig>[0-9a-f]{32})$")


def privileged_actions(dag_id: str, conf: Mapping[str, Any] | None) -> list[str]:
    """The actions a run of ``dag_id`` with ``conf`` would take that need a grant."""
    conf = conf or {}
    actions = []
    if dag_id == RESTORE_DAG and conf.get("dry_run", True) is False:
        actions.append(RESTORE)
    if conf.get("accept_data_loss") is True:
        actions.append(ACCEPT_DATA_LOSS)
    return actions


def derive_key(secret: str) -> bytes:
    """The grant key, derived from a secret of Airflow's own components (never used raw)."""
    if not secret:
        raise NotAuthorized(
            "no key to sign or check grants: Airflow's [api_auth] jwt_secret is not set."
        )
    return hmac.new(secret.encode(), b"lakehouse-grant-v1", hashlib.sha256).digest()


def _signature(
    key: bytes, dag_id: str, base: str, user: str, actions: Sequence[str], conf: Mapping[str, Any]
) -> str:
    payload = json.dumps(
        [dag_id, base, user, sorted(actions), dict(conf)], sort_keys=True, default=str
    )
    return hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()[:32]


def granted_run_id(key: bytes, dag_id: str, base: str, user: str, conf: Mapping[str, Any]) -> str:
    """The run id that carries a grant for ``user``'s run of ``dag_id`` with ``conf``."""
    actions = privileged_actions(dag_id, conf)
    return f"{base}.g{_signature(key, dag_id, base, user, actions, conf)}"


@dataclass(frozen=True)
class Grant:
    """What was permitted, to whom, for which run (handed to the job in a file)."""

    dag_id: str
    run_id: str
    user: str
    actions: tuple[str, ...]

    def write(self, path: Path) -> Path:
        return write_private(path, json.dumps(asdict(self)))

    @classmethod
    def read(cls, path: str | Path) -> Grant:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls(data["dag_id"], data["run_id"], data["user"], tuple(data["actions"]))
        except (OSError, ValueError, KeyError, TypeError):
            raise NotAuthorized(f"{GRANT_FILE_ENV}={path} is not a readable grant.") from None


def verify_run(
    key: bytes,
    dag_id: str,
    run_id: str,
    user: str | None,
    conf: Mapping[str, Any] | None,
    *,
    run_type: str,
    clear_number: int,
) -> Grant | None:
    """The grant of a run, or None when it needs none; ``NotAuthorized`` when it needs one
    and has none that holds."""
    conf = conf or {}
    actions = privileged_actions(dag_id, conf)
    if not actions:
        return None
    what = " and ".join(actions)
    how = (
        "trigger a new run from the UI or the REST API as a user whom Airflow's auth manager "
        "allows it (README, 'Who may do what')"
    )
    if run_type != "manual":
        raise NotAuthorized(f"{what} is refused in a {run_type} run: {how}.")
    if clear_number:
        raise NotAuthorized(
            f"{what} is refused in a cleared run (cleared {clear_number} time(s), by somebody "
            f"Airflow does not name): {how}."
        )
    match = _GRANTED.match(run_id)
    if match is None or not user:
        raise NotAuthorized(
            f"{what} is refused: run {run_id} was not created through Airflow's API by a "
            f"permitted user (a CLI trigger names whoever it likes): {how}."
        )
    expected = _signature(key, dag_id, match["base"], user, actions, conf)
    if not hmac.compare_digest(expected, match["sig"]):
        raise NotAuthorized(
            f"{what} is refused: run {run_id}'s grant does not match its user or params: {how}."
        )
    return Grant(dag_id, run_id, user, tuple(actions))


def require_grant(action: str, run_id: str, env: Mapping[str, str] | None = None) -> Grant:
    """In a job: the grant the operator handed over for ``action`` in this run, or refuse."""
    env = os.environ if env is None else env
    path = env.get(GRANT_FILE_ENV)
    if not path:
        raise NotAuthorized(
            f"{action} needs a grant: run it through Airflow (the lakehouse_restore DAG, or a "
            "pipeline run with accept_data_loss), as a user Airflow allows it (README, 'Who "
            "may do what')."
        )
    grant = Grant.read(path)
    if action not in grant.actions or grant.run_id != run_id:
        raise NotAuthorized(
            f"the grant in {GRANT_FILE_ENV} is for {', '.join(grant.actions)} in run "
            f"{grant.run_id}, not {action} in run {run_id}."
        )
    return grant
