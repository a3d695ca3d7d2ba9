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

