"""The task side of a pipeline run's warm driver (``jobs/driver.py``).

The layer tasks of one run (one Airflow DAG run, on one worker machine) share one Spark
driver: the first task starts it, each task sends it its job and gets the job's output and
exit code back, the run's last layer stops it. The driver listens on a Unix socket named
after the run (in Linux's abstract namespace: no file, no path-length limit, gone with the
process), and each side checks that the other runs as the same user; its output, process
group and start lock are files in a folder only this user can enter
(``lakehouse-drivers-<uid>`` in the temp folder). A driver removes its start lock when it
stops, so the folder keeps no file of a driver that stopped, but a failed one's output and a
killed one's files (until its name's next driver stops). A task on another machine does not
find it and starts its own.

With ``LAKEHOUSE_RUN_DRIVER_KEEP_S``, a driver is a pipeline DAG's rather than one run's: it
is named after the DAG and the settings it runs (a run with other settings or other code
starts a driver of its own, and the old one stops once nobody asks it), serves the DAG's runs
one after another, and stops when no run asked it for that long.

A request carries a fingerprint of the Spark settings the task would have submitted with
(master, settings, jars, code, the S3 access it was given): a driver started with others
refuses, and the task falls back to a ``spark-submit`` of its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from lakehouse.errors import ConfigurationError, DriverLost
from lakehouse.settings import Settings
from lakehouse.specs import Layer
from lakehouse.submit import SubmitSpec, job_path

# The jobs a driver runs: the layers (``jobs/<layer>.py``).
JOBS = tuple(str(layer) for layer in Layer)
START_TIMEOUT_S = 600


def protocol_line(message: Mapping[str, Any]) -> bytes:
    return (json.dumps(message) + "\n").encode()


def drivers_dir() -> Path:
    """This user's private folder of run drivers."""
    folder = Path(tempfile.gettempdir()) / f"lakehouse-drivers-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    if folder.stat().st_uid != os.getuid() or folder.stat().st_mode & 0o077:
        raise ConfigurationError(
            f"{folder} must belong to this user alone (mode 700): remove it, or set "
            "LAKEHOUSE_RUN_DRIVER_IDLE_S=0 to run every layer with its own spark-submit."
        )
    return folder


def fingerprint(parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def address(name: str) -> str:
    """The abstract Unix socket address of the driver called ``name``."""
    return f"\0lakehouse-driver-{os.getuid()}-{name}"


def driver_file(name: str, suffix: str) -> Path:
    """A file of the driver called ``name``: ``.log`` its own output (its JVM's; a job's goes
    to its task), removed when it stops in order; ``.pid`` its process group (for a task's
    ``on_kill``); ``.lock`` held while a task starts it (``start_lock``)."""
    return drivers_dir() / f"{name}{suffix}"


@contextlib.contextmanager
def start_lock(name: str) -> Iterator[None]:
    """Held while a task finds or starts the driver called ``name``: one task at a time.

    The lock file may be removed while a task waits for it (``remove_start_lock``): the
    waiter then holds a file that is no longer the path's, and takes the path's anew."""
    path = driver_file(name, ".lock")
    while True:
        with open(path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if _is_path_file(path, lock):
                yield
                return


def remove_start_lock(name: str) -> bool:
    """Remove the start lock of the driver called ``name`` (it stopped), unless a task holds
    it: that task is starting the next driver of the name, which removes it in turn. Whether
    it was removed."""
    path = driver_file(name, ".lock")
    try:
        with open(path, "rb") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not _is_path_file(path, lock):
                return False  # removed and taken anew since it was opened: another task's
            path.unlink()
            return True
    except (FileNotFoundError, BlockingIOError):
        return False


def _is_path_file(path: Path, file: IO[Any]) -> bool:
    """Whether the open ``file`` is still the one at ``path`` (not removed, or replaced)."""
    try:
        return os.stat(path).st_ino == os.fstat(file.fileno()).st_ino
    except FileNotFoundError:
        return False


def same_user(conn: socket.socket) -> bool:
    """Whether the process at the other end of ``conn`` runs as this user (``SO_PEERCRED``)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return bool(uid == os.getuid())


@dataclass(frozen=True)
class RunDriver:
    """The driver of one run: ``run_key`` names the run (DAG, run id); with ``keep_s``, the
    DAG's driver for the settings it runs, which outlives the run by up to ``keep_s``."""

    run_key: str
    fingerprint: str
    keep_s: int = 0

    @classmethod
    def of(cls, dag_id: str, run_id: str, fingerprint_: str, settings: Settings) -> RunDriver:
        """The driver a task of ``dag_id``'s run ``run_id`` uses."""
        if settings.run_driver_keep_s:
            return cls(f"{dag_id}@{fingerprint_}", fingerprint_, settings.run_driver_keep_s)
        return cls(f"{dag_id}/{run_id}", fingerprint_)

    @property
    def name(self) -> str:
        return fingerprint(self.run_key)[:24]

    @property
    def log_path(self) -> Path:
        return driver_file(self.name, ".log")

    def submit_spec(
        self, job: SubmitSpec, settings: Settings, pipeline: str, task_env: Iterable[str] = ()
    ) -> SubmitSpec:
        """``job``'s spark-submit turned into this driver's: the same settings, jars and
        code, ``jobs/driver.py`` as the application. ``task_env`` names the variables the
        starting task adds for its own job (its access files, its grant): the driver drops
        them once its session is up, so each job sees only the variables its task sends."""
        name = f"lakehouse-{pipeline}-run"
        return replace(
            job,
            application=job_path(settings, "driver"),
            args=(
                *("--driver", self.name, "--fingerprint", self.fingerprint),
                *("--idle-s", str(self.keep_s or settings.run_driver_idle_s), "--name", name),
                *("--task-env", ",".join(sorted(task_env))),
            ),
            name=name,
        )

    def _connect(self) -> socket.socket | None:
        return connect(self.name)

    @contextlib.contextmanager
    def _started(self, start: Callable[[Path], subprocess.Popen[bytes]]) -> Iterator[socket.socket]:
        """A connection to the driver, started with ``start(log_path)`` if none answers."""
        with start_lock(self.name):
            conn = self._connect() or self._wait_for(start(self.log_path))
        with conn:
            yield conn

    def _wait_for(self, process: subprocess.Popen[bytes]) -> socket.socket:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            conn = self._connect()
            if conn is not None:
                return conn
            if process.poll() is not None:
                raise DriverLost(
                    f"the run's Spark driver exited with code {process.returncode} before it "
                    f"served; its output:\n{self.log_tail()}"
                )
            time.sleep(0.2)
        process.kill()
        raise DriverLost(f"the run's Spark driver did not start in {START_TIMEOUT_S} s")

    def run(
        self,
        job: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        last: bool,
        start: Callable[[Path], subprocess.Popen[bytes]],
        out: Callable[[str], None],
    ) -> int | None:
        """Run ``job`` in the driver; its exit code, or None when the driver refused (other
        Spark settings: run it with a spark-submit of its own).

        A driver says it took a request before the job starts. One that went away without
        saying so never started the job (it stopped for being idle as the request came): the
        request goes once more, to a new driver. A kept driver (``keep_s``) goes on after the
        run's ``last`` layer, for the DAG's next run."""
        last = last and not self.keep_s
        request = {
            "job": job,
            "argv": list(argv),
            "env": dict(env),
            "last": last,
            "fingerprint": self.fingerprint,
        }
        for attempt in range(2):
            taken = False
            try:
                with self._started(start) as conn, conn.makefile("rb") as reader:
                    conn.sendall(protocol_line(request))
                    for raw in reader:
                        message = json.loads(raw)
                        if "taken" in message:
                            taken = True
                        elif "out" in message:
                            out(message["out"])
                        elif "exit" in message:
                            return int(message["exit"])
                        elif "refused" in message:
                            return None
            except ConnectionError:  # reset by a driver that stopped or died: its answer ends
                pass
            if taken or attempt:
                break
            out("the run's Spark driver stopped (idle) as this request came: starting a new one")
        raise DriverLost(
            f"the run's Spark driver went away while running {job} (killed, or its JVM "
            f"died); the task's retry starts a new one. Its last output:\n{self.log_tail()}"
        )

    def stop(self) -> bool:
        """Ask a running driver to stop (a run whose last layer had nothing to do; a kept
        driver waits for the DAG's next run instead)."""
        if self.keep_s:
            return False
        stopped = stop_driver(self.name)
        remove_start_lock(self.name)  # of a driver killed before it could remove it
        return stopped

    def kill(self) -> None:
        """Stop the driver's process group at once (the task was killed)."""
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.killpg(int(driver_file(self.name, ".pid").read_text()), signal.SIGTERM)

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no output)"


def connect(name: str) -> socket.socket | None:
    """A connection to the driver called ``name``, if one listens."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(address(name))
    except OSError:
        conn.close()
        return None
    if not same_user(conn):
        conn.close()
        raise ConfigurationError(
            f"another user's process listens on this run's driver address "
            f"({address(name)[1:]}); nothing was sent to it. Find it with `ss -xlp`, "
            "or set LAKEHOUSE_RUN_DRIVER_IDLE_S=0 to run every layer with its own "
            "spark-submit."
        )
    return conn


def stop_driver(name: str) -> bool:
    """Ask the driver called ``name`` to stop once its job (if any) is done; whether one
    answered."""
    conn = connect(name)
    if conn is None:
        return False
    with conn, conn.makefile("rb") as reader:
        conn.sendall(protocol_line({"stop": True}))
        reader.readline()
    return True


def stop_all() -> list[str]:
    """Stop every driver of this user on this machine (kept ones included); their names."""
    return [p.stem for p in sorted(drivers_dir().glob("*.pid")) if stop_driver(p.stem)]


def start(argv: Sequence[str], env: Mapping[str, str], log_file: Path) -> subprocess.Popen[bytes]:
    """Start a driver's spark-submit in a session of its own (it outlives the task that
    starts it; a fault's kill takes its process group only), its output into ``log_file``."""
    with open(log_file, "wb") as output:
        return subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lakehouse.run_driver stop``: stop this user's drivers on this machine, each
    once its job (if any) is done."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["stop"]:
        print("usage: python -m lakehouse.run_driver stop", file=sys.stderr)
        return 2
    stopped = stop_all()
    print(f"stopped {len(stopped)} driver(s)" + "".join(f"\n  {name}" for name in stopped))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
