"""The exit codes a scheduler acts on (``crowdspark.errors``, ``docs/operations.md``): 0 success, 2 what a
person must fix, 75 what a later try can get past, 1 anything else."""

from __future__ import annotations

import errno
import json
import subprocess
import sys

import pytest

from crowdspark.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    EXIT_RETRYABLE,
    ConfigError,
    IncompatibleModelError,
    InputError,
    OutputBusyError,
    classify_failure,
)
from crowdspark.io.files import LocalFiles
from crowdspark.io.lock import OutputLock
from tests.helpers import DATA

RTE = ["--labels", str(DATA / "rte" / "labels.csv"), "--gold", str(DATA / "rte" / "truth.csv")]


class _JavaThrowable:
    """A py4j ``java_exception`` stand-in: ``toString`` and ``getCause`` as the JVM's objects answer them."""

    def __init__(self, text: str, cause: _JavaThrowable | None = None) -> None:
        self.text, self.cause = text, cause

    def toString(self) -> str:  # noqa: N802 - the Java name
        return self.text

    def getCause(self):  # noqa: N802 - the Java name
        return self.cause


class Py4JJavaError(Exception):
    """Shaped as py4j's: a short text, the JVM throwable in ``java_exception``."""

    __module__ = "py4j.protocol"

    def __init__(self, java: _JavaThrowable) -> None:
        super().__init__("An error occurred while calling o123.treeAggregate.")
        self.java_exception = java


# what the driver sees when every attempt of a task ran on an executor that went away
LOST = Py4JJavaError(_JavaThrowable(
    "org.apache.spark.SparkException: Job aborted due to stage failure: Task 3 in stage 7.0 failed 4 times, most "
    "recent failure: Lost task 3.3 in stage 7.0 (TID 41) (10.0.0.7 executor 2): ExecutorLostFailure (executor 2 "
    "exited caused by one of the running tasks) Reason: Container killed by YARN for exceeding memory limits."))
# what the driver sees when an executor's Python cannot import crowdspark: the worker's traceback is the message
# of the cause, below the Java stack
NO_CROWDSPARK = Py4JJavaError(_JavaThrowable(
    "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 1.0 failed 1 times",
    _JavaThrowable("org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
                   '  File "/opt/spark/python/pyspark/worker.py", line 1847, in main\n'
                   "    func, profiler, deserializer, serializer = read_command(pickleSer, infile)\n"
                   "ModuleNotFoundError: No module named 'crowdspark'\n")))
# a task whose own code failed: Spark's failure, but nothing a retry cures
TASK_BUG = Py4JJavaError(_JavaThrowable(
    "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 1.0 failed 4 times",
    _JavaThrowable("java.lang.ArithmeticException: / by zero")))


@pytest.mark.parametrize("exc, code, kind", [
    (InputError("labels at 'x' have no column 'item'"), EXIT_BAD_INPUT, "bad_input"),
    (ConfigError("ds.max_iter must be an integer >= 1, but got 0"), EXIT_BAD_INPUT, "bad_config"),
    (IncompatibleModelError("the saved model has classes ['a', 'b']"), EXIT_BAD_INPUT, "incompatible_history"),
    (NO_CROWDSPARK, EXIT_BAD_INPUT, "executor_environment"),
    (OutputBusyError("another run is writing 'out'"), EXIT_RETRYABLE, "output_busy"),
    (OSError(errno.ENOSPC, "No space left on device", "/data/out/items/part-0.parquet"), EXIT_RETRYABLE, "disk_full"),
    (OSError(errno.EDQUOT, "Disk quota exceeded", "/data/out/items/part-0.parquet"), EXIT_RETRYABLE, "disk_full"),
    (LOST, EXIT_RETRYABLE, "executor_lost"),
    (TASK_BUG, EXIT_FAILURE, "failure"),
    (RuntimeError("a defect"), EXIT_FAILURE, "failure"),
    (OSError(errno.EIO, "Input/output error"), EXIT_FAILURE, "failure"),
], ids=lambda value: value if isinstance(value, str) else None)
def test_each_failure_has_its_documented_exit_code(exc, code, kind):
    failure = classify_failure(exc, "/data/out")
    assert (failure.code, failure.kind, failure.retryable) == (code, kind, code == EXIT_RETRYABLE)
    assert failure.error_class == type(exc).__name__


def test_a_full_disk_names_the_path_it_was_writing_or_the_output():
    named = classify_failure(OSError(errno.ENOSPC, "No space left on device", "/data/out/items/part-0.parquet"), "/o")
    assert "the disk is full (no space left on device) writing '/data/out/items/part-0.parquet'" in named.message
    unnamed = classify_failure(OSError(errno.EDQUOT, "Disk quota exceeded"), "/data/out")
    assert "writing '/data/out'" in unnamed.message and "run again" in unnamed.message


def test_missing_crowdspark_on_executors_is_said_in_the_drivers_message_with_the_fix():
    message = classify_failure(NO_CROWDSPARK).message
    assert "the executors' Python cannot import 'crowdspark'" in message
    assert "--py-files crowdspark.zip" in message and "docs/cluster.md" in message
    other = Py4JJavaError(_JavaThrowable("org.apache.spark.api.python.PythonException: Traceback ...\n"
                                         "ModuleNotFoundError: No module named 'scipy.special'"))
    assert "install scipy in the executors' Python" in classify_failure(other).message
    # the driver's own missing module is no executor's
    assert classify_failure(ModuleNotFoundError("No module named 'crowdspark'")).code == EXIT_FAILURE


def test_a_lost_executor_says_a_new_run_can_succeed():
    failure = classify_failure(LOST)
    assert failure.message.startswith("Spark lost executors while the run was computing (")
    assert "run again" in failure.message


def test_a_run_on_an_output_a_live_run_holds_exits_75_and_writes_nothing(tmp_path):
    """A real second process meets the lock this test process holds (the kernel's flock on a local output)."""
    out, status = tmp_path / "out", tmp_path / "status.json"
    with OutputLock(LocalFiles(), str(out)):
        done = subprocess.run([sys.executable, "-m", "crowdspark", "aggregate", *RTE, "--engine", "local",
                               "--algorithm", "mv", "--output", str(out), "--status-file", str(status), "--quiet"],
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == EXIT_RETRYABLE, done.stderr
    assert done.stderr.startswith(f"crowdspark: error: another run is writing '{out}' (process ")
    assert "(exit 75: the same command can succeed later)" in done.stderr
    assert not out.exists()
    written = json.loads(status.read_text())
    assert (written["exit_code"], written["retryable"], written["error"]["kind"]) == (75, True, "output_busy")


@pytest.mark.spark
@pytest.mark.slow
def test_executors_without_crowdspark_stop_the_run_with_exit_2_and_the_fix(spark, tmp_path, monkeypatch):
    """The executors' Python is a virtual environment that has the dependencies but not crowdspark (a ``.pth``
    line adds this environment's site-packages, whose editable crowdspark is not loaded from there); the
    driver's message names crowdspark and the fix, not the Python worker's traceback."""
    import sysconfig

    from crowdspark.config import load_config
    from crowdspark.pipeline.run import aggregate

    venv = tmp_path / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = str(venv / "bin" / "python")
    assert subprocess.run([python, "-c", "import numpy, pyspark"], cwd=tmp_path).returncode == 0
    assert subprocess.run([python, "-c", "import crowdspark"], cwd=tmp_path, capture_output=True).returncode != 0
    # the executors' interpreter and environment are taken when a function is shipped: these apply to this run;
    # PYTHONSAFEPATH keeps the worker's working directory (this repository) off its path
    monkeypatch.setattr(spark.sparkContext, "pythonExec", python)
    monkeypatch.setitem(spark.sparkContext.environment, "PYTHONSAFEPATH", "1")
    config = load_config(algorithm="mv", overrides=["engine.small_input_bytes=0"])
    with pytest.raises(Exception) as caught:
        aggregate(config, str(DATA / "rte" / "labels.csv"), str(tmp_path / "out"), spark=spark)
    failure = classify_failure(caught.value, str(tmp_path / "out"))
    assert (failure.code, failure.kind) == (EXIT_BAD_INPUT, "executor_environment"), failure
    assert failure.message.startswith("the executors' Python cannot import 'crowdspark' (ModuleNotFoundError")
    assert "--py-files crowdspark.zip" in failure.message and "docs/cluster.md" in failure.message
    assert not (tmp_path / "out").exists()
