"""Settings: one typed model read from the environment, per-pipeline settings named after
the pipeline, every variable documented."""

from __future__ import annotations

import pytest

from lakehouse.errors import ConfigurationError
from lakehouse.registry import get_pipeline
from lakehouse.settings import Settings, SourceKind, settings_table
from tests import PROJECT_DIR


def test_every_setting_is_in_the_readme() -> None:
    readme = (PROJECT_DIR / "README.md").read_text()
    missing = [variable for variable, _, _ in settings_table() if f"`{variable}`" not in readme]
    assert missing == []


def test_each_pipeline_reads_its_own_settings() -> None:
    settings = Settings.from_env(
        {
            "LAKEHOUSE_CUSTOMERS_SOURCE": "Kafka",
            "LAKEHOUSE_CUSTOMERS_KAFKA_TOPICS": "crm.a, crm.b",
            "LAKEHOUSE_ORDERS_SCHEDULE": "none",
        }
    )
    customers = settings.pipeline(get_pipeline("customers"))
    orders = settings.pipeline(get_pipeline("orders"))
    assert customers.source == SourceKind.KAFKA and orders.source == SourceKind.FILE
    assert customers.subscription.topics == ("crm.a", "crm.b")
    assert orders.subscription.topics == ("orders.events",)  # the declaration's
    assert orders.schedule is None
    assert customers.schedule == "0 */3 * * *"  # the declaration's


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"LAKEHOUSE_LOCK_WAIT_S": "x"}, "LAKEHOUSE_LOCK_WAIT_S='x'"),
        ({"LAKEHOUSE_MAX_FILES_PER_TRIGGER": "0"}, "LAKEHOUSE_MAX_FILES_PER_TRIGGER='0'"),
        ({"LAKEHOUSE_SPARK_CONF": "[1]"}, "must be a JSON object"),
        ({"LAKEHOUSE_SPARK_MASTER": "mesos://x"}, "not a Spark master URL"),
        ({"LAKEHOUSE_DRIVER_MEMORY": "lots"}, "use e.g. 2g"),
        ({"AWS_ENDPOINT_URL": "127.0.0.1:8333"}, "AWS_ENDPOINT_URL"),
    ],
)
def test_a_bad_setting_is_refused_naming_its_variable(env: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        Settings.from_env(env)


def test_a_bad_pipeline_setting_names_its_variable() -> None:
    settings = Settings.from_env({"LAKEHOUSE_ORDERS_SOURCE": "ftp"})
    with pytest.raises(ConfigurationError, match="LAKEHOUSE_ORDERS_SOURCE='ftp': use 'file'"):
        settings.pipeline(get_pipeline("orders"))


def test_defaults_come_from_the_project_folder() -> None:
    settings = Settings.from_env({"LAKEHOUSE_HOME": "/srv/lake-project"})
    assert settings.root == "/srv/lake-project/data/lakehouse"
    assert str(settings.jar_cache) == "/srv/lake-project/.cache/jars"
    assert settings.pipelines_dir == "/srv/lake-project/pipelines"
    assert settings.with_root("s3a://b/l").path("silver/x") == "s3a://b/l/silver/x"
