"""Late data and backfills on a dated lake, as a scheduler meets them: a day that arrives after the nights that
should have read it, a day rewritten after a night read it, a backfill into a chain of incremental nights, and
the days a window mode run reports as missing.

The nights that set a scene run in this process (``aggregate``); the night under test runs as a scheduler runs
it, ``python -m crowdspark aggregate`` in a subprocess, and is judged by its exit code, its message and what it
wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from crowdspark.config import load_config
from crowdspark.io.chain import read_items
from crowdspark.lake import LakeSpec, make_lake, write_lake
from crowdspark.pipeline import aggregate

SPEC = LakeSpec(days=7, items_per_day=40, labels_per_item=4, n_workers=8, n_classes=3, revisit=0.3, seed=11)
NIGHTLY = ["input.date_column=date", "incremental.mode=on"]
LATE = 2  # the day held back


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "crowdspark", *args], capture_output=True, text=True, timeout=600)


def cli_night(labels: str, out, day: int, *extra: str, keys=NIGHTLY) -> subprocess.CompletedProcess:
    sets = [arg for key in keys for arg in ("--set", key)]
    return cli("aggregate", "--labels", labels, "--output", str(out), "--run-id", SPEC.date(day), "--engine",
               "local", "--algorithm", "ds", *sets, *extra)


def night(labels: str, out, day: int, *extra: str, engine: str = "local", spark=None, keys=NIGHTLY):
    cfg = load_config(overrides=[*keys, *extra], algorithm="ds", engine_name=engine)
    return aggregate(cfg, labels, str(out), None, spark, run_id=SPEC.date(day)).summary


def summary(out, day: int) -> dict:
    return json.loads((out / f"run_id={SPEC.date(day)}" / "summary.json").read_text())


def refused(done: subprocess.CompletedProcess, *words: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    for word in words:
        assert word in done.stderr, (word, done.stderr)
    return done.stderr


@pytest.fixture(scope="module")
def data():
    return make_lake(SPEC)


def labels_up_to(data, day: int) -> pd.DataFrame:
    return data.labels[data.labels["date"] <= SPEC.date(day)]


@pytest.fixture
def held_back(data, tmp_path):
    """A lake without day ``LATE``, and nights 0 .. 4 run over it: ``(labels folder, run root)``."""
    labels = str(tmp_path / "labels")
    write_lake(data, labels, days=[SPEC.date(d) for d in range(SPEC.days) if d != LATE])
    out = tmp_path / "runs"
    for day in range(5):
        night(labels, out, day)
    return labels, out


# ---- late days -------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_day_that_arrives_late_is_fitted_by_the_next_night(data, held_back):
    labels, out = held_back
    assert summary(out, 4)["counts"]["labels"] == len(labels_up_to(data, 4)) - (data.labels["date"] ==
                                                                                SPEC.date(LATE)).sum()
    write_lake(data, labels, days=[SPEC.date(LATE)])  # day 2 arrives after night 4
    done = cli_night(labels, out, 5)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"1 day(s) arrived after the night that should have read them: ['{SPEC.date(LATE)}']" in done.stderr
    late = summary(out, 5)
    whole = labels_up_to(data, 5)
    assert late["counts"]["labels"] == len(whole)
    assert late["counts"]["items"] == whole["item"].nunique()
    assert late["incremental"]["late_days"] == [SPEC.date(LATE)]
    assert late["incremental"]["late_labels"] == int((data.labels["date"] == SPEC.date(LATE)).sum())
    assert late["inputs"]["late_days"] == {SPEC.date(LATE): late["incremental"]["late_labels"]}
    assert set(read_items(str(out))["item"]) == set(whole["item"])
    # the day is read once: the night after it finds nothing late
    assert cli_night(labels, out, 6).returncode == 0
    after = summary(out, 6)
    assert after["incremental"]["late_days"] == [] and after["counts"]["labels"] == len(labels_up_to(data, 6))


@pytest.mark.slow
def test_the_newest_night_run_again_fits_a_day_that_arrived_late(data, held_back):
    labels, out = held_back
    write_lake(data, labels, days=[SPEC.date(LATE)])
    done = cli_night(labels, out, 4)  # the newest run, again: it continues night 3, whose chain lacks day 2
    assert done.returncode == 0, done.stderr[-2000:]
    assert summary(out, 4)["counts"]["labels"] == len(labels_up_to(data, 4))


@pytest.mark.slow
def test_a_day_rewritten_after_a_night_read_it_stops_the_next_night_with_the_fix(data, held_back):
    labels, out = held_back
    day = os.path.join(labels, f"date={SPEC.date(1)}")
    extra = data.labels[data.labels["date"] == SPEC.date(1)].head(3).assign(item="added-later")
    extra.drop(columns="date").to_parquet(os.path.join(day, "part-1.parquet"), index=False)
    done = cli_night(labels, out, 5)
    refused(done, SPEC.date(1), "changed or are gone", "--full-refit")
    assert not (out / f"run_id={SPEC.date(5)}").exists()
    assert cli_night(labels, out, 5, "--full-refit").returncode == 0  # the fix the message names works
    assert summary(out, 5)["counts"]["labels"] == len(labels_up_to(data, 5)) - (
        data.labels["date"] == SPEC.date(LATE)).sum() + len(extra)


@pytest.mark.spark
@pytest.mark.slow
def test_spark_nights_fit_a_day_that_arrives_late(spark, data, tmp_path):
    labels = str(tmp_path / "labels")
    write_lake(data, labels, days=[SPEC.date(d) for d in range(4) if d != LATE])
    out = tmp_path / "runs"
    keys = ["engine.small_input_bytes=0"]
    # the first night reads days 0 and 1; the night of day 3 should have read day 2, which is not there yet
    for day in (1, 3):
        night(labels, out, day, *keys, engine="spark", spark=spark)
    write_lake(data, labels, days=[SPEC.date(LATE), SPEC.date(4)])
    late = night(labels, out, 4, *keys, engine="spark", spark=spark)
    assert late["incremental"]["late_days"] == [SPEC.date(LATE)]
    assert late["counts"]["labels"] == len(labels_up_to(data, 4))


# ---- backfills into a chain ------------------------------------------------------------------------------------
def tree(folder) -> dict[str, float]:
    return {os.path.relpath(os.path.join(d, f), folder): os.path.getmtime(os.path.join(d, f))
            for d, _, files in os.walk(folder) for f in files}


@pytest.mark.slow
def test_a_backfill_of_a_run_later_nights_build_on_is_refused(data, tmp_path):
    labels = str(tmp_path / "labels")
    write_lake(data, labels)
    out = tmp_path / "runs"
    for day in range(4):
        night(labels, out, day)
    before = tree(out)
    for extra in ((), ("--full-refit",)):
        done = cli_night(labels, out, 1, *extra)
        refused(done, f"run_id={SPEC.date(1)}", f"run_id={SPEC.date(2)}", f"run_id={SPEC.date(3)}", "--full-refit",
                "another --output")
    assert tree(out) == before
    assert cli_night(labels, out, 3).returncode == 0  # the newest run may be run again
    assert cli_night(labels, tmp_path / "other", 1).returncode == 0  # a backfill into another folder of runs


# ---- window mode -----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_window_days_before_the_lake_began_are_not_missing(data, tmp_path):
    labels = str(tmp_path / "labels.parquet")  # the date in a column: the local engine's window reads it
    kept = [SPEC.date(d) for d in range(4) if d != LATE]
    data.labels[data.labels["date"].isin(kept)].to_parquet(labels, index=False)
    out = tmp_path / "runs"
    keys = ["input.date_column=date", "input.window_days=10"]
    night(labels, out, 0, keys=keys)
    night(labels, out, 1, keys=keys)
    done = cli_night(labels, out, 3, keys=keys)
    assert done.returncode == 0, done.stderr[-2000:]
    inputs = summary(out, 3)["inputs"]
    assert inputs["missing_days"] == [SPEC.date(LATE)]  # the real gap, alone
    assert inputs["data_begins"] == SPEC.date(0)
    assert len(inputs["days_before_data"]) == 10 - 4
    assert [w for w in summary(out, 3)["warnings"] if w.startswith("no labels for")] == [
        f"no labels for 1 day(s) of the window: ['{SPEC.date(LATE)}']"]


@pytest.mark.slow
def test_a_night_without_labels_names_its_days_in_the_no_new_data_warning(data, tmp_path):
    labels = str(tmp_path / "labels")
    write_lake(data, labels, days=[SPEC.date(d) for d in range(SPEC.days) if d != LATE])
    out = tmp_path / "runs"
    night(labels, out, 0)
    night(labels, out, 1)
    done = cli_night(labels, out, LATE, "--set", "nightly.on_no_new_data=fail")
    message = refused(done, "no new data", f"({SPEC.date(LATE)} to {SPEC.date(LATE)}) holds no labels",
                      f"the previous run's of {SPEC.date(1)}")
    assert "None" not in message
