"""Which runs start their driver with the quick compiler only: small known inputs."""

from __future__ import annotations

from lakehouse.jvm import (
    QUICK_JIT_MAX_BYTES,
    QUICK_JIT_MAX_ROWS,
    QUICK_JIT_OPTION,
    quick_jit,
    with_quick_jit,
)


def test_a_small_known_input_compiles_quickly() -> None:
    assert quick_jit(0, None) and quick_jit(QUICK_JIT_MAX_ROWS, None)
    assert not quick_jit(QUICK_JIT_MAX_ROWS + 1, None)
    assert quick_jit(None, QUICK_JIT_MAX_BYTES) and not quick_jit(None, QUICK_JIT_MAX_BYTES + 1)
    # Rows, when known, decide: a few big records are still few.
    assert quick_jit(10, QUICK_JIT_MAX_BYTES * 4)


def test_an_unknown_size_keeps_the_full_compiler() -> None:
    assert not quick_jit(None, None)


def test_the_option_is_added_once() -> None:
    once = with_quick_jit("-Duser.timezone=UTC")
    assert once == f"-Duser.timezone=UTC {QUICK_JIT_OPTION}"
    assert with_quick_jit(once) == once
