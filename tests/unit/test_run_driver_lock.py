"""The start lock of a run driver (``lakehouse.run_driver.start_lock``): one task at a time
finds or starts a driver, and a driver that stops removes its lock file without letting two
tasks in at once."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

import pytest

from lakehouse.run_driver import driver_file, remove_start_lock, start_lock


@pytest.fixture(autouse=True)
def _private_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def test_a_held_lock_stays_and_a_free_one_is_removed() -> None:
    path = driver_file("d", ".lock")
    assert remove_start_lock("d") is False, "no lock file: nothing to remove"
    with start_lock("d"):
        assert path.exists()
        # A stopping driver leaves the lock of a task that starts its successor.
        assert remove_start_lock("d") is False and path.exists()
    assert remove_start_lock("d") is True and not path.exists()
    with start_lock("d"):
        assert path.exists(), "taken anew after its removal"


def test_a_task_waiting_on_a_removed_lock_file_takes_the_new_one() -> None:
    """A task opened the lock file, and it was removed before the task got it: when the task
    gets it, it is no lock of anyone's; it must wait for the path's holder."""
    entered: list[str] = []
    first_holds, first_go = threading.Event(), threading.Event()
    third_holds, third_go = threading.Event(), threading.Event()

    def hold(name: str, holds: threading.Event, go: threading.Event) -> None:
        with start_lock("d"):
            entered.append(name)
            holds.set()
            assert go.wait(10)
            entered.append(f"{name} leaves")

    def wait_in_turn() -> None:
        with start_lock("d"):
            entered.append("second")

    first = threading.Thread(target=hold, args=("first", first_holds, first_go))
    first.start()
    assert first_holds.wait(10)
    second = threading.Thread(target=wait_in_turn)
    second.start()
    wait_until_open_twice(driver_file("d", ".lock"))  # it waits on the file the first holds
    driver_file("d", ".lock").unlink()  # as a stopping driver would have, a moment earlier
    third = threading.Thread(target=hold, args=("third", third_holds, third_go))
    third.start()
    assert third_holds.wait(10), "a new lock file: the third task holds it at once"
    first_go.set()
    first.join(10)
    second.join(0.5)
    assert second.is_alive(), "the second task waits for the third, which holds the path's lock"
    third_go.set()
    for thread in (second, third):
        thread.join(10)
    assert entered == ["first", "third", "first leaves", "third leaves", "second"], entered


def wait_until_open_twice(path: Path) -> None:
    for _ in range(500):
        fds = Path("/proc/self/fd").iterdir()
        if sum(1 for fd in fds if os.path.realpath(fd) == str(path.resolve())) >= 2:
            return
        time.sleep(0.01)
    raise AssertionError(f"the second task never opened {path}")
