"""One warm Spark driver for the layer tasks of one pipeline run (``lakehouse.run_driver``).

A pipeline run is a few layer tasks in a row, each a Spark application of its own: a cold
JVM, a session and Delta's first log replays, 20-30 s before a small run does any work. The
first layer task of a run starts this application instead (with ``spark-submit``, the same
settings, jars and code as a layer job), and every layer task of the run asks it to run its
job: ``jobs/<layer>.py``'s ``main`` with the task's arguments and environment, in this one
session, its output sent back line by line for the task's log, then its exit code.

It serves one job at a time over a Unix socket, to processes of its own user only, and stops:

* after the run's last layer (the task says so), or after a job that did not succeed, so a
  retry starts from a fresh JVM as before;
* when nobody asked for ``--idle-s`` seconds (a run that ended early, a task that died); a
  request that comes as it stops is never taken (a driver says ``taken`` first), and its task
  sends it to a new driver;
* when killed (a fault point, the task's ``on_kill``): its tasks then fail, and retry.

Requests from a task whose Spark settings differ (another master, other jars or code) are
refused, and that task runs its job with its own ``spark-submit``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import logging
import os
import socket
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from jobs.faults import inject
from jobs.runtime import configure_logging
from jobs.session import build_spark, start_warm_up
from lakehouse.run_driver import (
    JOBS,
    address,
    driver_file,
    protocol_line,
    remove_start_lock,
    same_user,
)
from lakehouse.settings import Settings

log = logging.getLogger("lakehouse.driver")


class _Lines(io.TextIOBase):
    """A text stream that sends each complete line to the task (what the job prints and
    logs); a task that went away is not the job's failure."""

    def __init__(self, send: Callable[[dict[str, Any]], None]) -> None:
        self._send = send
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._send({"out": line})
        return len(text)

    def flush(self) -> None:
        if self._partial:
            self._send({"out": self._partial})
            self._partial = ""


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` on top of this process's environment for one job, then as it was."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_job(job: str, argv: list[str], env: dict[str, str], send: Callable[..., None]) -> int:
    """``jobs/<job>.py``'s ``main(argv)`` under ``env``, its output sent as it comes."""
    module = importlib.import_module(f"jobs.{job}")
    out = _Lines(send)
    try:
        with _environment(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                return int(module.main(argv))
            except BaseException:  # a job's own failures are in its exit code; this is not
                traceback.print_exc()
                return 1
            finally:
                out.flush()
    finally:
        configure_logging()  # this process's own output again


def serve(server: socket.socket, fingerprint: str) -> None:
    """Answer requests until one says stop, a job fails, or nobody asks in time."""
    while True:
        try:
            conn, _ = server.accept()
        except TimeoutError:
            log.info("no request for %.0f s: stopping", server.gettimeout() or 0)
            inject("driver.idle_stop")
            return
        with conn:
            if same_user(conn) and not answer(conn, fingerprint):
                return


def answer(conn: socket.socket, fingerprint: str) -> bool:
    """Answer one request; whether to go on serving."""

    def send(message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            conn.sendall(protocol_line(message))

    with conn.makefile("rb") as reader:
        request = json.loads(reader.readline() or b"{}")
    if request.get("stop"):
        send({"stopped": True})
        return False
    if request.get("fingerprint") != fingerprint or request.get("job") not in JOBS:
        send({"refused": "this driver runs other Spark settings or jobs"})
        return True
    send({"taken": request["job"]})
    log.info("running %s %s", request["job"], " ".join(request["argv"]))
    code = run_job(request["job"], list(request["argv"]), dict(request["env"]), send)
    send({"exit": code})
    log.info("%s exited with %d", request["job"], code)
    return code == 0 and not request.get("last")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="driver", description=__doc__.split("\n")[0])
    parser.add_argument("--driver", required=True, help="the driver's name (its socket, files)")
    parser.add_argument("--fingerprint", required=True, help="the Spark settings it runs")
    parser.add_argument("--idle-s", type=float, required=True, help="stop when idle this long")
    parser.add_argument("--name", required=True, help="the Spark application's name")
    parser.add_argument("--task-env", default="", help="variables of the starting task's job")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    configure_logging()
    spark = build_spark(args.name, Settings.from_env())
    start_warm_up(spark)  # beside the first request's setup
    # The starting task's own variables served the session's start (its S3 access); each job
    # gets its task's again with its request, and none of another task's.
    for key in filter(None, args.task_env.split(",")):
        os.environ.pop(key, None)
    driver_file(args.driver, ".pid").write_text(str(os.getpgrp()))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(address(args.driver))
        server.listen(8)
        server.settimeout(args.idle_s)
        log.info("serving %s as %s", spark.sparkContext.applicationId, args.driver)
        serve(server, args.fingerprint)
        # Stopped in order: its output has nothing a task needs (a failure keeps it). Gone
        # before the address is free, so a next driver's log is never this one's.
        driver_file(args.driver, ".log").unlink(missing_ok=True)
    finally:
        driver_file(args.driver, ".pid").unlink(missing_ok=True)
        server.close()
        remove_start_lock(args.driver)  # a task starting the next driver keeps it
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
