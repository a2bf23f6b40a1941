"""A lakehouse root under a test's ``tmp_path``, and helpers to feed it and run its layers.

Layer jobs run in-process through their ``main(argv)`` (the same entry point spark-submit
calls), against the test session's Spark; the end-to-end tests run them through Airflow and
spark-submit instead.
"""

from __future__ import annotations

import random
import subprocess
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from pyspark.sql import DataFrame, SparkSession

from lakehouse.fs import Storage, delta_storage_options, storage_for
from lakehouse.sample_data import OrderEventGenerator, land_file, render_file
from lakehouse.settings import Settings
from tests.oracle import GOLD_COLUMNS, SILVER_COLUMNS, split_records
from tests.oracle_customers import HISTORY_COLUMNS, SEGMENT_COLUMNS

T = TypeVar("T")

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from lakehouse.local.services import S3Server

# Every layer of each example pipeline, in the order a full run takes them.
LAYERS = {
    "orders": ("bronze", "silver", "gold"),
    "customers": ("bronze", "silver"),
    "segment_sales": ("gold",),
}


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


@dataclass
class Lake:
    """A lakehouse root (a folder under ``tmp_path``, or a prefix on the local S3 server) and
    helpers to feed it and run layers. ``scratch`` is a local folder of the test's own."""

    spark: SparkSession
    settings: Settings
    monkeypatch: pytest.MonkeyPatch
    scratch: Path | None = None

    @property
    def root(self) -> Path:
        """The root as a local folder (tests that look at files on disk)."""
        assert self.settings.root_is_local, "this test reads the root as a local folder"
        return Path(self.settings.root)

    @property
    def storage(self) -> Storage:
        return storage_for(self.settings)

    def land(
        self, content: bytes | list[bytes], name: str | None = None, pipeline: str = "orders"
    ) -> str:
        """Land one file whole: an object on S3, renamed in from a hidden name on a disk."""
        if isinstance(content, list):
            content = b"\n".join(content) + b"\n"
        return land_file(self.storage, self.settings.path(f"landing/{pipeline}"), content, name)

    def second_delivery(self, seed: int, run: Callable[[], T]) -> tuple[list[bytes], T]:
        """Two deliveries of 40 orders (``OrderEventGenerator(seed)``), each landed then run
        by ``run``: every record delivered, and what ``run`` returned for the second, a run
        on tables that exist."""
        generator = OrderEventGenerator(seed=seed)
        delivered: list[bytes] = []
        observed: list[T] = []
        for file_seed in (1, 2):
            content = render_file(generator.batch(40), random.Random(file_seed))
            self.land(content)
            delivered += split_records(content)
            observed.append(run())
        return delivered, observed[-1]

    def exists(self, relative: str) -> bool:
        """Whether anything is stored under ``relative`` (a file or a folder)."""
        return bool(self.storage.list_tree(self.settings.path(relative)))

    def run(
        self, layer: str, *args: str, fault: str | None = None, pipeline: str = "orders"
    ) -> int:
        from jobs import bronze, gold, silver

        module = {"bronze": bronze, "silver": silver, "gold": gold}[layer]
        if fault:
            self.monkeypatch.setenv("LAKEHOUSE_FAULT", fault)
        else:
            self.monkeypatch.delenv("LAKEHOUSE_FAULT", raising=False)
        try:
            argv = ["--pipeline", pipeline, "--root", self.settings.root, *args]
            return int(module.main(argv))
        finally:
            self.monkeypatch.delenv("LAKEHOUSE_FAULT", raising=False)

    def granted(self, action: str, run_id: str = "granted-run") -> list[str]:
        """The arguments of a run Airflow granted ``action`` (a restore, accepting data
        loss): its run id; the grant file the operator would hand over is in place."""
        from lakehouse.authz import GRANT_FILE_ENV, Grant

        folder = self.scratch or self.root.parent
        path = folder / f"grant-{run_id}.json"
        if not path.exists():
            Grant("test", run_id, "admin", (action,)).write(path)
        self.monkeypatch.setenv(GRANT_FILE_ENV, str(path))
        return ["--run-id", run_id]

    def submit(
        self,
        pipeline: str,
        job: str,
        *args: str,
        run_id: str | None = None,
        fault: str | None = None,
        **env: str,
    ) -> subprocess.Popen[str]:
        """The job as Airflow runs it: spark-submit (local Spark; the quick compiler for a
        layer whose input is small, as the operator decides), in a process group of its own,
        so that a SIGKILL (a test's, or ``fault`` with ``:kill``) takes the driver's group and
        not pytest. Its output is a text pipe."""
        from lakehouse.local.env import subprocess_env
        from lakehouse.pending import pending_input
        from lakehouse.registry import get_pipeline
        from lakehouse.specs import Layer
        from lakehouse.submit import job_submit_spec

        settings = Settings.from_env().with_root(self.settings.root)
        run_id = run_id or f"test-{pipeline}-{job}"
        spec = job_submit_spec(settings, pipeline, job, run_id=run_id, extra_args=args)
        if job in set(Layer) and pending_input(settings, get_pipeline(pipeline), job).small:
            spec = spec.with_quick_jit()
        environment = subprocess_env(settings, LAKEHOUSE_ROOT=self.settings.root, **env)
        environment.pop("LAKEHOUSE_FAULT", None)
        if fault:
            environment["LAKEHOUSE_FAULT"] = fault
        return subprocess.Popen(
            spec.argv("local[2]"),
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    @staticmethod
    def read_until(process: subprocess.Popen[str], text: str) -> list[str]:
        """The job's output lines up to the first holding ``text`` (all of it if none)."""
        assert process.stdout is not None
        seen = []
        for line in process.stdout:
            seen.append(line)
            if text in line:
                break
        return seen

    def run_all(self, *args: str, pipeline: str = "orders") -> None:
        for layer in LAYERS[pipeline]:
            assert self.run(layer, *args, pipeline=pipeline) == 0, f"{pipeline}.{layer} failed"

    def run_everything(self) -> None:
        """A run of the three example pipelines, as their schedules and assets would."""
        for pipeline in ("customers", "orders", "segment_sales"):
            self.run_all(pipeline=pipeline)

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

    def history(self) -> dict[tuple, tuple]:
        rows = self.rows("silver/customers_history", HISTORY_COLUMNS)
        return {(row[0], row[5]): row for row in rows}

    def segment_sales(self) -> dict[tuple, tuple]:
        rows = self.rows("gold/segment_sales_daily", SEGMENT_COLUMNS)
        return {(row[0], row[1]): row for row in rows}

    def customers_view(self, with_segment_sales: bool = False) -> dict[str, Any]:
        """The customers tables as the contract speaks of them; compare with
        ``oracle_customers.comparable_customers``."""
        view: dict[str, Any] = {
            "bronze": Counter(r[0] for r in self.rows("bronze/customers_events", ["raw_value"])),
            "quarantine": Counter(
                self.rows("silver/customers_quarantine", ["raw_value", "reason"])
            ),
            "history": self.history(),
        }
        if with_segment_sales:
            view["segment_sales"] = self.segment_sales()
        return view

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

    def delta(self, table: str, version: int | None = None) -> DeltaTable:
        """``table`` through delta-rs (no JVM), with the root's storage options."""
        from deltalake import DeltaTable

        return DeltaTable(
            self.settings.path(table),
            version=version,
            storage_options=delta_storage_options(self.settings),
        )

    def read_rows(self, table: str, version: int | None = None) -> list[dict[str, Any]]:
        """``table``'s rows through delta-rs's query engine."""
        from lakehouse.local.report import read_rows

        options = delta_storage_options(self.settings)
        return read_rows(self.settings.path(table), version=version, storage_options=options)

    def version(self, table: str) -> int:
        return int(self.delta(table).version())


def state_transactions(jvm: Any, snapshot: Any) -> dict[str, int]:
    """The writers' transaction versions in a JVM Delta snapshot's reconstructed state
    (Delta's own answer, whatever the snapshot's ``transactions`` was given)."""
    to_java = jvm.scala.jdk.javaapi.CollectionConverters.asJava
    listed = to_java(snapshot.computedState().setTransactions())
    return {str(t.appId()): int(t.version()) for t in listed}


def s3_lake(
    spark: SparkSession,
    base_settings: Settings,
    server: S3Server,
    scratch: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Lake]:
    """A lake under a prefix of its own on the local S3 server, emptied afterwards.

    The jobs run in this process: they find the endpoint and credentials in ``AWS_*`` (as a
    job started by hand does), and the test session's JVM, started before the server was
    known, gets them on its Hadoop configuration (s3a reads it when it first opens the
    bucket).
    """
    from lakehouse.local import seaweedfs

    config = server.config()
    prefix = f"tests/{uuid.uuid4().hex[:12]}"
    variables = {
        "AWS_ENDPOINT_URL": config.endpoint,
        "AWS_REGION": config.region,
        "AWS_ACCESS_KEY_ID": config.access_key_id,
        "AWS_SECRET_ACCESS_KEY": config.secret_access_key,
    }
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    for key, value in {
        "fs.s3a.endpoint": config.endpoint,
        "fs.s3a.endpoint.region": config.region,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.access.key": config.access_key_id,
        "fs.s3a.secret.key": config.secret_access_key,
    }.items():
        hadoop.set(key, value)
    root = f"s3a://{seaweedfs.BUCKET}/{prefix}/lake"
    settings = base_settings.with_root(root).with_env(
        AWS_ENDPOINT_URL=config.endpoint, AWS_REGION=config.region
    )
    try:
        yield Lake(spark, settings, monkeypatch, scratch)
    finally:
        client = server.client()
        for key in client.list(f"{prefix}/"):
            client.delete(key)
