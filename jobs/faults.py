"""Fault injection for the exactly-once tests: fail or die at a named point of a batch.

``LAKEHOUSE_FAULT=<point>[:kill|:pause]`` makes ``inject(<point>)`` raise ``InjectedFault``
(or, with ``:kill``, SIGKILL the whole process group, driver JVM and Python alike, as a lost
machine would: start the job in its own session; with ``:pause``, sleep ``PAUSE_S`` and go on,
to hold a race's window open). Unset, ``inject`` is a dictionary lookup.
Points: ``silver.after_quarantine`` (in the append's thread, while silver's writes may still
run beside it), ``silver.after_merge``, ``silver.after_changes`` (a
history's changes written, not its versions), ``silver.rederive.after_changes``,
``silver.rederive.after_silver`` (a reprocess or full refresh between its writes),
``silver.rederive.after_catch_up`` (a full refresh whose catch-up moved the checkpoint,
before it rewrites everything), ``gold.after_merge``, ``gold.rederive.after_catch_up`` (a
reprocess or full refresh whose catch-up moved the checkpoint, before it recomputes every
row), ``restore.before_checkpoint``
(a restore that dies half-way), ``driver.idle_stop`` (a run's driver that stops for being
idle, before it stops listening).
"""

from __future__ import annotations

import os
import signal
import time

PAUSE_S = 10.0


class InjectedFault(RuntimeError):
    """Raised at a fault point chosen by ``LAKEHOUSE_FAULT``."""


def inject(point: str) -> None:
    wanted = os.environ.get("LAKEHOUSE_FAULT")
    if not wanted:
        return
    name, _, how = wanted.partition(":")
    if name != point:
        return
    if how == "kill":
        os.killpg(os.getpgrp(), signal.SIGKILL)
    if how == "pause":
        time.sleep(PAUSE_S)
        return
    raise InjectedFault(f"fault injected at {point}")
