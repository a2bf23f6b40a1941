"""``lakehouse``: the project's command line (installed by ``make setup``).

lakehouse report                 what the tables hold (no JVM)
lakehouse services up|down|status [spark|kafka]
lakehouse demo [--source file|kafka]
lakehouse maintain [--pipeline P] [--actions optimize,vacuum,backup] [--dry-run] ...
lakehouse backups [PIPELINE]     the checkpoint backups
lakehouse restore PIPELINE LAYER [--backup-id ID|latest] [--check]
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from lakehouse.errors import LakehouseError


def _commands() -> dict[str, Callable[[list[str]], int]]:
    from lakehouse.local import demo, maintain, report, services

    def maintenance(command: str) -> Callable[[list[str]], int]:
        return lambda args: maintain.main([command, *args])

    return {
        "report": report.main,
        "services": services.main,
        "demo": demo.main,
        **{command: maintenance(command) for command in ("maintain", "backups", "restore")},
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = _commands()
    if not argv or argv[0] not in commands:
        print(__doc__)
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    try:
        return commands[argv[0]](argv[1:])
    except LakehouseError as exc:
        print(f"ERROR [{exc.code}] {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
