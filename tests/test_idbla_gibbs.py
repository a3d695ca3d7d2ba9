"""Tests of the IDBLA Gibbs family (IDBLA, Fixed-IDBLA, BCC) on the local engine."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from crowdspark.block import build_blocks
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.loop import finish_fn, fit
from crowdspark.errors import ConfigError
from crowdspark.models.common import shifted_exp
from crowdspark.models.dawid_skene import DawidSkene
from crowdspark.models.idbla_gibbs import (
    SINGLE_PRECISION_MAX_LABELS,
    SWEEP_DTYPE,
    Bcc,
    FixedIdbla,
    IdblaGibbs,
    _inverse_cdf,
    diagnose_levels,
    paper_preset,
)

FAST = dict(burn_in=10, n_samples=30)


def planted(seed: int = 0, n_items: int = 600, n_workers: int = 20, per_item: int = 7, max_labels: int = 10**6):
    """Two planted levels, C = 2: on easy items (60%) every worker is good; on hard items only experts are.

    Returns blocks, K, C, planted levels (0 easy, 1 hard) in the blocks' item order.
    """
    rng = np.random.default_rng(seed)
    C = 2
    truth = rng.integers(0, C, n_items)
    hard = (rng.random(n_items) < 0.4).astype(np.int32)
    expert = np.arange(n_workers) < n_workers // 2
    acc = np.where(expert[None, :], np.array([0.95, 0.85])[:, None], np.array([0.9, 0.4])[:, None])  # (2, K)
    items, workers, labels, gold = [], [], [], []
    for i in range(n_items):
        ks = rng.choice(n_workers, per_item, replace=False)
        ok = rng.random(per_item) < acc[hard[i], ks]
        lab = np.where(ok, truth[i], 1 - truth[i])
        items += [f"item{i}"] * per_item
        workers += ks.tolist()
        labels += lab.tolist()
        gold += [truth[i]] * per_item
    blocks = build_blocks(np.array(items, dtype=object), np.array(workers), np.array(labels), np.array(gold),
                          max_labels=max_labels)
    order = np.array([int(i[4:]) for b in blocks for i in b.item_ids])
    return blocks, n_workers, C, hard[order]


def fit_and_finish(model, blocks):
    engine = LocalEngine(blocks)
    result = fit(model, engine)
    out = engine.map_items(partial(finish_fn, model), result.params)
    return result, out


def error(out):
    wrong = sum(int(((b.truth >= 0) & (r.label != b.truth)).sum()) for b, r in out)
    return wrong / sum(int((b.truth >= 0).sum()) for b, _ in out)


@pytest.fixture(scope="module")
def data():
    return planted()


@pytest.mark.parametrize("scheme", ["joint", "paper"])
def test_posteriors_are_distributions(data, scheme):
    blocks, K, C, _ = data
    model = IdblaGibbs(K, C, scheme=scheme, **FAST)
    result, out = fit_and_finish(model, blocks)
    for block, r in out:
        np.testing.assert_allclose(r.posterior.sum(axis=1), 1.0)
        np.testing.assert_allclose(r.extra["level_posterior"].sum(axis=1), 1.0)
        assert r.extra["level"].dtype == np.int32 and r.extra["level"].shape == (block.n_items,)
        assert r.extra["epsilon"].shape == (block.n_items,)
    assert result.n_iter == model.schedule.max_sweeps == 40
    assert result.params["n_kept"] == 30
    assert all("loglik" in h and "level_share_0" in h for h in result.history)


def test_same_seed_same_output_and_other_seed_differs(data):
    blocks, K, C, _ = data
    _, a = fit_and_finish(IdblaGibbs(K, C, seed=5, **FAST), blocks)
    _, b = fit_and_finish(IdblaGibbs(K, C, seed=5, **FAST), blocks)
    _, c = fit_and_finish(IdblaGibbs(K, C, seed=6, **FAST), blocks)
    np.testing.assert_array_equal(a[0][1].posterior, b[0][1].posterior)
    assert not np.array_equal(a[0][1].posterior, c[0][1].posterior)


def test_block_split_gives_identical_results():
    one, K, C, _ = planted(n_items=200)
    many, _, _, _ = planted(n_items=200, max_labels=50)
    assert len(many) > 10
    model = IdblaGibbs(K, C, n_levels=2, **FAST)
    r1, o1 = fit_and_finish(model, one)
    r2, o2 = fit_and_finish(model, many)
    np.testing.assert_allclose(o1[0][1].posterior, np.concatenate([r.posterior for _, r in o2]), atol=1e-12)
    np.testing.assert_array_equal(o1[0][1].label, np.concatenate([r.label for _, r in o2]))
    np.testing.assert_allclose(r1.params["pi_sum"], r2.params["pi_sum"], atol=1e-9)


def test_counts_total_the_labels(data):
    blocks, K, C, _ = data
    result, _ = fit_and_finish(IdblaGibbs(K, C, **FAST), blocks)
    assert result.params["last_counts"].sum() == result.counts["n_labels"]
    assert result.params["last_levels"].sum() == result.counts["n_items"]


def test_planted_difficulty_beats_ds_and_recovers_levels(data):
    blocks, K, C, hard = data
    _, ds_out = fit_and_finish(DawidSkene(K, C, max_iter=200, tol=1e-8), blocks)
    errs, recovery = [], []
    for seed in range(3):
        _, out = fit_and_finish(IdblaGibbs(K, C, seed=seed), blocks)
        errs.append(error(out))
        level = np.concatenate([r.extra["level"] for _, r in out])
        recovery.append(np.mean(level == hard))
    assert np.mean(errs) < error(ds_out)
    assert np.mean(recovery) > 0.7


def test_worker_table_shapes(data):
    blocks, K, C, _ = data
    model = IdblaGibbs(K, C, n_levels=3, **FAST)
    result, _ = fit_and_finish(model, blocks)
    table = model.worker_table(result.params, result.init_stats)
    assert table["n_labels"].shape == (K,) and table["n_labels"].sum() == result.counts["n_labels"]
    assert table["confusion"].shape == (K, C, C)
    np.testing.assert_allclose(table["confusion"].sum(axis=-1), 1.0)
    assert table["level_confusion"].shape == (K, 3, C, C)
    assert table["level_accuracy"].shape == (K, 3) and table["accuracy"].shape == (K,)
    summary = model.summary(result.params)
    assert len(summary["level_sizes"]) == 3 and abs(sum(summary["level_proportions"]) - 1) < 1e-9


def test_fixed_idbla_runs_and_keeps_fixed_levels(data):
    blocks, K, C, _ = data
    model = FixedIdbla(K, C, **FAST)
    assert model.effective_delta == 0.5  # capped at (C - 1) / C for C = 2
    assert paper_preset(model).effective_delta == 0.8
    result, out = fit_and_finish(model, blocks)
    pi = model.worker_table(result.params, result.init_stats)["level_confusion"]
    np.testing.assert_allclose(pi[:, 0], [[0.9, 0.1], [0.1, 0.9]] * np.ones((K, 1, 1)))
    np.testing.assert_allclose(pi[:, 2], 0.5)
    assert error(out) < 0.2


def test_bcc_runs_with_one_level(data):
    blocks, K, C, _ = data
    model = Bcc(K, C, **FAST)
    assert model.n_levels == 1 and model.name == "bcc"
    result, out = fit_and_finish(model, blocks)
    assert all(np.all(r.extra["level"] == 0) for _, r in out)
    assert error(out) < 0.2


def test_diagnostics_flag_collapsed_and_permuted_levels(caplog):
    counts = np.zeros((3, 2, 2, 2))
    counts[:, 0] = [[9, 1], [1, 9]]
    counts[:, 1] = [[0, 3], [3, 0]]  # level 1: classes swapped
    diag = diagnose_levels(counts, np.array([0.99, 0.01]), 0.02)
    assert diag["permuted_levels"] == [1] and diag["collapsed_levels"] == [1]
    diag = diagnose_levels(counts, np.array([0.5, 0.5]), 0.02, learned=np.array([True, False]))
    assert diag["permuted_levels"] == [] and diag["collapsed_levels"] == []


def test_summary_has_level_diagnostics(data):
    blocks, K, C, _ = data
    model = IdblaGibbs(K, C, **FAST)
    result, _ = fit_and_finish(model, blocks)
    summary = model.summary(result.params)
    for key in ("level_agreement", "class_map", "permuted_levels", "collapsed_levels", "level_sizes"):
        assert key in summary
    # planted data: the easy level agrees with T more than the hard one, and no class is permuted
    assert summary["level_agreement"][0] > summary["level_agreement"][1]
    assert summary["permuted_levels"] == []


def test_paper_preset_values():
    m = paper_preset(IdblaGibbs(4, 2, diagonal_prior=3.0), n_levels=3)
    assert (m.omega, m.diagonal_prior, m.gamma_alpha, m.gamma_beta, m.n_samples, m.n_levels) == (
        1.0, 0.0, 1.0, 1.0, 500, 3)
    assert paper_preset(Bcc(4, 2)).diagonal_prior == Bcc(4, 2).diagonal_prior


@pytest.mark.parametrize(
    "cls, kwargs, match",
    [
        (IdblaGibbs, {"scheme": "gibbs"}, r"idbla.scheme must be one of \['joint', 'paper'\], but got 'gibbs'"),
        (IdblaGibbs, {"omega": 0.0}, r"idbla.omega must be a number > 0, but got 0.0"),
        (IdblaGibbs, {"burn_in": -1}, r"idbla.burn_in must be an integer >= 0, but got -1"),
        (IdblaGibbs, {"thin": 0}, r"idbla.thin must be an integer >= 1"),
        (FixedIdbla, {"delta": 1.0}, r"fixed-idbla.delta must be a number < 1, but got 1.0"),
        (FixedIdbla, {"n_levels": 1}, r"fixed-idbla.n_levels must be an integer >= 2, but got 1"),
        (Bcc, {"n_levels": 2}, r"bcc.n_levels must be an integer <= 1, but got 2"),
    ],
)
def test_validation_messages(cls, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        cls(4, 2, **kwargs)


def test_sweeps_draw_from_single_precision_tables_and_keep_double_results():
    """The sweep's tables are float32 (``SWEEP_DTYPE``); its draws match a float64 sweep's on (nearly) every
    item, and everything that leaves a block or the model is float64 or exact integers."""
    blocks, K, C, _ = planted(n_items=3000, n_workers=40)
    model = IdblaGibbs(K, C, burn_in=5, n_samples=5)
    engine = LocalEngine(blocks)
    result = fit(model, engine)
    params = result.params
    tables = model.step_params(params)
    assert all(t.dtype == SWEEP_DTYPE == np.float32 for t in tables.values())
    block, state = blocks[0], engine.states[0]
    sweep = model.schedule.max_sweeps + 1  # a kept sweep
    single_state, single = model.local_step(block, state, tables, sweep)
    double_state, double = model.local_step(
        block, state, model.log_tables(params["pi"], params["alpha"], params["beta"]), sweep)
    assert np.mean(single_state["T"] == double_state["T"]) > 0.999
    assert np.mean(single_state["Q"] == double_state["Q"]) > 0.999
    assert single["counts"].dtype == np.int64 and single["counts"].sum() == block.n_labels
    np.testing.assert_allclose(single["log_evidence"], double["log_evidence"], rtol=1e-6)
    for key in ("post_sum", "level_sum"):
        assert single_state[key].dtype == np.float64
        np.testing.assert_allclose(single_state[key], double_state[key], atol=1e-5)
    posterior, level_posterior = model.item_posteriors(block, state, params)
    assert posterior.dtype == level_posterior.dtype == np.float64


def test_inverse_cdf_never_draws_a_zero_weight_column():
    """Single-precision weights from ``shifted_exp`` (float64 row totals) and ``_inverse_cdf`` (float64
    partial sums in the same order): a column of weight 0 is never drawn, even with uniforms next to 1."""
    rng = np.random.default_rng(0)
    log_scores = np.asfortranarray(rng.standard_normal((100_000, 10)).astype(np.float32) * 3)
    log_scores[:, [4, 9]] = -np.inf
    weights, total, _ = shifted_exp(log_scores, axis=1)
    assert weights.dtype == np.float32 and total.dtype == np.float64
    for u in (0.0, 0.5, 1.0 - 1e-12, np.nextafter(1.0, 0.0), rng.random(len(weights))):
        idx = _inverse_cdf(weights, u * total[:, 0])
        assert not np.isin(idx, (4, 9)).any()


def test_blocks_with_many_labels_per_item_sweep_in_double_precision():
    """The rounding of a float32 sum grows with the number of labels summed: a block with an item of more
    than SINGLE_PRECISION_MAX_LABELS labels builds its table in float64, from the same float32 log tables."""
    rng = np.random.default_rng(1)
    C, K = 3, 50
    sizes = {"small": 10, "big": SINGLE_PRECISION_MAX_LABELS + 1}
    blocks = {}
    for name, per_item in sizes.items():
        items = np.repeat(np.array([f"i{j}" for j in range(20)], dtype=object), per_item)
        blocks[name] = build_blocks(items, rng.integers(0, K, items.size), rng.integers(0, C, items.size), None)[0]
    model = IdblaGibbs(K, C, n_levels=2)
    pi = rng.dirichlet(np.ones(C) + 3 * np.eye(C)[0], size=(K, 2, C))
    tables = model.log_tables(pi, np.full(C, 1 / C), np.full(2, 0.5), SWEEP_DTYPE)
    assert model.joint_log_table(blocks["small"], tables).dtype == np.float32
    big = model.joint_log_table(blocks["big"], tables)
    assert big.dtype == np.float64
    exact = model.joint_log_table(blocks["big"], {k: v.astype(np.float64) for k, v in tables.items()})
    np.testing.assert_array_equal(big, exact)
