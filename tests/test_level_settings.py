"""Choosing H and presets through the configuration (local engine)."""

from __future__ import annotations

import pandas as pd
import pytest

from crowdspark.config import load_config
from crowdspark.errors import ConfigError
from crowdspark.pipeline import aggregate_frames
from tests.helpers import DATA


@pytest.fixture(scope="module")
def temp():
    return pd.read_csv(DATA / "temp" / "labels.csv", dtype=str), pd.read_csv(DATA / "temp" / "truth.csv", dtype=str)


def run(frames, *overrides, algorithm="idbla"):
    config = load_config(overrides=[f"{algorithm}.burn_in=5", f"{algorithm}.n_samples=5", *overrides], algorithm=algorithm, engine_name="local")
    return aggregate_frames(config, *frames).summary


def test_select_levels_reports_every_criterion_and_refits_the_chosen_h(temp):
    summary = run(temp, "idbla.select_levels=[1, 2, 3]", "idbla.level_criterion=paper")
    table = summary["level_selection"]["table"]
    assert [row["n_levels"] for row in table] == [1, 2, 3]
    assert {"paper", "aic", "bic", "collapsed"} <= set(table[0])
    # the paper's criterion picks the largest value; the refitted model has that H
    best = max(table, key=lambda row: row["paper"])["n_levels"]
    assert summary["level_selection"]["chosen"] == best == summary["parameters"]["n_levels"]


def test_paper_preset_sets_the_papers_values(temp):
    summary = run(temp, "idbla.preset=paper", "idbla.n_samples=5")
    params = summary["parameters"]
    assert params["scheme"] == "paper" and params["omega"] == 1.0 and params["n_samples"] == 5
    assert summary["level_selection"]["criterion"] == "paper"


@pytest.mark.parametrize(
    "overrides, algorithm, message",
    [
        (["ds.select_levels=[1, 2]"], "ds", r"ds.select_levels applies only to models with difficulty levels"),
        (["idbla.select_levels=2"], "idbla", r"idbla.select_levels must be a list of integers >= 1, but got 2"),
        (["idbla.preset=fast"], "idbla", r"idbla.preset must be one of \['paper'\], but got 'fast'"),
    ],
)
def test_selection_and_preset_errors(temp, overrides, algorithm, message):
    with pytest.raises(ConfigError, match=message):
        config = load_config(overrides=list(overrides), algorithm=algorithm, engine_name="local")
        aggregate_frames(config, *temp)


def test_dds_chooses_h_unless_n_levels_is_given(temp):
    """dds without n_levels chooses H among 1 and 2 by BIC (on TEMP: 1, i.e. Dawid-Skene, whose answers it then
    gives); an explicit n_levels fixes H and reports no selection."""
    config = load_config(algorithm="dds", engine_name="local")
    summary = aggregate_frames(config, *temp).summary
    selection = summary["level_selection"]
    assert selection["criterion"] == "bic" and [row["n_levels"] for row in selection["table"]] == [1, 2]
    assert selection["chosen"] == summary["parameters"]["n_levels"] == 1
    ds = aggregate_frames(load_config(algorithm="ds", engine_name="local"), *temp).summary
    assert summary["metrics"]["error_rate"] == ds["metrics"]["error_rate"]
    fixed = aggregate_frames(load_config(overrides=["dds.n_levels=2"], algorithm="dds", engine_name="local"),
                             *temp).summary
    assert fixed["parameters"]["n_levels"] == 2 and fixed.get("level_selection") is None


def test_dds_finds_bluebirds_hard_level_and_beats_dawid_skene():
    """On Bluebird (39 workers label all 108 items) BIC keeps a hard level whose class penalties, not noise,
    carry the difficulty, and dds answers 2 more gold items right than DS (docs/difficulty_model.md)."""
    frames = [pd.read_csv(DATA / "bluebird" / f"{name}.csv", dtype=str) for name in ("labels", "truth")]
    dds = aggregate_frames(load_config(algorithm="dds", engine_name="local"), *frames).summary
    ds = aggregate_frames(load_config(algorithm="ds", engine_name="local"), *frames).summary
    assert dds["level_selection"]["chosen"] == dds["parameters"]["n_levels"] == 2
    bic = [row["bic"] for row in dds["level_selection"]["table"]]
    assert bic[1] < bic[0] - 50
    assert min(dds["model"]["level_penalty"][1]) > 0.5 and dds["model"]["level_noise"][1] < 0.1
    assert dds["metrics"]["error_rate"] < ds["metrics"]["error_rate"] - 0.01


@pytest.mark.parametrize("algorithm", ["idbla-cvb", "idbla-cvb0", "fixed-idbla"])
def test_every_level_model_chooses_h_through_the_configuration(temp, algorithm):
    """One selector serves every level model, the collapsed-VI models and Fixed-IDBLA included."""
    levels = "[2, 3]" if algorithm == "fixed-idbla" else "[1, 2]"
    overrides = [f"{algorithm}.select_levels={levels}"]
    if algorithm == "fixed-idbla":
        overrides += [f"{algorithm}.burn_in=5", f"{algorithm}.n_samples=5"]
    config = load_config(overrides=overrides, algorithm=algorithm, engine_name="local")
    summary = aggregate_frames(config, *temp).summary
    selection = summary["level_selection"]
    assert selection["criterion"] == "aic"
    assert [r["n_levels"] for r in selection["table"]] == [int(h) for h in levels.strip("[]").split(",")]
    best = min(selection["table"], key=lambda row: row["aic"])["n_levels"]
    assert selection["chosen"] == best == summary["parameters"]["n_levels"]
