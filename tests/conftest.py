"""Shared fixtures: one Spark JVM per session, a fresh lakehouse root per test.

Layer jobs run in-process through their ``main(argv)`` (the same entry point spark-submit
calls), against the session's Spark; the end-to-end tests run them through Airflow and
spark-submit instead.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from jobs.session import build_spark
from lakehouse.local import services
from lakehouse.sample_data import write_landing_file
from lakehouse.settings import Settings
from tests.oracle import GOLD_COLUMNS, SILVER_COLUMNS

PROJECT_DIR = Path(__file__).resolve().parents[1]

# PySpark turns timestamps into naive datetimes in the Python process's zone; pin it to UTC.
os.environ["TZ"] = "UTC"
time.tzset()


@pytest.fixture(scope="session")
def base_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("lake-default")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")}
    env["LAKEHOUSE_ROOT"] = str(root)
    env["LAKEHOUSE_SHUFFLE_PARTITIONS"] = "2"
    return Settings.from_env(env)


@pytest.fixture(scope="session")
def spark(base_settings: Settings) -> Iterator[SparkSession]:
    session = build_spark("lakehouse-tests", base_settings, master="local[2]")
    yield session
    session.stop()


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


@dataclass
class Lake:
    """A lakehouse root under ``tmp_path`` and helpers to feed it and run layers."""

    spark: SparkSession
    settings: Settings
    monkeypatch: pytest.MonkeyPatch

    @property
    def root(self) -> Path:
        return Path(self.settings.root)

    def land(self, content: bytes | list[bytes], name: str | None = None) -> Path:
        if isinstance(content, list):
            content = b"\n".join(content) + b"\n"
        return write_landing_file(self.root / "landing" / "orders", content, name)

    def run(self, layer: str, *args: str, fault: str | None = None) -> int:
        from jobs import bronze, gold, silver

        module = {"bronze": bronze, "silver": silver, "gold": gold}[layer]
        if fault:
            self.monkeypatch.setenv("LAKEHOUSE_FAULT", fault)
        else:
            self.monkeypatch.delenv("LAKEHOUSE_FAULT", raising=False)
        try:
            return int(module.main(["--pipeline", "orders", "--root", str(self.root), *args]))
        finally:
            self.monkeypatch.delenv("LAKEHOUSE_FAULT", raising=False)

    def run_all(self, *args: str) -> None:
        for layer in ("bronze", "silver", "gold"):
            assert self.run(layer, *args) == 0, f"{layer} failed"

    def table(self, name: str) -> DataFrame:
        return self.spark.read.format("delta").load(self.settings.path(name))

    def rows(self, name: str, columns: tuple[str, ...] | list[str] | None = None) -> list[Any]:
        df = self.table(name)
        return [
            tuple(_hashable(v) for v in row)
            for row in df.select(*(columns or df.columns)).collect()
        ]

    def silver(self) -> dict[str, tuple]:
        return {row[0]: row for row in self.rows("silver/orders", SILVER_COLUMNS)}

    def gold(self) -> dict[tuple, tuple]:
        return {(row[0], row[1]): row for row in self.rows("gold/sales_hourly", GOLD_COLUMNS)}

    def contract_view(self) -> dict[str, Any]:
        """The tables as the contract speaks of them; compare with ``oracle.comparable``."""
        return {
            "bronze": Counter(r[0] for r in self.rows("bronze/orders_events", ["raw_value"])),
            "quarantine": Counter(self.rows("silver/orders_quarantine", ["raw_value", "reason"])),
            "silver": self.silver(),
            "gold": self.gold(),
        }

    def snapshot(self) -> dict[str, Any]:
        """Everything a rerun must leave unchanged (volatile ingest times excluded)."""
        return {
            **self.contract_view(),
            "bronze_lineage": Counter(
                self.rows("bronze/orders_events", ["raw_value", "raw_bytes", "source_file"])
            ),
            "quarantine_lineage": Counter(
                self.rows("silver/orders_quarantine", ["raw_value", "reasons", "source_file"])
            ),
        }

    def version(self, table: str) -> int:
        from deltalake import DeltaTable

        return int(DeltaTable(self.settings.path(table)).version())


@pytest.fixture
def lake(
    spark: SparkSession, base_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Lake:
    settings = base_settings.with_root(tmp_path / "lake")
    monkeypatch.setenv("LAKEHOUSE_SHUFFLE_PARTITIONS", "2")
    monkeypatch.setenv("LAKEHOUSE_ORDERS_SOURCE", "file")
    return Lake(spark, settings, monkeypatch)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[services.KafkaPorts]:
    """The local Kafka broker (`make kafka-up`), started if it is not running and stopped
    again at the end if this session started it. A broker that cannot start fails the
    tests that need it: they never skip."""
    settings = Settings.from_env()
    was_up = services.is_up(settings, "kafka")
    services.up(settings, "kafka")
    yield services.kafka_ports(settings)
    if not was_up:
        services.down(settings, "kafka")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[services.S3Server]:
    """The local S3 server (`make s3-up`; built first if its binary is not cached), started
    if it is not running and stopped again at the end if this session started it. Returns
    its endpoint and credentials. A server that cannot start or build fails the tests that
    need it: they never skip."""
    settings = Settings.from_env()
    was_up = services.is_up(settings, "s3")
    services.up(settings, "s3")
    yield services.s3_server(settings)
    if not was_up:
        services.down(settings, "s3")
