"""The same input gives the same refusal whichever reader and engine run: the pandas reader (engine local), the
pandas reader on a Spark-engine run (a small local input) and the Spark reader (engine.small_input_bytes=0), in
window runs and in incremental nights."""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import gzip
import os
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crowdspark.config import load_config
from crowdspark.errors import ConfigError, InputError
from crowdspark.pipeline import aggregate

READERS = ["local", pytest.param("spark-small", marks=pytest.mark.spark),
           pytest.param("spark", marks=[pytest.mark.spark, pytest.mark.slow])]

DAY1 = [("1", "a", "0"), ("1", "b", "1"), ("2", "a", "1"), ("2", "b", "1")]
DAY2 = [("3", "a", 0), ("3", "b", 1), ("4", "a", 1), ("1", "c", 0)]  # label stored as int64


def _config(reader: str, *overrides: str):
    engine = "local" if reader == "local" else "spark"
    distribute = ["engine.small_input_bytes=0"] if reader == "spark" else []
    return load_config(overrides=[*distribute, *overrides], algorithm="ds", engine_name=engine)


def _refusal(reader: str, request, labels, *overrides: str, **kwargs) -> str:
    """The message of the error the run of ``reader`` stops with (it must stop with an InputError or
    ConfigError: exit 2)."""
    spark = None if reader == "local" else request.getfixturevalue("spark")
    with pytest.raises((InputError, ConfigError)) as caught:
        aggregate(_config(reader, *overrides), str(labels), kwargs.pop("output", None), spark=spark, **kwargs)
    return str(caught.value)


def _write_day(root, day: str, rows) -> None:
    folder = os.path.join(root, f"date={day}")
    os.makedirs(folder, exist_ok=True)
    columns = {"item": [r[0] for r in rows], "worker": [r[1] for r in rows], "label": [r[2] for r in rows]}
    pq.write_table(pa.table(columns), os.path.join(folder, "part-0.parquet"))


MIXED = (r"labels at '.*lake': column 'label' is int64 in file '.*date=2026-11-02/part-0\.parquet' but string in "
         r"file '.*date=2026-11-01/part-0\.parquet'; the files \(days\) of one input must give each column one type.*"
         r"Write every file with the same column types")


@pytest.mark.parametrize("reader", READERS)
def test_a_day_whose_label_column_has_another_type_is_refused_by_every_reader(reader, request, tmp_path):
    lake = tmp_path / "lake"
    _write_day(lake, "2026-11-01", DAY1)
    _write_day(lake, "2026-11-02", DAY2)
    message = _refusal(reader, request, lake, "input.date_column=date", as_of=_dt.date(2026, 11, 2))
    assert re.search(MIXED, message), message


@pytest.mark.parametrize("reader", READERS)
def test_an_incremental_night_whose_new_day_has_another_label_type_is_refused_by_every_reader(reader, request,
                                                                                            tmp_path):
    lake, out = tmp_path / "lake", tmp_path / "out"
    _write_day(lake, "2026-11-01", DAY1)
    nightly = ["input.date_column=date", "incremental.mode=on"]
    spark = None if reader == "local" else request.getfixturevalue("spark")
    aggregate(_config(reader, *nightly), str(lake), str(out), spark=spark, run_id="2026-11-01")
    _write_day(lake, "2026-11-02", DAY2)
    message = _refusal(reader, request, lake, *nightly, output=str(out), run_id="2026-11-02")
    assert re.search(MIXED, message), message


def test_the_command_line_exits_2_on_a_mixed_type_incremental_night(tmp_path):
    lake, out = tmp_path / "lake", tmp_path / "out"
    _write_day(lake, "2026-11-01", DAY1)
    command = [sys.executable, "-m", "crowdspark", "aggregate", "--labels", str(lake), "--output", str(out),
               "--engine", "local", "--set", "input.date_column=date", "--set", "incremental.mode=on"]
    first = subprocess.run([*command, "--run-id", "2026-11-01"], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    _write_day(lake, "2026-11-02", DAY2)
    second = subprocess.run([*command, "--run-id", "2026-11-02"], capture_output=True, text=True)
    assert second.returncode == 2, second.stderr
    assert re.search(MIXED, second.stderr)


# ---- files Spark used to fail on with exit 1 -------------------------------------------------------------------
BASIC = "item,worker,label\n1,a,x\n1,b,y\n2,a,y\n2,b,y\n"


def _same_on_both(request, labels, *overrides: str, **kwargs) -> str:
    """The refusal of the local engine, checked to be the Spark reader's too."""
    local = _refusal("local", request, labels, *overrides, **kwargs)
    assert _refusal("spark", request, labels, *overrides, **kwargs) == local
    return local


@pytest.mark.spark
def test_a_json_line_holding_an_array_is_refused_alike(request, tmp_path):
    path = tmp_path / "labels.json"
    path.write_text('{"item": "1", "worker": "a", "label": "x"}\n[1, 2]\n{"item": "2", "worker": "b", "label": "y"}\n')
    message = _same_on_both(request, path)
    assert re.search(r"JSON file '.*labels\.json', line 2 holds a list; every line must hold one JSON object",
                     message)


@pytest.mark.spark
@pytest.mark.parametrize("damage", ["truncated", "not gzip"])
def test_a_damaged_csv_gz_is_refused_alike(request, tmp_path, damage):
    path = tmp_path / "labels.csv.gz"
    whole = gzip.compress(BASIC.encode() * 200)
    path.write_bytes(whole[: len(whole) // 2] if damage == "truncated" else BASIC.encode())
    message = _same_on_both(request, path)
    assert re.search(r"file '.*labels\.csv\.gz' cannot be decompressed \(it is truncated", message), message


@pytest.mark.spark
def test_a_date_that_is_not_a_date_in_a_window_is_refused_alike(request, tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("item,worker,label,date\n1,a,x,2026-11-01\n1,b,y,2026-11-02\n2,a,y,notadate\n2,b,y,2026-11-02\n")
    message = _same_on_both(request, path, "input.date_column=date", "input.window_days=3",
                            as_of=_dt.date(2026, 11, 2))
    assert "1 value(s) of 'date' (input.date_column) are not dates written YYYY-MM-DD such as 'notadate'" in message


@pytest.mark.spark
def test_a_filter_on_an_unknown_column_names_it_and_the_columns_there_are(spark, tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text(BASIC)
    config = load_config(overrides=["input.filter=nosuch = 1"], algorithm="ds", engine_name="spark")
    with pytest.raises(ConfigError) as caught:
        aggregate(config, str(path), None, spark=spark)
    message = str(caught.value)
    assert re.search(r"input.filter 'nosuch = 1' is not a valid Spark SQL condition on the labels: it names the "
                     r"column 'nosuch', which they do not have; their columns are \['item', 'worker', 'label'\]",
                     message), message
    assert "\n" not in message and "at org.apache" not in message


# ---- paths the run cannot create, a full disk -----------------------------------------------------------------
@contextlib.contextmanager
def _tmpfs(folder, *options: str):
    """A tmpfs mounted at ``folder`` with ``options`` (skips the test where this user cannot mount)."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(folder)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "crowdspark", "aggregate", "--engine", "local", *args],
                          capture_output=True, text=True)


@pytest.mark.parametrize("flag", ["--output", "engine.checkpoint_dir"])
@pytest.mark.parametrize("obstacle", ["a file in the way", "a name too long", "a read-only parent"])
def test_a_folder_that_cannot_be_created_exits_2_naming_it_before_reading(tmp_path, flag, obstacle):
    with contextlib.ExitStack() as stack:
        if obstacle == "a file in the way":
            (tmp_path / "file").write_text("x")
            folder, reason = tmp_path / "file" / "sub", r"'[^']*file' is not a folder"
        elif obstacle == "a name too long":
            folder, reason = tmp_path / ("n" * 300) / "sub", r"the name 'nnn[^']*' is 300 bytes long.*shorter path"
        else:
            stack.enter_context(_tmpfs(tmp_path / "ro", "ro", "size=64k"))
            folder, reason = tmp_path / "ro" / "sub", r"'[^']*ro' cannot be written"
        missing = tmp_path / "labels-not-there.csv"  # read first, it would say the labels are missing
        if flag == "--output":
            done = _cli("--labels", str(missing), "--output", str(folder))
        else:
            done = _cli("--labels", str(missing), "--output", str(tmp_path / "out"), "--set",
                        f"engine.checkpoint_dir={folder}")
    assert done.returncode == 2, done.stderr
    assert re.search(rf"crowdspark: error: {re.escape(flag)} '[^']*sub'.*{reason}", done.stderr), done.stderr
    assert "Traceback" not in done.stderr and "labels-not-there" not in done.stderr.split(flag, 1)[0]


def test_a_full_disk_exits_75_naming_the_path_being_written(tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text(BASIC * 1 + "".join(f"{i},w{i % 7},{'xy'[i % 2]}\n" for i in range(3, 3000)))
    with _tmpfs(tmp_path / "small", "size=64k"):
        done = _cli("--labels", str(labels), "--output", str(tmp_path / "small" / "out"))
    assert done.returncode == 75, done.stderr  # retryable: a run with room to write can succeed
    assert re.search(r"crowdspark: failed: the disk is full \(no space left on device\) writing "
                     r"'[^']*small/[^']*'; free space there.*run again", done.stderr), done.stderr


def test_a_full_disk_at_a_writer_that_names_no_file_names_the_table_folder(tmp_path, monkeypatch, capsys):
    from crowdspark import cli
    from crowdspark.io import tables

    def full(frame, directory, fmt):
        raise OSError(errno.ENOSPC, "Error writing bytes to file")  # as pyarrow raises it: no file name

    monkeypatch.setattr(tables, "write_frame_local", full)
    labels = tmp_path / "labels.csv"
    labels.write_text(BASIC)
    code = cli.main(["aggregate", "--labels", str(labels), "--output", str(tmp_path / "out"), "--engine", "local"])
    assert code == 75
    assert re.search(r"the disk is full \(no space left on device\) writing '[^']*out[^']*/(items|workers)'",
                     capsys.readouterr().err)
