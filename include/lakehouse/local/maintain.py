"""``lakehouse maintain|backups|restore``: maintenance from a shell, without Airflow.

lakehouse maintain [--pipeline P] [--actions optimize,vacuum,backup] [--retention-hours 168] ...
lakehouse backups [PIPELINE]           the checkpoint backups and what each one holds
lakehouse restore PIPELINE LAYER [--backup-id ID|latest] [--check]

``maintain`` (every pipeline unless ``--pipeline`` names one) and ``restore`` submit
``jobs/maintenance.py`` with spark-submit, to the master
the settings name (``LAKEHOUSE_SPARK_MASTER``, local Spark when unset), exactly as the
``lakehouse_maintenance`` and ``lakehouse_restore`` DAGs do; their exit code is the job's
(0 done, 1 failed, 2 refused with a named error). ``restore --check`` runs every check and
changes nothing. ``backups`` reads the manifests directly (any root, no JVM).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from lakehouse.backups import MANIFEST, BackupManifest, backups_root, is_backup_id
from lakehouse.errors import NotAuthorized
from lakehouse.fs import storage_for
from lakehouse.local.env import subprocess_env
from lakehouse.registry import registry
from lakehouse.settings import Settings
from lakehouse.submit import LOCAL_MASTER, job_submit_spec


def submit(settings: Settings, pipeline: str, args: list[str]) -> int:
    """Run ``jobs/maintenance.py`` with spark-submit; its output goes to this terminal."""
    run_id = f"cli__{datetime.now(UTC):%Y%m%dT%H%M%S}"
    spec = job_submit_spec(settings, pipeline, "maintenance", run_id=run_id, extra_args=tuple(args))
    # The extra Spark settings (maybe secret) go in an owner-only file, never on the command line.
    with tempfile.TemporaryDirectory(prefix="lakehouse-") as scratch:
        properties = spec.write_properties(Path(scratch))
        command = spec.argv(settings.spark_master or LOCAL_MASTER, properties_file=properties)
        env = subprocess_env(settings, **({"LAKEHOUSE_SPARK_CONF": "{}"} if properties else {}))
        return subprocess.run(command, env=env, check=False).returncode


def list_backups(settings: Settings, pipeline: str) -> str:
    storage = storage_for(settings)
    folder = settings.path(backups_root(pipeline))
    ids = sorted((n for n in storage.list_names(folder) if is_backup_id(n)), reverse=True)
    if not ids:
        return f"no checkpoint backups of {pipeline} under {folder}"
    lines = [f"Checkpoint backups of {pipeline} under {folder} (newest first)"]
    for backup_id in ids:
        text = storage.read_text(f"{folder}/{backup_id}/{MANIFEST}")
        if text is None:
            lines.append(f"  {backup_id}  (no manifest: incomplete)")
            continue
        manifest = BackupManifest.from_json(text)
        tables = ", ".join(
            f"{sink.table}@{sink.version}"
            for stream in manifest.streams.values()
            for sink in stream.sinks
        )
        lines.append(f"  {backup_id}  code {manifest.code_version}  {tables}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ("maintain", "backups", "restore"):
        print(__doc__)
        return 2
    settings = Settings.from_env()
    command, rest = argv[0], argv[1:]
    if command == "maintain":
        parser = argparse.ArgumentParser(prog="lakehouse maintain", add_help=False)
        parser.add_argument("--pipeline", default="all")
        known, other = parser.parse_known_args(rest)
        return submit(settings, known.pipeline, other)
    pipelines = sorted(registry(settings).pipelines)
    if command == "backups":
        chosen = rest[:1] or pipelines
        print("\n".join(list_backups(settings, name) for name in chosen))
        return 0
    parser = argparse.ArgumentParser(prog="lakehouse restore")
    parser.add_argument("pipeline", choices=pipelines)
    parser.add_argument("layer", choices=["bronze", "silver", "gold"])
    parser.add_argument("--backup-id", default="latest")
    parser.add_argument("--check", action="store_true", help="run the checks; change nothing")
    ns = parser.parse_args(rest)
    if not ns.check:
        # A restore that changes anything needs a grant that only Airflow gives, to a user its
        # auth manager permits (the job refuses it otherwise): a shell user is nobody to it.
        raise NotAuthorized(
            "a restore that changes anything runs through Airflow, as a permitted user: "
            "trigger lakehouse_restore from the UI, or `curl -X POST -H 'Authorization: Bearer "
            "<token>' <airflow>/api/v2/dags/lakehouse_restore/dagRuns -d '{\"conf\": "
            f'{{"pipeline": "{ns.pipeline}", "layer": "{ns.layer}", "backup_id": '
            f'"{ns.backup_id}", "dry_run": false}}}}\'`. `lakehouse restore ... --check` runs '
            "the checks from here."
        )
    args = ["--restore", ns.layer, "--backup-id", ns.backup_id]
    return submit(settings, ns.pipeline, [*args, "--dry-run"] if ns.check else args)


if __name__ == "__main__":
    sys.exit(main())
