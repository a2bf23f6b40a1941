"""Who stops a local service: a test session stops what it started, and what a killed
session left running, but never a service started by hand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lakehouse.local import services
from lakehouse.settings import Settings


def test_a_service_whose_starter_died_is_left_behind_and_one_started_by_hand_is_not(
    tmp_path: Path,
) -> None:
    settings = Settings.from_env().model_copy(update={"project_dir": tmp_path})
    services.services_dir(settings).mkdir()
    # Started by hand (`make s3-up`): no owner, never someone else's to stop.
    assert not services.left_behind(settings, "s3")
    # Started by a session that is still running: that session stops it.
    services.claim(settings, "s3", os.getpid())
    assert not services.left_behind(settings, "s3")
    # Started by a session that was killed before its teardown.
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    services.claim(settings, "s3", int(dead.stdout))
    assert services.left_behind(settings, "s3")
    assert not services.left_behind(settings, "kafka")
    services.release(settings, "s3")
    assert not services.left_behind(settings, "s3")
    assert sorted(p.name for p in services.services_dir(settings).iterdir()) == []
