"""The class-data training run: every layer once in one driver JVM (see ``lakehouse.jvm``).

``python -m lakehouse.local.warmup`` submits this file with ``-XX:ArchiveClassesAtExit`` over a
few sample orders in a scratch root; the classes the three layers load are recorded, and
every later driver maps them instead of loading them again.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from jobs import bronze, gold, silver


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    for module in (bronze, silver, gold):
        if module.main(args) != 0:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
