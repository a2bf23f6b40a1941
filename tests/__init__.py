"""The test suite: ``unit/`` (no JVM), ``spark/`` (one Spark session, jobs in-process) and
``e2e/`` (Airflow, spark-submit, the standalone cluster, the Kafka broker, a browser)."""

from __future__ import annotations

from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
