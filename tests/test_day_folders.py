"""A local date-partitioned lake (``<root>/date=YYYY-MM-DD/``) in window mode is read with pandas, one folder per
day of the window, without Spark (:mod:`crowdspark.io.day_folders`)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from crowdspark.cli import main
from crowdspark.lake import LakeSpec, make_lake, write_lake
from tests.helpers import DATA

SPEC = LakeSpec(days=8, items_per_day=30, labels_per_item=3, n_workers=8, missing_days=(3,))
WINDOW = ["--set", "input.date_column=date", "--set", "input.window_days=6", "--as-of", SPEC.date(7)]


@pytest.fixture
def lake(tmp_path):
    """The lake, and the same labels as one flat Parquet file with the date as a column."""
    made = make_lake(SPEC)
    write_lake(made, str(tmp_path / "lake"))
    made.labels.to_parquet(tmp_path / "flat.parquet", index=False)
    return tmp_path / "lake", tmp_path / "flat.parquet"


@pytest.fixture
def no_spark(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a SparkSession was started")

    monkeypatch.setattr("crowdspark.spark_session.build_session", refuse)


def _items(out) -> pd.DataFrame:
    return pd.read_parquet(out / "items").sort_values("item").reset_index(drop=True)


@pytest.mark.parametrize("engine", [["--engine", "local"], ["--config", str(DATA.parent / "conf" / "nightly.toml")]],
                         ids=["local", "nightly.toml"])
def test_a_local_lake_in_window_mode_is_read_without_spark_as_its_flat_copy(tmp_path, lake, no_spark, engine, capsys):
    """The engine as asked (``--engine local``), or the nightly configuration's spark engine on a small input: the
    day folders give the answer the same labels give with the date as a column, and Spark never starts."""
    folders, flat = lake
    args = ["aggregate", *engine, "--algorithm", "ds", *WINDOW, "--quiet"]
    assert main([*args, "--labels", str(folders), "--output", str(tmp_path / "a")]) == 0
    assert main([*args, "--labels", str(flat), "--output", str(tmp_path / "b")]) == 0
    pd.testing.assert_frame_equal(_items(tmp_path / "a"), _items(tmp_path / "b"))
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["inputs"]["days"] == json.loads((tmp_path / "b" / "summary.json").read_text())["inputs"]["days"]
    assert summary["inputs"]["missing_days"] == [SPEC.date(3)]
    # the files of the window's day folders, as Spark lists them: one per day with labels
    assert summary["inputs"]["files"]["labels"]["files"] == len(summary["inputs"]["days"]) == 5


def test_only_the_day_folders_of_the_window_are_opened(tmp_path, lake, no_spark, capsys):
    folders, _ = lake
    (folders / f"date={SPEC.date(1)}" / "part-0.parquet").write_bytes(b"not parquet")  # outside the window
    assert main(["aggregate", "--engine", "local", "--algorithm", "mv", *WINDOW, "--labels", str(folders),
                 "--output", str(tmp_path / "out"), "--quiet"]) == 0
    (folders / f"date={SPEC.date(6)}" / "part-0.parquet").write_bytes(b"not parquet")  # inside it
    assert main(["aggregate", "--engine", "local", "--algorithm", "mv", *WINDOW, "--labels", str(folders),
                 "--output", str(tmp_path / "out"), "--quiet"]) == 2
    assert f"date={SPEC.date(6)}" in capsys.readouterr().err


def test_a_day_folder_whose_files_also_hold_the_date_is_refused(tmp_path, lake, no_spark, capsys):
    folders, _ = lake
    day = folders / f"date={SPEC.date(7)}" / "part-0.parquet"
    pd.read_parquet(day).assign(date=SPEC.date(7)).to_parquet(day, index=False)
    assert main(["aggregate", "--engine", "local", "--algorithm", "mv", *WINDOW, "--labels", str(folders),
                 "--output", str(tmp_path / "out"), "--quiet"]) == 2
    assert "hold a column 'date' and sit in a folder named after it" in capsys.readouterr().err


NIGHTS = ["--config", str(DATA.parent / "conf" / "nightly.toml"), "--set", "input.window_days=0",
          "--set", "incremental.mode=on"]


def _nights(tmp_path, folders, name: str, *extra: str) -> list[dict]:
    """Nights 0-7 of the lake into ``tmp_path/name`` with ``conf/nightly.toml`` (the spark engine) in incremental
    mode; their summaries."""
    out = tmp_path / name
    summaries = []
    for day in range(SPEC.days):
        assert main(["aggregate", *NIGHTS, *extra, "--labels", str(folders), "--output", str(out), "--run-id",
                     SPEC.date(day), "--warm-start", str(out), "--quiet"]) == 0
        summaries.append(json.loads((out / f"run_id={SPEC.date(day)}" / "summary.json").read_text()))
    return summaries


@pytest.mark.parametrize("extra, reason", [([], "small input"), (["--set", "engine.small_input_bytes=1"], "memory")],
                         ids=["small-input", "memory"])
def test_a_night_on_a_local_master_whose_lake_fits_the_driver_runs_without_spark(tmp_path, lake, no_spark, extra,
                                                                                   reason):
    """Incremental nights choose their engine as a window run does: on a local master, a local lake that is
    small, or whose whole fits the driver's budget, is read with pandas and fitted by the local engine (Spark
    never starts), and every night gives the answer ``--engine local`` gives."""
    folders, _ = lake
    chosen = _nights(tmp_path, folders, "chosen", *extra)
    asked = _nights(tmp_path, folders, "asked", "--engine", "local")
    for night in chosen:
        assert night["engine"] == "local"
        assert night["engine_choice"]["engine"] == "local" and night["engine_choice"]["reason"] == reason
    assert [n["incremental"]["kind"] for n in chosen] == [n["incremental"]["kind"] for n in asked]
    assert "incremental" in {n["incremental"]["kind"] for n in chosen}
    for day in range(SPEC.days):
        run = f"run_id={SPEC.date(day)}"
        pd.testing.assert_frame_equal(_items(tmp_path / "chosen" / run), _items(tmp_path / "asked" / run))


def test_a_night_whose_lake_is_above_the_driver_budget_starts_spark(lake):
    """Above ``engine.small_input_bytes``, the whole lake's predicted peak decides; a cluster master distributes."""
    from crowdspark.config import load_config
    from crowdspark.pipeline.source import driver_choice, needs_spark

    folders, flat = lake
    nights = [str(DATA.parent / "conf" / "nightly.toml")]
    large = ["input.window_days=0", "incremental.mode=on", "engine.small_input_bytes=1"]
    assert not needs_spark(load_config(nights, large), str(folders), master="local[2]")
    choice = driver_choice(load_config(nights, [*large, "engine.max_memory=1m"]), str(folders), master="local[2]")[0]
    assert (choice.engine, choice.reason) == ("spark", "memory")
    # every day of the lake counts, which bounds what any night reads
    assert f"for about {len(pd.read_parquet(flat))} labels, is above the driver's budget" in choice.detail
    assert needs_spark(load_config(nights, large), str(folders), master="spark://head:7077")


def test_the_first_night_says_once_that_it_starts_cold(tmp_path, lake, no_spark, caplog):
    """The checks before Spark starts and the run both resolve the warm start: the reason is logged once."""
    folders, _ = lake
    out = tmp_path / "runs"
    with caplog.at_level("WARNING"):
        assert main(["aggregate", *NIGHTS, "--labels", str(folders), "--output", str(out), "--run-id", SPEC.date(0),
                     "--warm-start", str(out)]) == 0
    said = [r.getMessage() for r in caplog.records if "holds no run yet" in r.getMessage()]
    assert said == [f"--warm-start {out} holds no run yet: this first run starts cold"]


def test_a_night_carried_forward_records_its_own_engine_choice(tmp_path, lake, no_spark):
    """A night without new labels reads nothing and carries the previous result forward, but the engine choice in
    its summary is its own, not the previous night's (here: nights 0-2 on ``--engine local``, then the missing
    day 3 on the nightly configuration)."""
    folders, _ = lake
    out = tmp_path / "runs"
    for day, engine in ((0, ["--engine", "local"]), (1, ["--engine", "local"]), (2, ["--engine", "local"]), (3, [])):
        assert main(["aggregate", *NIGHTS, *engine, "--labels", str(folders), "--output", str(out), "--run-id",
                     SPEC.date(day), "--warm-start", str(out), "--quiet"]) == 0
    before, night = (json.loads((out / f"run_id={SPEC.date(d)}" / "summary.json").read_text()) for d in (2, 3))
    assert night["incremental"]["kind"] == "carried forward"
    assert before["engine_choice"]["reason"] == "setting"
    assert night["engine_choice"]["reason"] == "small input"
