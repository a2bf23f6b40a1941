"""Which runs start their driver with the quick compiler only (and evaluate without
generated code): small known inputs; the project's own JVM code and what it is handed."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lakehouse.errors import JarsMissing
from lakehouse.jvm import QUICK_JIT_OPTION, compiles_quickly, with_quick_jit
from lakehouse.pending import SMALL_MAX_BYTES, SMALL_MAX_ROWS, Pending


def small(rows: int | None, size: int | None) -> bool:
    return Pending("silver", 1, rows, "", size).small


def test_a_small_known_input_compiles_quickly() -> None:
    assert small(0, None) and small(SMALL_MAX_ROWS, None)
    assert not small(SMALL_MAX_ROWS + 1, None)
    assert small(None, SMALL_MAX_BYTES) and not small(None, SMALL_MAX_BYTES + 1)
    # Rows, when known, decide: a few big records are still few.
    assert small(10, SMALL_MAX_BYTES * 4)


def test_an_unknown_size_keeps_the_full_compiler() -> None:
    assert not small(None, None)


def test_a_driver_kept_between_runs_keeps_the_full_compiler() -> None:
    assert compiles_quickly(small_input=True, keep_s=0)
    assert not compiles_quickly(small_input=True, keep_s=600)
    assert not compiles_quickly(small_input=False, keep_s=0)


def test_the_option_is_added_once() -> None:
    once = with_quick_jit("-Duser.timezone=UTC")
    assert once == f"-Duser.timezone=UTC {QUICK_JIT_OPTION}"
    assert with_quick_jit(once) == once


def test_a_spec_with_the_quick_compiler_changes_its_driver_options_only() -> None:
    from lakehouse.submit import SubmitSpec

    key = "spark.driver.extraJavaOptions"
    spec = SubmitSpec("jobs/silver.py", ("--pipeline", "orders"), "n", {key: "-Da=1", "x": "y"})
    quick = spec.with_quick_jit()
    assert quick.conf == {key: f"-Da=1 {QUICK_JIT_OPTION}", "x": "y"}
    assert spec.conf[key] == "-Da=1"  # the spec it came from is as it was
    assert dataclasses.replace(quick, conf=spec.conf) == spec
    assert quick.with_quick_jit() == quick


def test_the_project_jar_is_named_by_its_sources(tmp_path: Path) -> None:
    from lakehouse.jars import project_jar
    from lakehouse.settings import Settings

    source = tmp_path / "jvm" / "src" / "lakehouse" / "A.java"
    source.parent.mkdir(parents=True)
    source.write_text("class A {}")
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    first = project_jar(settings)
    assert first == project_jar(settings) and first.parent == settings.jar_cache / "lakehouse"
    source.write_text("class A { int a; }")
    assert project_jar(settings) != first  # a changed source is a new jar
    with pytest.raises(JarsMissing, match="not built"):
        project_jar(settings, must_exist=True)


def test_the_validator_gets_every_rule_of_a_declaration() -> None:
    """Each ``FieldSpec`` attribute reaches the JVM validator: a rule added to the spec and
    not handed over would be silently ignored."""
    from jobs.validation import spec_json
    from lakehouse.registry import get_pipeline
    from lakehouse.specs import FieldSpec

    record = get_pipeline("orders").record
    assert record is not None
    handed = json.loads(spec_json(record))
    assert handed["event_id"] == record.event_id
    assert [f["name"] for f in handed["fields"]] == record.names
    attributes = {f.name for f in dataclasses.fields(FieldSpec)}
    assert all(attributes <= set(f) for f in handed["fields"])
    total = next(f for f in handed["fields"] if f["name"] == "total")
    assert total["optional_when"] == ["event_type", ["cancelled"]]
    assert total["sql_type"] == "DECIMAL(18,2)" and total["maximum"] == "1000000000000"


def test_the_code_archive_carries_the_bytecode_a_driver_imports(tmp_path: Path) -> None:
    """A driver imports the project from the code archive, where Python writes no bytecode:
    the archive carries it, and tracebacks still name and show the source."""
    import subprocess
    import sys
    import zipfile

    from lakehouse.settings import Settings
    from lakehouse.submit import code_archive

    for package, folder in (("lakehouse", "include/lakehouse"), ("jobs", "jobs")):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text(f"NAME = {package!r}\n")
    (tmp_path / "jobs" / "boom.py").write_text("def fail():\n    raise ValueError('boom')\n")
    archive = code_archive(Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)}))
    assert sorted(zipfile.ZipFile(archive).namelist()) == [
        "jobs/__init__.py", "jobs/__init__.pyc", "jobs/boom.py", "jobs/boom.pyc",
        "lakehouse/__init__.py", "lakehouse/__init__.pyc",
    ]  # fmt: skip
    script = (
        "import sys, traceback; sys.path.insert(0, sys.argv[1]); import jobs.boom, lakehouse\n"
        "print(jobs.boom.__file__, lakehouse.__file__, lakehouse.NAME)\n"
        "try:\n    jobs.boom.fail()\nexcept ValueError:\n    traceback.print_exc(file=sys.stdout)"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", script, str(archive)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert (
        out.stdout.splitlines()[0]
        == f"{archive}/jobs/boom.pyc {archive}/lakehouse/__init__.pyc lakehouse"
    )
    assert f'File "{archive}/jobs/boom.py", line 2, in fail' in out.stdout
    assert "raise ValueError('boom')" in out.stdout


def test_a_driver_imports_the_installed_pyspark_not_spark_submits_source_zips(
    tmp_path: Path,
) -> None:
    """pip's pyspark carries the zips spark-submit puts first on a driver's path: they move
    behind the installed package (py4j's only for the same installed version); a Spark
    distribution's own zips stay where they are."""
    from jobs import prefer_installed_pyspark

    site = tmp_path / "site-packages"
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    (site / "py4j-0.10.9.9.dist-info").mkdir()
    archive, stdlib = str(tmp_path / "lakehouse-1.zip"), str(tmp_path / "lib" / "python3.11")
    pyspark_zip, py4j_zip = str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")
    path = [archive, pyspark_zip, py4j_zip, stdlib, str(site)]
    assert prefer_installed_pyspark(path) == [archive, stdlib, str(site), pyspark_zip, py4j_zip]

    (site / "py4j-0.10.9.9.dist-info").rename(site / "py4j-0.10.9.8.dist-info")
    assert prefer_installed_pyspark(path) == [archive, py4j_zip, stdlib, str(site), pyspark_zip]

    distribution = tmp_path / "opt" / "spark" / "python" / "lib"
    path = [archive, str(distribution / "pyspark.zip"), stdlib, str(site)]
    assert prefer_installed_pyspark(path) == path
    assert prefer_installed_pyspark([archive, pyspark_zip, stdlib]) == [
        archive,
        pyspark_zip,
        stdlib,
    ]


def test_a_layer_tasks_jar_sets_do_not_import_pyspark() -> None:
    """An Airflow task builds its job's spark-submit spec from the jar sets, which need
    pyspark's version and folder: read from its metadata and its package's location, not by
    importing pyspark, which cost every layer task that submits 0.2-0.7 s."""
    code = (
        "import json, sys\n"
        "from lakehouse.jars import jar_sets\n"
        "print(json.dumps([jar_sets()['s3'], 'pyspark' in sys.modules]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    s3_jars, imported = json.loads(out.stdout.strip().splitlines()[-1])
    import pyspark

    installed = Path(pyspark.__file__).parent
    (client,) = (installed / "jars").glob("hadoop-client-api-*.jar")
    hadoop = client.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    assert s3_jars == [f"org.apache.hadoop:hadoop-aws:{hadoop}"]
    assert not imported, "the jar sets imported pyspark"
    from lakehouse.jars import pyspark_dir

    assert pyspark_dir() == installed
