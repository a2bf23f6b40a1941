"""Child process of ``tests/test_s3.py``: Spark writes a Delta table to s3a and reads it back.

A process of its own because S3A reads the credentials from the JVM's environment, which is
fixed when the JVM starts; the test session's JVM may have started long before the S3
server's variables were set. The session is built exactly as jobs build theirs
(``jobs.session.build_spark``, settings from the environment), so this proves the path a job
takes: ``AWS_ENDPOINT_URL`` -> ``spark_conf``, credentials -> S3A's default chain.

    python -m tests.s3_spark_roundtrip <table URI> <report.json> <event log folder>
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from decimal import Decimal

from pyspark.sql import types as T

from jobs.session import build_spark
from lakehouse.settings import Settings

SCHEMA = T.StructType(
    [
        T.StructField("order_id", T.StringType()),
        T.StructField("total", T.DecimalType(18, 2)),
        T.StructField("order_ts", T.TimestampType()),
        T.StructField("region", T.StringType()),
    ]
)
ROWS = [
    ("o-1", Decimal("12.50"), datetime(2026, 11, 3, 0, 15), "us-east"),
    ("o-2", Decimal("0.00"), datetime(2026, 11, 3, 1, 0), "eu-west"),
    ("o-3", None, datetime(2026, 11, 3, 23, 59, 59), "São Paulo"),
]


def as_json(row: tuple) -> list:
    order_id, total, order_ts, region = row
    return [order_id, None if total is None else str(total), order_ts.isoformat(), region]


def main(argv: list[str]) -> int:
    table, report_path, event_log_dir = argv
    # The event log records the Spark and Hadoop properties: the test checks it for secrets.
    event_log = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": event_log_dir,
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }
    spark = build_spark(
        "lakehouse-s3-roundtrip", Settings.from_env(), master="local[2]", extra_conf=event_log
    )
    try:
        spark.createDataFrame(ROWS, SCHEMA).write.format("delta").save(table)
        back_df = spark.read.format("delta").load(table).orderBy("order_id")
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        report = {
            "written": [as_json(r) for r in ROWS],
            "read": [as_json(tuple(r)) for r in back_df.collect()],
            "spark_conf": dict(spark.sparkContext.getConf().getAll()),
            # What S3A was told about credentials: nothing, so its default chain decides.
            "hadoop": {
                key: hadoop.get(key)
                for key in (
                    "fs.s3a.access.key",
                    "fs.s3a.secret.key",
                    "fs.s3a.aws.credentials.provider",
                    "fs.s3a.endpoint",
                    "fs.s3a.path.style.access",
                )
            },
        }
    finally:
        spark.stop()
    with open(report_path, "w") as handle:
        json.dump(report, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
