"""Tests of choosing H (crowdspark.engine.select) for every level model."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from crowdspark.engine.local import LocalEngine
from crowdspark.engine.select import choose_levels, criteria, level_plan
from crowdspark.errors import ConfigError
from crowdspark.models.dawid_skene import DawidSkene
from crowdspark.models.difficulty_ds import DifficultyDawidSkene
from crowdspark.models.idbla_cvb import IdblaCvb, IdblaCvb0
from crowdspark.models.idbla_gibbs import FixedIdbla, IdblaGibbs

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
        for key in ("paper", "aic", "bic", "icl", "collapsed", "collapsed_raw", "log_evidence", "n_params",
                    "level_sizes"):
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
    assert criteria(IdblaGibbs(3, 2)) == {"aic": False, "bic": False, "icl": False, "paper": True,
                                          "collapsed": True, "collapsed_raw": True}
    assert criteria(DifficultyDawidSkene(3, 2)) == {"aic": False, "bic": False, "icl": False}


def test_bad_criterion_message():
    with pytest.raises(ConfigError, match=r"level_criterion must be one of \['aic', 'bic', 'icl'\], but got 'paper'"):
        choose_levels(lambda h: DifficultyDawidSkene(3, 2, n_levels=h), LocalEngine([]), (1, 2), criterion="paper")
    with pytest.raises(ConfigError, match="select_levels must be an integer >= 1, but got 0"):
        choose_levels(lambda h: DifficultyDawidSkene(3, 2, n_levels=h), LocalEngine([]), (0, 1))


@pytest.mark.filterwarnings("ignore::crowdspark.engine.loop.ConvergenceWarning")
@pytest.mark.parametrize("cls", [IdblaCvb, IdblaCvb0, FixedIdbla, DifficultyDawidSkene])
def test_every_level_model_can_choose_h(cls):
    blocks, K, C, _ = planted()
    small = {"max_iter": 30} if cls is not FixedIdbla else {"burn_in": 5, "n_samples": 10}
    levels = (2, 3) if cls is FixedIdbla else (1, 2)
    choice = choose_levels(lambda h: cls(K, C, n_levels=h, **small), LocalEngine(blocks), levels)
    assert [row["n_levels"] for row in choice.table] == list(levels)
    assert choice.chosen in levels and choice.criterion == cls.default_level_criterion
    assert all(np.isfinite(row[choice.criterion]) for row in choice.table)


def test_level_plan_policy():
    assert level_plan(DawidSkene, {"max_iter": 5}).candidates is None
    with pytest.raises(ConfigError, match="applies only to models with difficulty levels"):
        level_plan(DawidSkene, {"select_levels": [1, 2]})
    assert level_plan(DifficultyDawidSkene, {}).candidates == (1, 2)
    assert level_plan(DifficultyDawidSkene, {"n_levels": 3}).candidates is None
    warm = level_plan(DifficultyDawidSkene, {}, {"n_levels": 2})
    assert warm.candidates is None and warm.params["n_levels"] == 2
    paper = level_plan(IdblaGibbs, {"preset": "paper"})
    assert paper.candidates == (1, 2, 3, 4) and paper.criterion == "paper"
    assert level_plan(IdblaCvb, {"select_levels": [1, 2]}).candidates == (1, 2)


def _fit_params_equal(a, b) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)


def test_dds_run_keeps_the_chosen_fit_which_a_refit_repeats():
    from crowdspark.config import RunConfig
    from crowdspark.engine.loop import fit
    from crowdspark.pipeline.fit import fit_configured

    blocks, K, C, _ = planted()
    engine = LocalEngine(blocks)
    model, result, selection = fit_configured(RunConfig(algorithm="dds"), K, C, engine)
    assert model.n_levels == selection["chosen"]
    assert result.n_iter == selection["table"][[r["n_levels"] for r in selection["table"]].index(model.n_levels)]["n_iter"]
    refit = fit(DifficultyDawidSkene(K, C, n_levels=model.n_levels), engine)
    assert refit.n_iter == result.n_iter
    assert _fit_params_equal(refit.params, result.params)


def test_a_fit_is_kept_only_when_a_refit_would_repeat_it():
    from crowdspark.engine.select import LevelChoice
    from crowdspark.pipeline.fit import reusable_fit

    fits = {1: "fit of H=1", 2: "fit of H=2"}
    first = LevelChoice(table=[], chosen=1, criterion="bic", fits=fits)
    last = LevelChoice(table=[], chosen=2, criterion="bic", fits=fits)
    assert reusable_fit(first, (1, 2), stateful=False, cold=True) == "fit of H=1"
    assert reusable_fit(last, (1, 2), stateful=True, cold=True) == "fit of H=2"
    # the blocks hold the states of H=2, the last candidate fitted; a warm start or carried items change the fit
    assert reusable_fit(first, (1, 2), stateful=True, cold=True) is None
    assert reusable_fit(first, (1, 2), stateful=False, cold=False) is None
