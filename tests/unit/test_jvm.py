"""Which runs start their driver with the quick compiler only (and evaluate without
generated code): small known inputs."""

from __future__ import annotations

from lakehouse.jvm import QUICK_JIT_OPTION, with_quick_jit
from lakehouse.pending import SMALL_MAX_BYTES, SMALL_MAX_ROWS, Pending


def small(rows: int | None, size: int | None) -> bool:
    return Pending("silver", 1, rows, "", size).small


def test_a_small_known_input_compiles_quickly() -> None:
    assert small(0, None) and small(SMALL_MAX_ROWS, None)
    assert not small(SMALL_MAX_ROWS + 1, None)
    assert small(None, SMALL_MAX_BYTES) and not small(None, SMALL_MAX_BYTES + 1)
    # Rows, when known, decide: a few big records are still few.
    assert small(10, SMALL_MAX_BYTES * 4)


def test_an_unknown_size_keeps_the_full_compiler() -> None:
    assert not small(None, None)


def test_the_option_is_added_once() -> None:
    once = with_quick_jit("-Duser.timezone=UTC")
    assert once == f"-Duser.timezone=UTC {QUICK_JIT_OPTION}"
    assert with_quick_jit(once) == once
