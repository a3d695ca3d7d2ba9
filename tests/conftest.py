"""Shared fixtures: one SparkSession for the whole test session, and the bundled datasets."""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

#: the JVM options of every Spark application the tests start (the session below, and the command lines and
#: spark-submits of the tests' subprocesses, which inherit the environment): only the C1 compiler and the
#: serial collector.  A test's JVM lives a few seconds to a few minutes on kilobytes of data, so C2's compile
#: threads and the parallel collector's threads cost more CPU than they save: about half of a Spark
#: application's CPU (docs/decisions/0310-test-jvms-c1-serial-gc.md).  The launcher reads SPARK_SUBMIT_OPTS.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)

#: the environment variable that runs the full tier too (docs/testing.md)
FULL_SUITE = "CROWDSPARK_FULL_SUITE"


def full_suite() -> bool:
    """Whether this run includes the tests marked ``full`` (``CROWDSPARK_FULL_SUITE=1``)."""
    return os.environ.get(FULL_SUITE, "") not in ("", "0")


def pytest_collection_modifyitems(config, items):
    """Tests marked ``full`` are skipped, saying how to run them, unless ``CROWDSPARK_FULL_SUITE=1``."""
    if full_suite():
        return
    skip = pytest.mark.skip(reason=f"full tier: run with {FULL_SUITE}=1, `bash scripts/test.sh --full` "
                                   "(docs/testing.md)")
    for item in items:
        if item.get_closest_marker("full") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def spark():
    """A local SparkSession shared by every Spark test: 2 cores, a failed task is retried once (local[2,2],
    for the fault-tolerance tests), UI off, few shuffle partitions."""
    from crowdspark.spark_session import build_session

    session = build_session(
        "crowdspark-tests",
        master="local[2,2]",
        conf={"spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "2"},
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(autouse=True)
def _alone_if_marked(request, tmp_path_factory):
    """Under pytest-xdist, a test marked ``alone`` (it asserts a wall-clock deadline: a barrier probe, a session
    handshake) runs while no other worker runs a test: it holds an exclusive lock that every other test holds
    shared."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    path = tmp_path_factory.getbasetemp().parent / "crowdspark-alone.lock"
    with open(path, "a") as handle:
        alone = request.node.get_closest_marker("alone") is not None
        fcntl.flock(handle, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
