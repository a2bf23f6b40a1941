"""``make demo``: sample order events, two ``orders_pipeline`` runs through Airflow, a report.

1. lands a file of realistic events (about 5% broken on purpose) in ``landing/orders/``;
2. runs the whole pipeline with ``airflow dags test orders_pipeline``;
3. lands new orders, updates to earlier ones, late and repeated events;
4. runs the pipeline again: only the new data is read;
5. prints what the tables hold (``lakehouse.local.report``).

Each Airflow run's full log is kept under ``data/demo-logs/``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

from lakehouse.local.env import subprocess_env
from lakehouse.local.report import render
from lakehouse.sample_data import OrderEventGenerator, render_file, write_landing_file
from lakehouse.settings import Settings

_TASK_SUMMARY = re.compile(r"(orders\.(?:bronze|silver|gold): .*?rows/s\))")
_PROBLEM = re.compile(r"ERROR \[|Traceback|AirflowException|Task failed")


def run_pipeline(settings: Settings, log_path: Path) -> float:
    """``airflow dags test orders_pipeline``, echoing one line per finished task."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen(
            ["airflow", "dags", "test", "orders_pipeline"],
            env=subprocess_env(settings, LAKEHOUSE_ROOT=settings.root),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            match = _TASK_SUMMARY.search(line)
            if match:
                print(f"    {match.group(1)}", flush=True)
            elif _PROBLEM.search(line):
                print(f"    ! {line.strip()[:300]}", flush=True)
        code = process.wait()
    if code != 0 or "state=success" not in log_path.read_text(encoding="utf-8"):
        raise SystemExit(f"orders_pipeline failed; the full log is {log_path}")
    return time.monotonic() - t0


def land(settings: Settings, lines: list[bytes], label: str) -> None:
    path = write_landing_file(settings.local_path("landing/orders"), render_file(lines))
    print(
        f"  landed {len(lines):,} records ({label}) in {path.relative_to(settings.local_path(''))}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo")
    parser.add_argument("--source", choices=["file", "kafka"], default="file")
    parser.add_argument("--orders", type=int, default=3000, help="new orders in the first delivery")
    args = parser.parse_args(argv)
    if args.source != "file":
        raise SystemExit("The Kafka demo arrives with the Kafka source (see README).")
    settings = Settings.from_env()
    logs = settings.project_dir / "data" / "demo-logs"
    # A different seed per demo run: running it again adds new orders, not the same ones.
    seed = len(list(settings.local_path("landing/orders").glob("*.jsonl"))) + 2026
    generator = OrderEventGenerator(seed=seed)
    print(
        f"Lakehouse demo: root {settings.root}, source {args.source}, "
        f"Spark {settings.spark_master or 'local (or the lakehouse_spark connection)'}\n"
    )

    print("1. First delivery")
    land(settings, generator.batch(args.orders), "new orders, some broken on purpose")
    print("2. orders_pipeline, run 1 (bronze -> silver -> gold)")
    seconds = run_pipeline(settings, logs / f"run-{seed}-1.log")
    print(f"  done in {seconds:.0f}s\n")

    print("3. Second delivery")
    land(
        settings,
        generator.batch(args.orders // 2) + generator.flush_late(),
        "new orders, updates, cancellations, late and repeated events",
    )
    print("4. orders_pipeline, run 2 (reads only what is new)")
    seconds = run_pipeline(settings, logs / f"run-{seed}-2.log")
    print(f"  done in {seconds:.0f}s\n")

    print("5. What the tables hold\n")
    print(render(settings))
    print(
        '\nNext: `eval "$(make -s env)"` then `airflow standalone` for the UI, or '
        "`python -m lakehouse.local.report` for this report again. Logs: "
        f"{logs.relative_to(settings.project_dir)}/"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
