"""glad and mace: planted-parameter recovery, their pandas attributes, their errors for bad parameters.

The kernel contract (additive statistics, both engines, renaming, gold in the fit) is in
tests/test_conformance.py; crowd-kit's layouts and labels in tests/test_crowdkit_compat.py; the refusal of
incremental nights in tests/test_incremental.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdspark.api import GLAD, MACE
from crowdspark.block import build_blocks
from crowdspark.errors import ConfigError
from crowdspark.models.glad import Glad
from crowdspark.models.mace import Mace
from crowdspark.models.registry import build_model
from tests.helpers import fitted_answers, load_dataset
from tests.test_catalogue_simple import run

N_WORKERS, N_CLASSES, PER_ITEM = 30, 3, 8


def assignments(rng: np.random.Generator, n_items: int) -> tuple[np.ndarray, np.ndarray]:
    """``PER_ITEM`` distinct random workers per item: (item, worker) per label, item-major."""
    workers = np.argsort(rng.random((n_items, N_WORKERS)), axis=1)[:, :PER_ITEM]
    return np.repeat(np.arange(n_items), PER_ITEM), workers.ravel()


def blocks_of(items: np.ndarray, workers: np.ndarray, labels: np.ndarray, truth: np.ndarray):
    ids = np.array([f"i{i:06d}" for i in items], dtype=object)
    return build_blocks(ids, workers, labels, truth[items], max_labels=3000)


def glad_crowd(n_items: int, seed: int = 0):
    """A crowd drawn from GLAD: planted abilities (some adversarial) and log inverse difficulties, these
    around the prior's mean (only the products ``alpha exp(beta)`` are identified, so the priors set the
    scale)."""
    rng = np.random.default_rng(seed)
    alpha = rng.normal(1.5, 1.0, N_WORKERS)
    beta = rng.normal(1.0, 0.5, n_items)
    truth = rng.integers(0, N_CLASSES, n_items)
    items, workers = assignments(rng, n_items)
    right = rng.random(items.size) < 1.0 / (1.0 + np.exp(-alpha[workers] * np.exp(beta[items])))
    wrong = (truth[items] + rng.integers(1, N_CLASSES, items.size)) % N_CLASSES
    labels = np.where(right, truth[items], wrong)
    return blocks_of(items, workers, labels, truth), alpha, beta


def mace_crowd(n_items: int, seed: int = 0):
    """A crowd drawn from MACE: planted competences and spamming strategies."""
    rng = np.random.default_rng(seed)
    competence = rng.uniform(0.2, 0.95, N_WORKERS)
    strategy = rng.dirichlet(np.ones(N_CLASSES), N_WORKERS)
    truth = rng.integers(0, N_CLASSES, n_items)
    items, workers = assignments(rng, n_items)
    knows = rng.random(items.size) < competence[workers]
    spam = (rng.random(items.size)[:, None] > np.cumsum(strategy[workers], axis=1)).sum(axis=1)
    labels = np.where(knows, truth[items], np.minimum(spam, N_CLASSES - 1))
    return blocks_of(items, workers, labels, truth), competence, strategy


def test_glad_recovers_planted_abilities_and_difficulties():
    blocks, alpha, beta = glad_crowd(3000)
    model = Glad(N_WORKERS, N_CLASSES)
    result, labels, truth, _ = run(model, blocks)
    assert np.corrcoef(result.params["alpha"], alpha)[0, 1] > 0.95
    assert np.abs(result.params["alpha"] - alpha).mean() < 0.4
    assert np.mean(labels != truth) < 0.05
    objectives = [h["objective"] for h in result.history]
    assert objectives[-1] > objectives[0]


def test_glad_betas_follow_the_planted_difficulties():
    blocks, _, beta = glad_crowd(3000)
    fitted = GLAD().fit(frame_of(blocks))
    planted = pd.Series(beta[[int(i[1:]) for i in fitted.betas_.index]], index=fitted.betas_.index)
    assert fitted.betas_.name == "beta" and fitted.betas_.index.name == "task"
    # eight labels per item tell its difficulty only roughly (and nothing when all eight agree)
    assert np.corrcoef(fitted.betas_, planted)[0, 1] > 0.3
    assert fitted.alphas_.name == "alpha" and fitted.alphas_.index.name == "worker"
    assert fitted.items_["beta"].notna().all()


def test_mace_recovers_planted_competences_and_strategies():
    blocks, competence, strategy = mace_crowd(3000)
    for method in ("vb", "em"):
        model = build_model("mace", {"method": method}, N_WORKERS, N_CLASSES, 0)
        result, labels, truth, _ = run(model, blocks)
        table = model.worker_table(result.params, result.init_stats)
        assert np.corrcoef(table["competence"], competence)[0, 1] > 0.95, method
        assert np.abs(table["competence"] - competence).mean() < 0.06, method
        spammers = competence < 0.5  # their strategies have enough spam labels to be seen
        assert np.abs(table["strategy"][spammers] - strategy[spammers]).mean() < 0.1, method
        assert np.mean(labels != truth) < 0.05, method


def frame_of(blocks) -> pd.DataFrame:
    return pd.DataFrame({
        "task": np.concatenate([b.item_ids[b.item_of_label] for b in blocks]),
        "worker": np.concatenate([b.worker for b in blocks]).astype(str),
        "label": np.concatenate([b.label for b in blocks]),
    })


def test_mace_pandas_attributes_are_crowd_kits_arrays():
    blocks, competence, _ = mace_crowd(600)
    fitted = MACE().fit(frame_of(blocks))
    assert fitted.spamming_.shape == (N_WORKERS, 2) and fitted.thetas_.shape == (N_WORKERS, N_CLASSES)
    np.testing.assert_allclose(fitted.spamming_.sum(axis=1), 1.0)
    np.testing.assert_allclose(fitted.thetas_.sum(axis=1), 1.0)
    np.testing.assert_allclose(fitted.spamming_[:, 1], fitted.workers_["competence"])
    assert set(fitted.workers_.columns) >= {"competence", "spamming", "strategy", "accuracy"}


def test_a_worker_table_starts_glad_and_mace_workers():
    confusion = np.array([[[0.9, 0.05, 0.05], [0.05, 0.9, 0.05], [0.05, 0.05, 0.9]]])
    glad = Glad(1, 3).worker_start(confusion, np.array([0.9]))
    assert 1.0 / (1.0 + np.exp(-glad["alpha"][0] * np.exp(1.0))) == pytest.approx(0.9)
    mace = Mace(1, 3).worker_start(confusion, np.array([0.9]))
    assert mace["know"][0] == pytest.approx(0.85) and mace["spam"][0] == pytest.approx(0.15)


@pytest.mark.parametrize("name, params, message", [
    ("glad", {"beta_steps": 0}, r"glad.beta_steps must be"),
    ("glad", {"ties": "last"}, r"glad.ties must be one of"),
    ("glad", {"tol": -1}, r"glad.tol must be"),
    ("glad", {"stop": "first"}, r"glad.stop must be one of"),
    ("glad", {"m_step_rounds": 0}, r"glad.m_step_rounds must be"),
    ("glad", {"m_step": "lbfgs"}, r"glad.m_step must be one of"),
    ("glad", {"m_step": "cg"}, r"glad.m_step = 'cg' is crowd-kit's M-step .* set glad.stop = 'crowd-kit'"),
    ("mace", {"method": "gibbs"}, r"mace.method must be one of"),
    ("mace", {"alpha": 0}, r"mace.alpha must be"),
    ("mace", {"strategy_prior": -1.0}, r"mace.strategy_prior must be"),
])
def test_bad_parameters_are_refused(name, params, message):
    with pytest.raises(ConfigError, match=message):
        build_model(name, params, 3, 2, 0)


#: ``glad.m_step_rounds`` with which crowd-kit's rule stops music_genre's fit at its second EM iteration
ROUNDS = 4


def crowdkit_stop(n_workers: int, n_classes: int, **params) -> Glad:
    return build_model("glad", {"stop": "crowd-kit", "m_step_rounds": ROUNDS, **params}, n_workers, n_classes, 0)


def test_glads_crowd_kit_stop_answers_with_the_e_step_and_m_step_of_the_iteration_it_stops_at():
    """The rule's test of iteration t runs in the first sweep of iteration t + 1; the fit then answers with
    E-step t's posteriors (those a fit of t - 1 iterations ends with) and M-step t's abilities (those of a
    fit of t iterations)."""
    blocks, enc = load_dataset("music_genre", 10**6)
    k, c = enc.n_workers, enc.n_classes
    result, labels, _, posterior = run(crowdkit_stop(k, c), blocks)
    sweeps = len(result.history)
    t = (sweeps - 1) // ROUNDS
    assert result.converged and sweeps == ROUNDS * t + 1 and t >= 2
    last, before = result.history[-1], result.history[-1 - ROUNDS]
    assert last["change"] < 1e-5
    assert last["change"] == pytest.approx(last["crowdkit_objective"] - before["crowdkit_objective"])
    fixed = {"tol": 0.0, "stop": "change"}
    after_t, _, _, _ = run(crowdkit_stop(k, c, max_iter=t, **fixed), blocks)
    np.testing.assert_array_equal(result.params["alpha"], after_t.params["alpha"])
    _, before_labels, _, before_posterior = run(crowdkit_stop(k, c, max_iter=t - 1, **fixed), blocks)
    np.testing.assert_allclose(posterior, before_posterior, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(labels, before_labels)


def test_glads_defaults_ignore_the_crowd_kit_rule_s_state():
    """The default rule keeps no posteriors in the blocks and answers from the last parameters."""
    blocks, enc = load_dataset("music_genre", 10**6)
    k, c = enc.n_workers, enc.n_classes
    model = build_model("glad", {}, k, c, 0)
    state, _ = model.local_step(blocks[0], model.init_block(blocks[0])[0], {"alpha": np.ones(k)}, 1)
    assert set(state) == {"beta"}


@pytest.mark.spark
@pytest.mark.parametrize("params, sweeps", [
    ({"stop": "crowd-kit", "m_step_rounds": ROUNDS}, ROUNDS * 2 + 1),
    ({"preset": "crowd-kit"}, None),
])
def test_glads_crowd_kit_rules_give_the_local_answer_on_spark(spark, params, sweeps):
    from crowdspark.engine.spark.engine import SparkEngine

    blocks, enc = load_dataset("music_genre", 500)
    assert len(blocks) > 3
    model = build_model("glad", params, enc.n_workers, enc.n_classes, 0)
    local, _, labels, posterior = fitted_answers(model, blocks)
    engine = SparkEngine(spark.sparkContext.parallelize(blocks, 3))
    try:
        remote, _, remote_labels, remote_posterior = fitted_answers(model, blocks, engine)
    finally:
        engine.close()
    assert len(remote.history) == len(local.history) == (sweeps or len(local.history))
    assert local.converged and remote.converged
    # the partitions' sums are added in another order, whose rounding some hundred line-search steps carry
    np.testing.assert_allclose(remote.params["alpha"], local.params["alpha"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(remote_posterior, posterior, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(remote_labels, labels)
