"""EBCC and BWA: what only they show.

EBCC's bound never falls, and on a crowd drawn from its own model (two subtypes per class, so a worker's labels
are correlated through the item's subtype) it answers better than Dawid-Skene; BWA's first sweep is the paper's
update by hand and its worker table recovers planted accuracies; both engines agree.  The kernel contract
(additive statistics, renaming, gold clamping, 1 and 3 partitions) is in tests/test_conformance.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from crowdspark.block import build_blocks
from crowdspark.errors import ConfigError
from crowdspark.models.bwa import Bwa, bwa_scores
from crowdspark.models.ebcc import Ebcc
from crowdspark.models.registry import build_model
from crowdspark.stats import sum_stats
from tests.helpers import fitted_answers, load_dataset
from tests.test_catalogue_simple import one_coin_crowd, run, tiny


def subtype_crowd(n_items: int, seed: int, n_workers: int = 10, per_item: int = 7):
    """Blocks of a binary crowd drawn from EBCC's model with two subtypes per class: every worker has a label
    distribution per (subtype, class) drawn from ``Dirichlet(0.4 beta[t])`` (``beta`` EBCC's default prior),
    and each item gets ``per_item`` distinct random workers."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 2, n_items)
    subtype = rng.integers(0, 2, n_items)
    beta = np.where(np.eye(2, dtype=bool), 4.0, 1.0) * 0.4
    v = np.array([[[rng.dirichlet(beta[t]) for t in range(2)] for _ in range(2)] for _ in range(n_workers)])
    workers = np.concatenate([rng.choice(n_workers, per_item, replace=False) for _ in range(n_items)])
    item = np.repeat(np.arange(n_items), per_item)
    said_one = rng.random(item.size) < v[workers, subtype[item], truth[item], 1]
    ids = np.array([f"i{i:05d}" for i in item], dtype=object)
    return build_blocks(ids, workers, said_one.astype(np.int64), truth[item], max_labels=1500)


@pytest.mark.parametrize("seed", [0, 1])
def test_ebcc_beats_dawid_skene_on_a_crowd_with_two_subtypes_per_class(seed):
    blocks = subtype_crowd(600, seed)
    errors = {}
    for name, params in (("ds", {}), ("ebcc", {"n_subtypes": 2, "n_restarts": 3})):
        _, labels, truth, _ = run(build_model(name, params, 10, 2, 1), blocks)
        errors[name] = np.mean(labels != truth)
    assert errors["ebcc"] < errors["ds"], errors


def test_the_bound_of_one_restart_never_decreases():
    blocks = subtype_crowd(300, 2)
    result, *_ = run(Ebcc(10, 2, seed=4, n_restarts=1, n_subtypes=3, tol=1e-9, max_iter=60), blocks)
    bounds = np.array([h["objective"] for h in result.history])
    assert len(bounds) > 10
    assert np.all(np.diff(bounds) >= -1e-12 * np.abs(bounds[1:])), np.diff(bounds).min()


def test_the_answer_is_the_restart_with_the_largest_bound():
    blocks = subtype_crowd(300, 3)
    model = Ebcc(10, 2, seed=5, n_restarts=4, n_subtypes=2)
    result, labels, _, posterior = run(model, blocks)
    params = result.params
    assert int(params["best"]) == int(np.argmax(params["bound"]))
    assert model.summary(params)["best_restart"] == int(params["best"])
    # the saved model keeps the best restart alone, and answers as the fit does
    exported = model.export_params(params)
    assert exported["lam"].shape == (10, 1, 2, 2, 2)
    again = np.concatenate([model.class_posterior(b, exported) for b in blocks])
    np.testing.assert_allclose(again, posterior, rtol=0, atol=1e-12)


def test_bwa_first_sweep_is_the_papers_update_by_hand():
    # tiny(): item a: w0=0 w1=0 w2=1; item b: w0=1 w1=1 w2=0; item c: w0=0 w2=1
    blocks = tiny()
    model = Bwa(3, 2, a_v=15.0, lam=1.0)
    init_stats = sum_stats([model.init_block(b)[1] for b in blocks])
    params = model.init_params(init_stats)
    y = np.zeros((3, 3, 2))  # (item, worker, class): 1 on the class the worker said
    seen = np.zeros((3, 3), dtype=bool)
    for i, j, c in [(0, 0, 0), (0, 1, 0), (0, 2, 1), (1, 0, 1), (1, 1, 1), (1, 2, 0), (2, 0, 0), (2, 2, 1)]:
        y[i, j, c], seen[i, j] = 1.0, True
    z0 = y.sum(axis=1) / seen.sum(axis=1)[:, None]
    b_v = 15.0 * 4 * (1 - 1 / 2) * (seen.sum(axis=1)[:, None] * z0 * (1 - z0)).sum(axis=0) / seen.sum()
    residual = (((z0[:, None, :] - y) ** 2) * seen[:, :, None]).sum(axis=0)  # (worker, class)
    v = (15.0 + seen.sum(axis=0)[:, None]) / (b_v + residual)
    mu = z0.mean(axis=0)
    np.testing.assert_allclose(params["b_v"], b_v)
    np.testing.assert_allclose(params["v"], v)
    np.testing.assert_allclose(params["mu"], mu)
    z1 = (mu + (v[None] * y * seen[:, :, None]).sum(axis=1)) / (1.0 + (v[None] * seen[:, :, None]).sum(axis=1))
    got = np.concatenate([bwa_scores(b, params["v"], params["mu"], 1.0) for b in blocks])
    ids = np.concatenate([b.item_ids for b in blocks]).astype(str)
    np.testing.assert_allclose(got[np.argsort(ids)], z1)


def test_bwa_recovers_planted_accuracies_on_a_highly_redundant_crowd():
    """Every one of 12 one-coin workers labels each of 1500 items (BWA's setting): the worker table's accuracy
    is the planted one within 3 standard errors of a share of 1500 labels (0.04), and the precisions follow the
    accuracies."""
    accuracy = np.linspace(0.6, 0.95, 12)
    blocks, _ = one_coin_crowd(1500, accuracy, 2, 12)
    model = Bwa(12, 2, seed=1)
    result, labels, truth, _ = run(model, blocks)
    assert result.converged and np.mean(labels == truth) > 0.98
    table = model.worker_table(result.params, result.init_stats)
    np.testing.assert_allclose(table["accuracy"], accuracy, atol=0.04)
    np.testing.assert_allclose(table["confusion"].sum(axis=2), 1.0)
    # a binary label's squared residual is about 1 when it is wrong, so 1 / precision is about the error rate
    assert np.corrcoef(1.0 - 1.0 / table["precision"][:, 0], accuracy)[0, 1] > 0.95


@pytest.mark.parametrize("name, params, message", [
    ("ebcc", {"n_subtypes": 0}, r"ebcc\.n_subtypes must be an integer >= 1"),
    ("ebcc", {"n_restarts": 0}, r"ebcc\.n_restarts must be an integer >= 1"),
    ("ebcc", {"a_pi": 0.0}, r"ebcc\.a_pi must be a number > 0"),
    ("ebcc", {"empirical_prior": "yes"}, r"ebcc\.empirical_prior must be true or false"),
    ("bwa", {"a_v": -1.0}, r"bwa\.a_v must be a number > 0"),
    ("bwa", {"lam": 0.0}, r"bwa\.lam must be a number > 0"),
])
def test_bad_parameters_are_config_errors(name, params, message):
    with pytest.raises(ConfigError, match=message):
        build_model(name, params, 3, 2, 0)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("name, params", [("ebcc", {"n_restarts": 3, "n_subtypes": 4, "max_iter": 10}), ("bwa", {})])
def test_the_spark_engine_gives_the_local_answer(spark, name, params):
    blocks, enc = load_dataset("temp", 500)
    assert_spark_gives_local_answer(spark, build_model(name, params, enc.n_workers, enc.n_classes, 7), blocks)


def assert_spark_gives_local_answer(spark, model, blocks) -> None:
    """The fit of ``model`` on the Spark engine over ``blocks`` in 3 partitions has the local fit's sweeps, labels
    and posteriors."""
    from crowdspark.engine.spark.engine import SparkEngine

    local, _, labels, posterior = fitted_answers(model, blocks)
    engine = SparkEngine(spark.sparkContext.parallelize(blocks, 3))
    try:
        remote, _, remote_labels, remote_posterior = fitted_answers(model, blocks, engine)
    finally:
        engine.close()
    assert len(remote.history) == len(local.history) > 1
    np.testing.assert_array_equal(remote_labels, labels)
    np.testing.assert_allclose(remote_posterior, posterior, rtol=0, atol=1e-9)
