"""``make demo``: sample order events, two ``orders_pipeline`` runs through Airflow, a report.

1. delivers realistic events (about 5% broken on purpose): a file in ``landing/orders/``, or,
   with ``SOURCE=kafka``, messages on the ``orders.events`` topic (keyed by order id), with
   the local broker started if it is not running;
2. runs the whole pipeline with ``airflow dags test orders_pipeline``;
3. delivers new orders, updates to earlier ones, late and repeated events;
4. runs the pipeline again: only the new data is read;
5. prints what the tables hold (``lakehouse.local.report``).

The Kafka demo keeps its tables apart (``data/lakehouse-kafka`` unless ``LAKEHOUSE_ROOT`` is
set): a root's bronze stream reads one source for good. Each Airflow run's full log is kept
under ``data/demo-logs/``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from lakehouse.errors import ConfigurationError
from lakehouse.local.env import subprocess_env
from lakehouse.local.report import render
from lakehouse.pipelines import ORDERS
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
            env=subprocess_env(
                settings,
                LAKEHOUSE_ROOT=settings.root,
                LAKEHOUSE_ORDERS_SOURCE=str(settings.pipeline(ORDERS).source),
            ),
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


def demo_topic(settings: Settings) -> str:
    topics = settings.pipeline(ORDERS).subscription
    if not topics.topics:
        raise ConfigurationError(
            f"the demo produces to a topic, and the pipeline reads {topics.describe()}.",
            "Set LAKEHOUSE_ORDERS_KAFKA_TOPICS to the topic the demo should write.",
        )
    return topics.topics[0]


def start_kafka(settings: Settings) -> str:
    """The broker the pipeline reads (the local one started if it is not running) and the
    demo's topic on it, created if missing. Returns the topic."""
    from lakehouse.local import kafka_dev, services

    local = settings.kafka_brokers.rpartition(":")[0] in ("127.0.0.1", "localhost")
    if local and "," not in settings.kafka_brokers and not services.is_up(settings, "kafka"):
        print(f"  starting the local Kafka broker at {settings.kafka_brokers} ...", flush=True)
        print(f"  broker ready after {services.up(settings, 'kafka'):.0f}s")
    topic = demo_topic(settings)
    kafka_dev.create_topic(settings.kafka_brokers, topic, partitions=3, exist_ok=True)
    return topic


def send(settings: Settings, topic: str, lines: list[bytes], label: str) -> None:
    """Produce ``lines`` as messages keyed by order id: an order's events stay in order."""
    from lakehouse.local import kafka_dev

    def key(line: bytes) -> bytes | None:
        try:
            return str(json.loads(line)["order_id"]).encode()
        except (ValueError, KeyError, TypeError):
            return None  # broken records travel too, unkeyed

    kafka_dev.produce(settings.kafka_brokers, topic, [(key(line), line) for line in lines])
    print(f"  sent {len(lines):,} messages ({label}) to {topic} on {settings.kafka_brokers}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo")
    parser.add_argument("--source", choices=["file", "kafka"], default="file")
    parser.add_argument("--orders", type=int, default=3000, help="new orders in the first delivery")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    deliver: Callable[[list[bytes], str], None]
    if args.source == "kafka":
        if not os.environ.get("LAKEHOUSE_ROOT"):
            settings = settings.with_root(settings.project_dir / "data" / "lakehouse-kafka")
        settings = settings.with_env(LAKEHOUSE_ORDERS_SOURCE="kafka")
        print("0. Kafka")
        topic = start_kafka(settings)
        from lakehouse.local import kafka_dev

        # A different seed per demo run: running it again adds new orders, not the same ones.
        seed = sum(kafka_dev.latest_offsets(settings.kafka_brokers, topic).values()) + 2026
        print()

        def deliver(lines: list[bytes], label: str) -> None:
            send(settings, topic, lines, label)
    else:
        settings = settings.with_env(LAKEHOUSE_ORDERS_SOURCE="file")
        seed = len(list(settings.local_path("landing/orders").glob("*.jsonl"))) + 2026

        def deliver(lines: list[bytes], label: str) -> None:
            land(settings, lines, label)

    logs = settings.project_dir / "data" / "demo-logs"
    generator = OrderEventGenerator(seed=seed)
    print(
        f"Lakehouse demo: root {settings.root}, source {args.source}, "
        f"Spark {settings.spark_master or 'local (or the lakehouse_spark connection)'}\n"
    )

    print("1. First delivery")
    deliver(generator.batch(args.orders), "new orders, some broken on purpose")
    print("2. orders_pipeline, run 1 (bronze -> silver -> gold)")
    seconds = run_pipeline(settings, logs / f"run-{args.source}-{seed}-1.log")
    print(f"  done in {seconds:.0f}s\n")

    print("3. Second delivery")
    deliver(
        generator.batch(args.orders // 2) + generator.flush_late(),
        "new orders, updates, cancellations, late and repeated events",
    )
    print("4. orders_pipeline, run 2 (reads only what is new)")
    seconds = run_pipeline(settings, logs / f"run-{args.source}-{seed}-2.log")
    print(f"  done in {seconds:.0f}s\n")

    print("5. What the tables hold\n")
    print(render(settings))
    root = "" if settings.root == Settings.from_env().root else f"LAKEHOUSE_ROOT={settings.root} "
    print(
        '\nNext: `eval "$(make -s env)"` then `airflow standalone` for the UI, or '
        f"`{root}python -m lakehouse.local.report` for this report again. Logs: "
        f"{logs.relative_to(settings.project_dir)}/"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
