"""Difficulty-aware Dawid-Skene (``dds``): EM guarantees, the exact H = 1 reduction, additivity, planted
recovery, level selection and validation."""

from __future__ import annotations

import warnings
from dataclasses import replace
from functools import partial

import numpy as np
import pandas as pd
import pytest

from crowdspark.block import build_blocks
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.loop import finish_fn, fit
from crowdspark.engine.select import choose_levels
from crowdspark.errors import ConfigError
from crowdspark.metrics import level_error_stats
from crowdspark.models.dawid_skene import DawidSkene
from crowdspark.models.difficulty_ds import (
    DifficultyDawidSkene,
    _base_update,
    _penalty_update,
    level_log_pi,
    penalized_log_B,
)
from crowdspark.stats import sum_stats
from crowdspark.synthetic import dawid_skene_data, idbla_data
from tests.helpers import by_item, error_rate, load_dataset

#: planted difficulty where it matters: 10 workers label every item, 4 classes, half the items have 80% noise
PLANTED = dict(
    n_items=800, n_workers=10, n_classes=4, n_levels=2, labels_per_item=10, seed=0,
    accuracy=(0.55, 0.99), level_noise=(0.0, 0.8), activity_sigma=0.0,
)  # fmt: skip


def frames_to_coded_blocks(labels: pd.DataFrame, truth: pd.DataFrame, max_labels: int = 2_000_000):
    """Blocks of generated data (classes are "0".."C-1"), K and the item-ordered truth frame."""
    workers = sorted(labels["worker"].unique())
    worker = pd.Index(workers).get_indexer(labels["worker"])
    gold = labels["item"].map(dict(zip(truth["item"], truth["truth"].astype(int))))
    blocks = build_blocks(
        labels["item"].to_numpy(), worker, labels["label"].astype(int).to_numpy(), gold.to_numpy(), max_labels
    )
    return blocks, len(workers), truth.sort_values("item").reset_index(drop=True)


@pytest.fixture(scope="module")
def planted():
    labels, truth, params = idbla_data(**PLANTED)
    blocks, K, truth = frames_to_coded_blocks(labels, truth)
    return blocks, K, truth, params


def run(model, blocks):
    engine = LocalEngine(blocks)
    result = fit(model, engine)
    return result, engine.map_items(partial(finish_fn, model), result.params)


def nll(results) -> float:
    """Mean negative log posterior of the gold class."""
    values = [-np.log(r.posterior[np.arange(b.n_items), b.truth]) for b, r in results]
    return float(np.mean(np.concatenate(values)))


# ---- EM --------------------------------------------------------------------------------------------------


def assert_monotone_per_stage(history: list[dict], stages: set[float]) -> None:
    """The objective never decreases within a stage (DS warm-up = 0, open levels = 1); ``stages`` ran."""
    stage = np.array([h["stage"] for h in history])
    objective = np.array([h["objective"] for h in history])
    assert set(stage.tolist()) == stages and np.all(np.diff(stage) >= 0)
    for value in stages:
        part = objective[stage == value]
        assert np.all(np.diff(part) >= -1e-12), (value, np.diff(part).min())
        assert part[-1] > part[0]


@pytest.mark.parametrize(
    "dataset,fields",
    [
        ("rte", {}),
        ("bluebird", {"n_levels": 3}),
        ("temp", {"noise": "worker"}),
        ("bluebird", {"learn_penalty": False}),
        ("web_search_filtered", {"penalty_prior": 0.1}),
        ("bluebird", {"start_from_ds": True}),
        ("rte", {"start_from_ds": True, "n_levels": 3}),
    ],
)
def test_objective_never_decreases(dataset, fields):
    blocks, enc = load_dataset(dataset)
    model = DifficultyDawidSkene(enc.n_workers, enc.n_classes, max_iter=80, **{"n_levels": 2, **fields})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result, _ = run(model, blocks)
    assert_monotone_per_stage(result.history, {0.0, 1.0} if model.start_from_ds else {1.0})


def test_objective_never_decreases_on_planted_data(planted):
    blocks, K, _, _ = planted
    result, _ = run(DifficultyDawidSkene(K, 4, n_levels=3, pooled_prior=2.0, max_iter=1000), blocks)
    assert_monotone_per_stage(result.history, {1.0})
    assert result.converged
    staged, _ = run(DifficultyDawidSkene(K, 4, n_levels=2, start_from_ds=True), blocks)
    assert_monotone_per_stage(staged.history, {0.0, 1.0})


def test_levels_open_where_dawid_skene_converges():
    blocks, enc = load_dataset("bluebird")
    K, C = enc.n_workers, enc.n_classes
    ds_result, _ = run(DawidSkene(K, C), blocks)
    result, _ = run(DifficultyDawidSkene(K, C, n_levels=2, start_from_ds=True), blocks)
    warm_up = [h for h in result.history if h["stage"] == 0]
    # the warm-up is Dawid-Skene's EM: same iterations and objective (up to s * H * log(1 / H) per label
    # for the uniform level proportions)
    assert len(warm_up) == ds_result.n_iter
    shift = 0.5 * 2 * np.log(0.5) / sum(b.n_labels for b in blocks)
    np.testing.assert_allclose([h["objective"] for h in warm_up],
                               [h["objective"] + shift for h in ds_result.history], rtol=1e-12)


@pytest.mark.parametrize("dataset", ["rte", "web_search"])
def test_one_level_is_dawid_skene(dataset):
    blocks, enc = load_dataset(dataset)
    K, C = enc.n_workers, enc.n_classes
    ds_result, ds_items = run(DawidSkene(K, C, smoothing=0.5, max_iter=100, tol=1e-6), blocks)
    dds = DifficultyDawidSkene(K, C, n_levels=1, smoothing=0.5, max_iter=100, tol=1e-6)
    dds_result, dds_items = run(dds, blocks)
    assert dds_result.n_iter == ds_result.n_iter
    np.testing.assert_allclose(
        [h["objective"] for h in dds_result.history], [h["objective"] for h in ds_result.history], rtol=1e-12
    )
    np.testing.assert_allclose(dds_result.params["log_B"], ds_result.params["log_pi"], atol=1e-12)
    for (_, a), (_, b) in zip(dds_items, ds_items):
        np.testing.assert_allclose(a.posterior, b.posterior, atol=1e-12)
        np.testing.assert_array_equal(a.label, b.label)
        np.testing.assert_array_equal(a.extra["level"], 0)
    table = dds.worker_table(dds_result.params, dds_result.init_stats)
    ds_table = DawidSkene(K, C).worker_table(ds_result.params, ds_result.init_stats)
    np.testing.assert_allclose(table["accuracy"], ds_table["accuracy"], atol=1e-12)
    np.testing.assert_array_equal(table["n_labels"], ds_table["n_labels"])


def test_statistics_are_additive_across_block_splits():
    labels, truth, _ = idbla_data(**{**PLANTED, "n_items": 300})
    whole, K, _ = frames_to_coded_blocks(labels, truth)
    split, _, _ = frames_to_coded_blocks(labels, truth, max_labels=97)
    assert len(whole) == 1 and len(split) > 20
    model = DifficultyDawidSkene(K, 4, n_levels=3, max_iter=40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a_result, a_items = run(model, whole)
        b_result, b_items = run(model, split)
    assert a_result.n_iter == b_result.n_iter
    for key in ("log_B", "w", "d", "log_alpha", "log_beta"):
        np.testing.assert_allclose(a_result.params[key], b_result.params[key], atol=1e-9)
    ids_a, label_a, post_a = by_item(a_items)
    ids_b, label_b, post_b = by_item(b_items)
    np.testing.assert_array_equal(ids_a, ids_b)
    np.testing.assert_array_equal(label_a, label_b)
    np.testing.assert_allclose(post_a, post_b, atol=1e-9)


# ---- planted difficulty -------------------------------------------------------------------------------


def test_recovers_planted_levels_and_beats_dawid_skene(planted):
    blocks, K, truth, params = planted
    ds_result, ds_items = run(DawidSkene(K, 4), blocks)
    result, items = run(DifficultyDawidSkene(K, 4, n_levels=2), blocks)
    assert result.converged
    # levels: the planted noise weight and share, and most items' level
    np.testing.assert_allclose(result.params["w"], params["level_noise"], atol=0.1)
    np.testing.assert_allclose(np.exp(result.params["log_beta"]), params["beta"], atol=0.1)
    level = np.concatenate([r.extra["level"] for _, r in items])
    assert np.mean(level == truth["level"].to_numpy()) > 0.85
    # accuracy and calibration: a clear margin over Dawid-Skene
    assert error_rate(items) < error_rate(ds_items) - 0.05
    assert nll(items) < 0.5 * nll(ds_items)
    # the easy level has the lower labeling error (paper 5.3.4)
    stats = sum_stats(level_error_stats(b, r.extra["level"], 2) for b, r in items)
    per_level = stats["level_error_sum"] / stats["level_gold_n"]
    assert per_level[0] < per_level[1] - 0.3


def test_outputs_have_the_documented_shapes(planted):
    blocks, K, _, _ = planted
    model = DifficultyDawidSkene(K, 4, n_levels=3)
    result, items = run(model, blocks)
    assert model.item_extras == {"level": "int", "level_posterior": "array<double>"}
    for b, r in items:
        assert r.posterior.shape == (b.n_items, 4) and r.label.dtype == np.int32
        assert r.extra["level"].dtype == np.int32 and r.extra["level"].shape == (b.n_items,)
        assert r.extra["level_posterior"].shape == (b.n_items, 3)
        np.testing.assert_allclose(r.posterior.sum(axis=1), 1.0)
        np.testing.assert_allclose(r.extra["level_posterior"].sum(axis=1), 1.0)
    table = model.worker_table(result.params, result.init_stats)
    assert table["confusion"].shape == (K, 4, 4) and table["accuracy"].shape == (K,)
    assert table["level_confusion"].shape == (K, 3, 4, 4) and table["level_accuracy"].shape == (K, 3)
    assert table["n_labels"].sum() == sum(b.n_labels for b in blocks)
    np.testing.assert_allclose(table["level_confusion"].sum(axis=-1), 1.0)
    # ordered by construction: level 0 is the worker's base matrix, every harder level lowers every worker's
    # probability of the correct answer (here B[k, t, t] >= 1 / C), and levels 1.. are sorted by its mean
    w = np.array(model.summary(result.params)["level_noise"])
    assert w[0] == 0.0 and np.all(w >= 0.0)
    correct = np.diagonal(table["level_confusion"], axis1=2, axis2=3)  # (K, H, C)
    assert np.all(np.diagonal(table["confusion"], axis1=1, axis2=2) >= 0.25)
    assert np.all(correct[:, 1:] <= correct[:, :1] + 1e-12)
    assert np.all(np.diff(correct.mean(axis=(0, 2))) <= 1e-12)
    summary = model.summary(result.params)
    assert set(summary) == {"level_noise", "level_penalty", "level_proportions", "class_proportions"}
    d = np.array(summary["level_penalty"])
    assert d.shape == (3, 4) and np.all(d[0] == 0.0) and np.all(d >= 0.0)
    assert sum(summary["level_proportions"]) == pytest.approx(1.0)


def test_level_log_pi_rows_are_distributions():
    rng = np.random.default_rng(0)
    B = rng.dirichlet(np.ones(3), size=(5, 3))
    noise = rng.dirichlet(np.ones(3), size=5)
    log_pi = level_log_pi(np.log(B), np.array([0.0, 0.4, 1.0]), np.log(noise))
    np.testing.assert_allclose(np.exp(log_pi).sum(axis=-1), 1.0)
    np.testing.assert_allclose(np.exp(log_pi[:, 0]), B)
    np.testing.assert_allclose(np.exp(log_pi[:, 2]), np.broadcast_to(noise[:, None, :], (5, 3, 3)))


def test_penalized_base_rows_are_distributions_and_zero_penalty_is_the_base():
    rng = np.random.default_rng(1)
    B = rng.dirichlet(np.ones(4), size=(6, 4))
    d = np.array([[0.0] * 4, [0.5, 0.0, 2.0, 8.0]])
    S = np.exp(penalized_log_B(np.log(B), d))
    np.testing.assert_allclose(S.sum(axis=-1), 1.0)
    np.testing.assert_allclose(S[:, 0], B)
    # the penalty lowers only the correct answer's odds, by exactly e^-d against every other class
    odds = S[:, 1, 2, 2] / S[:, 1, 2, 0]
    np.testing.assert_allclose(odds, B[:, 2, 2] / B[:, 2, 0] * np.exp(-2.0))
    np.testing.assert_allclose(S[:, 1, 1], B[:, 1])


def test_base_update_maximizes_the_penalized_objective():
    """_base_update's closed form (off-diagonal ∝ counts, one concave 1-D problem per row) against a generic
    optimizer over the full softmax parameters."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(2)
    K, H, C = 3, 2, 3
    counts = rng.gamma(1.0, 3.0, size=(K, H, C, C))
    pseudo = counts.sum(axis=1) + 0.5
    d = np.array([[0.0] * C, [0.7, 1.5, 0.0]])

    def objective(theta_flat, k):
        theta = theta_flat.reshape(C, C)
        log_B = theta - np.log(np.exp(theta).sum(axis=1, keepdims=True))
        S = penalized_log_B(log_B[None], d)[0]
        return -((counts[k] * S).sum() + 0.5 * log_B.sum())

    log_B = _base_update(pseudo, counts.sum(axis=-1), d)
    np.testing.assert_allclose(np.exp(log_B).sum(axis=-1), 1.0)
    for k in range(K):
        best = minimize(objective, np.zeros(C * C), args=(k,), method="BFGS", options={"gtol": 1e-10})
        assert -objective(log_B[k].ravel(), k) >= -best.fun - 1e-8
    # without penalties it is the Dawid-Skene update
    np.testing.assert_allclose(_base_update(pseudo, counts.sum(axis=-1), np.zeros((H, C))),
                               np.log(pseudo / pseudo.sum(axis=-1, keepdims=True)), atol=1e-10)


def test_penalty_update_is_the_constrained_optimum():
    rng = np.random.default_rng(3)
    K, H, C = 5, 3, 3
    counts = rng.gamma(1.0, 3.0, size=(K, H, C, C))
    counts[:, 2, 1, 1] += 30.0  # level 2, class 1: many correct answers, so its optimum is d = 0
    log_B = np.log(rng.dirichlet(np.ones(C) * 2 + 4 * np.eye(C)[0], size=(K, C)))
    d = _penalty_update(counts, log_B, np.ones((H, C)), prior=1.0)
    assert np.all(d[0] == 0.0) and np.all(d >= 0.0)

    def value(h, t, x):
        dd = d.copy()
        dd[h, t] = x
        return (counts[:, h] * penalized_log_B(log_B, dd)[:, h]).sum() - 0.5 * x**2

    for h in (1, 2):
        for t in range(C):
            grid = np.linspace(0.0, 6.0, 601)
            assert value(h, t, d[h, t]) >= max(value(h, t, x) for x in grid) - 1e-9
    assert d[2, 1] == 0.0


def test_warm_start_from_a_model_saved_before_the_penalties(planted):
    """A saved model without class penalties (no ``d``) warm-starts with ``d = 0``; the levels are open."""
    blocks, K, _, _ = planted
    model = DifficultyDawidSkene(K, 4, n_levels=2, start_from_ds=True)
    result, _ = run(model, blocks)
    previous = {key: value for key, value in model.export_params(result.params).items() if key != "d"}
    init = model.init_params(sum_stats(model.init_block(b)[1] for b in blocks))
    warm = model.warm_start(init, previous, np.arange(K))
    assert warm["stage"] == 1 and np.all(warm["d"] == 0.0)
    np.testing.assert_allclose(warm["log_B"], result.params["log_B"])
    np.testing.assert_allclose(warm["log_pi"], level_log_pi(warm["log_B"], warm["w"], warm["log_noise"]))


def test_same_seed_same_answer(planted):
    blocks, K, _, _ = planted
    model = DifficultyDawidSkene(K, 4, seed=3)
    _, a = run(model, blocks)
    _, b = run(replace(model), blocks)
    for (_, x), (_, y) in zip(a, b):
        np.testing.assert_array_equal(x.label, y.label)
        np.testing.assert_array_equal(x.extra["level"], y.extra["level"])


# ---- choosing H ------------------------------------------------------------------------------------------


def test_bic_finds_planted_levels_and_none_in_dawid_skene_data(planted):
    blocks, K, _, _ = planted
    choice = choose_levels(lambda h: DifficultyDawidSkene(K, 4, n_levels=h), LocalEngine(blocks), (1, 2, 3))
    assert choice.chosen == 2 and choice.criterion == "bic"
    assert [row["n_levels"] for row in choice.table] == [1, 2, 3]
    # a level costs its proportion, its noise weight and C = 4 class penalties
    assert choice.table[1]["n_params"] - choice.table[0]["n_params"] == 6
    labels, truth, _ = dawid_skene_data(1500, 20, 3, 6, seed=1)
    ds_blocks, ds_K, _ = frames_to_coded_blocks(labels, truth)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds_choice = choose_levels(
            lambda h: DifficultyDawidSkene(ds_K, 3, n_levels=h), LocalEngine(ds_blocks), (1, 2)
        )
    assert ds_choice.chosen == 1


def test_icl_adds_twice_the_level_entropy_to_bic_and_finds_planted_levels(planted):
    blocks, K, _, _ = planted
    choice = choose_levels(lambda h: DifficultyDawidSkene(K, 4, n_levels=h), LocalEngine(blocks), (1, 2),
                              criterion="icl")
    assert choice.chosen == 2 and choice.criterion == "icl"
    one, two = choice.table
    assert one["level_entropy"] == pytest.approx(0.0, abs=1e-9) and one["icl"] == pytest.approx(one["bic"])
    assert two["level_entropy"] > 0.0 and two["icl"] == pytest.approx(two["bic"] + 2 * two["level_entropy"])
    # the joint (level, class) entropy bounds the level entropy from above
    assert two["joint_entropy"] >= two["level_entropy"]


# ---- validation ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"n_levels": 0}, r"dds\.n_levels must be an integer >= 1, but got 0"),
        ({"smoothing": 0.0}, r"dds\.smoothing must be a number > 0, but got 0\.0"),
        ({"init_noise": 1.0}, r"dds\.init_noise must be a number < 1, but got 1\.0"),
        ({"pooled_prior": -1.0}, r"dds\.pooled_prior must be a number >= 0, but got -1\.0"),
        ({"noise": "gaussian"}, r"dds\.noise must be one of \['uniform', 'worker', 'labels'\], but got 'gaussian'"),
        ({"learn_noise": 1}, r"dds\.learn_noise must be true or false, but got 1"),
        ({"learn_penalty": "yes"}, r"dds\.learn_penalty must be true or false, but got 'yes'"),
        ({"penalty_prior": 0.0}, r"dds\.penalty_prior must be a number > 0, but got 0\.0"),
        ({"init_penalty": -0.5}, r"dds\.init_penalty must be a number >= 0, but got -0\.5"),
        ({"start_from_ds": None}, r"dds\.start_from_ds must be true or false, but got None"),
        ({"max_iter": 0}, r"dds\.max_iter must be an integer >= 1, but got 0"),
        ({"tol": float("nan")}, r"dds\.tol must be a finite number, but got nan"),
    ],
)
def test_invalid_parameters_are_rejected(fields, message):
    with pytest.raises(ConfigError, match=message):
        DifficultyDawidSkene(4, 3, **fields)


# ---- Spark ---------------------------------------------------------------------------------------------


@pytest.mark.spark
def test_spark_engine_gives_the_local_answer_on_any_partitioning(spark):
    import pickle

    from crowdspark.engine.spark.engine import SparkEngine

    blocks, enc = load_dataset("temp", max_labels=300)
    model = DifficultyDawidSkene(enc.n_workers, enc.n_classes, n_levels=2, max_iter=30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local, local_items = run(model, blocks)
        for partitions in (1, 4):
            engine = SparkEngine(spark.sparkContext.parallelize(blocks, partitions))
            try:
                remote = fit(model, engine)
                blobs = engine.item_blobs(partial(finish_fn, model), remote.params).collect()
                choice = choose_levels(lambda h: replace(model, n_levels=h), engine, (1, 2))
            finally:
                engine.close()
            remote_items = [pickle.loads(row[0]) for row in blobs]
            # the engines add the block statistics in different orders; the Newton steps of the M-step (which
            # stop at a step of 1e-10) can turn those last-digit differences into ~1e-12 ones
            assert [h["objective"] for h in remote.history] == pytest.approx(
                [h["objective"] for h in local.history], rel=1e-10
            )
            for key in ("log_B", "w", "d", "log_beta"):
                np.testing.assert_allclose(remote.params[key], local.params[key], atol=1e-10)
            ids, labels, post = by_item(remote_items)
            ids_l, labels_l, post_l = by_item(local_items)
            np.testing.assert_array_equal(ids, ids_l)
            np.testing.assert_array_equal(labels, labels_l)
            np.testing.assert_allclose(post, post_l, atol=1e-10)
            assert choice.chosen == choose_levels(
                lambda h: replace(model, n_levels=h), LocalEngine(blocks), (1, 2)
            ).chosen


def test_batched_halvings_take_the_same_steps_bit_for_bit(monkeypatch):
    """Concave problems whose Newton steps overshoot by far (many halvings): the batched halvings of
    maximize_concave_1d end where halving one at a time (``HALVING_GROWTH = 1``) does, to the last bit, in
    fewer calls."""
    from crowdspark.models import difficulty_ds as dds

    rng = np.random.default_rng(11)
    scale, centre = rng.gamma(1.0, 5.0, size=400), rng.normal(0.0, 20.0, size=400)
    calls = []

    def fun(v, i):  # f = -scale * sqrt(1 + (v - centre)^2): a Newton step from z overshoots to -z^3
        calls.append(i.size)
        z = v - centre[i]
        root = np.sqrt(1.0 + z**2)
        return -scale[i] * root, -scale[i] * z / root, -scale[i] / root**3

    start = rng.normal(0.0, 30.0, size=400)
    results = {}
    for growth in (1, 4):
        monkeypatch.setattr(dds, "HALVING_GROWTH", growth)
        calls.clear()
        results[growth] = (dds.maximize_concave_1d(start, fun), len(calls),
                           dds.maximize_concave_1d(np.abs(start), fun, lower=0.0))
    assert np.array_equal(results[4][0], results[1][0]) and np.array_equal(results[4][2], results[1][2])
    assert results[4][1] < results[1][1] / 2
    np.testing.assert_allclose(results[4][0], centre, atol=1e-6)
    np.testing.assert_allclose(results[4][2], np.maximum(centre, 0.0), atol=1e-6)


def test_base_update_leaves_out_levels_without_penalty_bit_for_bit():
    """Level 0 (d = 0) adds exact zeros to the per-row sums over levels: leaving it out gives the numbers of
    the sum over every level, with two levels (the default choice) and with a level whose penalties are 0."""
    from crowdspark.models import difficulty_ds as dds

    rng = np.random.default_rng(4)
    K, C = 40, 4
    for d in (np.array([[0.0] * C, [0.3, 1.2, 0.0, 2.0]]), np.zeros((2, C))):
        counts = rng.gamma(1.0, 3.0, size=(K, 2, C, C))
        pseudo, totals = counts.sum(axis=1) + 0.5, counts.sum(axis=-1)
        m_t = np.diagonal(pseudo, axis1=1, axis2=2).ravel()
        r = pseudo.sum(axis=-1).ravel() - m_t
        n = totals.transpose(0, 2, 1).reshape(K * C, -1)
        a = np.broadcast_to(-np.expm1(-d).T[None], (K, C, 2)).reshape(n.shape)

        def every_level(v, i):
            u = 1.0 / (1.0 + np.exp(-v))
            q = u * (1.0 - u)
            ni, ai, ui = n[i], a[i], u[:, None]
            shrink = 1.0 - ai * ui
            f = -m_t[i] * np.logaddexp(0.0, -v) - r[i] * np.logaddexp(0.0, v) - (ni * np.log(shrink)).sum(axis=1)
            g = m_t[i] * (1.0 - u) - r[i] * u + (ni * ai * q[:, None] / shrink).sum(axis=1)
            h = -(m_t[i] + r[i]) * q + (ni * ai * (1.0 - 2.0 * ui + ai * ui**2) * q[:, None] / shrink**2).sum(axis=1)
            return f, g, h

        v = dds.maximize_concave_1d(np.log(m_t) - np.log(r), every_level).reshape(K, C)
        diagonal = np.diagonal(_base_update(pseudo, totals, d), axis1=1, axis2=2)
        assert np.array_equal(diagonal, -np.logaddexp(0.0, -v))
