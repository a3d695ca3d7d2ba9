"""The session crowdspark builds: the settings its runs rely on."""

from __future__ import annotations

import os

import pytest

from crowdspark import spark_session


def _sql_daemons(batches):
    """mapInArrow function: the parent process (the Python daemon) of the worker that ran the task."""
    import pyarrow as pa

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"daemon": [os.getppid()]})


def _rdd_daemon(_):
    return os.getppid()


@pytest.mark.spark
def test_sql_and_rdd_tasks_share_one_python_daemon(spark):
    """Block building (mapInArrow) and the sweeps (RDD tasks) fork their Python workers from one daemon, so a
    run starts Python workers once per executor, not once per kind of task."""
    sql = {row.daemon for row in spark.range(0, 100, numPartitions=2).mapInArrow(_sql_daemons, "daemon long").collect()}
    rdd = set(spark.sparkContext.parallelize(range(2), 2).map(_rdd_daemon).collect())
    assert len(sql) == 1
    assert rdd == sql



@pytest.mark.parametrize("argv", [
    ["aggregate", "--labels", "x", "--output", "y", "--master", "local[2]"],
    ["aggregate", "--labels", "x", "--output", "y", "--master=local[2]"],
    ["aggregate", "--labels", "x", "--engine", "local", "--output", "y"],
    ["aggregate", "--labels", "x", "--engine=local", "--output", "y"],
    ["report", "run"],
    [],
])
def test_no_early_session_when_the_command_line_decides_otherwise(monkeypatch, argv):
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    monkeypatch.setattr(spark_session, "build_session", lambda *a, **k: pytest.fail("a session was started"))
    assert spark_session.start_session("app", argv) is None


def test_no_early_session_outside_spark_submit(monkeypatch):
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setattr(spark_session, "build_session", lambda *a, **k: pytest.fail("a session was started"))
    assert spark_session.start_session("app", ["aggregate", "--labels", "x", "--output", "y"]) is None


def test_an_early_session_is_the_built_one_and_its_error_is_raised_by_get(monkeypatch):
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    built = object()
    monkeypatch.setattr(spark_session, "build_session", lambda app_name: (app_name, built))
    assert spark_session.start_session("app", ["aggregate", "--labels", "x"]).get() == ("app", built)

    def fail(app_name):
        raise RuntimeError("the JVM is gone")

    monkeypatch.setattr(spark_session, "build_session", fail)
    starting = spark_session.start_session("app", ["aggregate", "--labels", "x"])
    with pytest.raises(RuntimeError, match="the JVM is gone"):
        starting.get()
