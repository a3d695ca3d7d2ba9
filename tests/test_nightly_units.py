"""The parts of nightly runs, without Spark: the window, the run root's pointer and retention, the lock, and
a few nights of the local engine over a CSV log with a date column."""

from __future__ import annotations

import datetime as _dt
import json
import os

import pandas as pd
import pytest

from crowdspark.config import load_config
from crowdspark.errors import ConfigError, InputError
from crowdspark.io.files import LocalFiles
from crowdspark.io.lock import OutputLock, lock_path
from crowdspark.io.chain import prune_runs
from crowdspark.io.runs import default_as_of, latest_run_before, parse_as_of, read_latest
from crowdspark.lake import LakeSpec, make_lake
from crowdspark.pipeline import aggregate
from crowdspark.pipeline.window import Window

DAY = _dt.date.fromisoformat


def window(days: int | None, end: str = "2026-11-10") -> Window:
    config = load_config(overrides=["input.date_column=date", *([f"input.window_days={days}"] if days else [])])
    return Window.of(config, DAY(end))


def test_the_window_ends_at_the_as_of_date():
    week = window(7)
    assert week.days()[0] == "2026-11-04" and week.days()[-1] == "2026-11-10"
    assert window(None).days() == []  # open-ended: every day up to the as-of date
    assert Window.of(load_config(), DAY("2026-11-10")) is None
    assert week.holds_path("s3a://lake/labels/date=2026-11-04/part-0.parquet")
    assert not week.holds_path("s3a://lake/labels/date=2026-11-11/part-0.parquet")
    assert not week.holds_path("/lake/labels/date=2026-11-03/x.parquet")
    assert week.holds_path("/lake/labels/part-0.parquet")  # the date is a column inside the file
    assert window(None).holds_path("/lake/date=2001-01-01/a.parquet")


def test_the_window_filters_rows_and_refuses_what_is_not_a_date():
    frame = pd.DataFrame({"item": list("abcd"), "date": ["2026-11-03", "2026-11-04", "2026-11-10", "2026-11-11"]})
    kept, days = window(7).filter_pandas(frame, "labels.csv")
    assert list(kept["item"]) == ["b", "c"] and days == {"2026-11-04": 1, "2026-11-10": 1}
    frame.loc[1, "date"] = "11/04/2026"
    with pytest.raises(InputError, match=r"1 value\(s\) of 'date' .* are not dates written YYYY-MM-DD such as "
                                         r"'11/04/2026'"):
        window(7).filter_pandas(frame, "labels.csv")
    with pytest.raises(InputError, match=r"have no column 'date'.*present columns: \['item'\]"):
        window(7).filter_pandas(frame[["item"]], "labels.csv")


def test_as_of_dates():
    assert parse_as_of("2026-11-25") == DAY("2026-11-25")
    for bad in ("2026-11-5", "25.11.2026", "2026-02-30"):
        with pytest.raises(ConfigError, match="--as-of must be a date such as 2026-11-25"):
            parse_as_of(bad)
    assert default_as_of("2026-11-25") == DAY("2026-11-25")
    assert default_as_of("nightly-7", today=DAY("2026-12-01")) == DAY("2026-12-01")


def test_a_second_holder_is_refused_and_a_dead_holders_lock_taken_over(tmp_path, monkeypatch):
    destination = str(tmp_path / "out")
    first = OutputLock(LocalFiles(), destination)
    with first:
        with pytest.raises(ConfigError, match=r"another run is writing .*out' \(process \d+ on .*, since .*UTC\)"):
            OutputLock(LocalFiles(), destination, patience=0).acquire()
        assert os.path.exists(lock_path(destination))
    assert not os.path.exists(lock_path(destination))
    # exclusive create (Hadoop filesystems) judges a lock by its record; flock by who holds the file
    # (tests/test_lock.py)
    record = {"crowdspark": "lock", "pid": 2 ** 22 + 7, "host": __import__("socket").gethostname(), "started": 0}
    with open(lock_path(destination), "w") as handle:  # left by a killed run whose process is gone
        json.dump(record, handle)
    monkeypatch.setattr("crowdspark.io.lock.process_alive", lambda pid: False)
    with OutputLock(LocalFiles(), destination, kernel=False) as taken:
        assert taken.held
    with open(lock_path(destination), "w") as handle:  # another host's, recent: kept
        json.dump({**record, "pid": 1, "host": "elsewhere", "started": __import__("time").time()}, handle)
    with pytest.raises(ConfigError, match="on elsewhere"):
        OutputLock(LocalFiles(), destination, kernel=False).acquire()
    assert OutputLock(LocalFiles(), destination, stale_after=0, kernel=False).acquire() is None  # too old: taken


def test_two_runs_never_share_a_checkpoint_folder_at_once(log_csv, tmp_path):
    checkpoints = tmp_path / "checkpoints"
    config = load_config(overrides=[f"engine.checkpoint_dir={checkpoints}", "engine.checkpoint_every=2"],
                         algorithm="ds")
    OutputLock(LocalFiles(), str(checkpoints)).acquire()  # a live run of this process holds the folder
    with pytest.raises(ConfigError, match=r"another run is writing .*checkpoints' \(process \d+ on "):
        aggregate(config, log_csv[0], str(tmp_path / "a"), log_csv[1])
    assert not (tmp_path / "a").exists()
    os.remove(lock_path(str(checkpoints)))
    aggregate(config, log_csv[0], str(tmp_path / "b"), log_csv[1])
    assert not os.path.exists(lock_path(str(checkpoints)))  # released when the run is done


@pytest.fixture(scope="module")
def log_csv(tmp_path_factory):
    """Six days of a small crowd as one CSV file with a date column (no partition folders: pandas reads it)."""
    lake = make_lake(LakeSpec(days=6, items_per_day=60, labels_per_item=5, n_workers=15, missing_days=(4,), seed=4))
    root = tmp_path_factory.mktemp("log")
    lake.labels.to_csv(root / "labels.csv", index=False)
    lake.truth.to_csv(root / "truth.csv", index=False)
    return str(root / "labels.csv"), str(root / "truth.csv")


def night(log_csv, out, day: int, *extra: str):
    config = load_config(overrides=["input.date_column=date", "input.window_days=3", *extra], algorithm="ds",
                         engine_name="local")
    return aggregate(config, log_csv[0], str(out), log_csv[1], run_id=f"2026-11-0{day + 1}",
                     warm_start=str(out)).summary


def test_nights_backfill_missing_day_and_retention_on_the_local_engine(log_csv, tmp_path):
    out = tmp_path / "runs"
    first = night(log_csv, out, 0)
    assert first["warm_start"]["used"] is False and first["inputs"]["days"] == {"2026-11-01": 300}
    assert first["inputs"]["missing_days"] == [] and not first["warnings"]  # the lake begins on 2026-11-01
    assert first["inputs"]["days_before_data"] == ["2026-10-30", "2026-10-31"]
    for day in (1, 2, 3):
        summary = night(log_csv, out, day)
        assert summary["warm_start"] == {"source": str(out / f"run_id=2026-11-0{day}"), "used": True}
        assert len(summary["inputs"]["days"]) == min(day + 1, 3)
    assert read_latest(str(out))["run_id"] == "2026-11-04"
    backfill = night(log_csv, out, 1)
    assert backfill["warm_start"]["source"] == str(out / "run_id=2026-11-01")
    assert read_latest(str(out))["run_id"] == "2026-11-04"
    assert latest_run_before(str(out), DAY("2026-11-03")) == str(out / "run_id=2026-11-02")
    missing = night(log_csv, out, 4)  # day 4 has no labels
    assert missing["inputs"]["missing_days"] == ["2026-11-05"]
    assert any("no new data since run '2026-11-04'" in w for w in missing["warnings"])
    with pytest.raises(InputError, match="nightly.on_no_new_data"):
        night(log_csv, out, 4, "nightly.on_no_new_data=fail")
    night(log_csv, out, 5, "nightly.keep_runs=2")
    kept = sorted(p.name for p in out.iterdir() if p.name.startswith("run_id="))
    assert kept == ["run_id=2026-11-05", "run_id=2026-11-06"]
    assert prune_runs(str(out), 1) == [str(out / "run_id=2026-11-05")]
    assert read_latest(str(out))["run_id"] == "2026-11-06"
