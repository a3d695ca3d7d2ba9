"""one-coin: planted-accuracy recovery, the M-step by hand, EM's objective, a worker table, bad parameters.

The kernel contract (additive statistics, both engines, renaming, gold clamping) is in tests/test_conformance.py;
incremental statistics in tests/test_incremental.py; crowd-kit's layout in tests/test_crowdkit_compat.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdspark.errors import ConfigError
from crowdspark.io.worker_table import worker_table_from_frame
from crowdspark.models.one_coin import OneCoinDawidSkene, one_coin_accuracy, one_coin_m_step
from crowdspark.models.registry import build_model
from tests.test_catalogue_simple import one_coin_crowd, run
from tests.test_worker_table import _started, temp  # noqa: F401 - the fixture


def test_m_step_by_hand():
    # worker 0: 6 of 8 labels right; worker 1: 1 of 4 right, with s = 1: (6+1)/(8+2) and (1+1)/(4+2)
    confusion = np.array([[[3.0, 1.0], [1.0, 3.0]], [[1.0, 2.0], [1.0, 0.0]]])
    np.testing.assert_allclose(one_coin_accuracy(confusion, 1.0), [0.7, 1.0 / 3.0])
    pi = np.exp(one_coin_m_step(confusion, np.array([5.0, 7.0]), 1.0)["log_pi"])
    np.testing.assert_allclose(pi[0], [[0.7, 0.3], [0.3, 0.7]])
    np.testing.assert_allclose(np.exp(one_coin_m_step(confusion, np.array([5.0, 7.0]), 1.0)["log_alpha"]),
                               [6.0 / 14.0, 8.0 / 14.0])


def test_recovers_planted_accuracies_and_the_objective_never_decreases():
    accuracy = np.array([0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5, 0.4, 0.35])
    blocks, _ = one_coin_crowd(3000, accuracy, 3, 5)
    result, labels, truth, posterior = run(OneCoinDawidSkene(10, 3, seed=1), blocks)
    assert result.converged
    np.testing.assert_allclose(OneCoinDawidSkene(10, 3).worker_table(result.params, result.init_stats)["accuracy"],
                               accuracy, atol=0.03)
    objectives = [h["objective"] for h in result.history]
    assert np.all(np.diff(objectives) >= -1e-12)
    assert np.mean(labels == truth) > 0.9
    np.testing.assert_allclose(posterior.sum(axis=1), 1.0)


def test_every_worker_matrix_is_one_coin():
    blocks, _ = one_coin_crowd(500, np.array([0.9, 0.7, 0.6, 0.8]), 4, 3)
    result, *_ = run(OneCoinDawidSkene(4, 4), blocks)
    pi = np.exp(result.params["log_pi"])
    off = pi[:, ~np.eye(4, dtype=bool)].reshape(4, -1)
    np.testing.assert_allclose(off, off[:, :1].repeat(off.shape[1], axis=1))
    np.testing.assert_allclose(pi.sum(axis=2), 1.0)


def test_a_worker_table_starts_the_listed_workers_from_their_accuracy(temp):  # noqa: F811
    workers = sorted(temp["worker"].unique())[:3]
    table = worker_table_from_frame(pd.DataFrame({"worker": workers, "accuracy": [0.9, 0.6, 0.55]}))
    model, own, started, enc = _started("one-coin", temp, table)
    index = [enc.workers.index(w) for w in workers]
    np.testing.assert_allclose(np.exp(started["log_pi"][index, 0, 0]), [0.9, 0.6, 0.55])
    np.testing.assert_allclose(np.exp(started["log_pi"][index, 1, 0]), [0.1, 0.4, 0.45])
    others = np.setdiff1d(np.arange(enc.n_workers), index)
    np.testing.assert_array_equal(started["log_pi"][others], own["log_pi"][others])


@pytest.mark.parametrize("key, value, message", [
    ("smoothing", 0.0, r"one-coin\.smoothing must be a number > 0"),
    ("max_iter", 0, r"one-coin\.max_iter must be an integer >= 1"),
    ("stop", "never", r"one-coin\.stop"),
])
def test_bad_parameters_are_config_errors(key, value, message):
    with pytest.raises(ConfigError, match=message):
        build_model("one-coin", {key: value}, 3, 2, 0)


def test_the_crowd_kit_preset_drops_the_smoothing_and_yields_to_explicit_values():
    preset = build_model("one-coin", {"preset": "crowd-kit"}, 3, 2, 0)
    assert (preset.smoothing, preset.tol, preset.stop) == (1e-10, 1e-5, "crowd-kit")
    assert build_model("one-coin", {}, 3, 2, 0).stop == "change"
    assert build_model("one-coin", {"preset": "crowd-kit", "smoothing": 2.0}, 3, 2, 0).smoothing == 2.0
    assert build_model("one-coin", {}, 3, 2, 0).smoothing == 0.5


def test_crowd_kits_stop_answers_with_the_e_step_of_the_sweep_whose_objective_fell():
    """On web_search crowd-kit's objective falls at the second sweep: the preset's fit stops there and keeps
    the parameters that sweep's E-step used, the first sweep's, so its answers are those of a one-sweep fit."""
    from crowdspark.api import Aggregator
    from tests.helpers import DATA

    labels = pd.read_csv(DATA / "web_search" / "labels.csv", dtype=str)
    preset = Aggregator("one-coin", preset="crowd-kit").fit(labels)
    assert preset.n_iter_ == 2 and preset.converged_
    assert preset.loss_history_[1] < preset.loss_history_[0]
    with pytest.warns(UserWarning, match="did not converge"):
        one_sweep = Aggregator("one-coin", smoothing=1e-10, max_iter=1).fit(labels)
    pd.testing.assert_series_equal(preset.labels_, one_sweep.labels_)
    np.testing.assert_allclose(preset.probas_.to_numpy(), one_sweep.probas_.to_numpy(), atol=1e-12)
