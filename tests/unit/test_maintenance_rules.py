"""Maintenance rules without Spark: params, OPTIMIZE and VACUUM decisions, checkpoint files."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from lakehouse.backups import (
    BackupManifest,
    SinkState,
    SourceState,
    StreamBackup,
    backups_to_drop,
    new_backup_id,
)
from lakehouse.checkpoints import CheckpointLog, DeltaPosition, parse_offsets, txn_problem
from lakehouse.errors import InvalidRunParams, RetentionBelowFloor
from lakehouse.maintenance import (
    OptimizePolicy,
    PartitionHealth,
    StreamNeed,
    parse_interval_hours,
    partition_predicate,
    plan_optimize,
    plan_vacuum,
)
from lakehouse.params import MaintenanceParams
from lakehouse.registry import get_pipeline, registry
from lakehouse.settings import Settings

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "hours"),
    [
        ("interval 1 week", 168.0),
        ("interval 7 days", 168.0),
        ("interval 36 hours", 36.0),
        ("interval 0 seconds", 0.0),
        ("interval 1 day 12 hours", 36.0),
        ("30 minutes", 0.5),
    ],
)
def test_delta_interval_properties_in_hours(text: str, hours: float) -> None:
    assert parse_interval_hours(text) == pytest.approx(hours)


def test_an_interval_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError):
        parse_interval_hours("a fortnight")


ORDERS = get_pipeline("orders")
TABLES = registry().tables


def test_params_default_to_everything_with_a_week_of_retention() -> None:
    params = MaintenanceParams.parse({})
    params.check_against(TABLES, floor_hours=168)
    assert params.actions == ("optimize", "vacuum", "backup")
    assert params.retention_hours == 168
    assert [t.name for t in params.selected(TABLES)][-1] == "ops/run_log"
    assert params.only("vacuum").job_args() == [
        "--actions",
        "vacuum",
        "--retention-hours",
        "168",
        "--keep-backups",
        "7",
        "--small-file-mb",
        "32.0",
        "--min-small-files",
        "10",
    ]


def test_a_retention_below_the_floor_is_refused_with_a_named_error() -> None:
    with pytest.raises(RetentionBelowFloor, match="below the floor of 168 h"):
        MaintenanceParams.parse({"retention_hours": 24}).check_against(TABLES, floor_hours=168)
    params = MaintenanceParams.parse({"retention_hours": 0})
    params.check_against(TABLES, 0)
    assert params.retention_hours == 0


def test_every_bad_param_is_reported_at_once() -> None:
    with pytest.raises(InvalidRunParams) as caught:
        MaintenanceParams.parse({"actions": ["shrink"], "keep_backups": 0, "x": 1})
    message = str(caught.value)
    for part in ("unknown parameters ['x']", "shrink", "keep_backups=0"):
        assert part in message
    with pytest.raises(InvalidRunParams, match="gold/nope"):
        MaintenanceParams.parse({"tables": ["gold/nope"]}).check_against(TABLES, 168)


def test_settings_floor_and_margin_come_from_the_environment() -> None:
    settings = Settings.from_env(
        {"LAKEHOUSE_VACUUM_FLOOR_HOURS": "24", "LAKEHOUSE_MAINTENANCE_SCHEDULE": "none"}
    )
    assert (settings.vacuum_floor_hours, settings.vacuum_margin_s) == (24, 3600)
    assert settings.maintenance_schedule is None
    assert Settings.from_env({}).vacuum_floor_hours == 168


def partition(small: int, written: int | None, day: str = "2026-11-26") -> PartitionHealth:
    return PartitionHealth(
        values=(("ingest_date", day),),
        files=small + 1,
        bytes=small * 1000 + 10**9,
        small_files=small,
        small_bytes=small * 1000,
        bytes_written=written,
    )


def test_optimize_compacts_only_changed_partitions_with_many_small_files() -> None:
    bronze = ORDERS.table("bronze/orders_events")
    policy = OptimizePolicy(min_small_files=10)
    parts = [
        partition(12, 12_000, "2026-11-25"),  # changed, fragmented: compact
        partition(30, 0, "2026-11-24"),  # fragmented but untouched since the last OPTIMIZE
        partition(3, 3_000, "2026-11-26"),  # changed but healthy
    ]
    decision = plan_optimize(bronze, parts, policy, last_optimize_version=7)
    assert decision.run
    assert [p.label for p in decision.partitions] == ["ingest_date=2026-11-25"]
    assert "since the last OPTIMIZE (version 7)" in decision.reason
    assert partition_predicate(bronze, decision.partitions) == (
        "(`ingest_date` = CAST('2026-11-25' AS DATE))"
    )


def test_a_healthy_or_untouched_table_is_skipped_with_the_reason() -> None:
    silver = ORDERS.table("silver/orders")
    policy = OptimizePolicy(min_small_files=10)
    untouched = plan_optimize(silver, [partition(40, 0)], policy, 3)
    assert not untouched.run and untouched.reason.startswith("healthy: nothing written")
    healthy = plan_optimize(silver, [partition(9, 100)], policy, None)
    assert not healthy.run and "the most is 9" in healthy.reason
    unknown = plan_optimize(silver, [partition(10, None)], policy, None)
    assert unknown.run and unknown.zorder_by == ("order_id",)


def need(stream: str, needed: int, since: datetime, latest: int = 20) -> StreamNeed:
    return StreamNeed(stream, latest, needed, since + timedelta(seconds=1), since)


def test_vacuum_raises_the_retention_for_the_stream_that_lags_most() -> None:
    decision = plan_vacuum(
        requested_hours=168,
        floor_hours=168,
        table_retention_hours=168,
        needs=[
            need("orders.gold", 5, NOW - timedelta(days=10)),
            need("orders.other", 15, NOW - timedelta(days=2)),
        ],
        now=NOW,
        margin_s=3600,
    )
    assert decision.run and decision.raised_for == ("orders.gold",)
    assert decision.retention_hours == pytest.approx(24 * 10 + 1)
    assert decision.cutoff == NOW - timedelta(days=10, hours=1)
    assert "orders.gold lags 16 version(s)" in decision.reason


def test_vacuum_keeps_the_requested_retention_when_no_stream_lags_that_far() -> None:
    decision = plan_vacuum(
        requested_hours=200,
        floor_hours=168,
        table_retention_hours=336,  # the table's own property wins over the request
        needs=[need("orders.gold", 19, NOW - timedelta(hours=2))],
        now=NOW,
        margin_s=3600,
    )
    assert (decision.retention_hours, decision.raised_for) == (336, ())


def test_vacuum_skips_a_table_whose_reader_cannot_be_protected() -> None:
    broken = StreamNeed("orders.gold", 9, problem="its checkpoint reads table id x")
    decision = plan_vacuum(
        requested_hours=168,
        floor_hours=168,
        table_retention_hours=168,
        needs=[broken],
        now=NOW,
        margin_s=0,
    )
    assert not decision.run and "orders.gold: its checkpoint reads table id x" in decision.reason
    with pytest.raises(RetentionBelowFloor):
        plan_vacuum(
            requested_hours=1,
            floor_hours=168,
            table_retention_hours=168,
            needs=[],
            now=NOW,
            margin_s=0,
        )


OFFSETS = (
    "v1\n"
    '{"batchWatermarkMs":0,"batchTimestampMs":1795652332763,"conf":{}}\n'
    '{"sourceVersion":1,"reservoirId":"253e","reservoirVersion":4,"index":-1,'
    '"isStartingVersion":false}\n'
)


def test_a_delta_source_offset_is_read_from_the_offset_log() -> None:
    entry = parse_offsets(3, OFFSETS)
    assert DeltaPosition.from_offset(entry.sources[0]) == DeltaPosition("253e", 4, -1, False)
    assert DeltaPosition.from_offset({"logOffset": 2}) is None
    assert parse_offsets(0, 'v1\n{}\n{"logOffset":0}\n').sources == ({"logOffset": 0},)


def test_a_stream_resumes_from_its_last_committed_batch() -> None:
    assert CheckpointLog("q", (3, 4, 5), (3, 4)).resume_batch == 4  # batch 5 is replayed
    assert CheckpointLog("q", (0,), ()).resume_batch == 0
    assert CheckpointLog(None, (), ()).resume_batch is None


def test_a_table_ahead_of_its_checkpoint_is_inconsistent() -> None:
    assert txn_problem("t", None, None, None) is None
    assert txn_problem("t", 4, 4, 4) is None
    assert txn_problem("t", 5, 4, 5) is None  # crashed after the commit: replay is skipped
    assert txn_problem("t", 2, 4, 4) is None  # batches 3 and 4 wrote nothing to t
    assert "older than its table" in (txn_problem("t", 6, 4, 5) or "")


def test_backups_keep_the_newest_and_downstream_follows_the_registry() -> None:
    ids = [new_backup_id(NOW + timedelta(minutes=i)) for i in range(5)]
    assert backups_to_drop([*ids, ".x.partial", "replaced"], keep=3) == ids[:2]
    lakehouse = registry()
    assert [s.name for s in lakehouse.downstream_of(ORDERS.stream("bronze"))] == [
        "orders.silver",
        "orders.gold",
        "segment_sales.gold",  # another pipeline's gold reads silver/orders
    ]
    assert lakehouse.downstream_of(ORDERS.stream("gold")) == []


def test_a_manifest_survives_its_json() -> None:
    manifest = BackupManifest(
        backup_id=new_backup_id(NOW),
        pipeline="orders",
        created_at=NOW.isoformat(),
        code_version="0.1.0+abc",
        spark_version="4.1.1",
        delta_version="4.4.0",
        streams={
            "gold": StreamBackup(
                layer="gold",
                checkpoint="_checkpoints/gold/sales_hourly",
                query_id="q",
                last_offsets=3,
                last_commit=3,
                files={"metadata": 45, "offsets/3": 700},
                sources=(SourceState("delta", "silver/orders", "id", 9, json.loads("{}")),),
                sinks=(SinkState("gold/sales_hourly", "gid", 4, 3),),
            )
        },
    )
    assert BackupManifest.from_json(manifest.to_json()) == manifest


def test_restore_args_come_from_the_params() -> None:
    from lakehouse_airflow.operators import restore_args

    settings = Settings.from_env({})
    params = {"pipeline": "orders", "layer": "silver", "backup_id": "latest", "dry_run": False}
    assert restore_args({}, params, settings) == [  # type: ignore[arg-type]
        "--restore",
        "silver",
        "--backup-id",
        "latest",
    ]
    with pytest.raises(InvalidRunParams, match="no bronze layer"):
        restore_args(  # type: ignore[arg-type]
            {}, {**params, "pipeline": "segment_sales", "layer": "bronze"}, settings
        )
