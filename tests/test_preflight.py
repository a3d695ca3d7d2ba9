"""Problems that need no label stop a Spark-engine run with exit 2 before a SparkSession starts.

A nightly job on a shared cluster should not wait for Spark (and its executors) to learn that its output, its
checkpoint folder or its warm start is wrong.  Every case here forces the distributed path
(``engine.small_input_bytes=0``), so the run would start Spark if it got that far.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time

import pytest

from crowdspark.cli import main
from crowdspark.io.files import LocalFiles
from crowdspark.io.lock import OutputLock, lock_path
from tests.helpers import DATA

RTE = str(DATA / "rte" / "labels.csv")


@pytest.fixture
def no_spark(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a SparkSession was started")

    monkeypatch.setattr("crowdspark.spark_session.build_session", refuse)


def spark_run(*args: str) -> list[str]:
    return ["aggregate", "--labels", RTE, "--set", "engine.small_input_bytes=0", "--quiet", *args]


@pytest.fixture
def previous_mv_run(tmp_path):
    out = tmp_path / "mv-run"
    assert main(["aggregate", "--labels", RTE, "--algorithm", "mv", "--engine", "local", "--output", str(out),
                 "--quiet"]) == 0
    return out


@pytest.fixture
def held_lock():
    """Take the lock of a destination as a live run holds it (this test process), until the test ends."""
    held = []

    def hold(destination) -> None:
        held.append(OutputLock(LocalFiles(), str(destination)))
        held[-1].acquire()

    yield hold
    for lock in held:
        lock.release()


def left_lock(destination) -> None:
    """A lock file whose run is gone: its record names a process, but no process holds the file."""
    with open(lock_path(str(destination)), "w") as handle:
        json.dump({"crowdspark": "lock", "destination": str(destination), "pid": os.getpid(),
                   "host": socket.gethostname(), "started": time.time(), "token": "other"}, handle)


@pytest.mark.parametrize("case, message", [
    ("empty output", r"--output is empty"),
    ("root output", r"--output '/' is the root of a file system"),
    ("user folder", r"--output .*user' is a directory with 1 entry without crowdspark's marker"),
    ("checkpoint file", r"engine.checkpoint_dir .* is not a folder"),
    ("missing warm start", r"--warm-start .*nowhere.* does not exist"),
    ("warm start of another algorithm", r"was fitted with 'mv', this run uses 'ads'"),  # the default algorithm
    ("bad run id", r"--run-id must be a plain name"),
    ("bad as-of", r"--as-of must be a date such as 2026-11-25, but got '11/25/2026'"),
    ("locked output", r"another run is writing .*locked.* \(process \d+ on "),
    ("locked checkpoint folder", r"another run is writing .*shared-checkpoints.* \(process \d+ on "),
])
def test_stops_before_spark_starts(tmp_path, no_spark, previous_mv_run, held_lock, capsys, case, message):
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    (tmp_path / "a-file").write_text("not a folder")
    held_lock(tmp_path / "locked")
    held_lock(tmp_path / "shared-checkpoints")
    args = {
        "empty output": ["--output", ""],
        "root output": ["--output", "/"],
        "user folder": ["--output", str(tmp_path / "user")],
        "checkpoint file": ["--output", str(tmp_path / "o"), "--set", f"engine.checkpoint_dir={tmp_path / 'a-file'}",
                            "--set", "engine.checkpoint_every=5"],
        "missing warm start": ["--output", str(tmp_path / "o"), "--warm-start", str(tmp_path / "nowhere")],
        "warm start of another algorithm": ["--output", str(tmp_path / "o"), "--warm-start", str(previous_mv_run)],
        "bad run id": ["--output", str(tmp_path / "o"), "--run-id", "2026/11/25"],
        "bad as-of": ["--output", str(tmp_path / "o"), "--as-of", "11/25/2026"],
        "locked output": ["--output", str(tmp_path / "locked")],
        "locked checkpoint folder": ["--output", str(tmp_path / "o"), "--set",
                                     f"engine.checkpoint_dir={tmp_path / 'shared-checkpoints'}",
                                     "--set", "engine.checkpoint_every=5"],
    }[case]
    assert main(spark_run(*args)) == (75 if case.startswith("locked") else 2)  # a live holder: retryable
    err = capsys.readouterr().err
    assert err.startswith("crowdspark: error: ") and len(err.strip().splitlines()) == 1, err
    assert re.search(message, err), err
    assert not (tmp_path / "o").exists()
    assert (tmp_path / "user" / "notes.txt").read_text() == "mine"


def test_a_lock_left_by_a_process_that_is_gone_does_not_stop_the_run(tmp_path, no_spark, capsys):
    out = tmp_path / "o"
    left_lock(out)
    # the run gets past every check and would start Spark: the refusing stub says so (exit 1)
    assert main(spark_run("--output", str(out))) == 1
    assert "a SparkSession was started" in capsys.readouterr().err


def test_an_output_whose_folder_cannot_be_written_is_refused_before_spark(tmp_path, no_spark, monkeypatch, capsys):
    (tmp_path / "readonly").mkdir()
    real_access = os.access
    monkeypatch.setattr("os.access", lambda path, mode: False if str(path).endswith("readonly") else
                        real_access(path, mode))
    assert main(spark_run("--output", str(tmp_path / "readonly" / "out"))) == 2
    assert re.search(r"--output .*readonly/out.*: .*readonly' cannot be written by this user",
                     capsys.readouterr().err)


def test_a_lock_that_cannot_be_created_is_a_clear_error(tmp_path, monkeypatch, capsys):
    """A filesystem that refuses the write (read-only, or permissions the check could not see) stops the
    run with exit 2 before it reads a label."""
    def refuse(self, path, data):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr("crowdspark.io.files.LocalFiles.create_exclusive", refuse)
    assert main(["aggregate", "--labels", RTE, "--engine", "local", "--output", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"cannot write beside --output .*/o' \(the lock .*_crowdspark-lock-o'\): PermissionError", err)
    assert not (tmp_path / "o").exists()
