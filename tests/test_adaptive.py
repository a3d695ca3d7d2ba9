"""ads: the structure the criterion chooses on crowds drawn from each structure, each structure equal to its own
model, the choice in summary.json, and a warm start that keeps it.

The kernel contract (additive statistics, both engines, renaming, gold clamping) is in tests/test_conformance.py;
incremental statistics in tests/test_incremental.py.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from crowdspark.block import build_blocks
from crowdspark.cli import main
from crowdspark.errors import ConfigError
from crowdspark.io.worker_table import worker_table_from_frame
from crowdspark.models.adaptive_ds import AdaptiveDawidSkene, n_free_params, structure_scores
from crowdspark.models.dawid_skene import DawidSkene
from crowdspark.models.one_coin import OneCoinDawidSkene
from crowdspark.models.registry import build_model
from tests.helpers import DATA
from tests.test_catalogue_simple import one_coin_crowd, run
from tests.test_worker_table import _started


def biased_crowd(n_items: int = 600, n_classes: int = 2, seed: int = 0):
    """Blocks of 8 workers who label every item, each right far more often on some classes (0.95) than on the
    others (0.55 or 0.35; a wrong label is any other class alike): full matrices, which one accuracy per worker
    cannot say."""
    rng = np.random.default_rng(seed)
    pattern = np.array([[0.95, 0.55], [0.55, 0.95], [0.95, 0.35], [0.35, 0.95]] * 2)
    right = pattern[:, np.arange(n_classes) % 2]
    truth = rng.integers(0, n_classes, n_items)
    items = np.repeat(np.array([f"i{i:05d}" for i in range(n_items)], dtype=object), 8)
    workers = np.tile(np.arange(8), n_items)
    t = np.repeat(truth, 8)
    wrong = (t + rng.integers(1, n_classes, t.size)) % n_classes
    labels = np.where(rng.random(t.size) < right[workers, t], t, wrong)
    return build_blocks(items, workers, labels, t, max_labels=1000), truth


def sparse_crowd():
    """300 one-coin workers of 4 classes with about 20 labels each."""
    accuracy = np.random.default_rng(3).uniform(0.35, 0.9, 300)
    return one_coin_crowd(2000, accuracy, 4, 3, seed=2)[0], 300, 4


def test_aic_chooses_one_coin_for_sparse_one_coin_workers_and_full_matrices_for_biased_ones():
    blocks, k, c = sparse_crowd()
    result, labels, truth, _ = run(AdaptiveDawidSkene(k, c, seed=1), blocks)
    assert int(result.params["structure"][0]) == 1
    assert AdaptiveDawidSkene(k, c).summary(result.params)["structure"] == "one-coin"
    blocks, _ = biased_crowd()
    result, *_ = run(AdaptiveDawidSkene(8, 2, seed=1), blocks)
    assert AdaptiveDawidSkene(8, 2).summary(result.params)["structure"] == "full"


@pytest.mark.parametrize("structure, alone", [("full", DawidSkene), ("one-coin", OneCoinDawidSkene)])
def test_each_structure_fitted_alongside_the_other_is_its_own_model(structure, alone):
    blocks, k, c = sparse_crowd()
    _, labels, _, posterior = run(AdaptiveDawidSkene(k, c, seed=1, structure=structure, max_iter=15, tol=0.0),
                                  blocks)
    _, labels_alone, _, posterior_alone = run(alone(k, c, seed=1, max_iter=15, tol=0.0), blocks)
    np.testing.assert_allclose(posterior, posterior_alone, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(labels, labels_alone)


def test_criteria_by_hand():
    # K = 10, C = 3: full 10*3*2 + 2 = 62 parameters, one-coin 10 + 2 = 12
    n_params = n_free_params(10, 3)
    np.testing.assert_array_equal(n_params, [62, 12])
    np.testing.assert_allclose(structure_scores(np.array([-100.0, -160.0]), n_params, 1000.0, "aic"),
                               [200 + 124, 320 + 24])
    np.testing.assert_allclose(structure_scores(np.array([-100.0, -160.0]), n_params, 1000.0, "bic"),
                               [200 + 62 * np.log(1000), 320 + 12 * np.log(1000)])


def _crowd_frame(blocks) -> pd.DataFrame:
    return pd.concat([pd.DataFrame({"item": b.item_ids[b.item_of_label], "worker": [f"w{w:03d}" for w in b.worker],
                                    "label": b.label.astype(str)}) for b in blocks])


def test_summary_records_the_choice_and_a_warm_start_keeps_it(tmp_path):
    sparse, _, _ = sparse_crowd()
    sparse_frame = _crowd_frame(sparse)
    biased = _crowd_frame(biased_crowd(n_classes=4)[0])
    # the biased crowd's workers and items under the sparse crowd's names, so the warm start knows them
    biased["worker"] = biased["worker"].map(dict(zip(sorted(biased["worker"].unique()),
                                                     sorted(sparse_frame["worker"].unique()))))
    sparse_frame.to_csv(tmp_path / "sparse.csv", index=False)
    biased.to_csv(tmp_path / "biased.csv", index=False)

    def aggregate(labels: str, out: str, *extra: str) -> dict:
        assert main(["aggregate", "--labels", str(tmp_path / labels), "--engine", "local", "--algorithm", "ads",
                     "--output", str(tmp_path / out), "--quiet", *extra]) == 0
        return json.loads((tmp_path / out / "summary.json").read_text())["model"]

    first = aggregate("sparse.csv", "first")
    assert first["structure"] == "one-coin"
    selection = first["structure_selection"]
    assert selection["criterion"] == "aic" and selection["reason"] == "lower AIC"
    assert selection["score"]["one-coin"] < selection["score"]["full"]
    assert aggregate("biased.csv", "cold")["structure"] == "full"
    warm = aggregate("biased.csv", "warm", "--warm-start", str(tmp_path / "first"))
    assert warm["structure"] == "one-coin"
    assert warm["structure_selection"]["reason"] == "kept from the warm-start model"


@pytest.mark.parametrize("key, value, message", [
    ("criterion", "hqc", r"ads\.criterion must be one of \['aic', 'bic', 'heldout'\]"),
    ("folds", 1, r"ads\.folds must be"),
    ("holdout_iter", 1, r"ads\.holdout_iter must be"),
    ("structure", "two-coin", r"ads\.structure must be one of \['auto', 'full', 'one-coin'\]"),
    ("smoothing", 0.0, r"ads\.smoothing must be a number > 0"),
])
def test_bad_parameters_are_config_errors(key, value, message):
    with pytest.raises(ConfigError, match=message):
        build_model("ads", {key: value}, 3, 2, 0)


def test_a_worker_table_starts_both_structures_of_the_listed_workers():
    temp = pd.read_csv(DATA / "temp" / "labels.csv", dtype=str)
    workers = sorted(temp["worker"].unique())[:2]
    table = worker_table_from_frame(pd.DataFrame({"worker": workers, "accuracy": [0.9, 0.6]}))
    _, own, started, enc = _started("ads", temp, table)
    index = [enc.workers.index(w) for w in workers]
    for m in (0, 1):  # an accuracy is a one-coin matrix: both structures start from it
        np.testing.assert_allclose(np.exp(started["log_pi"][index, m, 0, 0]), [0.9, 0.6])
    others = np.setdiff1d(np.arange(enc.n_workers), index)
    np.testing.assert_array_equal(started["log_pi"][others], own["log_pi"][others])
    assert not started["kept"]  # a table starts the workers, not the structure
