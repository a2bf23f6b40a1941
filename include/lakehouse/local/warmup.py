"""Record the classes a Spark driver loads into a CDS archive (see ``lakehouse.jvm``).

Submits ``jobs/warmup.py`` (bronze, silver and gold once, in one driver) over a few sample
orders in a scratch root, with ``-XX:ArchiveClassesAtExit``. Idempotent: nothing to do when
the archive for this Java and these jars exists. ``make setup`` calls it; it takes about a
minute, once.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from lakehouse.jvm import cds_archive_path
from lakehouse.local.env import subprocess_env
from lakehouse.sample_data import OrderEventGenerator, render_file, write_landing_file
from lakehouse.settings import Settings
from lakehouse.submit import job_submit_spec


def build_archive(settings: Settings) -> Path | None:
    archive = cds_archive_path(settings)
    if archive.exists():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    with tempfile.TemporaryDirectory(prefix="lakehouse-warmup-") as root:
        scratch = settings.with_root(root)
        write_landing_file(
            scratch.local_path("landing/orders"), render_file(OrderEventGenerator(seed=1).batch(50))
        )
        spec = job_submit_spec(scratch, "orders", "warmup", run_id="cds-training")
        conf = dict(spec.conf)
        conf["spark.driver.extraJavaOptions"] = (
            conf["spark.driver.extraJavaOptions"].split(" -XX:SharedArchiveFile")[0]
            + f" -XX:ArchiveClassesAtExit={partial}"
        )
        training = replace(spec, conf=conf)
        print(
            "recording Spark driver classes for faster job starts (once, about a minute)...",
            flush=True,
        )
        t0 = time.monotonic()
        result = subprocess.run(
            training.argv("local[2]"),
            env=subprocess_env(settings, LAKEHOUSE_ROOT=root),
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        sys.stderr.write(result.stdout[-2000:] + result.stderr[-2000:])
        print("could not build the class-data archive; jobs will start without it")
        return None
    partial.replace(archive)
    print(f"class-data archive ready in {time.monotonic() - t0:.0f}s: {archive}")
    return archive


if __name__ == "__main__":
    build_archive(Settings.from_env())
