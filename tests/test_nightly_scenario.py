"""A scheduler's nights over a dated lake, on both engines: the README's nightly section, step by step.

A simulated lake (crowdspark.lake: 12 days, a new class from day 8, no labels on day 10) is aggregated night by
night with a 7-day window and a warm start from the output root, as cron or Airflow would run it; then a
backfill, killed runs (before and during the commit), a failed night, a missing day and two runs of one day at
once.  "local" reads the lake with Spark and fits on the driver (the small-input path); "spark" distributes.
"""

from __future__ import annotations

import json
import threading

import pandas as pd
import pytest

from crowdspark.config import load_config
from crowdspark.errors import ConfigError, IncompatibleModelError, InputError
from crowdspark.io.runs import read_latest
from crowdspark.lake import LakeSpec, make_lake, write_lake
from crowdspark.pipeline import aggregate

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPEC = LakeSpec(days=12, items_per_day=150, labels_per_item=5, n_workers=30, n_classes=3, start="2026-11-01",
                new_class_day=7, missing_days=(9,), seed=3)
NIGHT = {d: SPEC.date(d) for d in range(SPEC.days)}
WINDOW = ["input.date_column=date", "input.window_days=7", "ds.max_iter=200"]


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("lake")
    data = make_lake(SPEC)
    gold = write_lake(data, str(root / "labels"))
    return str(root / "labels"), gold, data


def config(engine: str, *extra: str):
    small = [] if engine == "local" else ["engine.small_input_bytes=0"]
    return load_config(overrides=[*WINDOW, *small, *extra], algorithm="ds", engine_name="spark")


def night(spark, lake, out, engine, day, *extra, **kwargs):
    labels, gold, _ = lake
    return aggregate(config(engine, *extra), labels, str(out), gold, spark, run_id=NIGHT[day],
                     warm_start=kwargs.pop("warm_start", str(out)), **kwargs).summary


def run_items(spark, out):
    """The documented read of every run's items: one row per item and run, with the run id as a column."""
    return spark.read.option("basePath", str(out)).parquet(f"{out}/run_id=*/items")


@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.full)])
def test_nights_of_a_scheduler(spark, lake, tmp_path, engine, monkeypatch):
    out = tmp_path / "results"
    labels_by_day = lake[2].labels.groupby("date").size()

    # nights 0-4: each reads the 7 days up to its own date and warm starts from the night before
    summaries = {d: night(spark, lake, out, engine, d) for d in range(5)}
    for d, summary in summaries.items():
        window = [NIGHT[x] for x in range(max(0, d - 6), d + 1)]
        assert summary["inputs"]["days"] == {day: int(labels_by_day[day]) for day in window}
        assert summary["inputs"]["as_of"] == NIGHT[d] and summary["inputs"]["run_id"] == NIGHT[d]
        # the files Spark lists for the window: one per day with labels
        assert summary["inputs"]["files"]["labels"]["files"] == len(window)
        if d:
            assert summary["warm_start"] == {"source": str(out / f"run_id={NIGHT[d - 1]}"), "used": True}
    # the first night runs the same command as every other: its warm start finds no run yet, and it says so
    assert summaries[0]["warm_start"]["used"] is False and "holds no run yet" in summaries[0]["warm_start"]["reason"]
    assert read_latest(str(out))["run_id"] == NIGHT[4]
    latest = json.loads((out / "_LATEST.json").read_text())
    assert latest["path"] == f"run_id={NIGHT[4]}" and latest["as_of"] == NIGHT[4]  # not relative to the cwd

    # a backfill of night 2 reads night 2's days, not the newer ones, warm starts from night 1, and leaves
    # _LATEST.json on night 4
    backfill = night(spark, lake, out, engine, 2)
    assert backfill["inputs"]["days"] == summaries[2]["inputs"]["days"]
    assert backfill["warm_start"]["source"] == str(out / f"run_id={NIGHT[1]}")
    assert backfill["metrics"] == summaries[2]["metrics"]
    assert read_latest(str(out))["run_id"] == NIGHT[4]

    # a run killed after its result was staged, before the commit: readers never see the staging directory,
    # and the next run of the same night removes it
    def killed_before_commit(self):
        raise KeyboardInterrupt("killed")

    with monkeypatch.context() as patch:
        patch.setattr("crowdspark.io.sink.StagedOutput.commit", killed_before_commit)
        patch.setattr("crowdspark.io.sink.StagedOutput.abort", lambda self: None)  # a kill runs no cleanup
        with pytest.raises(KeyboardInterrupt):
            night(spark, lake, out, engine, 5)
    assert [p.name for p in out.iterdir() if p.name.startswith("_crowdspark-staging-")]
    assert run_items(spark, out).select("run_id").distinct().count() == 5  # nights 0-4, no staging
    again = night(spark, lake, out, engine, 5)
    assert "removed" in again["recovered"]
    assert not [p for p in out.iterdir() if p.name.startswith("_crowdspark-")]

    # a run killed inside the commit, between moving the old result aside and renaming the new one: the next
    # run finishes that commit first
    from crowdspark.io.files import LocalFiles

    real_rename = LocalFiles.rename
    calls = []

    def rename_then_die(self, source, target):
        calls.append(target)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed between the renames")
        return real_rename(self, source, target)

    with monkeypatch.context() as patch:
        patch.setattr(LocalFiles, "rename", rename_then_die)
        patch.setattr("crowdspark.io.sink.StagedOutput.abort", lambda self: None)
        with pytest.raises(KeyboardInterrupt):
            night(spark, lake, out, engine, 5)
    assert not (out / f"run_id={NIGHT[5]}").exists()
    resumed = night(spark, lake, out, engine, 5)
    assert "finished an interrupted commit" in resumed["recovered"]
    assert (out / f"run_id={NIGHT[5]}" / "summary.json").exists()

    night(spark, lake, out, engine, 6)
    # night 7 brings a new class: with the default policy it stops before the fit, and writes nothing
    with pytest.raises(IncompatibleModelError, match=r"class set changed"):
        night(spark, lake, out, engine, 7)
    assert read_latest(str(out))["run_id"] == NIGHT[6]
    # the policy "cold" runs it without the warm start, and says so
    cold = night(spark, lake, out, engine, 7, "nightly.on_incompatible=cold")
    assert cold["warm_start"]["used"] is False and "class set changed" in cold["warm_start"]["reason"]
    assert cold["classes"] == ["0", "1", "2", "3"]
    # the next nights warm start from the latest good run again
    assert night(spark, lake, out, engine, 8)["warm_start"]["source"] == str(out / f"run_id={NIGHT[7]}")

    # day 9 has no labels: night 9 reads nothing newer than night 8, and says so (or stops, by configuration)
    missing = night(spark, lake, out, engine, 9)
    assert NIGHT[9] in missing["inputs"]["missing_days"]
    assert any("no new data since run" in w for w in missing["warnings"])
    with pytest.raises(InputError, match=r"no new data since run .*nightly.on_no_new_data"):
        night(spark, lake, out, engine, 9, "nightly.on_no_new_data=fail")

    # two runs of one night at once: the second stops at once, saying who holds the output
    started, release = threading.Event(), threading.Event()
    real_fit = __import__("crowdspark.pipeline.run", fromlist=["fit_prepared"]).fit_prepared
    errors = []

    def slow_fit(*args, **kwargs):
        started.set()
        release.wait(60)
        return real_fit(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr("crowdspark.pipeline.run.fit_prepared", slow_fit)
        first = threading.Thread(target=lambda: errors.append(night(spark, lake, out, engine, 10)))
        first.start()
        assert started.wait(120)
        with pytest.raises(ConfigError, match=r"another run is writing .*run_id=2026-11-11.* \(process \d+ on "):
            aggregate(config(engine), lake[0], str(out), lake[1], spark, run_id=NIGHT[10], warm_start=str(out))
        release.set()
        first.join(120)
    assert errors and errors[0]["inputs"]["run_id"] == NIGHT[10]
    assert read_latest(str(out))["run_id"] == NIGHT[10]

    # every run's items in one read, with the run as a column; the saved models are skipped
    runs = run_items(spark, out).groupBy("run_id").count().toPandas()
    assert set(runs["run_id"].astype(str)) == {NIGHT[d] for d in range(11)}
    assert pd.read_parquet(out / f"run_id={NIGHT[10]}" / "items").shape[0] == errors[0]["counts"]["items"]


def test_retention_keeps_the_newest_runs(spark, lake, tmp_path):
    out = tmp_path / "kept"
    for d in range(4):
        night(spark, lake, out, "local", d, "nightly.keep_runs=2")
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("run_id=")) == [
        f"run_id={NIGHT[2]}", f"run_id={NIGHT[3]}"]
