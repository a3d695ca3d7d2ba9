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
from crowdspark.errors import ConfigError
from crowdspark.metrics import level_error_stats
from crowdspark.models.dawid_skene import DawidSkene
from crowdspark.models.difficulty_ds import DifficultyDawidSkene, choose_levels_ds, level_log_pi
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


@pytest.mark.parametrize("dataset,fields", [("rte", {}), ("bluebird", {"n_levels": 3}), ("temp", {"noise": "worker"})])
def test_objective_never_decreases(dataset, fields):
    blocks, enc = load_dataset(dataset)
    model = DifficultyDawidSkene(enc.n_workers, enc.n_classes, max_iter=60, **fields)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result, _ = run(model, blocks)
    objective = np.array([h["objective"] for h in result.history])
    assert np.all(np.diff(objective) >= -1e-12), np.diff(objective).min()
    assert objective[-1] > objective[0]


def test_objective_never_decreases_on_planted_data(planted):
    blocks, K, _, _ = planted
    result, _ = run(DifficultyDawidSkene(K, 4, n_levels=3, pooled_prior=2.0), blocks)
    objective = np.array([h["objective"] for h in result.history])
    assert np.all(np.diff(objective) >= -1e-12)
    assert result.converged


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
    for key in ("log_B", "w", "log_alpha", "log_beta"):
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
    # ordered by construction: noise grows and accuracy falls with the level, for every worker
    w = np.array(model.summary(result.params)["level_noise"])
    assert w[0] == 0.0 and np.all(np.diff(w) >= 0)
    assert np.all(np.diff(table["level_accuracy"], axis=1) <= 1e-12)
    summary = model.summary(result.params)
    assert set(summary) == {"level_noise", "level_proportions", "class_proportions"}
    assert sum(summary["level_proportions"]) == pytest.approx(1.0)


def test_level_log_pi_rows_are_distributions():
    rng = np.random.default_rng(0)
    B = rng.dirichlet(np.ones(3), size=(5, 3))
    noise = rng.dirichlet(np.ones(3), size=5)
    log_pi = level_log_pi(np.log(B), np.array([0.0, 0.4, 1.0]), np.log(noise))
    np.testing.assert_allclose(np.exp(log_pi).sum(axis=-1), 1.0)
    np.testing.assert_allclose(np.exp(log_pi[:, 0]), B)
    np.testing.assert_allclose(np.exp(log_pi[:, 2]), np.broadcast_to(noise[:, None, :], (5, 3, 3)))


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
    choice = choose_levels_ds(lambda h: DifficultyDawidSkene(K, 4, n_levels=h), LocalEngine(blocks), (1, 2, 3))
    assert choice.chosen == 2 and choice.criterion == "bic"
    assert [row["n_levels"] for row in choice.table] == [1, 2, 3]
    assert choice.table[1]["n_params"] - choice.table[0]["n_params"] == 2
    labels, truth, _ = dawid_skene_data(1500, 20, 3, 6, seed=1)
    ds_blocks, ds_K, _ = frames_to_coded_blocks(labels, truth)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds_choice = choose_levels_ds(
            lambda h: DifficultyDawidSkene(ds_K, 3, n_levels=h), LocalEngine(ds_blocks), (1, 2)
        )
    assert ds_choice.chosen == 1


def test_icl_adds_twice_the_level_entropy_to_bic_and_finds_planted_levels(planted):
    blocks, K, _, _ = planted
    choice = choose_levels_ds(lambda h: DifficultyDawidSkene(K, 4, n_levels=h), LocalEngine(blocks), (1, 2),
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
        ({"max_iter": 0}, r"dds\.max_iter must be an integer >= 1, but got 0"),
        ({"tol": float("nan")}, r"dds\.tol must be a finite number, but got nan"),
    ],
)
def test_invalid_parameters_are_rejected(fields, message):
    with pytest.raises(ConfigError, match=message):
        DifficultyDawidSkene(4, 3, **fields)


def test_choose_levels_rejects_unknown_criterion_and_bad_levels():
    engine = LocalEngine([])
    with pytest.raises(ConfigError, match=r"criterion must be one of \['bic', 'aic', 'icl'\], but got 'paper'"):
        choose_levels_ds(lambda h: DifficultyDawidSkene(4, 3, n_levels=h), engine, criterion="paper")
    with pytest.raises(ConfigError, match=r"levels must be an integer >= 1, but got 0"):
        choose_levels_ds(lambda h: DifficultyDawidSkene(4, 3, n_levels=h), engine, levels=(0, 1))


# ---- Spark ---------------------------------------------------------------------------------------------


@pytest.mark.spark
def test_spark_engine_gives_the_local_answer_on_any_partitioning(spark):
    import pickle

    from crowdspark.engine.spark import SparkEngine

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
                choice = choose_levels_ds(lambda h: replace(model, n_levels=h), engine, (1, 2))
            finally:
                engine.close()
            remote_items = [pickle.loads(row[0]) for row in blobs]
            assert [h["objective"] for h in remote.history] == pytest.approx(
                [h["objective"] for h in local.history], rel=1e-12
            )
            for key in ("log_B", "w", "log_beta"):
                np.testing.assert_allclose(remote.params[key], local.params[key], atol=1e-10)
            ids, labels, post = by_item(remote_items)
            ids_l, labels_l, post_l = by_item(local_items)
            np.testing.assert_array_equal(ids, ids_l)
            np.testing.assert_array_equal(labels, labels_l)
            np.testing.assert_allclose(post, post_l, atol=1e-10)
            assert choice.chosen == choose_levels_ds(
                lambda h: replace(model, n_levels=h), LocalEngine(blocks), (1, 2)
            ).chosen
