"""``ads.criterion = "heldout"``: it picks one-coin on the issue's crowd shape, full matrices for prolific
class-biased workers and for sparse workers who share an asymmetry between classes (where AIC picks one-coin);
the folds are keyed by (seed, item, worker); the fold statistics are additive and equal a direct computation;
both engines choose alike; the choice is in summary.json and a warm start keeps it.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from crowdspark.block import build_blocks
from crowdspark.cli import main
from crowdspark.errors import ConfigError
from crowdspark.models.adaptive_ds import AdaptiveDawidSkene
from crowdspark.models.holdout import fold_stats, label_folds
from crowdspark.stats import sum_stats
from crowdspark.synthetic import mixed_crowd_data
from tests.helpers import fitted_answers, frames_to_blocks
from tests.test_adaptive import _crowd_frame, biased_crowd, sparse_crowd


def issue_crowd(seed: int = 0, n_items: int = 2000, max_labels: int = 4000):
    """The issue's shape: 2 classes 78/22, 3 workers who label 97% of the items with per-class accuracies,
    sparse one-coin workers with 15 labels each, 5-11 labels per item."""
    labels, truth, _ = mixed_crowd_data(n_items, (0.78, 0.22), seed)
    return frames_to_blocks(labels, truth, max_labels=max_labels)


def _error(blocks, labels) -> float:
    """Error of ``labels`` (sorted by item id, as :func:`fitted_answers` gives them) against the blocks' truth."""
    truth = np.concatenate([b.truth for b in blocks])
    order = np.argsort(np.concatenate([b.item_ids for b in blocks]).astype(str), kind="stable")
    return float((labels != truth[order]).mean())


def _chosen(blocks, enc, **options) -> tuple[str, float]:
    model = AdaptiveDawidSkene(enc.n_workers, enc.n_classes, seed=1, **options)
    result, _, labels, _ = fitted_answers(model, blocks)
    return model.summary(result.params)["structure"], _error(blocks, labels)


def test_heldout_picks_one_coin_on_the_issue_shape():
    blocks, enc = issue_crowd()
    structure, error = _chosen(blocks, enc, criterion="heldout")
    full, full_error = _chosen(blocks, enc, structure="full")
    assert structure == "one-coin" and full == "full"
    assert error < full_error


def test_heldout_keeps_full_matrices_for_prolific_class_biased_workers():
    blocks, _ = biased_crowd()
    model = AdaptiveDawidSkene(8, 2, seed=1, criterion="heldout")
    result, *_ = fitted_answers(model, blocks)
    summary = model.summary(result.params)
    assert summary["structure"] == "full"
    assert summary["structure_selection"]["reason"] == "held-out log-likelihood (one-standard-error rule)"


def test_heldout_keeps_full_matrices_where_sparse_workers_share_an_asymmetry_and_aic_does_not():
    labels, truth, _ = mixed_crowd_data(2000, (0.78, 0.22), 1, sparse_accuracy=(0.5, 0.85),
                                        sparse_class_shift=(0.1, -0.3))
    blocks, enc = frames_to_blocks(labels, truth, max_labels=4000)
    heldout, heldout_error = _chosen(blocks, enc, criterion="heldout")
    aic, aic_error = _chosen(blocks, enc, criterion="aic")
    assert (heldout, aic) == ("full", "one-coin")
    assert heldout_error < aic_error


def _fold_by_pair(blocks, seed: int, n_folds: int) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for block in blocks:
        folds = label_folds(block, seed, n_folds)
        for item, worker, fold in zip(block.item_ids[block.item_of_label], block.worker, folds):
            assert out.setdefault((str(item), int(worker)), int(fold)) == fold  # a pair's labels share a fold
    return out


def test_folds_are_keyed_by_seed_item_and_worker_not_by_block():
    labels, truth, _ = mixed_crowd_data(300, (0.78, 0.22), 0)
    small, _ = frames_to_blocks(labels, truth, max_labels=97)
    whole, _ = frames_to_blocks(labels, truth)
    reordered, _ = frames_to_blocks(labels.sample(frac=1.0, random_state=3), truth, max_labels=211)
    assert len(small) > 10 and len(whole) == 1
    folds = _fold_by_pair(whole, 1, 5)
    assert _fold_by_pair(small, 1, 5) == folds == _fold_by_pair(reordered, 1, 5)
    shares = np.bincount(list(folds.values()), minlength=5) / len(folds)
    np.testing.assert_allclose(shares, 0.2, atol=0.03)
    other = _fold_by_pair(whole, 2, 5)
    assert np.mean([other[pair] != fold for pair, fold in folds.items()]) > 0.7  # another seed, other folds


def _random_fold_params(rng, k: int, f: int, c: int):
    log_pi = np.log(rng.dirichlet(np.ones(c), size=(k, f, 2, c)))
    log_alpha = np.log(rng.dirichlet(np.ones(c), size=(f, 2)))
    return log_pi, log_alpha


def test_fold_statistics_are_additive_and_equal_a_direct_computation():
    rng = np.random.default_rng(0)
    n, k, c, f = 40, 6, 3, 3
    items = np.repeat(np.array([f"i{i:03d}" for i in range(n)], dtype=object), 4)
    workers = np.concatenate([rng.choice(k, 4, replace=False) for _ in range(n)])
    labels = rng.integers(0, c, items.size)
    whole = build_blocks(items, workers, labels)
    split = build_blocks(items, workers, labels, max_labels=23)
    log_pi, log_alpha = _random_fold_params(rng, k, f, c)
    got = fold_stats(whole[0], log_pi, log_alpha, seed=4)
    summed = sum_stats([fold_stats(b, log_pi, log_alpha, seed=4) for b in split])
    for key in got:
        np.testing.assert_allclose(summed[key], got[key], rtol=1e-12, atol=1e-12)
    # direct: for each fold, each item's posterior from its labels outside the fold, then the fold's labels
    block = whole[0]
    folds = label_folds(block, 4, f)
    heldout = np.zeros((f, 2))
    confusion = np.zeros((k, f, 2, c, c))
    for i in range(n):
        rows = np.arange(block.offsets[i], block.offsets[i + 1])
        for g in range(f):
            train = rows[folds[rows] != g]
            for s in range(2):
                score = log_alpha[g, s] + sum(log_pi[block.worker[j], g, s, :, block.label[j]] for j in train)
                post = np.exp(score - np.logaddexp.reduce(score))
                for j in rows[folds[rows] == g]:
                    heldout[g, s] += np.log(post @ np.exp(log_pi[block.worker[j], g, s, :, block.label[j]]))
                for j in train:
                    confusion[block.worker[j], g, s, :, block.label[j]] += post
    np.testing.assert_allclose(got["heldout"], heldout, rtol=1e-10)
    np.testing.assert_allclose(got["fold_confusion"], confusion, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(got["heldout_labels"], np.bincount(folds, minlength=f))


@pytest.mark.spark
@pytest.mark.slow
def test_spark_engine_makes_the_local_choice_with_the_same_heldout_likelihood(spark):
    from crowdspark.engine.spark.engine import SparkEngine

    blocks, enc = issue_crowd(n_items=600, max_labels=900)
    model = AdaptiveDawidSkene(enc.n_workers, enc.n_classes, seed=1, max_iter=20, criterion="heldout")
    local, ids, labels, post = fitted_answers(model, blocks)
    engine = SparkEngine(spark.sparkContext.parallelize(blocks, 3))
    try:
        remote, remote_ids, remote_labels, remote_post = fitted_answers(model, blocks, engine=engine)
    finally:
        engine.close()
    np.testing.assert_allclose(remote.params["heldout"], local.params["heldout"], rtol=1e-9)
    assert remote.params["structure"][0] == local.params["structure"][0]
    np.testing.assert_array_equal(remote_ids, ids)
    np.testing.assert_array_equal(remote_labels, labels)
    np.testing.assert_allclose(remote_post, post, atol=1e-9)


def test_the_heldout_choice_is_in_the_summary_and_a_warm_start_keeps_it_without_a_heldout_stage(tmp_path):
    _crowd_frame(sparse_crowd()[0]).to_csv(tmp_path / "sparse.csv", index=False)

    def aggregate(out: str, *extra: str) -> dict:
        assert main(["aggregate", "--labels", str(tmp_path / "sparse.csv"), "--engine", "local", "--algorithm", "ads",
                     "--set", "ads.criterion=heldout", "--output", str(tmp_path / out), "--quiet", *extra]) == 0
        return json.loads((tmp_path / out / "summary.json").read_text())

    first = aggregate("first")
    selection = first["model"]["structure_selection"]
    assert first["model"]["structure"] == "one-coin" and selection["criterion"] == "heldout"
    held = selection["heldout"]
    assert held["folds"] == 5 and held["sweeps"] == 5 and isinstance(held["full_fit_converged"], bool)
    assert held["log_likelihood"]["one-coin"] > held["log_likelihood"]["full"]
    assert selection["score"] == {k: -v for k, v in held["log_likelihood"].items()}
    warm = aggregate("warm", "--warm-start", str(tmp_path / "first"))
    assert warm["model"]["structure_selection"]["reason"] == "kept from the warm-start model"
    assert "heldout" not in warm["model"]["structure_selection"]
    assert not any(entry.get("stage") for entry in warm["history"])  # no sweep of a held-out stage


def test_mixed_crowd_has_the_planted_shape_and_is_reproducible():
    labels, truth, params = mixed_crowd_data(2000, (0.78, 0.22), 5)
    again = mixed_crowd_data(2000, (0.78, 0.22), 5)
    assert labels.equals(again[0]) and truth.equals(again[1])
    assert not labels.equals(mixed_crowd_data(2000, (0.78, 0.22), 6)[0])
    per_item = labels.groupby("item").size()
    per_worker = labels.groupby("worker").size().sort_values()
    assert per_item.between(2, 11).all() and 7.0 < per_item.mean() < 9.0  # 3 x 0.97 prolific + 2-8 sparse
    assert (per_worker.iloc[-3:] > 0.95 * 2000).all() and per_worker.iloc[:-3].median() == 15
    assert abs((truth["truth"] == "1").mean() - 0.22) < 0.03
    pi = params["pi"]
    np.testing.assert_allclose(pi.sum(axis=2), 1.0)
    np.testing.assert_allclose(pi[3:, 0, 0], pi[3:, 1, 1])  # sparse workers are one-coin
    assert not np.allclose(pi[:3, 0, 0], pi[:3, 1, 1])  # prolific workers are class-biased


def test_mixed_crowd_departures_are_off_by_default_and_leave_the_rest_of_the_crowd_alone():
    base = mixed_crowd_data(1500, (0.78, 0.22), 4)
    explicit = mixed_crowd_data(1500, (0.78, 0.22), 4, sparse_class_bias=0.0, activity_sigma=0.0, hard_share=0.0)
    assert base[0].equals(explicit[0]) and not base[2]["hard"].any()
    biased = mixed_crowd_data(1500, (0.78, 0.22), 4, sparse_class_bias=0.2)
    assert base[1].equals(biased[1])  # same truth, same pairs: only the sparse workers' diagonals move
    assert base[0][["item", "worker"]].equals(biased[0][["item", "worker"]])
    np.testing.assert_array_equal(base[2]["pi"][:3], biased[2]["pi"][:3])


def test_sparse_class_bias_gives_each_sparse_worker_its_own_classes_around_its_accuracy():
    _, _, params = mixed_crowd_data(3000, (0.5, 0.3, 0.2), 2, sparse_class_bias=0.15, sparse_accuracy=(0.5, 0.8))
    diag = np.diagonal(params["pi"][3:], axis1=1, axis2=2)
    inside = ((diag > 0.02) & (diag < 0.99)).all(axis=1)  # rows the clip left alone keep their mean
    spread = diag - diag.mean(axis=1, keepdims=True)
    assert 0.1 < spread[inside].std() * np.sqrt(3 / 2) < 0.2  # the centred deviations' sd, b = 0.15
    assert np.all((diag[inside].mean(axis=1) >= 0.5 - 1e-12) & (diag[inside].mean(axis=1) <= 0.8 + 1e-12))
    assert (np.argmax(diag, axis=1) == 0).mean() < 0.6  # no class favoured by all


def test_activity_sigma_gives_sparse_workers_log_normal_label_counts():
    labels, _, _ = mixed_crowd_data(3000, (0.78, 0.22), 1, activity_sigma=1.5)
    counts = labels.groupby("worker").size().sort_values().iloc[:-3]  # the sparse workers
    assert 10 <= counts.median() <= 20 and counts.max() > 200 and (counts <= 3).mean() > 0.1
    even = mixed_crowd_data(3000, (0.78, 0.22), 1)[0].groupby("worker").size().sort_values().iloc[:-3]
    assert counts.size < even.size  # fewer sparse workers deal the same slots
    assert 0.9 * even.sum() < counts.sum() <= even.sum()  # less the pairs a long run repeats on an item


@pytest.mark.parametrize("errors", ["uniform", "majority"])
def test_hard_items_lower_every_workers_accuracy_and_send_errors_where_asked(errors):
    labels, truth, params = mixed_crowd_data(4000, (0.7, 0.2, 0.1), 3, hard_share=0.3, hard_drop=0.4,
                                             hard_errors=errors)
    hard = pd.Series(params["hard"], index=truth["item"])
    assert abs(hard.mean() - 0.3) < 0.03
    merged = labels.merge(truth, on="item")
    merged["hard"] = hard.loc[merged["item"]].to_numpy()
    right = (merged["label"] == merged["truth"]).groupby(merged["hard"]).mean()
    assert right[False] - right[True] > 0.3  # 0.4 less where the clip allows
    wrong_rare = merged[merged["hard"] & (merged["truth"] != "0") & (merged["label"] != merged["truth"])]
    to_majority = (wrong_rare["label"] == "0").mean()
    # the base errors go to either other class alike; on "majority" the dropped 0.4 goes to "0" as well
    assert to_majority > 0.7 if errors == "majority" else 0.4 < to_majority < 0.6


def test_bad_departures_are_config_errors():
    with pytest.raises(ConfigError, match="hard_errors must be 'uniform' or 'majority'"):
        mixed_crowd_data(100, (0.5, 0.5), 0, hard_errors="left")
    with pytest.raises(ConfigError, match="hard_share"):
        mixed_crowd_data(100, (0.5, 0.5), 0, hard_share=1.5)
    with pytest.raises(ConfigError, match="activity_sigma"):
        mixed_crowd_data(100, (0.5, 0.5), 0, activity_sigma=-1.0)


def test_ordinal_errors_send_every_workers_errors_to_neighbouring_grades():
    labels, truth, params = mixed_crowd_data(3000, (0.2,) * 5, 0, ordinal_errors=1.5)
    assert labels.equals(mixed_crowd_data(3000, (0.2,) * 5, 0, ordinal_errors=1.5)[0])
    pi = params["pi"]
    np.testing.assert_allclose(pi.sum(axis=2), 1.0)
    # every worker, every class: errors to a neighbour e^1.5 times as likely as two grades away
    np.testing.assert_allclose(pi[:, 2, 1] / pi[:, 2, 0], np.exp(1.5))
    np.testing.assert_allclose(pi[:, 2, 1], pi[:, 2, 3])
    merged = labels.merge(truth, on="item")
    wrong = merged[merged["label"] != merged["truth"]]
    distance = (wrong["label"].astype(int) - wrong["truth"].astype(int)).abs()
    assert (distance == 1).mean() > 0.6  # uniform errors over 4 other grades would give 0.4
    uniform = mixed_crowd_data(3000, (0.2,) * 5, 0)[2]["pi"]
    assert uniform[0, 2, 0] == uniform[0, 2, 1]  # off by default: errors alike
