"""Majority vote and Dawid-Skene kernels on the local engine (no Spark)."""

from __future__ import annotations

import warnings
from functools import partial

import numpy as np
import pandas as pd
import pytest

from crowdspark.block import build_blocks
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.loop import ConvergenceWarning, finish_fn, fit
from crowdspark.errors import ConfigError
from crowdspark.models.common import argmax_random_ties, incidence, label_loglik
from crowdspark.models.dawid_skene import DawidSkene
from crowdspark.models.majority_vote import MajorityVote
from crowdspark.rng import uniforms
from tests.helpers import by_item, error_rate, frames_to_blocks, load_dataset


def run(model, blocks):
    engine = LocalEngine(blocks)
    result = fit(model, engine)
    return result, engine.map_items(partial(finish_fn, model), result.params)


def test_argmax_random_ties_picks_each_tied_class_evenly():
    n = 30_000
    scores = np.tile([2.0, 5.0, 5.0, 5.0, 1.0], (n, 1))
    picks = argmax_random_ties(scores, uniforms(1, 0, np.arange(n, dtype=np.uint64)))
    counts = np.bincount(picks, minlength=5)
    assert counts[0] == counts[4] == 0
    assert np.all(np.abs(counts[1:4] / n - 1 / 3) < 0.015)
    assert argmax_random_ties(np.array([[0.1, 0.9]]), np.array([0.99]))[0] == 1


def test_majority_vote_posterior_is_vote_shares_and_ties_follow_the_seed():
    labels = pd.DataFrame(
        {"item": ["a", "a", "a", "b", "b"], "worker": ["1", "2", "3", "1", "2"], "label": ["x", "x", "y", "x", "y"]}
    )
    blocks, enc = frames_to_blocks(labels)
    _, results = run(MajorityVote(len(enc.workers), 2, seed=0), blocks)
    ids, lab, post = by_item(results)
    np.testing.assert_allclose(post, [[2 / 3, 1 / 3], [0.5, 0.5]])
    assert lab[0] == 0
    tie_labels = {int(by_item(run(MajorityVote(3, 2, seed=s), blocks)[1])[1][1]) for s in range(20)}
    assert tie_labels == {0, 1}


def test_majority_vote_error_on_rte_over_ten_seeds_matches_expected_tie_split():
    blocks, enc = load_dataset("rte")
    errors = [error_rate(run(MajorityVote(enc.n_workers, enc.n_classes, seed=s), blocks)[1]) for s in range(10)]
    assert 0.098 <= np.mean(errors) <= 0.110


def test_ds_first_iteration_golden_values():
    # two workers, two items; hand-computed M-step from majority-vote shares with s = 0.5
    labels = pd.DataFrame({"item": ["a", "a", "b", "b"], "worker": ["u", "v", "u", "v"], "label": ["0", "0", "0", "1"]})
    blocks, enc = frames_to_blocks(labels)
    model = DawidSkene(2, 2, smoothing=0.5, max_iter=1, tol=0.0)
    engine = LocalEngine(blocks)
    with pytest.warns(ConvergenceWarning):
        result = fit(model, engine)
    # shares: item a -> (1, 0); item b -> (0.5, 0.5)
    # worker u said 0 on a and b: N_u[t=0] = (1 + 0.5, 0), N_u[t=1] = (0.5, 0)
    # worker v said 0 on a, 1 on b: N_v[t=0] = (1, 0.5), N_v[t=1] = (0, 0.5)
    n_u = np.array([[1.5, 0.0], [0.5, 0.0]]) + 0.5
    n_v = np.array([[1.0, 0.5], [0.0, 0.5]]) + 0.5
    pi0 = np.stack([n_u / n_u.sum(1, keepdims=True), n_v / n_v.sum(1, keepdims=True)])
    alpha0 = (np.array([1.5, 0.5]) + 0.5) / 3.0
    # the first sweep's E-step uses pi0, alpha0; its objective is the log posterior per label
    log_ev = 0.0
    for said in ([0, 0], [0, 1]):
        joint = alpha0 * pi0[0][:, said[0]] * pi0[1][:, said[1]]
        log_ev += np.log(joint.sum())
    expected = (log_ev + 0.5 * (np.log(pi0).sum() + np.log(alpha0).sum())) / 4
    assert result.history[0]["objective"] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("name", ["rte", "web_search_filtered", "bluebird"])
def test_ds_objective_never_decreases(name):
    blocks, enc = load_dataset(name)
    model = DawidSkene(enc.n_workers, enc.n_classes, max_iter=60, tol=1e-13)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        result = fit(model, LocalEngine(blocks))
    assert len(result.history) > 5
    objective = np.array([h["objective"] for h in result.history])
    assert np.all(np.diff(objective) >= -1e-12)


def test_ds_statistics_are_additive_across_block_splits():
    one, enc = load_dataset("web_search_filtered")
    many, _ = load_dataset("web_search_filtered", max_labels=500)
    assert len(many) > 20
    model = DawidSkene(enc.n_workers, enc.n_classes, max_iter=5, tol=0.0)
    with pytest.warns(ConvergenceWarning):
        r1, res1 = run(model, one)
    with pytest.warns(ConvergenceWarning):
        r2, res2 = run(model, many)
    np.testing.assert_allclose(r1.params["log_pi"], r2.params["log_pi"], rtol=0, atol=1e-12)
    _, l1, p1 = by_item(res1)
    _, l2, p2 = by_item(res2)
    np.testing.assert_array_equal(l1, l2)
    np.testing.assert_allclose(p1, p2, atol=1e-12)


def test_ds_reaches_the_issue_targets_on_rte_and_web_search_filtered():
    for name, target in (("rte", 0.073), ("web_search_filtered", 0.166)):
        blocks, enc = load_dataset(name)
        result, results = run(DawidSkene(enc.n_workers, enc.n_classes), blocks)
        assert result.converged
        assert error_rate(results) <= target, name


def test_ds_posteriors_sum_to_one_and_relabelling_workers_changes_nothing():
    blocks, enc = load_dataset("temp")
    _, results = run(DawidSkene(enc.n_workers, enc.n_classes), blocks)
    for _, r in results:
        np.testing.assert_allclose(r.posterior.sum(axis=1), 1.0, atol=1e-12)
    labels = pd.read_csv("data/temp/labels.csv", dtype=str)
    renamed = labels.assign(worker="z" + labels["worker"].str[::-1])
    blocks2, enc2 = frames_to_blocks(renamed, pd.read_csv("data/temp/truth.csv", dtype=str))
    _, results2 = run(DawidSkene(enc2.n_workers, enc2.n_classes), blocks2)
    _, l1, p1 = by_item(results)
    _, l2, p2 = by_item(results2)
    np.testing.assert_array_equal(l1, l2)
    np.testing.assert_allclose(p1, p2, atol=1e-9)


def test_ds_warns_when_it_stops_without_converging():
    blocks, enc = load_dataset("web_search_filtered")
    with pytest.warns(ConvergenceWarning, match="did not converge.*max_iter"):
        result, _ = run(DawidSkene(enc.n_workers, enc.n_classes, max_iter=2, tol=1e-9), blocks)
    assert result.converged is False and result.n_iter == 2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_iter": 0}, r"ds.max_iter must be an integer >= 1, but got 0"),
        ({"max_iter": 2.5}, r"ds.max_iter must be an integer, but got 2.5"),
        ({"tol": -1.0}, r"ds.tol must be a number >= 0, but got -1.0"),
        ({"smoothing": 0.0}, r"ds.smoothing must be a number > 0, but got 0.0"),
        ({"smoothing": float("nan")}, r"ds.smoothing must be a finite number, but got nan"),
    ],
)
def test_ds_parameter_validation(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        DawidSkene(3, 2, **kwargs)


def test_ds_recovers_planted_confusion_matrices():
    from crowdspark.synthetic import dawid_skene_data

    labels, truth, planted = dawid_skene_data(20_000, 50, 3, 8, seed=5)
    blocks, enc = frames_to_blocks(labels, truth)
    result, results = run(DawidSkene(enc.n_workers, enc.n_classes, smoothing=0.01), blocks)
    # worker ids "w0000".. are in index order, classes "0".."2" too
    assert list(enc.workers) == sorted(enc.workers) and list(enc.classes) == ["0", "1", "2"]
    estimated = np.exp(result.params["log_pi"])
    worker_index = [int(w[1:]) for w in enc.workers]
    true_pi = planted["pi"][worker_index]
    n_labels = np.bincount(np.concatenate([b.worker for b in blocks]), minlength=enc.n_workers)
    busy = n_labels >= 2000
    assert busy.sum() >= 10
    assert np.max(np.abs(estimated[busy] - true_pi[busy])) < 0.05
    np.testing.assert_allclose(np.exp(result.params["log_alpha"]), planted["alpha"], atol=0.02)
    assert error_rate(results) < 0.05


def test_incidence_per_dtype_shares_the_index_arrays():
    """One incidence matrix per dtype, memoized on the block, sharing the index arrays; the single-precision
    per-label log-likelihood matches the double one."""
    rng = np.random.default_rng(3)
    items = np.repeat(np.arange(300), 5).astype(str).astype(object)
    block = build_blocks(items, rng.integers(0, 12, items.size), rng.integers(0, 3, items.size), None)[0]
    double = incidence(block, 12, 3)
    single = incidence(block, 12, 3, np.float32)
    assert double.dtype == np.float64 and single.dtype == np.float32
    assert np.shares_memory(single.indices, double.indices) and np.shares_memory(single.indptr, double.indptr)
    assert incidence(block, 12, 3, np.float32) is single
    log_pi = np.log(rng.dirichlet(np.ones(3), size=(12, 2, 3)))
    ll32 = label_loglik(block, log_pi.astype(np.float32))
    assert ll32.dtype == np.float32
    np.testing.assert_allclose(ll32, label_loglik(block, log_pi), rtol=1e-5)


def test_incidence_matrices_share_one_read_only_array_of_ones_and_equal_the_counts(monkeypatch):
    """Blocks of a process share their matrices' values (no copy of ones per block, none writable); the
    matrices count each (worker, label) per item, duplicates included."""
    from crowdspark.models import common

    monkeypatch.setattr(common, "_ONES", {})  # this process's array as a run's first blocks find it
    rng = np.random.default_rng(5)
    items = np.repeat(np.arange(400), 4).astype(str).astype(object)
    worker, label = rng.integers(0, 9, items.size), rng.integers(0, 3, items.size)
    small, large = build_blocks(items, worker, label, None, max_labels=600)[:2]
    a, b = incidence(large, 9, 3), incidence(small, 9, 3)
    assert np.shares_memory(a.data, b.data) and not a.data.flags.writeable
    assert a.indices.dtype == a.indptr.dtype == np.int32  # scipy's own index type: kept, not copied
    assert np.shares_memory(a.indices, incidence(large, 9, 3).indices)
    dense = np.zeros((27, large.n_items))
    np.add.at(dense, (large.worker * 3 + large.label, large.item_of_label), 1.0)
    np.testing.assert_array_equal(a.toarray(), dense)
    with pytest.raises(ValueError):
        a.data[0] = 2.0
