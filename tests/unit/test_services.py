"""Who stops a local service: a test session stops what it started, and what a killed
session left running, but never a service started by hand."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

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


FAKE_GO = """#!/bin/sh
# A stand-in for `go build ... -o <out> ...`: a partial binary first, the whole one at the end.
echo build >> "$FAKE_GO_CALLS"
cut -d' ' -f41 /proc/$$/stat > "$FAKE_GO_CALLS.policy"  # the scheduling policy it runs under
while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done
echo partial > "$out"
sleep "${FAKE_GO_SLEEP:-0}"
echo weed > "$out"
"""


def _home_with_a_fake_go(home: Path) -> tuple[Path, Path]:
    """A project home whose pinned SeaweedFS is v9.9.9 and no binary of it, and a fake ``go``
    (and the file it records its calls in) to build it with."""
    from lakehouse.local import seaweedfs

    tools = home / "tools" / "seaweedfs"
    tools.mkdir(parents=True)
    (tools / "go.mod").write_text(f"module build\n\nrequire (\n\t{seaweedfs.MODULE} v9.9.9\n)\n")
    go, calls = home / "go", home / "go-calls"
    go.write_text(FAKE_GO)
    go.chmod(0o755)
    return go, calls


def test_the_s3_server_builds_in_the_background_once_and_a_stopped_build_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from lakehouse.local import seaweedfs

    go, calls = _home_with_a_fake_go(tmp_path)
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path))
    monkeypatch.setenv("GO", str(go))
    monkeypatch.setenv("FAKE_GO_CALLS", str(calls))
    monkeypatch.setenv("FAKE_GO_SLEEP", "2")
    settings = Settings.from_env()
    target = seaweedfs.binary_path(settings)
    assert target.name == "weed-v9.9.9"

    # The session's background build holds the lock; the first test that needs the server
    # waits for it, says so, and builds nothing itself.
    build = seaweedfs.start_background_build(settings)
    assert build is not None
    _wait_for(calls.exists)
    assert seaweedfs.weed_binary(settings) == target
    assert "waiting for SeaweedFS v9.9.9, which another process is building" in (
        capsys.readouterr().out
    )
    assert build.wait(timeout=30) == 0
    assert target.read_text() == "weed\n"
    assert calls.read_text() == "build\n"
    # On idle CPU only: the tests beside it take precedence.
    assert int(Path(f"{calls}.policy").read_text()) == os.SCHED_IDLE
    assert seaweedfs.start_background_build(settings) is None  # cached

    # A session that ends before its build does stops it: no binary, no partial one; the
    # next build starts over.
    target.unlink()
    monkeypatch.setenv("FAKE_GO_SLEEP", "60")
    build = seaweedfs.start_background_build(settings)
    assert build is not None
    _wait_for(lambda: calls.read_text().count("build") == 2)
    seaweedfs.stop_background_build(build)
    assert build.returncode is not None
    assert not target.exists()
    monkeypatch.setenv("FAKE_GO_SLEEP", "0")
    assert seaweedfs.weed_binary(settings).read_text() == "weed\n"
    assert calls.read_text() == "build\n" * 3
    assert sorted(p.name for p in target.parent.glob(".*.tmp")) == []


def _wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_tests_that_need_the_s3_server_run_after_all_the_others(tmp_path: Path) -> None:
    """So that on a fresh checkout the server's build has the rest of the session to finish
    in. Collecting alone builds nothing, even where no binary is cached."""
    go, calls = _home_with_a_fake_go(tmp_path)
    project = Path(__file__).resolve().parents[2]
    (tmp_path / "pipelines").symlink_to(project / "pipelines")
    home = {"LAKEHOUSE_HOME": str(tmp_path), "GO": str(go), "FAKE_GO_CALLS": str(calls)}
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env={**os.environ, **home},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert not (tmp_path / ".cache" / "seaweedfs").exists()
    assert not calls.exists()
    ids = [line for line in collected.splitlines() if "::" in line]
    on_s3 = ("tests/e2e/test_s3.py::", "tests/e2e/test_leases.py::")
    needs_s3 = [test.endswith("[s3]") or test.startswith(on_s3) for test in ids]
    first = needs_s3.index(True)
    assert first > 0
    assert [t for t, s3 in zip(ids[first:], needs_s3[first:], strict=True) if not s3] == []
    assert ids[-1].endswith("[s3]")
