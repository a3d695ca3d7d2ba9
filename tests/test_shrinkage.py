"""``ads.shrinkage = "empirical-bayes"``: the strength learned from the crowd (large where workers are one-coin,
small where their rows carry their own pattern), prolific workers keeping their matrices and sparse ones staying
near one accuracy, the effective parameters by hand, and the option through ``ads`` (summary, block split).
"""

from __future__ import annotations

import numpy as np
import pytest

from crowdspark.block import Block, build_blocks
from crowdspark.errors import ConfigError
from crowdspark.models.adaptive_ds import AdaptiveDawidSkene, n_free_params
from crowdspark.models.common import normalize_rows, one_coin_confusion
from crowdspark.models.one_coin import one_coin_accuracy
from crowdspark.models.registry import build_model
from crowdspark.models.shrinkage import effective_worker_params, empirical_strength, shrunk_m_step
from tests.helpers import load_dataset
from tests.test_adaptive import sparse_crowd
from tests.test_catalogue_simple import run
from tests.test_ebcc_bwa import assert_spark_gives_local_answer


def _counts(pi: np.ndarray, per_row: int, seed: int) -> np.ndarray:
    """Confusion counts (K, C, C): ``per_row`` labels per row drawn from each worker's matrix ``pi`` (K, C, C)."""
    rng = np.random.default_rng(seed)
    return np.stack([[rng.multinomial(per_row, row) for row in worker] for worker in pi]).astype(np.float64)


def test_strength_is_large_for_one_coin_workers_and_small_for_class_biased_ones():
    accuracy = np.random.default_rng(0).uniform(0.55, 0.95, 300)
    coin = one_coin_confusion(accuracy, 3)
    coin_counts = _counts(coin, 20, seed=1)
    # rows that follow the one-coin matrices: only the counts' noise separates them from the centre
    centre = one_coin_confusion(one_coin_accuracy(coin_counts, 0.5), 3)
    assert np.all(empirical_strength(coin_counts, centre) >= 100.0)
    # every worker right 0.95 of the time on one class and 0.45 on the others (which class varies by worker)
    biased = one_coin_confusion(np.full(300, 0.6), 3)
    for k in range(300):
        t = k % 3
        biased[k, t] = 0.025
        biased[k, t, t] = 0.95
    biased_counts = _counts(biased, 200, seed=2)
    centre = one_coin_confusion(one_coin_accuracy(biased_counts, 0.5), 3)
    # the rows' own 200 labels set at least 90% of each shrunk row: 200 / (200 + A) >= 0.9
    assert np.all(empirical_strength(biased_counts, centre) <= 200.0 / 9.0)


def test_a_prolific_worker_keeps_its_matrix_and_a_sparse_one_stays_near_its_accuracy():
    accuracy = np.random.default_rng(3).uniform(0.6, 0.9, 200)
    counts = _counts(one_coin_confusion(accuracy, 2), 8, seed=4)  # 200 sparse one-coin workers
    counts[0] = [[1900.0, 100.0], [800.0, 1200.0]]  # a prolific worker right 0.95 / 0.6 of the time
    counts[1] = [[4.0, 0.0], [2.0, 2.0]]  # a sparse worker: 4 of 4 right on class 0, 2 of 4 on class 1
    pi = np.exp(shrunk_m_step(counts, np.array([1000.0, 1000.0]), 0.5)["log_pi"])
    np.testing.assert_allclose(pi[0], normalize_rows(counts[0]), atol=0.02)
    own, coin = normalize_rows(counts[1], 0.5), one_coin_confusion(np.array([(6 + 0.5) / 9]), 2)[0]
    assert np.abs(pi[1] - coin).max() < np.abs(own - coin).max() / 2


def test_effective_params_by_hand():
    counts = np.zeros((2, 2, 2))
    counts[0] = [[6.0, 4.0], [10.0, 20.0]]  # rows of 10 and 30 labels
    counts[1] = [[1.0, 1.0], [0.0, 0.0]]  # one row of 2 labels
    # worker 0: 1 + 10/20 + 30/40 = 2.25, at most C (C - 1) = 2; worker 1: 1 + 2/12 + 0
    assert effective_worker_params(counts, np.array([10.0, 10.0])) == pytest.approx(2.0 + 1.0 + 2.0 / 12.0)


@pytest.mark.slow
def test_ads_records_the_strength_and_charges_the_effective_parameters():
    blocks, k, c = sparse_crowd()
    model = AdaptiveDawidSkene(k, c, seed=1, shrinkage="empirical-bayes")
    result, *_ = run(model, blocks)
    selection = model.summary(result.params)["structure_selection"]
    assert selection["shrinkage"]["method"] == "empirical-bayes"
    assert len(selection["shrinkage"]["strength"]) == c
    assert k + c - 1 <= selection["n_params"]["full"] < n_free_params(k, c)[0]
    default = AdaptiveDawidSkene(k, c, seed=1)
    assert "shrinkage" not in default.summary(run(default, blocks)[0].params)["structure_selection"]


def _split(blocks: list[Block], max_labels: int) -> list[Block]:
    """The same labels in blocks of at most ``max_labels``."""
    items = np.concatenate([b.item_ids[b.item_of_label] for b in blocks])
    return build_blocks(items, np.concatenate([b.worker for b in blocks]), np.concatenate([b.label for b in blocks]),
                        np.concatenate([b.truth[b.item_of_label] for b in blocks]), max_labels=max_labels)


@pytest.mark.slow
def test_the_answers_do_not_depend_on_the_block_split():
    blocks, k, c = sparse_crowd()
    model = AdaptiveDawidSkene(k, c, seed=1, shrinkage="empirical-bayes", max_iter=20)
    _, labels, _, posterior = run(model, blocks)
    order = np.argsort(np.concatenate([b.item_ids for b in blocks]), kind="stable")
    split = _split(blocks, 500)
    _, labels_split, _, posterior_split = run(model, split)
    order_split = np.argsort(np.concatenate([b.item_ids for b in split]), kind="stable")
    np.testing.assert_array_equal(labels[order], labels_split[order_split])
    np.testing.assert_allclose(posterior[order], posterior_split[order_split], rtol=0, atol=1e-9)


def test_a_bad_shrinkage_is_a_config_error():
    with pytest.raises(ConfigError, match=r"ads\.shrinkage must be one of \['none', 'empirical-bayes'\]"):
        build_model("ads", {"shrinkage": "lasso"}, 3, 2, 0)


@pytest.mark.spark
@pytest.mark.slow
def test_the_spark_engine_gives_the_local_answer(spark):
    blocks, enc = load_dataset("temp", 500)
    model = AdaptiveDawidSkene(enc.n_workers, enc.n_classes, seed=7, shrinkage="empirical-bayes", max_iter=20)
    assert_spark_gives_local_answer(spark, model, blocks)
