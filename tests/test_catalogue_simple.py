"""wawa, zbs, kos and mmsr: planted-parameter recovery, hand-checked values, their errors for bad parameters.

The kernel contract (additive statistics, both engines, renaming) is in tests/test_conformance.py.
"""

from __future__ import annotations

import warnings
from functools import partial

import numpy as np
import pytest

from crowdspark.block import build_blocks
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.loop import finish_fn, fit
from crowdspark.errors import ConfigError
from crowdspark.models.kos import Kos
from crowdspark.models.mmsr import Mmsr, msr_fit, pair_counts, trimmed_means
from crowdspark.models.registry import build_model
from crowdspark.models.wawa import Wawa
from crowdspark.models.zero_based_skill import ZeroBasedSkill


def one_coin_crowd(n_items: int, accuracy: np.ndarray, n_classes: int, per_item: int, seed: int = 0):
    """Blocks of a crowd drawn from the one-coin model: each item gets ``per_item`` distinct random workers;
    worker k is right with probability ``accuracy[k]``, else says one of the other classes uniformly."""
    rng = np.random.default_rng(seed)
    n_workers = len(accuracy)
    truth = rng.integers(0, n_classes, n_items)
    items, workers, labels = [], [], []
    for i in range(n_items):
        for k in rng.choice(n_workers, per_item, replace=False):
            right = rng.random() < accuracy[k]
            wrong = (truth[i] + rng.integers(1, n_classes)) % n_classes
            items.append(f"i{i:06d}")
            workers.append(k)
            labels.append(truth[i] if right else wrong)
    blocks = build_blocks(np.array(items, dtype=object), np.array(workers), np.array(labels),
                          truth[[int(i[1:]) for i in items]], max_labels=2000)
    return blocks, truth


def run(model, blocks):
    engine = LocalEngine(blocks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fit(model, engine)
    pairs = engine.map_items(partial(finish_fn, model), result.params)
    labels = np.concatenate([r.label for _, r in pairs])
    truth = np.concatenate([b.truth for b, _ in pairs])
    posterior = np.concatenate([r.posterior for _, r in pairs])
    return result, labels, truth, posterior


def tiny():
    """Three items, three workers: w0 and w1 agree everywhere, w2 disagrees on items a and b.

    item a: w0=0 w1=0 w2=1; item b: w0=1 w1=1 w2=0; item c: w0=0 w2=1 (a tie for majority vote).
    """
    items = np.array(["a", "a", "a", "b", "b", "b", "c", "c"], dtype=object)
    workers = np.array([0, 1, 2, 0, 1, 2, 0, 2])
    labels = np.array([0, 0, 1, 1, 1, 0, 0, 1])
    return build_blocks(items, workers, labels)


# --- wawa ------------------------------------------------------------------------------------------------


def test_wawa_hand_checked_skills_and_answers():
    # with ties="first", c's majority vote is class 0: w0 agrees 3/3, w1 2/2, w2 0/3; c is then w0's 0
    model = Wawa(3, 2, ties="first")
    result, labels, _, posterior = run(model, tiny())
    np.testing.assert_allclose(result.params["skill"], [1.0, 1.0, 0.0])
    np.testing.assert_array_equal(labels, [0, 1, 0])
    np.testing.assert_allclose(posterior, [[1, 0], [0, 1], [1, 0]])
    table = model.worker_table(result.params, result.init_stats)
    np.testing.assert_array_equal(table["n_labels"], [3, 2, 3])


def test_wawa_item_whose_workers_all_have_skill_zero_is_uniform():
    model = Wawa(3, 2)
    params = {"skill": np.array([0.0, 0.0, 0.0]), "labels": np.ones(3)}
    result = model.finish_block(tiny()[0], None, params)
    np.testing.assert_allclose(result.posterior, 0.5)


def test_wawa_recovers_planted_accuracies():
    accuracy = np.array([0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5, 0.4, 0.35])
    blocks, _ = one_coin_crowd(3000, accuracy, 3, 5)
    result, labels, truth, _ = run(Wawa(10, 3, seed=1), blocks)
    # the agreement with a majority vote of 5 overstates the bad workers a little; order and scale hold
    assert np.all(np.diff(result.params["skill"]) <= 0.02)
    np.testing.assert_allclose(result.params["skill"], accuracy, atol=0.1)
    assert np.mean(labels == truth) > 0.9


@pytest.mark.parametrize("name", ["wawa", "zbs", "mmsr"])
def test_a_tie_rule_that_does_not_exist_is_a_config_error(name):
    with pytest.raises(ConfigError, match=rf"{name}\.ties must be one of \['random', 'first'\], but got 'last'"):
        build_model(name, {"ties": "last"}, 3, 2, 0)


# --- zbs -------------------------------------------------------------------------------------------------


def test_zbs_learning_rate_halves_every_20_sweeps_as_crowdkit():
    model = ZeroBasedSkill(3, 2)
    assert [model.learning_rate(s) for s in (1, 19, 20, 39, 40, 100)] == [1.0, 1.0, 0.5, 0.5, 0.25, 1 / 32]


def test_zbs_first_sweep_is_a_majority_vote_and_skills_its_agreement():
    model = ZeroBasedSkill(3, 2, ties="first", max_iter=1)
    result, labels, _, _ = run(model, tiny())
    # sweep 1: equal skills 1/2 + eps -> majority vote (c: a tie, class 0); lr = 1 -> skills = agreements
    np.testing.assert_allclose(result.params["skill"], [1.0, 1.0, 0.0])
    np.testing.assert_array_equal(labels, [0, 1, 0])


def test_zbs_recovers_planted_accuracies_and_stops_at_its_fixed_point():
    accuracy = np.array([0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5, 0.4, 0.35])
    blocks, _ = one_coin_crowd(3000, accuracy, 3, 5)
    result, labels, truth, _ = run(ZeroBasedSkill(10, 3, seed=1), blocks)
    assert result.converged and result.n_iter < 20
    np.testing.assert_allclose(result.params["skill"], accuracy, atol=0.08)
    assert np.mean(labels == truth) > 0.9


@pytest.mark.parametrize("key, value, message", [
    ("lr_reduce_factor", 1.5, r"zbs\.lr_reduce_factor must be a number <= 1"),
    ("lr_init", 0.0, r"zbs\.lr_init must be a number > 0"),
    ("lr_steps_to_reduce", 0, r"zbs\.lr_steps_to_reduce must be an integer >= 1"),
])
def test_zbs_bad_parameters_are_config_errors(key, value, message):
    with pytest.raises(ConfigError, match=message):
        build_model("zbs", {key: value}, 3, 2, 0)


# --- kos -------------------------------------------------------------------------------------------------


def test_kos_refuses_more_than_two_classes_with_the_fix():
    with pytest.raises(ConfigError, match=r"kos is for two classes, but the labels have 3; .*--algorithm ds"):
        build_model("kos", {}, 5, 3, 0)


def test_kos_one_update_hand_checked():
    # y = 1 on every edge; x_{i->j} = the item's other votes (+1 for class 0); S_j = sum A x
    # a: A = (+, +, -), x = (0, 0, 2) -> contributions A x = (0, 0, -2); b: A = (-, -, +): x = (0, 0, -2),
    # A x = (0, 0, -2); c: A = (+, -): x = (-1, 1), A x = (-1, -1).  S = (-1, 0, -5), max|S| = 5.
    # y_{j->i} = (S_j - A_ij x_ij) / 5: a: (-0.2, 0, -0.6) -> sum A y = -0.2 + 0 + 0.6 = 0.4 > 0: class 0
    # b: (-0.2, 0, -0.6) -> 0.2 + 0 - 0.6 = -0.4: class 1; c: (0, -0.8) -> 0 + 0.8 = 0.8: class 0
    model = Kos(3, 2, max_iter=1)
    result, labels, _, posterior = run(model, tiny())
    np.testing.assert_allclose(result.params["sums"], [-1.0, 0.0, -5.0])
    np.testing.assert_array_equal(labels, [0, 1, 0])
    np.testing.assert_allclose(posterior, [[1, 0], [0, 1], [1, 0]])


def test_kos_recovers_planted_good_and_adversarial_workers_and_messages_stay_finite():
    accuracy = np.array([0.9, 0.85, 0.8, 0.8, 0.75, 0.7, 0.5, 0.5, 0.2, 0.15])
    blocks, _ = one_coin_crowd(3000, accuracy, 2, 6)
    short, labels, truth, _ = run(Kos(10, 2, max_iter=30, tol=0.0), blocks)
    long, long_labels, _, _ = run(Kos(10, 2, max_iter=2000, tol=0.0), blocks)
    assert np.mean(labels == truth) > 0.93
    np.testing.assert_array_equal(long_labels, labels)
    assert np.all(np.isfinite(long.params["sums"]))
    reliability = long.params["reliability"]
    assert np.all(reliability[:6] > 0) and np.all(reliability[8:] < 0)
    assert reliability[0] > reliability[5] > abs(reliability[7])


def test_kos_scores_new_items_from_the_workers_totals_alone():
    blocks = tiny()
    model = Kos(3, 2, max_iter=3)
    result, labels, _, _ = run(model, blocks)
    alone = model.finish_block(blocks[0], None, result.params)
    # without its own messages, an item's answer is the vote weighted by the workers' whole totals
    weights = result.params["sums"][blocks[0].worker] * (1 - 2.0 * blocks[0].label)
    expected = np.where(np.add.reduceat(weights, blocks[0].offsets[:-1]) > 0, 0, 1)
    np.testing.assert_array_equal(alone.label, expected)


# --- mmsr ------------------------------------------------------------------------------------------------


def test_mmsr_pair_counts_hand_checked():
    common, agree = pair_counts(tiny()[0], 3, 2)
    np.testing.assert_array_equal(common, [[0, 2, 3], [2, 0, 2], [3, 2, 0]])
    np.testing.assert_array_equal(agree, [[0, 2, 0], [2, 0, 0], [0, 0, 0]])


def test_mmsr_pair_counts_count_a_repeated_label_once_and_leave_the_block_unchanged():
    """A worker who gave an item the same label twice: counted once in ``common`` and ``agree``, and the
    block's memoized incidence matrix (which shares the block's read-only arrays) is not summed in place."""
    items = np.array(["a", "a", "a", "b", "b", "c", "c"], dtype=object)
    workers = np.array([0, 0, 1, 0, 1, 1, 2])
    labels = np.array([0, 0, 0, 1, 0, 1, 1])
    block = build_blocks(items, workers, labels)[0]
    offsets, worker = block.offsets.copy(), block.worker.copy()
    common, agree = pair_counts(block, 3, 2)
    np.testing.assert_array_equal(common, [[0, 2, 0], [2, 0, 1], [0, 1, 0]])
    np.testing.assert_array_equal(agree, [[0, 1, 0], [1, 0, 1], [0, 1, 0]])
    np.testing.assert_array_equal(block.offsets, offsets)
    np.testing.assert_array_equal(block.worker, worker)
    assert pair_counts(block, 3, 2)[0].sum() == common.sum()


def _trimmed_mean_by_rule(values: np.ndarray, centre: float, trim: int, empty: float) -> float:
    """M-MSR's rule written out on one sorted list."""
    y = np.sort(values)
    y = y[y >= centre] if np.sum(y < centre) < trim else y[trim:]
    y = y[y <= centre] if np.sum(y > centre) < trim else y[: len(y) - trim]
    if len(y) == 1 and y[0] == 0:
        return empty
    return float(y.mean()) if len(y) else centre


@pytest.mark.parametrize("trim", [0, 1, 3, 7])
def test_mmsr_trimmed_means_follow_the_rule_on_every_row(trim):
    rng = np.random.default_rng(trim)
    ratios = rng.gamma(2.0, size=(40, 40))
    valid = rng.random((40, 40)) < 0.5
    centre = rng.gamma(2.0, size=40)
    got = trimmed_means(ratios, valid, centre, trim, 0.123)
    want = [_trimmed_mean_by_rule(ratios[k][valid[k]], centre[k], trim, 0.123) for k in range(40)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_mmsr_fit_with_exact_zero_covariances_converges_to_finite_values():
    # zero covariances make some trimmed means 0; the ratios that divide by them must not poison the rest
    rng = np.random.default_rng(0)
    s = rng.uniform(0.2, 0.9, 30)
    cov = np.outer(s, s)
    cov[:5] = 0.0
    cov[:, :5] = 0.0
    np.fill_diagonal(cov, 0.0)
    observed = ~np.eye(30, dtype=bool)
    u, v, n_iter, change = msr_fit(cov, observed, 3, 1000, 500, 1e-10)
    assert np.all(np.isfinite(u)) and np.all(np.isfinite(v)) and change < 1e-10 and n_iter < 500
    np.testing.assert_allclose(np.outer(u, v)[5:, 5:][~np.eye(25, dtype=bool)],
                               cov[5:, 5:][~np.eye(25, dtype=bool)], rtol=1e-6)


def test_mmsr_recovers_planted_accuracies():
    accuracy = np.array([0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5, 0.4, 0.35, 0.9, 0.8])
    blocks, _ = one_coin_crowd(4000, accuracy, 3, 5)
    result, labels, truth, _ = run(Mmsr(12, 3), blocks)
    np.testing.assert_allclose(result.params["accuracy"], accuracy, atol=0.05)
    assert np.mean(labels == truth) > 0.93


def test_mmsr_more_workers_than_max_workers_is_a_config_error():
    with pytest.raises(ConfigError, match=r"K = 30 workers, more than mmsr\.max_workers = 20 .*raise mmsr\.max_workers"):
        build_model("mmsr", {"max_workers": 20}, 30, 2, 0)
