"""The README's examples, read from the README itself, so that a test that runs one proves the
README right (and breaks when the README drifts)."""

from __future__ import annotations

import re

from tests import PROJECT_DIR


def readme_example(name: str) -> str:
    """The fenced code block that follows ``<!-- example: <name> -->`` in the README."""
    text = (PROJECT_DIR / "README.md").read_text(encoding="utf-8")
    match = re.search(rf"<!-- example: {re.escape(name)} -->\s*```\w*\n(.*?)\n```", text, re.S)
    assert match, f"the README has no example {name}"
    return match.group(1) + "\n"
