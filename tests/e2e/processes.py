"""The processes running on this machine, for tests that look for a secret where it must
not be: command lines, environments, who started whom."""

from __future__ import annotations

from pathlib import Path


def processes() -> dict[int, tuple[str, bytes]]:
    """Every process's command line (as ``ps`` shows it) and, when readable, environment."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone meanwhile
        found[int(entry.name)] = (cmdline, environ)
    return found


def descendants(root: int) -> set[int]:
    """``root`` and every process below it (from the parent pids in ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, pending = set(), [root]
    while pending:
        pid = pending.pop()
        found.add(pid)
        pending += children.get(pid, [])
    return found
