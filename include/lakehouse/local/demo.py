"""``make demo``: sample data for the three example pipelines, two rounds of runs through
Airflow, a report.

1. delivers realistic events, some broken on purpose: customer changes (an initial load and
   a first batch) to ``landing/customers/`` and order events to ``landing/orders/``, or, with
   ``SOURCE=kafka``, to the topics ``customers.cdc`` and ``orders.events`` (keyed by customer
   and order id), with the local broker started if it is not running;
2. runs ``customers_pipeline``, ``orders_pipeline`` and ``segment_sales_pipeline`` with
   ``airflow dags test``;
3. delivers new orders, updates, late and repeated events, and late customer changes;
4. runs the three again: each reads only what is new, and segment sales recomputes only the
   days the changes touch;
5. prints what the tables hold (``lakehouse.local.report``).

With ``LAKEHOUSE_ROOT=s3a://lakehouse/<prefix>`` (after ``make s3-up``) it runs the same on
the local S3 server, landing whole objects, and says how many S3 requests each pipeline run
made (from the server's metrics).

The Kafka demo keeps its tables apart (``data/lakehouse-kafka`` unless ``LAKEHOUSE_ROOT`` is
set): a root's bronze streams read one source for good. Each Airflow run's full log is kept
under ``data/demo-logs/``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from lakehouse.errors import ConfigurationError
from lakehouse.fs import storage_for
from lakehouse.local.env import subprocess_env
from lakehouse.local.report import render
from lakehouse.registry import registry
from lakehouse.sample_customers import CustomerEventGenerator
from lakehouse.sample_customers import message_key as customer_key
from lakehouse.sample_data import OrderEventGenerator, land_file, render_file
from lakehouse.settings import Settings

PIPELINES = ("customers", "orders", "segment_sales")
_TASK_SUMMARY = re.compile(r"(\w+\.(?:bronze|silver|gold): .*?rows/s\))")
_PROBLEM = re.compile(r"ERROR \[|Traceback|AirflowException|Task failed")

Deliver = Callable[[Settings, str, list[bytes], str], None]


def run_pipeline(settings: Settings, pipeline: str, log_path: Path) -> float:
    """``airflow dags test <pipeline>_pipeline``, echoing one line per finished task."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen(
            ["airflow", "dags", "test", f"{pipeline}_pipeline"],
            # The root as the demo chose it (it may differ from a LAKEHOUSE_ROOT in environ).
            env=subprocess_env(settings, **{**settings.environ, "LAKEHOUSE_ROOT": settings.root}),
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
        raise SystemExit(f"{pipeline}_pipeline failed; the full log is {log_path}")
    return time.monotonic() - t0


def run_all(settings: Settings, logs: Path, label: str) -> None:
    requests = s3_request_counter(settings)
    for pipeline in PIPELINES:
        before = requests() if requests else {}
        seconds = run_pipeline(settings, pipeline, logs / f"{label}-{pipeline}.log")
        line = f"  {pipeline}_pipeline done in {seconds:.0f}s"
        if requests:
            after = requests()
            spent = {k: after.get(k, 0) - before.get(k, 0) for k in after}
            kinds = ", ".join(f"{k} {n:,}" for k, n in sorted(spent.items(), key=lambda i: -i[1]))
            line += f"; {sum(spent.values()):,} S3 requests ({kinds})"
        print(line)


def s3_request_counter(settings: Settings) -> Callable[[], dict[str, int]] | None:
    """The local S3 server's request counts, when the root is on it (None otherwise)."""
    from lakehouse.s3 import is_s3_uri

    if not is_s3_uri(settings.root):
        return None
    from lakehouse.local import services

    server = services.s3_server(settings)
    if settings.s3_endpoint != server.endpoint:
        return None
    try:
        server.request_counts()
    except OSError:
        return None  # a server started before it exposed its metrics
    return server.request_counts


def land(settings: Settings, pipeline: str, lines: list[bytes], label: str) -> None:
    """Land one file whole (an object on S3), as a producer outside the lakehouse would."""
    landing = settings.path(registry(settings).get(pipeline).landing)
    location = land_file(storage_for(settings), landing, render_file(lines))
    print(f"  {pipeline}: landed {len(lines):,} records ({label}) in {location.rsplit('/')[-1]}")


def landed_files(settings: Settings) -> int:
    """Landing files of every example pipeline so far (a new seed per demo run)."""
    storage = storage_for(settings)
    return sum(
        len(storage.file_sizes(settings.path(registry(settings).get(p).landing)))
        for p in ("customers", "orders")
    )


def demo_topic(settings: Settings, pipeline: str) -> str:
    topics = settings.pipeline(registry(settings).get(pipeline)).subscription
    if topics is None or not topics.topics:
        variable = f"LAKEHOUSE_{pipeline.upper()}_KAFKA_TOPICS"
        raise ConfigurationError(
            f"the demo produces to a topic, and {pipeline} reads "
            f"{topics.describe() if topics else 'no declared topic'}.",
            f"Set {variable} to the topic the demo should write.",
        )
    return topics.topics[0]


def start_kafka(settings: Settings) -> None:
    """The broker the pipelines read (the local one started if it is not running) and the
    demo's topics on it, created if missing."""
    from lakehouse.local import kafka_dev, services

    local = settings.kafka_brokers.rpartition(":")[0] in ("127.0.0.1", "localhost")
    if local and "," not in settings.kafka_brokers and not services.is_up(settings, "kafka"):
        print(f"  starting the local Kafka broker at {settings.kafka_brokers} ...", flush=True)
        print(f"  broker ready after {services.up(settings, 'kafka'):.0f}s")
    for pipeline in ("customers", "orders"):
        topic = demo_topic(settings, pipeline)
        kafka_dev.create_topic(settings.kafka_brokers, topic, partitions=3, exist_ok=True)


def order_key(line: bytes) -> bytes | None:
    import json

    try:
        return str(json.loads(line)["order_id"]).encode()
    except (ValueError, KeyError, TypeError):
        return None  # broken records travel too, unkeyed


def send(settings: Settings, pipeline: str, lines: list[bytes], label: str) -> None:
    """Produce ``lines`` as messages keyed by their entity: its events stay in order."""
    from lakehouse.local import kafka_dev

    topic = demo_topic(settings, pipeline)
    key = customer_key if pipeline == "customers" else order_key
    kafka_dev.produce(settings.kafka_brokers, topic, [(key(line), line) for line in lines])
    print(f"  {pipeline}: sent {len(lines):,} messages ({label}) to {topic}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo")
    parser.add_argument("--source", choices=["file", "kafka"], default="file")
    parser.add_argument("--orders", type=int, default=3000, help="new orders in the first delivery")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    if args.source == "kafka" and not os.environ.get("LAKEHOUSE_ROOT"):
        settings = settings.with_root(settings.project_dir / "data" / "lakehouse-kafka")
    sources = {f"LAKEHOUSE_{p.upper()}_SOURCE": args.source for p in ("customers", "orders")}
    settings = settings.with_env(**sources)
    deliver: Deliver = land
    if args.source == "kafka":
        print("0. Kafka")
        start_kafka(settings)
        deliver = send
        print()
    # A different seed per demo run: running it again adds new data, not the same.
    seed = 2026 + landed_files(settings)
    if args.source == "kafka":
        from lakehouse.local import kafka_dev

        seed += sum(kafka_dev.latest_offsets(settings.kafka_brokers, "orders.events").values())
    logs = settings.project_dir / "data" / "demo-logs"
    orders = OrderEventGenerator(seed=seed)
    customers = CustomerEventGenerator(seed=seed)
    print(
        f"Lakehouse demo: root {settings.root}, source {args.source}, "
        f"Spark {settings.spark_master or 'local (or the lakehouse_spark connection)'}\n"
    )

    print("1. First delivery")
    deliver(settings, "customers", customers.initial_load(), "every customer's first version")
    deliver(settings, "customers", customers.batch(400), "changes and deletes, some broken")
    deliver(settings, "orders", orders.batch(args.orders), "new orders, some broken on purpose")
    print("2. customers, orders and segment_sales pipelines, run 1")
    run_all(settings, logs, f"{args.source}-{seed}-1")
    print()

    print("3. Second delivery")
    deliver(
        settings,
        "orders",
        orders.batch(args.orders // 2) + orders.flush_late(),
        "new orders, updates, cancellations, late and repeated events",
    )
    deliver(
        settings,
        "customers",
        customers.batch(200) + customers.flush_late(),
        "late changes that split versions orders fall in",
    )
    print("4. The three pipelines again (each reads only what is new)")
    run_all(settings, logs, f"{args.source}-{seed}-2")
    print()

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
