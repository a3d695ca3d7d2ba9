"""The session crowdspark builds: the settings its runs rely on."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.spark


def _sql_daemons(batches):
    """mapInArrow function: the parent process (the Python daemon) of the worker that ran the task."""
    import pyarrow as pa

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"daemon": [os.getppid()]})


def _rdd_daemon(_):
    return os.getppid()


def test_sql_and_rdd_tasks_share_one_python_daemon(spark):
    """Block building (mapInArrow) and the sweeps (RDD tasks) fork their Python workers from one daemon, so a
    run starts Python workers once per executor, not once per kind of task."""
    sql = {row.daemon for row in spark.range(0, 100, numPartitions=2).mapInArrow(_sql_daemons, "daemon long").collect()}
    rdd = set(spark.sparkContext.parallelize(range(2), 2).map(_rdd_daemon).collect())
    assert len(sql) == 1
    assert rdd == sql



def _fake_spark_home(root, zip_version: bytes, installed_version: bytes):
    """``root/site/pyspark`` as an installed pyspark whose ``python/lib`` holds spark-submit's zips."""
    import zipfile

    package = root / "site" / "pyspark"
    (package / "python" / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "version.py").write_bytes(installed_version)
    with zipfile.ZipFile(package / "python" / "lib" / "pyspark.zip", "w") as archive:
        archive.writestr("pyspark/__init__.py", "")
        archive.writestr("pyspark/version.py", zip_version)
    return package


_PROBE = ("import json, sys; from crowdspark.spark_session import prefer_installed_pyspark; "
          "moved = prefer_installed_pyspark(); print(json.dumps([moved, sys.path]))")


@pytest.mark.parametrize("zip_version, moved", [(b'__version__ = "4.3.0"\n', True),
                                                (b'__version__ = "4.2.1"\n', False)], ids=["same", "other"])
def test_spark_submit_of_the_installed_pyspark_imports_it_rather_than_its_zip(tmp_path, zip_version, moved):
    """spark-submit puts ``pyspark.zip`` first on the path; the job moves it last only when the installed package is
    the same release (its ``version.py`` is the zip's), so pyspark imports with its compiled code."""
    import json
    import subprocess
    import sys

    package = _fake_spark_home(tmp_path, zip_version, b'__version__ = "4.3.0"\n')
    archive = str(package / "python" / "lib" / "pyspark.zip")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "SPARK_HOME": str(package), "PYTHONPATH": os.pathsep.join([archive, str(package.parent),
                                                                                     repo])}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    moved_entries, path = json.loads(out.stdout)
    assert moved_entries == ([archive] if moved else [])
    assert (path.index(archive) > path.index(str(package.parent))) == moved
