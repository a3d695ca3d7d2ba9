"""Tests of the IDBLA initialization (paper 4.4) on the local engine."""

from __future__ import annotations

import numpy as np
import pytest

from crowdspark.block import build_blocks
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.loop import fit
from crowdspark.errors import ConfigError
from crowdspark.models.idbla_init import IdblaInit, fit_strength, level_thresholds


def small_data(seed: int = 0, n_items: int = 300, n_workers: int = 12, n_classes: int = 3, max_labels: int = 10**6):
    """Items labelled by 5 random workers; a third of the items are hard (labels near random)."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, n_classes, n_items)
    hard = rng.random(n_items) < 1 / 3
    items, workers, labels, gold = [], [], [], []
    for i in range(n_items):
        for k in rng.choice(n_workers, 5, replace=False):
            acc = 0.45 if hard[i] else 0.9
            lab = truth[i] if rng.random() < acc else rng.integers(0, n_classes)
            items.append(f"i{i}")
            workers.append(k)
            labels.append(lab)
            gold.append(truth[i])
    blocks = build_blocks(np.array(items, dtype=object), np.array(workers), np.array(labels), np.array(gold),
                          max_labels=max_labels)
    return blocks, n_workers, n_classes


def run_init(model, blocks):
    engine = LocalEngine(blocks)
    result = fit(model, engine)
    return result, engine.states


def test_contract_shapes_and_dtypes():
    blocks, K, C = small_data()
    model = IdblaInit(K, C, n_levels=3)
    result, states = run_init(model, blocks)
    p = result.params
    assert p["pi"].shape == (K, 3, C, C)
    np.testing.assert_allclose(p["pi"].sum(axis=-1), 1.0)
    assert p["alpha"].shape == (C,) and p["beta"].shape == (3,)
    np.testing.assert_allclose([p["alpha"].sum(), p["beta"].sum()], 1.0)
    for block, state in zip(blocks, states):
        assert state["T"].dtype == np.int32 and state["T"].shape == (block.n_items,)
        assert state["Q"].dtype == np.int32 and state["Q"].shape == (block.n_items,)
        assert state["epsilon"].dtype == np.float64 and np.all(state["epsilon"] >= 0)
    assert IdblaInit.stateful is True


def test_levels_are_balanced_and_ordered_by_epsilon():
    blocks, K, C = small_data()
    _, states = run_init(IdblaInit(K, C, n_levels=3), blocks)
    Q = np.concatenate([s["Q"] for s in states])
    eps = np.concatenate([s["epsilon"] for s in states])
    sizes = np.bincount(Q, minlength=3)
    assert sizes.min() > 0.1 * Q.size  # ties at the bound make level 0 larger than 1/3
    # level 0 = most confident: mean epsilon decreases with the level
    means = [eps[Q == h].mean() for h in range(3)]
    assert means[0] > means[1] > means[2]


def test_easy_level_has_lower_labeling_error():
    blocks, K, C = small_data()
    _, states = run_init(IdblaInit(K, C, n_levels=2), blocks)
    from crowdspark.metrics import level_error_stats
    from crowdspark.stats import sum_stats

    s = sum_stats(level_error_stats(b, st["Q"], 2) for b, st in zip(blocks, states))
    err = s["level_error_sum"] / s["level_gold_n"]
    assert err[0] < err[1] - 0.15


@pytest.mark.parametrize("scale", [0.1, 3.0, 50.0])
def test_ability_scale_cannot_change_levels(scale):
    """The likelihood depends on x * epsilon only: x rescales epsilon and changes nothing else."""
    blocks, K, C = small_data()
    base_result, base = run_init(IdblaInit(K, C, n_levels=3, ability_scale=1.0), blocks)
    result, other = run_init(IdblaInit(K, C, n_levels=3, ability_scale=scale), blocks)
    for a, b in zip(base, other):
        np.testing.assert_array_equal(a["Q"], b["Q"])
        np.testing.assert_array_equal(a["T"], b["T"])
        np.testing.assert_allclose(b["epsilon"] * scale, a["epsilon"], rtol=1e-12)
    np.testing.assert_allclose(result.params["pi"], base_result.params["pi"])


def test_strength_matches_grid_maximum_and_bounds():
    blocks, K, C = small_data(n_items=40)
    block = blocks[0]
    rate = np.linspace(0.5, 0.95, K)
    T = block.label[block.offsets[:-1]].astype(np.int32)  # the first label of each item
    s = fit_strength(block, T, rate, C, bound=30.0, n_steps=60)
    y = block.label == T[block.item_of_label]
    grid = np.linspace(0, 30, 30001)
    for j in range(block.n_items):
        sl = slice(block.offsets[j], block.offsets[j + 1])
        r, yy = rate[block.worker[sl]], y[sl]
        u = r[:, None] * grid[None, :]
        ll = (-np.log1p((C - 1) * np.exp(-u)) - np.where(yy[:, None], 0.0, u)).sum(axis=0)
        assert abs(s[j] - grid[np.argmax(ll)]) < 2e-3 or (yy.all() and s[j] == 30.0)
    assert np.all((s >= 0) & (s <= 30.0))


def test_all_agreeing_items_get_the_bound_and_chance_items_zero():
    blocks = build_blocks(np.array(["a", "a", "b", "b", "c"], dtype=object), np.array([0, 1, 0, 1, 0]),
                          np.array([1, 1, 0, 1, 1]))
    T = np.array([1, 0, 1], dtype=np.int32)  # item b: one of two labels agrees (chance for C = 2)
    s = fit_strength(blocks[0], T, np.array([0.8, 0.8]), 2, bound=25.0, n_steps=30)
    assert s[0] == 25.0 and s[2] == 25.0  # all agree, including the one-label item
    assert s[1] == 0.0


def test_thresholds_with_ties_keep_groups_distinct():
    hist = np.zeros(100)
    hist[-1] = 80  # most items at the bound
    hist[10] = 20
    t = level_thresholds(hist, 3)
    assert np.all(np.diff(t) < 0)


def test_random_init_is_seeded_and_differs_from_paper():
    blocks, K, C = small_data()
    _, a = run_init(IdblaInit(K, C, init="random", seed=3), blocks)
    _, b = run_init(IdblaInit(K, C, init="random", seed=3), blocks)
    _, c = run_init(IdblaInit(K, C, init="paper", seed=3), blocks)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x["T"], y["T"])
        np.testing.assert_array_equal(x["Q"], y["Q"])
    Ta, Tc = np.concatenate([s["T"] for s in a]), np.concatenate([s["T"] for s in c])
    assert np.mean(Ta == Tc) < 0.6


def test_split_into_blocks_gives_same_init():
    one, K, C = small_data()
    many, _, _ = small_data(max_labels=97)
    assert len(many) > 5
    r1, s1 = run_init(IdblaInit(K, C, n_levels=3), one)
    r2, s2 = run_init(IdblaInit(K, C, n_levels=3), many)
    np.testing.assert_allclose(r1.params["pi"], r2.params["pi"])
    np.testing.assert_array_equal(s1[0]["Q"], np.concatenate([s["Q"] for s in s2]))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_levels": 0}, r"idbla-init.n_levels must be an integer >= 1, but got 0"),
        ({"init": "mv"}, r"idbla-init.init must be one of \['paper', 'random'\], but got 'mv'"),
        ({"ability_scale": 0.0}, r"idbla-init.ability_scale must be a number > 0, but got 0.0"),
        ({"epsilon_bound": -1.0}, r"idbla-init.epsilon_bound must be a number > 0"),
        ({"newton_steps": 0}, r"idbla-init.newton_steps must be an integer >= 1"),
        ({"init_smoothing": -0.1}, r"idbla-init.init_smoothing must be a number >= 0"),
    ],
)
def test_validation_messages(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        IdblaInit(5, 2, **kwargs)
