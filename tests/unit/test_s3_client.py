"""The S3 client and settings without a server: SigV4 signing, the s3a settings Spark gets,
named errors, and what `make -s env` exports."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

import pytest

from lakehouse.errors import ConfigurationError, S3Unavailable
from lakehouse.fs import ArrowStorage, LocalStorage, delta_storage_options, storage_for
from lakehouse.leases import store_for
from lakehouse.local import seaweedfs
from lakehouse.local.env import project_env
from lakehouse.s3 import ACCESS_FILE_ENV, S3Client, S3Config, sign, split_uri
from lakehouse.settings import Settings
from lakehouse.submit import REDACTION_REGEX, spark_conf


def test_sigv4_matches_the_aws_documentation_example() -> None:
    # "Example: GET Object" of the S3 API reference (Signature Version 4, header auth).
    config = S3Config(
        "https://examplebucket.s3.amazonaws.com",
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "us-east-1",
    )
    headers = sign(
        config,
        "GET",
        "https://examplebucket.s3.amazonaws.com/test.txt",
        {"Range": "bytes=0-9"},
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        now=datetime(2013, 5, 24, tzinfo=UTC),
    )
    assert headers["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )


def test_spark_conf_points_s3a_at_the_endpoint_without_credentials() -> None:
    env = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:8333/",
        "AWS_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "AKIDCANARY",
        "AWS_SECRET_ACCESS_KEY": "secret-canary",
    }
    conf = spark_conf(Settings.from_env(env))
    s3a = {k: v for k, v in conf.items() if k.startswith("spark.hadoop.fs.s3a.")}
    assert s3a == {
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:8333",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    }
    assert not any("canary" in f"{k}={v}".lower() for k, v in conf.items())
    assert not any(k.startswith("spark.hadoop.fs.s3a.") for k in spark_conf(Settings.from_env({})))
    # Spark copies AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY into these Hadoop properties
    # (see the round trip below); its redaction must hide them in the UI and event logs.
    for key in ("fs.s3a.access.key", "fs.s3a.secret.key", "fs.s3a.session.token"):
        assert re.search(REDACTION_REGEX, f"spark.hadoop.{key}")


def test_a_bad_endpoint_or_missing_credentials_are_named() -> None:
    with pytest.raises(ConfigurationError, match="AWS_ENDPOINT_URL"):
        Settings.from_env({"AWS_ENDPOINT_URL": "127.0.0.1:8333"})
    with pytest.raises(ConfigurationError, match="AWS_SECRET_ACCESS_KEY"):
        S3Config.from_env({"AWS_ENDPOINT_URL": "http://127.0.0.1:8333", "AWS_ACCESS_KEY_ID": "x"})
    config = S3Config("http://127.0.0.1:9", "id", "secret-canary", "us-east-1")
    assert "secret-canary" not in repr(config)
    with pytest.raises(S3Unavailable):
        S3Client(config, "lakehouse", timeout_s=2).bucket_exists()


def test_env_exports_the_local_server_without_overriding_the_user(tmp_path: Path) -> None:
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    assert not any(k.startswith("AWS_") for k in project_env(settings, {}))

    credentials = seaweedfs.local_credentials(settings, create=True)
    assert credentials is not None
    assert seaweedfs.credentials_path(settings).stat().st_mode & 0o777 == 0o600
    exported = project_env(settings, {"LAKEHOUSE_S3_PORT": "9555"})
    assert {k: v for k, v in exported.items() if k.startswith("AWS_")} == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9555",
        "AWS_ACCESS_KEY_ID": credentials.access_key_id,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key,
        "AWS_REGION": "us-east-1",
    }
    assert project_env(settings, {"AWS_REGION": "eu-west-1"})["AWS_REGION"] == "eu-west-1"
    # Another endpoint: the local keys are not added to it.
    elsewhere = project_env(settings, {"AWS_ENDPOINT_URL": "https://s3.example.com"})
    assert not any(k.startswith("AWS_") for k in elsewhere)


def test_the_access_file_carries_credentials_only_and_wins_over_the_environment(
    tmp_path: Path,
) -> None:
    config = S3Config(
        "http://127.0.0.1:8333", "AKIDFILE", "secret-canary", "us-east-1", "token-canary"
    )
    path = config.write_access_file(tmp_path / "s3-access.json")
    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_text()) == {
        "access_key_id": "AKIDFILE",
        "secret_access_key": "secret-canary",
        "session_token": "token-canary",
    }
    env = {
        ACCESS_FILE_ENV: str(path),
        "AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
        "AWS_ACCESS_KEY_ID": "AKIDENV",
        "AWS_SECRET_ACCESS_KEY": "from-env",
    }
    read = S3Config.from_env(env)
    assert (read.access_key_id, read.secret_access_key, read.session_token) == (
        "AKIDFILE",
        "secret-canary",
        "token-canary",
    )
    assert "canary" not in repr(read)
    assert read.secrets == ("secret-canary", "token-canary")
    assert read.hadoop_credentials() == {
        "fs.s3a.access.key": "AKIDFILE",
        "fs.s3a.secret.key": "secret-canary",
        "fs.s3a.session.token": "token-canary",
        "fs.s3a.aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        ),
    }
    assert read.storage_options()["AWS_SESSION_TOKEN"] == "token-canary"
    with pytest.raises(ConfigurationError, match=ACCESS_FILE_ENV):
        S3Config.from_env({ACCESS_FILE_ENV: str(tmp_path / "missing.json")})


def test_every_light_side_reader_takes_the_roots_access(tmp_path: Path) -> None:
    from pyarrow import fs

    config = S3Config("http://127.0.0.1:9", "AKID", "secret", "eu-west-1")
    s3_root = Settings.from_env({"LAKEHOUSE_ROOT": "s3a://bucket/lake"})
    storage = storage_for(s3_root, config)
    assert isinstance(storage, ArrowStorage) and isinstance(storage.filesystem, fs.S3FileSystem)
    assert storage.filesystem.region == "eu-west-1"
    assert delta_storage_options(s3_root, config)["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9"
    local = Settings.from_env({"LAKEHOUSE_ROOT": str(tmp_path)})
    assert isinstance(storage_for(local), LocalStorage) and delta_storage_options(local) == {}
    assert split_uri("s3a://bucket/lake/_locks/x") == ("bucket", "lake/_locks/x")
    # Settings read again for other LAKEHOUSE_* values keep their S3 endpoint and region.
    endpoint_env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_REGION": "eu-west-1"}
    again = Settings.from_env(endpoint_env).with_env(LAKEHOUSE_ORDERS_SOURCE="kafka")
    assert (again.s3_endpoint, again.s3_region) == ("http://127.0.0.1:9", "eu-west-1")
    # The lease needs create-if-absent: a root without a lease store is refused, by name.
    abfs = Settings.from_env({"LAKEHOUSE_ROOT": "abfss://c@account.dfs.core.windows.net/lake"})
    with pytest.raises(ConfigurationError, match="create-if-absent"):
        store_for(abfs, "silver/orders")
    lease_store = store_for(s3_root, "silver/orders", config)
    assert lease_store.where == "s3://bucket/lake/_locks/silver__orders/"


def test_the_s3_connection_maps_to_credentials_endpoint_and_region(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from airflow.sdk import BaseHook

    from lakehouse_airflow import s3_access

    class Conn:
        login = "AKIDCONN"
        password = "secret-canary"
        extra_dejson: ClassVar[dict[str, str]] = {
            "endpoint_url": "http://127.0.0.1:8333",
            "region_name": "eu-central-1",
            "aws_session_token": "token-canary",
        }

    masked: list[str] = []
    monkeypatch.setattr(BaseHook, "get_connection", classmethod(lambda cls, conn_id: Conn()))
    monkeypatch.setattr("airflow.sdk.log.mask_secret", masked.append)
    for variable in ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(variable, raising=False)
    settings = Settings.from_env({"LAKEHOUSE_ROOT": "s3a://lakehouse/lake"})
    mapped, config = s3_access.s3_access(settings)
    assert config is not None
    assert (mapped.s3_endpoint, mapped.s3_region) == ("http://127.0.0.1:8333", "eu-central-1")
    assert (config.access_key_id, config.session_token) == ("AKIDCONN", "token-canary")
    assert set(masked) == {"secret-canary", "token-canary"}
    env = s3_access.s3_job_env(mapped, config, tmp_path)
    assert env == {
        ACCESS_FILE_ENV: str(tmp_path / "s3-access.json"),
        "AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
        "AWS_REGION": "eu-central-1",
    }
    assert not any("canary" in value for value in env.values())
    # The environment wins over the connection's endpoint; a local root needs nothing.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9999")
    assert s3_access.s3_access(settings.with_env(AWS_ENDPOINT_URL="http://127.0.0.1:9999"))[
        0
    ].s3_endpoint == ("http://127.0.0.1:9999")
    assert s3_access.s3_access(Settings.from_env({"LAKEHOUSE_ROOT": str(tmp_path)}))[1] is None
    # A typo in the extra is refused by name rather than silently ignored.
    Conn.extra_dejson = {"endpoint": "http://127.0.0.1:8333"}
    with pytest.raises(ConfigurationError, match=r"unknown extra fields \['endpoint'\]"):
        s3_access.s3_access(settings)
