"""Spark applications, one per layer, each runnable by ``spark-submit jobs/<layer>.py``.

Nothing here imports Airflow. Shared pieces: ``session`` (the one session factory),
``runtime`` (arguments, the availableNow run, progress, run log), ``validation`` and
``transforms`` (pure DataFrame functions), ``delta_writes`` (idempotent writes).

Importing the package first, before pyspark, makes a ``spark-submit`` driver import the
installed pyspark (``prefer_installed_pyspark``): the scripts ``spark-submit`` runs start
with it.
"""

from __future__ import annotations

import os
import sys


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """``path`` (``sys.path``) with the source zips ``spark-submit`` puts first for a Python
    driver moved to its end, behind the pyspark package they came with.

    ``spark-submit`` puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's
    ``py4j-<version>-src.zip`` before everything but the ``--py-files``. Python compiles what it
    imports from a zip on every start and never keeps the bytecode, so every driver compiled
    pyspark again: 0.8 s of a cold driver's 1.4 s of imports on the 2-core machine. pip's
    pyspark is its own ``SPARK_HOME``: its zips are inside the installed package, which holds
    the same modules with the bytecode pip compiled. Only those zips move (py4j's only when
    the same py4j version is installed beside pyspark); a Spark distribution's own zips, and
    any path once pyspark is imported, stay as they are."""
    installed = {os.path.realpath(entry) for entry in path if entry}
    moved = []
    for entry in path:
        lib, name = os.path.split(entry)  # <site>/pyspark/python/lib, the zip's name
        python = os.path.dirname(lib)
        package = os.path.dirname(python)
        site = os.path.dirname(package)
        if (
            (os.path.basename(package), os.path.basename(python), os.path.basename(lib))
            != ("pyspark", "python", "lib")
            or os.path.realpath(site) not in installed
            or not os.path.isfile(os.path.join(package, "__init__.py"))
        ):
            continue
        if name == "pyspark.zip" or (
            name.startswith("py4j-")
            and name.endswith("-src.zip")
            and os.path.isdir(os.path.join(site, f"{name.removesuffix('-src.zip')}.dist-info"))
        ):
            moved.append(entry)
    return [entry for entry in path if entry not in moved] + moved


if "pyspark" not in sys.modules:
    sys.path[:] = prefer_installed_pyspark(sys.path)
