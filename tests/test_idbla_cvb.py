"""Tests of IDBLA by collapsed variational inference (crowdspark.models.idbla_cvb)."""

from __future__ import annotations

import math
import pickle
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from crowdspark.block import Block, build_blocks
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.loop import ConvergenceWarning, finish_fn, fit
from crowdspark.errors import ConfigError
from crowdspark.models.idbla_cvb import (
    CHANGE_EDGES,
    CvbPriors,
    IdblaCvb,
    IdblaCvb0,
    collapsed_log_joint,
    cvb_tables,
    cvb_update,
    gather_order,
    label_multiplicity,
    max_change_bound,
    next_damping,
    step_cosine,
    step_stats,
    tables_to_params,
)
from crowdspark.stats import sum_stats
from tests.helpers import load_dataset

DATA = Path(__file__).resolve().parents[1] / "data"
sys.path.insert(0, str(DATA.parent / "scripts" / "experiments"))
from cvb_sequential import fit_sequential  # noqa: E402

# ---------------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------------


def load(name: str, max_labels: int = 3000) -> tuple[list[Block], int, int]:
    blocks, enc = load_dataset(name, max_labels)
    return blocks, enc.n_workers, enc.n_classes


def tiny_data(seed: int = 0, n_items: int = 7, n_workers: int = 4, n_classes: int = 3):
    """Random labels with a repeated (item, worker) pair, random factors of every item."""
    rng = np.random.default_rng(seed)
    items, workers, labels = [], [], []
    for i in range(n_items):
        for k in rng.choice(n_workers, size=rng.integers(1, n_workers + 1), replace=False):
            items.append(i)
            workers.append(int(k))
            labels.append(int(rng.integers(n_classes)))
    # a worker who labelled item 0 twice, once with the same class
    items += [0, 0]
    workers += [workers[0], workers[0]]
    labels += [labels[0], (labels[0] + 1) % n_classes]
    truth = rng.integers(-1, n_classes, size=len(items))
    truth = np.array([truth[items.index(i)] for i in items])
    ids = np.array([f"i{i}" for i in items], dtype=object)
    return ids, np.array(workers), np.array(labels), truth


def random_factors(n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.dirichlet(np.ones(size), size=n)
    return x


def reference_update(
    item: np.ndarray, worker: np.ndarray, label: np.ndarray, lam: np.ndarray, rho: np.ndarray, p: CvbPriors
) -> tuple[np.ndarray, np.ndarray]:
    """Paper eq. 23 then eq. 22 for every item from the same (old) factors, with loops over labels.

    Direct transcription: sums over the other items' labels of Bernoulli means and variances.
    """
    n, C = lam.shape
    H = rho.shape[1]

    def elog(mean: float, var: float, a: float) -> float:
        return math.log(mean + a) - (var / (2 * (mean + a) ** 2) if p.second_order else 0.0)

    lam_new, rho_new = np.zeros_like(lam), np.zeros_like(rho)
    for i in range(n):
        others = [j for j in range(n) if j != i]
        own = np.flatnonzero(item == i)
        rest = np.flatnonzero(item != i)
        score = np.zeros(C)
        for t in range(C):
            e = sum(lam[j, t] for j in others)
            v = sum(lam[j, t] * (1 - lam[j, t]) for j in others)
            score[t] = elog(e, v, p.gamma_alpha)
            for ell in own:
                cell = p.omega + p.diagonal_prior * (t == label[ell])
                for same_class, a, sign in ((True, cell, 1.0), (False, C * p.omega + p.diagonal_prior, -1.0)):
                    sel = [r for r in rest if worker[r] == worker[ell] and (not same_class or label[r] == label[ell])]
                    probs = [float(rho[item[r]] @ rho[i]) * lam[item[r], t] for r in sel]
                    score[t] += sign * elog(sum(probs), sum(q * (1 - q) for q in probs), a)
        lam_i = np.exp(score - score.max())
        lam_new[i] = lam_i / lam_i.sum()
        score = np.zeros(H)
        for h in range(H):
            e = sum(rho[j, h] for j in others)
            v = sum(rho[j, h] * (1 - rho[j, h]) for j in others)
            score[h] = elog(e, v, p.gamma_beta)
            for ell in own:
                # the diagonal pseudo-count of the random cell (T_i, c) enters at its mean
                cell = p.omega + p.diagonal_prior * lam_new[i, label[ell]]
                for same_class, a, sign in ((True, cell, 1.0), (False, C * p.omega + p.diagonal_prior, -1.0)):
                    sel = [r for r in rest if worker[r] == worker[ell] and (not same_class or label[r] == label[ell])]
                    probs = [float(lam[item[r]] @ lam_new[i]) * rho[item[r], h] for r in sel]
                    score[h] += sign * elog(sum(probs), sum(q * (1 - q) for q in probs), a)
        rho_i = np.exp(score - score.max())
        rho_new[i] = rho_i / rho_i.sum()
    return lam_new, rho_new


def vectorized_update(blocks: list[Block], K: int, lam: list, rho: list, priors: CvbPriors):
    stats = sum_stats(cvb_tables(b, l, r, K, priors.second_order) for b, l, r in zip(blocks, lam, rho))
    tables = tables_to_params(stats)
    out = [cvb_update(b, tables, l, r, label_multiplicity(b), priors) for b, l, r in zip(blocks, lam, rho)]
    return np.concatenate([o[0] for o in out]), np.concatenate([o[1] for o in out])


# ---------------------------------------------------------------------------------------------------------
# the update equations
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("second_order", [True, False])
@pytest.mark.parametrize("seed, diagonal_prior", [(0, 0.0), (1, 0.0), (2, 1.5)])
def test_parallel_update_matches_per_item_reference(second_order: bool, seed: int, diagonal_prior: float) -> None:
    ids, workers, labels, truth = tiny_data(seed)
    K, C, H = 4, 3, 2
    (block,) = build_blocks(ids, workers, labels, truth)
    rng = np.random.default_rng(seed + 10)
    lam, rho = random_factors(block.n_items, C, rng), random_factors(block.n_items, H, rng)
    priors = CvbPriors(
        omega=0.7, gamma_alpha=1.3, gamma_beta=0.9, second_order=second_order, diagonal_prior=diagonal_prior
    )
    got_lam, got_rho = vectorized_update([block], K, [lam], [rho], priors)
    ref_lam, ref_rho = reference_update(block.item_of_label, block.worker, block.label, lam, rho, priors)
    np.testing.assert_allclose(got_lam, ref_lam, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_rho, ref_rho, rtol=1e-10, atol=1e-12)


def test_update_by_hand_two_items() -> None:
    """Two items, one worker, C = 2, H = 1, CVB0: lambda_1 follows the other item's label counts."""
    ids = np.array(["a", "b"], dtype=object)
    (block,) = build_blocks(ids, np.array([0, 0]), np.array([0, 0]))
    lam = np.array([[0.5, 0.5], [0.8, 0.2]])
    rho = np.ones((2, 1))
    priors = CvbPriors(second_order=False)
    new_lam, new_rho = vectorized_update([block], 1, [lam], [rho], priors)
    # item a: (E N_t + 1) * (E N_l(0, 0, t, 0) + 1) / (E N_l(0, 0, t, .) + 2), with item b only:
    # t = 0: (0.8 + 1) * (0.8 + 1) / (0.8 + 2);  t = 1: (0.2 + 1) * (0.2 + 1) / (0.2 + 2)
    s0, s1 = 1.8 * 1.8 / 2.8, 1.2 * 1.2 / 2.2
    np.testing.assert_allclose(new_lam[0], [s0 / (s0 + s1), s1 / (s0 + s1)], rtol=1e-12)
    np.testing.assert_allclose(new_rho, 1.0)


def test_variance_correction_changes_the_update() -> None:
    ids, workers, labels, truth = tiny_data(3)
    (block,) = build_blocks(ids, workers, labels, truth)
    rng = np.random.default_rng(5)
    lam, rho = random_factors(block.n_items, 3, rng), random_factors(block.n_items, 2, rng)
    a = vectorized_update([block], 4, [lam], [rho], CvbPriors(second_order=True))[0]
    b = vectorized_update([block], 4, [lam], [rho], CvbPriors(second_order=False))[0]
    assert np.abs(a - b).max() > 1e-4


def test_damping_mixes_old_factors() -> None:
    ids, workers, labels, truth = tiny_data(4)
    (block,) = build_blocks(ids, workers, labels, truth)
    rng = np.random.default_rng(6)
    lam, rho = random_factors(block.n_items, 3, rng), random_factors(block.n_items, 2, rng)
    undamped, _ = vectorized_update([block], 4, [lam], [rho], CvbPriors())
    damped, _ = vectorized_update([block], 4, [lam], [rho], CvbPriors(damping=0.25))
    np.testing.assert_allclose(damped, 0.75 * undamped + 0.25 * lam, rtol=1e-12)


def test_tables_are_additive_over_block_splits() -> None:
    ids, workers, labels, truth = tiny_data(2, n_items=12)
    (whole,) = build_blocks(ids, workers, labels, truth)
    parts = build_blocks(ids, workers, labels, truth, max_labels=4)
    assert len(parts) > 2
    rng = np.random.default_rng(0)
    lam, rho = random_factors(whole.n_items, 3, rng), random_factors(whole.n_items, 2, rng)
    one = cvb_tables(whole, lam, rho, 4)
    split, start = [], 0
    for b in parts:
        split.append(cvb_tables(b, lam[start : start + b.n_items], rho[start : start + b.n_items], 4))
        start += b.n_items
    total = sum_stats(split)
    for key, value in one.items():
        np.testing.assert_allclose(total[key], value, rtol=1e-12, atol=1e-12)
    # the expected counts total the numbers of labels and items
    assert one["n_l"].sum() == pytest.approx(whole.n_labels)
    assert one["n_t"].sum() == pytest.approx(whole.n_items)
    # both second-moment tables hold sum lambda_t^2 rho_h^2 on their diagonals
    diag_tt = np.einsum("kttha->ktha", one["s_tt"])
    diag_hh = np.einsum("khhta->ktha", one["s_hh"])
    np.testing.assert_allclose(diag_tt, diag_hh, rtol=1e-12)


def test_collapsed_log_joint_matches_direct_formula() -> None:
    rng = np.random.default_rng(1)
    n_l = rng.integers(0, 4, size=(2, 2, 3, 3)).astype(float)
    n_t, n_q = np.array([3.0, 1.0, 2.0]), np.array([4.0, 2.0])
    lg = math.lgamma
    want = sum(lg(x + 1.0) for x in n_t) - lg(6 + 3.0) + lg(3.0)
    want += sum(lg(x + 1.0) for x in n_q) - lg(6 + 2.0) + lg(2.0)
    for row in n_l.reshape(-1, 3):
        want += sum(lg(x + 0.5) for x in row) - 3 * lg(0.5) + lg(1.5) - lg(row.sum() + 1.5)
    assert collapsed_log_joint(n_t, n_q, n_l, 0.5, 1.0, 1.0) == pytest.approx(want, rel=1e-12)
    # a diagonal pseudo-count d: row t has 0.5 + d on cell t
    d = 2.0
    want_d = sum(lg(x + 1.0) for x in n_t) - lg(6 + 3.0) + lg(3.0)
    want_d += sum(lg(x + 1.0) for x in n_q) - lg(6 + 2.0) + lg(2.0)
    for row_index, row in enumerate(n_l.reshape(-1, 3)):
        a = np.full(3, 0.5)
        a[row_index % 3] += d
        want_d += sum(lg(x + y) - lg(y) for x, y in zip(row, a)) + lg(a.sum()) - lg(row.sum() + a.sum())
    assert collapsed_log_joint(n_t, n_q, n_l, 0.5, 1.0, 1.0, diagonal_prior=d) == pytest.approx(want_d, rel=1e-12)


def test_damping_rises_only_on_oscillation() -> None:
    assert next_damping(0.0, -0.9, adaptive=True) == pytest.approx(0.2)
    assert next_damping(0.7, -0.9, adaptive=True) == pytest.approx(0.8)
    assert next_damping(0.8, -0.9, adaptive=True) == pytest.approx(0.8)
    assert next_damping(0.2, 0.3, adaptive=True) == pytest.approx(0.2)
    assert next_damping(0.0, -0.9, adaptive=False) == 0.0
    stats = step_stats(np.array([[0.1, -0.1]]), np.array([[-0.1, 0.1]]))
    assert step_cosine(stats, 0.02) == pytest.approx(-1.0)
    assert step_cosine(step_stats(np.zeros((1, 2)), None), 0.0) == 0.0


def test_change_bound_is_an_upper_bound_within_the_bin_ratio() -> None:
    for value in (3e-7, 1e-4, 0.5, 1.0):
        hist = np.bincount([np.searchsorted(CHANGE_EDGES, value)], minlength=len(CHANGE_EDGES))
        bound = max_change_bound(hist)
        assert value <= bound <= value * 10 ** (1 / 24) + 1e-300
    assert max_change_bound(np.zeros(len(CHANGE_EDGES))) == 0.0


# ---------------------------------------------------------------------------------------------------------
# the model on engines
# ---------------------------------------------------------------------------------------------------------


def _fit(model, blocks):
    engine = LocalEngine(blocks)
    result = fit(model, engine)
    items = engine.map_items(partial(finish_fn, model), result.params)
    return result, items


def _labels(items) -> np.ndarray:
    return np.concatenate([r.label for _, r in items])


def _error(items) -> float:
    label = _labels(items)
    truth = np.concatenate([b.truth for b, _ in items])
    return float(np.mean(label[truth >= 0] != truth[truth >= 0]))


@pytest.fixture(scope="module")
def rte():
    return load("rte")


@pytest.mark.filterwarnings("ignore::crowdspark.engine.loop.ConvergenceWarning")
def test_same_result_for_one_block_and_many(rte) -> None:
    blocks, K, C = rte
    one = [build_blocks(*_flatten(blocks), max_labels=10**9)[0]]
    many = build_blocks(*_flatten(blocks), max_labels=500)
    assert len(many) > 10
    model = IdblaCvb(K, C, max_iter=5)
    r1, items1 = _fit(model, one)
    r2, items2 = _fit(model, many)
    np.testing.assert_allclose(
        np.concatenate([r.posterior for _, r in items1]), np.concatenate([r.posterior for _, r in items2]),
        atol=1e-9,
    )
    assert [h["objective"] for h in r1.history] == pytest.approx([h["objective"] for h in r2.history], rel=1e-9)
    for key in ("n_l", "s_tt", "s_hh"):
        np.testing.assert_allclose(r1.params[key], r2.params[key], atol=1e-8)


def _flatten(blocks: list[Block]):
    ids = np.concatenate([np.repeat(b.item_ids, np.diff(b.offsets)) for b in blocks])
    worker = np.concatenate([b.worker for b in blocks])
    label = np.concatenate([b.label for b in blocks])
    truth = np.concatenate([b.truth[b.item_of_label] for b in blocks])
    return ids, worker, label, truth


@pytest.mark.parametrize("cls", [IdblaCvb, IdblaCvb0])
def test_converges_on_rte(rte, cls) -> None:
    blocks, K, C = rte
    model = cls(K, C)
    result, items = _fit(model, blocks)
    assert result.converged, result.stop_reason
    assert result.n_iter < model.max_iter
    assert _error(items) <= 0.073
    history = result.history
    assert all("error" in h and "log_joint_map" in h for h in history)
    assert history[-1]["change"] < model.tol
    assert history[-1]["objective"] > history[0]["objective"]
    post = np.concatenate([r.posterior for _, r in items])
    np.testing.assert_allclose(post.sum(axis=1), 1.0)
    level_post = np.concatenate([r.extra["level_posterior"] for _, r in items])
    assert level_post.shape == (800, model.n_levels)
    np.testing.assert_array_equal(np.concatenate([r.extra["level"] for _, r in items]), level_post.argmax(axis=1))


def test_cvb_and_cvb0_differ_but_agree_on_most_labels(rte) -> None:
    blocks, K, C = rte
    r1, items1 = _fit(IdblaCvb(K, C), blocks)
    r0, items0 = _fit(IdblaCvb0(K, C), blocks)
    p1 = np.concatenate([r.posterior for _, r in items1])
    p0 = np.concatenate([r.posterior for _, r in items0])
    assert np.abs(p1 - p0).max() > 1e-3
    assert np.mean(_labels(items1) == _labels(items0)) >= 0.98
    assert IdblaCvb0(K, C).name == "idbla-cvb0" and IdblaCvb(K, C).name == "idbla-cvb"


@pytest.mark.parametrize("cls", [IdblaCvb, IdblaCvb0])
def test_parallel_and_sequential_schedules_agree_on_rte(rte, cls) -> None:
    blocks, K, C = rte
    model = cls(K, C)
    _, items = _fit(model, blocks)
    seq = fit_sequential(blocks, model)
    seq_items = seq.items(blocks, model)
    assert seq.converged, seq.stop_reason
    assert np.mean(_labels(items) == _labels(seq_items)) >= 0.99
    # the incrementally kept tables equal the tables recomputed from scratch
    assert max(h["table_drift"] for h in seq.history) < 1e-8


def test_sequential_schedule_on_tiny_data_keeps_exact_tables() -> None:
    ids, workers, labels, truth = tiny_data(7, n_items=10)
    blocks = build_blocks(ids, workers, labels, truth, max_labels=6)
    model = IdblaCvb(4, 3, max_iter=3, tol=1e-12)
    seq = fit_sequential(blocks, model)
    assert seq.n_iter == 3 and not seq.converged
    assert max(h["table_drift"] for h in seq.history) < 1e-10
    lam = np.concatenate([s["lam"] for s in seq.states])
    np.testing.assert_allclose(lam.sum(axis=1), 1.0)


def test_outputs_and_worker_table(rte) -> None:
    blocks, K, C = rte
    model = IdblaCvb(K, C, n_levels=3)
    result, items = _fit(model, blocks)
    table = model.worker_table(result.params, result.init_stats)
    H = 3
    assert table["level_confusion"].shape == (K, H, C, C)
    np.testing.assert_allclose(table["level_confusion"].sum(axis=-1), 1.0)
    np.testing.assert_allclose(table["confusion"].sum(axis=-1), 1.0)
    assert table["accuracy"].shape == (K,) and table["level_accuracy"].shape == (K, H)
    assert table["n_labels"].sum() == 8000
    summary = model.summary(result.params)
    assert sum(summary["level_sizes"]) == pytest.approx(800)
    assert sum(summary["class_proportions"]) == pytest.approx(1.0)
    # params are sized by K, H and C only: the largest are the second-moment tables
    largest = max(K * C * C * H * C, K * H * H * C * C)
    for value in result.params.values():
        assert np.size(value) <= largest and 800 not in np.shape(value)


def test_model_pickles_for_executors() -> None:
    model = IdblaCvb0(5, 3, n_levels=3, damping=0.1)
    assert pickle.loads(pickle.dumps(model)) == model


def test_adaptive_damping_stops_the_oscillation_on_bluebird() -> None:
    """The parallel CVB0 schedule falls into a period-2 cycle on bluebird; adaptive damping ends it."""
    blocks, K, C = load("bluebird")
    with pytest.warns(ConvergenceWarning):
        plain, _ = _fit(IdblaCvb0(K, C, adaptive_damping=False, max_iter=150), blocks)
    assert min(h["step_cosine"] for h in plain.history[-20:]) < -0.9
    damped, items = _fit(IdblaCvb0(K, C, max_iter=150), blocks)
    assert damped.converged, damped.stop_reason
    assert damped.history[-1]["damping"] > 0
    assert _error(items) <= 0.11


@pytest.mark.spark
@pytest.mark.parametrize("n_partitions", [1, 3])
def test_spark_engine_matches_local_engine(spark, rte, n_partitions) -> None:
    from crowdspark.engine.spark.engine import SparkEngine

    blocks = build_blocks(*_flatten(rte[0]), max_labels=1000)
    model = IdblaCvb(rte[1], rte[2], max_iter=12)
    with pytest.warns(ConvergenceWarning):
        r_local, items_local = _fit(model, blocks)
    engine = SparkEngine(spark.sparkContext.parallelize(blocks, n_partitions), checkpoint_interval=5,
                         session_sweeps=5)
    try:
        with pytest.warns(ConvergenceWarning):
            r_spark = fit(model, engine)
        blobs = engine.item_blobs(partial(finish_fn, model), r_spark.params).collect()
    finally:
        engine.close()
    items_spark = sorted((pickle.loads(b[0]) for b in blobs), key=lambda br: str(br[0].item_ids[0]))
    items_local = sorted(items_local, key=lambda br: str(br[0].item_ids[0]))
    np.testing.assert_allclose(
        np.concatenate([r.posterior for _, r in items_spark]),
        np.concatenate([r.posterior for _, r in items_local]),
        atol=1e-9,
    )
    np.testing.assert_allclose(
        [h["objective"] for h in r_spark.history], [h["objective"] for h in r_local.history], rtol=1e-12
    )
    np.testing.assert_allclose(r_spark.params["s_tt"], r_local.params["s_tt"], atol=1e-9)


# ---------------------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"damping": 1.0}, r"idbla-cvb\.damping must be a number < 1, but got 1\.0"),
        ({"damping": -0.1}, r"idbla-cvb\.damping must be a number >= 0"),
        ({"omega": 0.0}, r"idbla-cvb\.omega must be a number > 0, but got 0\.0"),
        ({"max_iter": 0}, r"idbla-cvb\.max_iter must be an integer >= 1, but got 0"),
        ({"tol": 0.0}, r"idbla-cvb\.tol must be a number > 0"),
        ({"correction": "yes"}, r"idbla-cvb\.correction must be true or false, but got 'yes'"),
        ({"adaptive_damping": 1}, r"idbla-cvb\.adaptive_damping must be true or false, but got 1"),
        ({"diagonal_prior": -1.0}, r"idbla-cvb\.diagonal_prior must be a number >= 0, but got -1\.0"),
        ({"n_levels": 0}, r"idbla-cvb\.n_levels must be an integer >= 1, but got 0"),
    ],
)
def test_validation_messages(kwargs, message) -> None:
    with pytest.raises(ConfigError, match=message):
        IdblaCvb(3, 2, **kwargs)


def test_cvb0_validation_uses_its_name() -> None:
    with pytest.raises(ConfigError, match=r"idbla-cvb0\.gamma_beta must be a number > 0"):
        IdblaCvb0(3, 2, gamma_beta=-1.0)


@pytest.mark.parametrize("second_order", [True, False])
def test_update_does_not_depend_on_the_chunks(monkeypatch, second_order: bool) -> None:
    """Chunks of a few labels (items never split, some items alone in a chunk) give the one-chunk update;
    items with gold in the fit get the one-hot of their class."""
    import crowdspark.models.idbla_cvb as cvb
    from crowdspark.block import GoldSplit
    from tests.helpers import load_dataset

    blocks, enc = load_dataset("bluebird", 10**6)
    (whole,) = blocks
    (block,) = build_blocks(np.repeat(whole.item_ids, whole.labels_per_item()), whole.worker, whole.label,
                            np.repeat(whole.truth, whole.labels_per_item()), split=GoldSplit(0.3, 0))
    K, C, H = enc.n_workers, enc.n_classes, 2
    rng = np.random.default_rng(3)
    lam, rho = random_factors(block.n_items, C, rng), random_factors(block.n_items, H, rng)
    tables = tables_to_params(cvb_tables(block, lam, rho, K, second_order))
    priors = CvbPriors(second_order=second_order, damping=0.3, diagonal_prior=0.5)
    mult = label_multiplicity(block)
    monkeypatch.setattr(cvb, "CHUNK_LABELS", 10**9)
    lam_one, rho_one = cvb_update(block, tables, lam, rho, mult, priors)
    monkeypatch.setattr(cvb, "CHUNK_LABELS", 7)
    lam_many, rho_many = cvb_update(block, tables, lam, rho, mult, priors)
    np.testing.assert_allclose(lam_many, lam_one, rtol=0, atol=1e-13)
    np.testing.assert_allclose(rho_many, rho_one, rtol=0, atol=1e-13)
    fixed = np.flatnonzero(block.fixed >= 0)
    assert fixed.size > 0
    expected = 0.7 * np.eye(C)[block.fixed[fixed]] + 0.3 * lam[fixed]  # damped towards the one-hot
    np.testing.assert_allclose(lam_one[fixed], expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize("second_order", [True, False])
def test_gather_order_gives_the_same_update_bit_for_bit(monkeypatch, second_order: bool) -> None:
    """Taking each chunk's labels in (worker, class) order for the gathers changes nothing, to the last bit,
    with chunks of a few labels and with one chunk."""
    import crowdspark.models.idbla_cvb as cvb

    blocks, K, C = load("bluebird", 10**6)
    (block,) = blocks
    rng = np.random.default_rng(5)
    lam, rho = random_factors(block.n_items, C, rng), random_factors(block.n_items, 2, rng)
    tables = tables_to_params(cvb_tables(block, lam, rho, K, second_order))
    priors = CvbPriors(second_order=second_order, damping=0.2, diagonal_prior=0.5)
    mult = label_multiplicity(block)
    for size in (50, 10**9):
        monkeypatch.setattr(cvb, "CHUNK_LABELS", size)
        order = gather_order(block, C)
        for lo, hi in cvb._chunk_bounds(block, size):
            a, b = int(block.offsets[lo]), int(block.offsets[hi])
            cells = block.worker[a:b] * C + block.label[a:b]
            assert np.array_equal(np.sort(order[a:b]), np.arange(b - a))
            assert np.all(np.diff(cells[order[a:b]]) >= 0)
        stored = cvb_update(block, tables, lam, rho, mult, priors)
        gathered = cvb_update(block, tables, lam, rho, mult, priors, order=order)
        assert np.array_equal(stored[0], gathered[0]) and np.array_equal(stored[1], gathered[1])
