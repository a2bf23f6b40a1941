"""JVM options for Spark drivers, including a class-data-sharing (AppCDS) archive.

A job is a short-lived JVM, and a cold one spends most of its first seconds loading and
verifying the same ~20,000 classes. ``make setup`` records them once in a CDS archive
(``python -m lakehouse.local.warmup``); every driver then maps the archive instead, which on
this project's jobs roughly halves the JVM's share of a run. The archive belongs to one Java
build and one set of jars: its name carries a hash of both, and a stale or missing archive is
simply not used.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from lakehouse.settings import Settings

# Spark compiles each query stage into one Java method, and silver's validation (a dozen fields,
# several rules each) makes methods beyond the 8,000 bytes of bytecode that HotSpot refuses to
# compile by default: they ran interpreted for the whole job. Compiled, the validation of
# 100,000 records took 1.5 s instead of 2.6 s in a warm session (B5: 6.6 -> 4.0). Drivers and
# executors both run generated code, so both get the option.
COMPILE_HUGE_METHODS = "-XX:-DontCompileHugeMethods"
BASE_JVM_OPTIONS = f"-Duser.timezone=UTC {COMPILE_HUGE_METHODS}"

# A small run is over before the optimizing compiler (C2) pays for the CPU it takes from the
# work on a small machine: with the quick compiler only, cold layer runs of a few hundred
# records took 26 % less time, and of 100,000 events 24 % less; at 500,000 events silver's
# validation took 19 % longer. So a run whose input is known to be small
# (``lakehouse.pending.Pending.small``) starts its driver with the quick compiler; every other
# run (a size not known, a re-derivation) keeps the full one.
QUICK_JIT_OPTION = "-XX:TieredStopAtLevel=1"


def compiles_quickly(small_input: bool, keep_s: int) -> bool:
    """Whether a driver starts with the quick compiler only: for an input known to be small,
    unless the driver is kept between runs (``keep_s``, ``LAKEHOUSE_RUN_DRIVER_KEEP_S``).

    A kept driver's JVM serves every later run too, and there the quick compiler's code is
    what slows it down: a 1 % delivery of orders (bronze, silver, gold) took 14.6 s a run
    in a driver that had the quick compiler only, 10.7 s (8-9 s by the sixth run) in one
    with both, which had cost 7 s more in its first, cold run (2 cores, medians of two
    drivers each)."""
    return small_input and not keep_s


def with_quick_jit(java_options: str) -> str:
    return (
        java_options if QUICK_JIT_OPTION in java_options else f"{java_options} {QUICK_JIT_OPTION}"
    )


def _java_identity() -> str:
    java_home = os.environ.get("JAVA_HOME", "")
    java = Path(java_home, "bin", "java") if java_home else None
    if java is None or not java.exists():
        from shutil import which

        found = which("java")
        java = Path(found) if found else None
    if java is None:
        return "no-java"
    real = java.resolve()
    return f"{real}:{real.stat().st_mtime_ns}"


def cds_archive_path(settings: Settings) -> Path:
    import importlib.metadata

    from lakehouse.jars import project_jar

    marker = settings.jar_cache / "spark" / ".resolved"
    identity = "|".join(
        [
            _java_identity(),
            importlib.metadata.version("pyspark"),
            marker.read_text() if marker.exists() else "",
            project_jar(settings).name,
        ]
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:12]
    return settings.project_dir / ".cache" / "jvm" / f"spark-driver-{digest}.jsa"


def driver_java_options(settings: Settings, log4j_config: Path) -> str:
    options = [BASE_JVM_OPTIONS, f"-Dlog4j.configurationFile=file:{log4j_config}"]
    archive = cds_archive_path(settings)
    if archive.exists():
        options.append(f"-XX:SharedArchiveFile={archive}")
    return " ".join(options)
