"""The write lease across processes that share nothing but the storage: the local S3 server.

Each driver is a process of its own (``tests/e2e/lease_worker.py``) posing as a process of
another machine, so the lease's same-machine shortcut stays out of the way and only what
holds across machines decides: exactly one of two drivers writes, 20 tries of 20; a holder
killed with SIGKILL is replaced within the lease time; a holder paused (SIGSTOP) past its
lease cannot commit when it wakes. The last test shows the same-machine shortcut: a driver
killed on this machine frees its lease at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from lakehouse.local import seaweedfs
from lakehouse.local.services import S3Server
from tests import PROJECT_DIR

LEASE_S = 6.0
Launch = Callable[..., "Worker"]


@dataclass
class Worker:
    """One lease worker and the lines it printed, each with when it arrived."""

    process: subprocess.Popen[str]
    lines: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append((time.time(), line.strip()))

    def wait_for(self, prefix: str, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for _, line in self.lines:
                if line.startswith(prefix):
                    return line
            if self.process.poll() is not None and not any(
                line.startswith(prefix) for _, line in self.lines
            ):
                time.sleep(0.2)  # the reader may still be behind
                if not any(line.startswith(prefix) for _, line in self.lines):
                    break
            time.sleep(0.05)
        raise AssertionError(f"no {prefix!r} from the worker: {self.output()}")

    def finish(self, timeout_s: float = 60.0) -> int:
        code = self.process.wait(timeout=timeout_s)
        time.sleep(0.1)
        return code

    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)


@pytest.fixture
def root(s3_server: S3Server) -> Iterator[str]:
    prefix = f"tests/{uuid.uuid4().hex[:12]}"
    yield f"s3a://{seaweedfs.BUCKET}/{prefix}/lake"
    client = s3_server.client()
    for key in client.list(f"{prefix}/"):
        client.delete(key)


@pytest.fixture
def start(s3_server: S3Server) -> Iterator[Launch]:
    config = s3_server.config()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LAKEHOUSE_"))}
    env.update(
        AWS_ENDPOINT_URL=config.endpoint,
        AWS_REGION=config.region,
        AWS_ACCESS_KEY_ID=config.access_key_id,
        AWS_SECRET_ACCESS_KEY=config.secret_access_key,
    )
    workers: list[Worker] = []

    def launch(root: str, name: str, *args: str, same_machine: bool = False) -> Worker:
        # Posing as another machine unless asked not to.
        machine_args = [] if same_machine else ["--machine", f"machine-of-{name}"]
        argv = [sys.executable, "-m", "tests.e2e.lease_worker", root, name, *machine_args, *args]
        process = subprocess.Popen(
            argv,
            cwd=PROJECT_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        workers.append(Worker(process))
        return workers[-1]

    yield launch
    for worker in workers:
        if worker.process.poll() is None:
            os.kill(worker.process.pid, signal.SIGCONT)
            worker.process.kill()
            worker.process.wait()


def committed_rows(s3_server: S3Server, root: str) -> list[tuple[str, int]]:
    from lakehouse.local.report import read_rows

    location = f"{root}/gold/lease_test"
    rows = read_rows(location, storage_options=s3_server.config().storage_options())
    return sorted((r["owner"], r["generation"]) for r in rows)


def test_of_two_drivers_exactly_one_writes_20_tries_of_20(
    s3_server: S3Server, root: str, start: Launch
) -> None:
    """Two processes try for the lease at the same moments, 20 times (a round every 2 s):
    each time exactly one takes it and commits, the other is refused."""
    launch = start
    begin = time.time() + 8.0  # both processes started and ready
    pair = [
        launch(root, side, "--rounds", "20", "--period", "2", "--start-at", f"{begin}")
        for side in ("a", "b")
    ]
    assert [worker.finish(timeout_s=180) for worker in pair] == [0, 0], pair[0].output()
    outcomes: dict[int, list[str]] = {}
    for worker in pair:
        for _, line in worker.lines:
            if line.startswith("ROUND"):
                _, n, outcome, *_ = line.split()
                outcomes.setdefault(int(n), []).append(outcome)
    assert {n: sorted(o) for n, o in outcomes.items()} == {
        n: ["COMMITTED", "REFUSED"] for n in range(20)
    }, [w.output() for w in pair]
    rows = committed_rows(s3_server, root)
    # One row per try, each from a new generation of the lease.
    assert sorted(g for _, g in rows) == list(range(1, 21))


def test_a_holder_killed_with_sigkill_is_replaced_within_the_lease_time(
    s3_server: S3Server, root: str, start: Launch
) -> None:
    launch = start
    holder = launch(root, "holder", "--hold-s", "120", "--lease-s", f"{LEASE_S}")
    taken = holder.wait_for("ACQUIRED")
    waiter = launch(root, "waiter", "--wait-s", "120", "--lease-s", f"{LEASE_S}")
    waiter.wait_for("READY")
    time.sleep(3)  # the holder renews; the waiter waits
    assert not any(line.startswith("ACQUIRED") for _, line in waiter.lines)
    os.kill(holder.process.pid, signal.SIGKILL)
    killed_at = time.time()
    replaced = waiter.wait_for("ACQUIRED", timeout_s=LEASE_S * 4)
    replaced_after_s = float(replaced.split()[2]) - killed_at
    assert waiter.finish() == 0, waiter.output()
    print(f"killed holder replaced after {replaced_after_s:.2f}s (lease {LEASE_S:.0f}s)")
    # Within the lease: its last heartbeat came before the kill; the storage's times are
    # whole seconds and the waiter looks four times a second, hence the 1.5 s.
    assert 0 < replaced_after_s <= LEASE_S + 1.5
    assert int(replaced.split()[1]) == int(taken.split()[1]) + 1
    assert committed_rows(s3_server, root) == [("waiter", 2)]


def test_a_paused_holder_cannot_commit_when_it_wakes(
    s3_server: S3Server, root: str, start: Launch
) -> None:
    launch = start
    holder = launch(root, "paused", "--hold-s", "4", "--lease-s", f"{LEASE_S}")
    holder.wait_for("ACQUIRED")
    os.kill(holder.process.pid, signal.SIGSTOP)
    stopped_at = time.time()
    successor = launch(root, "successor", "--wait-s", "120", "--lease-s", f"{LEASE_S}")
    successor.wait_for("COMMITTED", timeout_s=LEASE_S * 4)
    assert successor.finish() == 0, successor.output()
    time.sleep(max(0.0, stopped_at + LEASE_S + 1 - time.time()))
    os.kill(holder.process.pid, signal.SIGCONT)  # past its lease: it wakes up to commit
    assert holder.finish() == 2, holder.output()
    assert "ERROR [LeaseLost] the write lease of gold/lease_test (generation 1) was lost" in (
        holder.output()
    )
    assert "COMMITTED" not in holder.output()
    assert committed_rows(s3_server, root) == [("successor", 2)]


def test_a_holder_killed_on_this_machine_frees_its_lease_at_once(
    s3_server: S3Server, root: str, start: Launch
) -> None:
    launch = start
    holder = launch(root, "local-holder", "--hold-s", "120", "--lease-s", "60", same_machine=True)
    holder.wait_for("ACQUIRED")
    os.kill(holder.process.pid, signal.SIGKILL)
    killed_at = time.time()
    waiter = launch(root, "local-waiter", "--wait-s", "30", "--lease-s", "60", same_machine=True)
    replaced = waiter.wait_for("ACQUIRED", timeout_s=30)
    assert waiter.finish() == 0, waiter.output()
    # Not the 60 s of its lease: this machine's kernel says the holder is gone.
    assert float(replaced.split()[2]) - killed_at < 15
    assert committed_rows(s3_server, root) == [("local-waiter", 2)]
