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


def test_an_incremental_night_on_the_spark_engine_still_reads_its_days_with_spark(lake):
    """Only a window run reads the day folders with pandas: the incremental reader of days on the spark engine
    needs its SparkSession (a small lake there is not a small input)."""
    from crowdspark.config import load_config
    from crowdspark.pipeline.source import needs_spark

    folders, _ = lake
    nightly = [str(DATA.parent / "conf" / "nightly.toml")]
    assert not needs_spark(load_config(nightly), str(folders))
    assert needs_spark(load_config(nightly, ["input.window_days=0", "incremental.mode=on"]), str(folders))
