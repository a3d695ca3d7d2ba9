"""Tests of choosing H (crowdspark.model_selection)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from crowdspark.engine.local import LocalEngine
from crowdspark.errors import ConfigError
from crowdspark.model_selection import CRITERIA, choose_levels
from crowdspark.models.idbla_gibbs import IdblaGibbs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_idbla_gibbs import planted  # noqa: E402


@pytest.fixture(scope="module")
def choice():
    blocks, K, C, _ = planted()
    engine = LocalEngine(blocks)
    return choose_levels(lambda h: IdblaGibbs(K, C, n_levels=h, burn_in=20, n_samples=50), engine, levels=(1, 2, 3))


def test_table_has_every_criterion(choice):
    assert [row["n_levels"] for row in choice.table] == [1, 2, 3]
    for row in choice.table:
        for key in ("paper", "aic", "bic", "collapsed", "collapsed_raw", "log_evidence", "n_params", "level_sizes"):
            assert key in row
        assert np.isfinite(row["aic"]) and np.isfinite(row["collapsed"])
    assert choice.criterion == "aic"


def test_default_criterion_recovers_planted_levels(choice):
    aics = [row["aic"] for row in choice.table]
    assert choice.chosen == choice.table[int(np.argmin(aics))]["n_levels"] == 2


def test_evidence_criteria_do_not_grow_like_the_papers(choice):
    paper = [row["paper"] for row in choice.table]
    assert paper[2] > paper[1] > paper[0]  # the paper's criterion keeps growing
    assert choice.table[2]["aic"] > choice.table[1]["aic"]  # the default does not


def test_bic_penalizes_parameters(choice):
    params = [row["n_params"] for row in choice.table]
    assert params[0] < params[1] < params[2]


def test_criteria_directions():
    assert CRITERIA == {"aic": False, "bic": False, "collapsed": True, "collapsed_raw": True, "paper": True}


def test_bad_criterion_message():
    with pytest.raises(ConfigError, match=r"criterion must be one of \['aic', 'bic', 'collapsed', 'collapsed_raw', 'paper'\], but got 'dic'"):
        choose_levels(lambda h: None, LocalEngine([]), criterion="dic")
