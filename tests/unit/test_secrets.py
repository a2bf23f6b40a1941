"""Secrets in Spark settings and errors: never on a command line, never in an error text, and
the safety settings cannot be changed."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lakehouse.errors import ConfigurationError, LakehouseError
from lakehouse.secrets import (
    MASK,
    PROTECTED_SPARK_CONF,
    mask,
    mask_all,
    remember,
    secret_values,
)
from lakehouse.settings import Settings
from lakehouse.submit import job_submit_spec, spark_conf, write_properties

CANARY = "canary-s3-5e3f0a9c2b"


def settings_with(conf: dict[str, str], tmp_path: Path) -> Settings:
    """Settings with ``conf`` and a jar cache of its own under ``tmp_path``, laid out as setup
    leaves it (empty files: these tests compose command lines and start no JVM), so that they
    pass in a fresh clone before ``make setup``."""
    from lakehouse.jars import jar_dir, jar_sets, project_jar

    settings = Settings.from_env(
        {"LAKEHOUSE_ROOT": str(tmp_path / "lake"), "LAKEHOUSE_SPARK_CONF": json.dumps(conf)}
    ).model_copy(update={"jars_dir": tmp_path / "jars"})
    for name, artifacts in jar_sets().items():
        directory = jar_dir(settings, name)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / ".resolved").write_text(" ".join(artifacts))
    jar = project_jar(settings)
    jar.parent.mkdir(parents=True, exist_ok=True)
    jar.touch()
    return settings


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("spark.redaction.regex", "(?i)nothing"),
        ("spark.sql.files.ignoreMissingFiles", "true"),
        ("spark.databricks.delta.retentionDurationCheck.enabled", "false"),
        ("SPARK.SQL.FILES.IGNOREMISSINGFILES", "true"),
    ],
)
def test_a_safety_setting_cannot_be_overridden(key: str, value: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as refused:
        settings_with({key: value, "spark.hadoop.fs.s3a.secret.key": CANARY}, tmp_path)
    message = str(refused.value)
    assert key in message and "LAKEHOUSE_SPARK_CONF" in message
    assert CANARY not in message, "the error repeats the secret"


def test_a_bad_spark_conf_is_refused_without_repeating_it() -> None:
    with pytest.raises(ConfigurationError) as refused:
        Settings.from_env({"LAKEHOUSE_SPARK_CONF": f'{{"spark.x.password": "{CANARY}"'})
    assert CANARY not in str(refused.value)


def test_extra_settings_go_in_an_owner_only_file_not_on_the_command_line(tmp_path: Path) -> None:
    conf = {
        "spark.hadoop.fs.s3a.secret.key": CANARY,
        "spark.executor.memory": "4g",
        "spark.sql.shuffle.partitions": "7",  # an extra replaces the project's value
    }
    spec = job_submit_spec(settings_with(conf, tmp_path), "orders", "silver", run_id="r1")
    with pytest.raises(ValueError, match="properties file"):
        spec.argv("local[1]")
    path = spec.write_properties(tmp_path)
    assert path is not None
    argv = spec.argv("local[1]", properties_file=path)
    assert CANARY not in " ".join(argv) and "spark.executor.memory" not in " ".join(argv)
    assert argv[argv.index("--properties-file") + 1] == str(path)
    assert "--load-spark-defaults" in argv
    assert "spark.sql.shuffle.partitions=7" not in argv
    assert not any(a.startswith("spark.sql.shuffle.partitions=") for a in argv)
    # The safety settings stay on the command line, which wins over any file.
    for key, value in PROTECTED_SPARK_CONF.items():
        assert f"{key}={value}" in argv
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert f"spark.hadoop.fs.s3a.secret.key={CANARY}" in text
    assert "spark.sql.shuffle.partitions=7" in text
    # In-process sessions get the same settings, the safety ones last.
    assert spark_conf(settings_with(conf, tmp_path))["spark.sql.shuffle.partitions"] == "7"


def test_without_extra_settings_there_is_no_file(tmp_path: Path) -> None:
    spec = job_submit_spec(settings_with({}, tmp_path), "orders", "bronze", run_id="r1")
    assert spec.write_properties(tmp_path) is None
    assert "--properties-file" not in spec.argv("local[1]")


def test_properties_are_escaped_as_java_reads_them(tmp_path: Path) -> None:
    path = write_properties(
        tmp_path / "p.properties", {"a.key": "x=y: z#1\\n", "b": "é\nnext", "c": " lead"}
    )
    lines = path.read_text(encoding="ascii").splitlines()
    assert lines == ["a.key=x\\=y\\:\\ z\\#1\\\\n", "b=\\u00e9\\nnext", "c=\\ lead"]
    with pytest.raises(FileExistsError):
        write_properties(path, {})  # never over an existing file


def test_secret_values_are_those_of_secret_keys() -> None:
    conf = {
        "spark.hadoop.fs.s3a.secret.key": "s3cret-1",
        "spark.hadoop.fs.s3a.access.key": "AKIA-1",
        "spark.kafka.sasl.jaas.config": "x password=p",
        "spark.executor.memory": "4g",
    }
    assert sorted(secret_values(conf)) == ["AKIA-1", "s3cret-1", "x password=p"]


def test_mask_hides_known_secrets_and_values_of_secret_keys() -> None:
    remember("remembered-1234")
    text = (
        "failed: remembered-1234 at spark.hadoop.fs.s3a.secret.key=abc123 and "
        "password: 'hunter22', other=ok; given-secret"
    )
    masked = mask(text, ["given-secret"])
    assert masked is not None
    for secret in ("remembered-1234", "abc123", "hunter22", "given-secret"):
        assert secret not in masked
    assert "other=ok" in masked and f"spark.hadoop.fs.s3a.secret.key={MASK}" in masked
    summary = {"error": "x token=t0k3n", "actions": [{"error": "given-secret"}], "rows": 3}
    assert mask_all(summary, ["given-secret"]) == {
        "error": f"x token={MASK}",
        "actions": [{"error": MASK}],
        "rows": 3,
    }


def test_a_failed_or_refused_record_never_holds_a_secret() -> None:
    from jobs.runtime import RunRecord

    remember(CANARY)
    record = RunRecord("orders", "silver", "r1", "started", datetime.now(UTC))
    record.fail(RuntimeError(f"S3 said no to secret.key={CANARY}"))
    assert record.status == "failed" and CANARY not in (record.error or "")
    record.fail(LakehouseError(f"refused with {CANARY}"))
    assert record.status == "refused" and CANARY not in (record.error or "")
    assert CANARY not in json.dumps(record.summary(), default=str)


def test_the_operator_masks_its_summary_and_hands_over_the_file(tmp_path: Path) -> None:
    from lakehouse_airflow.operators import LakehouseJobOperator

    operator = LakehouseJobOperator(task_id="silver", pipeline="orders", layer="silver")
    settings = settings_with({"spark.hadoop.fs.s3a.secret.key": CANARY}, tmp_path)
    spec = job_submit_spec(settings, "orders", "silver", run_id="r1")
    operator._hand_over_extra_conf(spec, tmp_path)
    assert operator._properties_file == str(tmp_path / "spark.properties")
    assert operator.env_vars == {"LAKEHOUSE_SPARK_CONF": "{}"}
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"status": "failed", "error": f"Boom {CANARY}"}))
    assert operator._read_summary(summary) == {"status": "failed", "error": f"Boom {MASK}"}
