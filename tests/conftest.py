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


#: the files whose tests take longest in the default tier, longest first (`--durations`, docs/testing.md, "Where
#: the time goes"): `scripts/test.sh`'s two workers take whole files in the order of the run, so these start
#: first and the run ends on short files, not with one worker running a long file while the other has none left
LONGEST_FIRST = (
    "test_commit_kill.py", "test_incremental.py", "test_conformance.py", "test_validation.py", "test_engines.py",
    "test_ml.py", "test_spark_item_write.py", "test_idbla_cvb.py", "test_catalog_tables.py", "test_nightly_late.py",
    "test_spark_stderr.py", "test_engine_choice.py", "test_notebook_catalogue.py", "test_crowdkit_compat.py",
)


def _order(items):
    """The sort key of the run's order: the files of :data:`LONGEST_FIRST` in its order, then the others, those
    with more tests first (pytest-xdist's own order, which `scripts/test.sh` turns off with
    ``--no-loadscope-reorder`` to keep this one).  In a file, its tests marked ``alone`` come first, the others
    keep their order.  Of those marked alone, the ones that use the SparkSession come first, so that the session
    starts before the first of them takes the lock, not while the lock is held."""
    files, counts = {}, {}
    for item in items:
        files.setdefault(item.path, len(files))
        counts[item.path] = counts.get(item.path, 0) + 1
    longest = {name: rank for rank, name in enumerate(LONGEST_FIRST)}

    def key(item):
        file = (longest.get(item.path.name, len(longest)), -counts[item.path], files[item.path])
        rank = (0, "spark" not in getattr(item, "fixturenames", ())) if _alone(item) else (1, 0)
        return file, rank

    return key


def pytest_collection_modifyitems(config, items):
    """The files longest to run go first (:func:`_order`); a file's tests marked ``alone`` run first in it, one
    after the other (:func:`_alone_if_marked`); tests marked ``full`` are skipped, saying how to run them,
    unless ``CROWDSPARK_FULL_SUITE=1``."""
    items.sort(key=_order(items))
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


def _alone(item) -> bool:
    return item.get_closest_marker("alone") is not None


class _AloneLock:
    """This worker's hold on the file lock of the tests marked ``alone``: exclusive for such a test, shared for
    any other, taken after the test's higher-scoped fixtures are set up (a session's or a module's start is
    not exclusive)."""

    def __init__(self) -> None:
        self.handle = None
        self.mode = None

    def hold(self, path: Path, mode: int) -> None:
        """Hold the lock in ``mode``, waiting for it unless this worker holds it so already."""
        if self.mode == mode:
            return
        self.release()
        handle = open(path, "a")
        fcntl.flock(handle, mode)
        self.handle, self.mode = handle, mode

    def release(self) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
        self.handle = self.mode = None


_ALONE_LOCK = _AloneLock()


@pytest.fixture(autouse=True)
def _alone_if_marked(request, tmp_path_factory):
    """Under pytest-xdist, a test marked ``alone`` (it asserts a wall-clock deadline: a barrier probe, a session
    handshake) runs while no other worker runs a test: it holds an exclusive lock that every other test holds
    shared.  The lock is let go after the test (:func:`pytest_runtest_teardown`)."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        path = tmp_path_factory.getbasetemp().parent / "crowdspark-alone.lock"
        _ALONE_LOCK.hold(path, fcntl.LOCK_EX if _alone(request.node) else fcntl.LOCK_SH)
    yield


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """Let the ``alone`` lock go after a test's teardown, except between two tests marked ``alone``: the
    worker keeps it exclusive from the first of them to the last, so it waits for the other worker once for
    the lot instead of once per test (they run one after the other: :func:`pytest_collection_modifyitems`)."""
    if nextitem is None or not (_alone(item) and _alone(nextitem)):
        _ALONE_LOCK.release()
