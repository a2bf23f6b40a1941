"""The local S3 server and the s3a plumbing: real requests against a real server.

What the rest of the project relies on: the server refuses anonymous and wrongly signed
requests, holds the bucket ``lakehouse``, and refuses a conditional create of an existing
key with 412 (the lock on S3 is built on that); Spark writes Delta through s3a with the
credentials only in the environment, and delta-rs reads the same rows without a JVM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path

import pytest

from lakehouse.errors import S3AccessDenied
from lakehouse.local import seaweedfs
from lakehouse.local.services import S3Server
from lakehouse.s3 import S3Client, S3Config
from tests import PROJECT_DIR


@pytest.fixture
def prefix(s3_server: S3Server) -> Iterator[str]:
    """A key prefix of the bucket for one test, emptied afterwards."""
    name = f"tests/{uuid.uuid4().hex[:12]}"
    yield name
    client = s3_server.client()
    for key in client.list(f"{name}/"):
        client.delete(key)


# ------------------------------------------------------------------------ the server


def test_only_signed_requests_are_served(s3_server: S3Server, prefix: str) -> None:
    client = s3_server.client()
    assert client.bucket_exists()

    anonymous_list = client.request("GET", query={"list-type": "2"}, signed=False)
    assert (anonymous_list.status, anonymous_list.error_code) == (403, "AccessDenied")
    anonymous_put = client.request("PUT", f"{prefix}/anonymous", body=b"x", signed=False)
    assert anonymous_put.status == 403

    forged = S3Client(
        S3Config(s3_server.endpoint, s3_server.credentials.access_key_id, "wrong", "us-east-1"),
        seaweedfs.BUCKET,
    )
    forged_put = forged.request("PUT", f"{prefix}/forged", body=b"x")
    assert (forged_put.status, forged_put.error_code) == (403, "SignatureDoesNotMatch")
    with pytest.raises(S3AccessDenied):
        forged.put(f"{prefix}/forged", b"x")

    client.put(f"{prefix}/signed", b"signed")
    assert client.list(f"{prefix}/") == [f"{prefix}/signed"]
    assert client.get(f"{prefix}/signed") == b"signed"


def test_put_if_absent_refuses_an_existing_key(s3_server: S3Server, prefix: str) -> None:
    client = s3_server.client()
    key = f"{prefix}/locks/silver orders+1.json"  # a space and a plus: the key is encoded
    assert client.put_if_absent(key, b'{"owner": "first"}') is True

    second = client.request("PUT", key, body=b'{"owner": "second"}', headers={"If-None-Match": "*"})
    assert (second.status, second.error_code) == (412, "PreconditionFailed")
    assert client.put_if_absent(key, b'{"owner": "third"}') is False
    assert client.get(key) == b'{"owner": "first"}'

    client.delete(key)
    assert client.get(key) is None
    assert client.put_if_absent(key, b'{"owner": "fourth"}') is True
    assert client.get(key) == b'{"owner": "fourth"}'


@pytest.mark.spark
def test_spark_writes_delta_to_s3a_and_delta_rs_reads_it(
    s3_server: S3Server, prefix: str, tmp_path: Path
) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    table = f"s3a://{seaweedfs.BUCKET}/{prefix}/t"
    config = s3_server.config()
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "AWS_", "PYSPARK_"))
    }
    env.update(
        LAKEHOUSE_ROOT=f"s3a://{seaweedfs.BUCKET}/{prefix}",
        LAKEHOUSE_SHUFFLE_PARTITIONS="2",
        AWS_ENDPOINT_URL=config.endpoint,
        AWS_REGION=config.region,
        AWS_ACCESS_KEY_ID=config.access_key_id,
        AWS_SECRET_ACCESS_KEY=config.secret_access_key,
    )
    report_path = tmp_path / "report.json"
    event_logs = tmp_path / "events"
    event_logs.mkdir()
    argv = [
        sys.executable,
        "-m",
        "tests.e2e.s3_spark_roundtrip",
        table,
        str(report_path),
        event_logs.as_uri(),
    ]
    result = subprocess.run(
        argv, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(report_path.read_text())

    # Spark reads back exactly what it wrote.
    assert report["read"] == report["written"]
    assert report["read"] == [
        ["o-1", "12.50", "2026-11-03T00:15:00", "us-east"],
        ["o-2", "0.00", "2026-11-03T01:00:00", "eu-west"],
        ["o-3", None, "2026-11-03T23:59:59", "São Paulo"],
    ]
    # The secret reached S3A from the environment only: not through the Spark configuration
    # or the command line. (Spark itself copies AWS_* into the Hadoop configuration, where
    # S3A's default chain finds them; no provider was configured.)
    secret = config.secret_access_key
    assert not any(secret in f"{k}={v}" for k, v in report["spark_conf"].items())
    assert secret not in " ".join(argv)
    hadoop = report["hadoop"]
    assert hadoop["fs.s3a.endpoint"] == config.endpoint
    assert hadoop["fs.s3a.path.style.access"] == "true"
    assert hadoop["fs.s3a.access.key"] == config.access_key_id
    assert "EnvironmentVariableCredentialsProvider" in hadoop["fs.s3a.aws.credentials.provider"]
    assert "spark.hadoop.fs.s3a.aws.credentials.provider" not in report["spark_conf"]
    # The event log lists the Hadoop properties, the copied keys among them, redacted.
    events = "".join(p.read_text() for p in event_logs.rglob("*") if p.is_file())
    assert '"fs.s3a.secret.key"' in events
    assert secret not in events
    assert config.access_key_id not in events

    # delta-rs, no JVM: the same rows from the same objects.
    delta = DeltaTable(table, storage_options=config.storage_options())
    query = QueryBuilder().register("t", delta)
    rows = pa.table(query.execute("SELECT * FROM t ORDER BY order_id").read_all()).to_pylist()
    assert [
        [
            r["order_id"],
            None if r["total"] is None else str(r["total"]),
            r["order_ts"].astimezone(UTC).replace(tzinfo=None).isoformat(),
            r["region"],
        ]
        for r in rows
    ] == report["written"]
    assert delta.version() == 0
    assert any(key.endswith(".parquet") for key in s3_server.client().list(f"{prefix}/t/"))
