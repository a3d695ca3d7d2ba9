"""Quality signals: agreement, uncertainty, worker quality, calibration and the relabel queue (docs/quality.md)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowdspark.block import build_blocks
from crowdspark.config import load_config
from crowdspark.errors import ConfigError
from crowdspark.models.registry import algorithm_names
from crowdspark.pipeline import aggregate, aggregate_frames
from crowdspark.pipeline.quality import RELABEL_COLUMNS, relabel_queue
from crowdspark.quality import (
    ITEM_COLUMNS,
    agreement_stats,
    alpha_from_stats,
    average_confusion,
    calibration_from_stats,
    calibration_stats,
    expected_error_reduction,
    margin,
    spammer_probability,
    spammer_score,
)
from crowdspark.stats import sum_stats

DATA = Path(__file__).resolve().parent.parent / "data"
DATASETS = sorted(p.name for p in DATA.iterdir() if (p / "labels.csv").exists() and (p / "truth.csv").exists())


def _config(*overrides: str, algorithm: str = "mv"):
    return load_config(overrides=[f"algorithm={algorithm}", "engine.name=local", *overrides])


def _labels(name: str) -> pd.DataFrame:
    return pd.read_csv(DATA / name / "labels.csv", dtype=str)


def test_every_bundled_dataset_is_tested():
    assert len(DATASETS) == 12


@pytest.mark.parametrize("name", DATASETS)
def test_alpha_equals_crowdkit_on_every_bundled_dataset(name):
    from crowdkit.metrics.data import alpha_krippendorff

    labels = _labels(name)
    run = aggregate_frames(_config(), labels)
    expected = alpha_krippendorff(labels.rename(columns={"item": "task"}))
    assert run.summary["quality"]["krippendorff_alpha"] == pytest.approx(expected, abs=1e-9)


def _hand_blocks(max_labels: int):
    # item a: x x y; item b: y y; item c: x (one label: no pair); worker 0..2
    items = np.array(["a", "a", "a", "b", "b", "c"], dtype=object)
    worker = np.array([0, 1, 2, 0, 1, 2])
    label = np.array([0, 0, 1, 1, 1, 0])
    return build_blocks(items, worker, label, max_labels=max_labels)


def test_agreement_statistics_by_hand_and_additive_across_blocks():
    inferred = {"a": 0, "b": 1, "c": 0}

    def summed(max_labels: int):
        return sum_stats(agreement_stats(b, np.array([inferred[i] for i in b.item_ids]), 3, 2)
                         for b in _hand_blocks(max_labels))

    whole, split = summed(100), summed(2)
    assert len(_hand_blocks(2)) == 3
    for key in whole:
        np.testing.assert_allclose(whole[key], split[key])
    # paired labels: a (x, x, y) and b (y, y): N_x = 2, N_y = 3, N = 5; D_o = ((9 - 5) / 2 + 0) / 5 = 0.4;
    # D_e = (25 - 13) / 20 = 0.6; alpha = 1 - 0.4 / 0.6
    assert alpha_from_stats(whole) == pytest.approx(1 - 0.4 / 0.6)
    np.testing.assert_allclose(whole["alpha_class_pairs"] / whole["alpha_class_labels"], [1 / 2, 2 / 3])
    # worker 2 labelled a with y (inferred x) and c with x (inferred x)
    np.testing.assert_array_equal(whole["worker_confusion"][2], [[1, 1], [0, 0]])


def test_alpha_is_none_without_pairs_and_one_with_one_class():
    blocks = build_blocks(np.array(["a", "b"], dtype=object), np.array([0, 1]), np.array([0, 1]))
    assert alpha_from_stats(agreement_stats(blocks[0], np.array([0, 1]), 2, 2)) is None
    blocks = build_blocks(np.array(["a", "a"], dtype=object), np.array([0, 1]), np.array([1, 1]))
    assert alpha_from_stats(agreement_stats(blocks[0], np.array([1]), 2, 2)) == 1.0


def test_calibration_by_hand():
    truth = np.array([0, 1, 1, -1])
    block = build_blocks(np.array(["a", "b", "c", "d"], dtype=object), np.zeros(4, int), np.zeros(4, int),
                         truth=truth)[0]
    posterior = np.array([[0.95, 0.05], [0.9, 0.1], [0.35, 0.65], [0.5, 0.5]])
    label = posterior.argmax(axis=1)
    table = calibration_from_stats(calibration_stats(block, posterior, label, 10))
    assert table["n_gold"] == 3
    # bin 9: confidence 0.95 and 0.9, one right; bin 6: confidence 0.65, right
    assert table["bins"][9] == {"low": 0.9, "high": 1.0, "items": 2, "mean_confidence": pytest.approx(0.925),
                                "accuracy": 0.5}
    assert table["bins"][6]["accuracy"] == 1.0 and table["bins"][0]["items"] == 0
    assert table["ece"] == pytest.approx((2 * 0.425 + 0.35) / 3)


def test_expected_error_reduction_is_the_bayes_update_of_one_label():
    rng = np.random.default_rng(0)
    posterior = rng.dirichlet(np.ones(3), size=20)
    confusion = rng.dirichlet(np.ones(3) * 2, size=3) + np.eye(3)
    confusion /= confusion.sum(axis=1, keepdims=True)
    expected = []
    for p in posterior:
        after = 0.0
        for y in range(3):
            joint = p * confusion[:, y]
            after += joint.sum() * (1 - joint.max() / joint.sum())
        expected.append((1 - p.max()) - after)
    np.testing.assert_allclose(expected_error_reduction(posterior, confusion), np.maximum(expected, 0), atol=1e-12)
    certain = np.array([[1.0, 0.0, 0.0]])
    assert expected_error_reduction(certain, confusion)[0] == 0.0


def test_margin_is_the_gap_between_the_two_most_probable_classes():
    posterior = np.array([[0.2, 0.5, 0.3], [0.1, 0.1, 0.8], [0.4, 0.4, 0.2]])
    np.testing.assert_allclose(margin(posterior), [0.2, 0.7, 0.0], atol=1e-15)
    binary = np.random.default_rng(3).dirichlet([1, 1], size=50)
    np.testing.assert_allclose(margin(binary), 2 * binary.max(axis=1) - 1, atol=1e-15)


def test_spammer_score_perfect_worker_one_and_uniform_spammer_near_zero():
    perfect = np.array([[[30, 0], [0, 30]]])
    assert spammer_score(perfect)[0] == pytest.approx(1.0)
    rng = np.random.default_rng(1)
    # a spammer's rows are draws from the same distribution: the score is unbiased around 0
    rows = rng.multinomial(15, [1 / 3] * 3, size=(4000, 3))
    assert abs(spammer_score(rows).mean()) < 0.01
    assert np.isnan(spammer_score(np.array([[[5, 0], [1, 0]]]))[0])  # one row of two labels or more


def test_spammer_probability_is_the_bayes_factor_of_chance_agreement():
    from scipy.integrate import quad

    # 20 labels, 9 equal to the inferred class; rows (inferred) 8, 6, 6; columns (given) 7, 7, 6
    counts = np.array([[[4, 2, 2], [1, 3, 2], [2, 2, 2]]])
    n, d = 20, 9
    p0 = (8 * 7 + 6 * 7 + 6 * 6) / 400
    chance = p0 ** d * (1 - p0) ** (n - d)
    worker = quad(lambda q: q ** d * (1 - q) ** (n - d), p0, 1)[0] / (1 - p0)
    assert spammer_probability(counts)[0] == pytest.approx(chance / (chance + worker), rel=1e-9)
    assert spammer_probability(np.array([[[10, 0], [0, 10]]]))[0] < 1e-3
    assert np.isnan(spammer_probability(np.zeros((1, 3, 3))))[0]
    assert np.isnan(spammer_probability(np.array([[[5, 0], [0, 0]]])))[0]  # one class only: nothing to tell


def test_spammer_probability_of_uniform_spammers_and_weak_workers_at_20_labels():
    rng = np.random.default_rng(2)
    n_classes, n = 5, 20
    true_class = rng.integers(0, n_classes, size=(4000, n))
    spam = rng.integers(0, n_classes, size=(4000, n))
    right = rng.random((4000, n)) < 0.5  # right half the time, else uniform over the other classes
    weak = np.where(right, true_class, (true_class + rng.integers(1, n_classes, size=(4000, n))) % n_classes)

    def table(given):
        counts = np.zeros((4000, n_classes, n_classes))
        np.add.at(counts, (np.arange(4000)[:, None], true_class, given), 1)
        return counts

    # flagged at 0.5: 94% of the spammers, 11% of the workers right half the time
    assert (spammer_probability(table(spam)) > 0.5).mean() > 0.9
    assert (spammer_probability(table(weak)) > 0.5).mean() < 0.15
    assert np.median(spammer_probability(table(weak))) < 0.1


@pytest.mark.parametrize("algorithm", ["ds", "mv", "wawa"])
def test_planted_spammers_of_20_labels_are_flagged_with_precision_and_recall_090(algorithm):
    from jobs.spammer_experiment import SPAMMER_LABELS, flag_counts, planted_spammers

    config = _config(algorithm=algorithm)
    total: dict[str, int] = {}
    for seed in range(6):
        labels, _, spammers = planted_spammers(seed, n_classes=6)
        per_worker = labels.worker.value_counts()
        assert (per_worker[list(spammers)] == SPAMMER_LABELS).all()
        assert per_worker.drop(list(spammers)).mean() == SPAMMER_LABELS  # 400 items x 5 labels / 100 workers
        counts = flag_counts(aggregate_frames(config, labels).workers, spammers)
        total = {k: total.get(k, 0) + v for k, v in counts.items()}
    assert total["flag right"] / total["flag flagged"] >= 0.9
    assert total["flag right"] / total["planted"] >= 0.9


def test_run_outputs_quality_columns_summary_and_relabel_queue(tmp_path):
    out = tmp_path / "out"
    config = _config("relabel.budget=7", algorithm="ds")
    aggregate(config, str(DATA / "rte" / "labels.csv"), str(out), str(DATA / "rte" / "truth.csv"))
    items = pd.read_parquet(out / "items")
    workers = pd.read_parquet(out / "workers")
    relabel = pd.read_parquet(out / "relabel")
    summary = json.loads((out / "summary.json").read_text())["quality"]
    assert set(ITEM_COLUMNS) <= set(items.columns)
    assert {"agreement", "spammer_score", "spammer_probability", "spammer"} <= set(workers.columns)
    assert list(relabel.columns) == list(RELABEL_COLUMNS) and len(relabel) == 7
    assert relabel["rank"].tolist() == list(range(1, 8))
    top = items.sort_values(["margin", "confidence", "item"]).head(7)
    assert relabel["item"].tolist() == top["item"].tolist()
    assert (items["n_labels"] == 10).all()
    assert np.all(items["posterior_entropy"] >= 0) and np.all(items["vote_entropy"] <= np.log(2) + 1e-12)
    assert summary["workers"]["spammers"] == int(workers["spammer"].sum())
    assert summary["calibration"]["n_gold"] == 800
    assert summary["relabel"]["budget"] == 7


def test_quality_switched_off_leaves_the_outputs_as_before(tmp_path):
    out = tmp_path / "out"
    aggregate(_config("quality.enabled=false"), str(DATA / "temp" / "labels.csv"), str(out))
    assert not (out / "relabel").exists()
    assert "quality" not in json.loads((out / "summary.json").read_text())
    assert not set(ITEM_COLUMNS) & set(pd.read_parquet(out / "items").columns)
    assert "spammer" not in pd.read_parquet(out / "workers").columns


@pytest.mark.parametrize("override, message", [
    ("quality.spammer_threshold=2", r"quality.spammer_threshold must be .*1.*, but got 2"),
    ("relabel.budget=-1", r"relabel.budget must be .*0.*, but got -1"),
    ("quality.calibration_bins=0", r"quality.calibration_bins must be .*1.*, but got 0"),
])
def test_bad_quality_settings_are_named(override, message):
    with pytest.raises(ConfigError, match=message):
        _config(override)


def test_pandas_api_exposes_the_same_numbers():
    from crowdspark.api import DawidSkene

    labels = _labels("temp").rename(columns={"item": "task"})
    model = DawidSkene().fit(labels)
    run = aggregate_frames(_config("relabel.budget=0", algorithm="ds"), _labels("temp"))
    assert model.quality_ == run.summary["quality"]
    assert model.quality_["relabel"]["budget"] == 0 and len(model.relabel_) == len(run.items)
    assert list(model.relabel_.columns) == ["rank", "task", *RELABEL_COLUMNS[2:]]
    np.testing.assert_allclose(model.workers_["spammer_score"].to_numpy(), run.workers["spammer_score"].to_numpy())


def _read_dir(path: Path) -> pd.DataFrame:
    key = "worker" if path.name == "workers" else "item"
    return pd.read_parquet(path).sort_values(key).reset_index(drop=True)


@pytest.mark.spark
def test_local_and_spark_engines_give_the_same_quality(spark, tmp_path):
    labels, gold = str(DATA / "rte" / "labels.csv"), str(DATA / "rte" / "truth.csv")
    base = ["relabel.budget=25", "spark.partitions=3", "engine.small_input_bytes=0", "engine.max_block_labels=900"]
    outs = {}
    for engine in ("local", "spark"):
        outs[engine] = tmp_path / engine
        config = load_config(overrides=base, algorithm="ds", engine_name=engine, seed=5)
        aggregate(config, labels, str(outs[engine]), gold, spark=spark if engine == "spark" else None)
    summaries = [json.loads((outs[e] / "summary.json").read_text())["quality"] for e in ("local", "spark")]
    assert _close(summaries[0], summaries[1])
    for table, columns in (("items", list(ITEM_COLUMNS)),
                           ("workers", ["agreement", "spammer_score", "spammer_probability", "spammer"]),
                           ("relabel", list(RELABEL_COLUMNS))):
        local, distributed = (_read_dir(outs[e] / table)[columns] for e in ("local", "spark"))
        pd.testing.assert_frame_equal(local, distributed, check_exact=False, rtol=1e-9, atol=1e-12)


def _close(a, b) -> bool:
    """JSON trees equal, numbers to 1e-9."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        return all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        assert len(a) == len(b)
        return all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-12)
        return True
    assert a == b
    return True


@pytest.mark.spark
def test_spark_queue_of_every_item_is_numbered_across_partitions(spark):
    run = aggregate_frames(_config(algorithm="ds"), _labels("rte"))
    columns = list(RELABEL_COLUMNS[1:])
    items = spark.createDataFrame(run.items[columns]).repartition(4)
    key = "spark.sql.adaptive.coalescePartitions.enabled"  # else the small sort is coalesced into one partition
    before = spark.conf.get(key, None)
    spark.conf.set(key, "false")
    try:
        queue = relabel_queue(items, 0)
        assert queue.rdd.getNumPartitions() > 1
        got = queue.toPandas()
    finally:
        spark.conf.unset(key) if before is None else spark.conf.set(key, before)
    pd.testing.assert_frame_equal(got.sort_values("rank").reset_index(drop=True), relabel_queue(run.items, 0),
                                  check_dtype=False)


@pytest.mark.spark
def test_ml_model_exposes_the_same_numbers(spark):
    from crowdspark.ml import DawidSkeneAggregator

    labels = _labels("temp")
    model = DawidSkeneAggregator(seed=0).fit(spark.createDataFrame(labels))
    try:
        run = aggregate_frames(_config(algorithm="ds"), labels)
        assert _close(model.summary["quality"], run.summary["quality"])
        queue = model.relabel(10).toPandas()
        pd.testing.assert_frame_equal(queue, relabel_queue(run.items, 10), check_exact=False, rtol=1e-9,
                                      check_dtype=False)
        workers = model.workers.toPandas().sort_values("worker").reset_index(drop=True)
        expected = run.workers.sort_values("worker").reset_index(drop=True)
        np.testing.assert_allclose(workers["spammer_score"], expected["spammer_score"], rtol=1e-9)
    finally:
        model.close()


@pytest.mark.parametrize("algorithm", sorted(algorithm_names()))
def test_every_algorithm_reports_quality_and_calibration(algorithm):
    labels, gold = _labels("temp"), pd.read_csv(DATA / "temp" / "truth.csv", dtype=str)
    run = aggregate_frames(_config("gold.fit_fraction=0.3", algorithm=algorithm), labels, gold)
    quality = run.summary["quality"]
    assert quality["calibration"]["n_gold"] == run.summary["metrics"]["n_gold"] > 0
    assert sum(b["items"] for b in quality["calibration"]["bins"]) == quality["calibration"]["n_gold"]
    assert 0 <= quality["calibration"]["ece"] <= 1
    assert set(ITEM_COLUMNS) <= set(run.items.columns) and (run.items["relabel_gain"] >= 0).all()
    assert len(run.workers) == run.summary["counts"]["workers"] and run.workers["spammer"].dtype == bool


def _reference_entropy(shares):
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(shares > 0, shares * np.log(np.where(shares > 0, shares, 1.0)), 0.0)
    return 0.0 - terms.sum(axis=1)


def _reference_gain(posterior, confusion):
    joint = posterior[:, :, None] * confusion[None, :, :]
    best = posterior.argmax(axis=1)
    return (joint.max(axis=1) - joint[np.arange(posterior.shape[0]), best]).sum(axis=1)


@pytest.mark.parametrize("n_classes", [2, 3, 5, 9])
@pytest.mark.parametrize("order", ["C", "F"])
def test_item_columns_equal_their_definitions_bit_for_bit(n_classes, order):
    from crowdspark.quality import entropy, expected_error_reduction, margin

    rng = np.random.default_rng(n_classes)
    posterior = rng.dirichlet(np.full(n_classes, 0.3), 2000)
    posterior[:40] = np.eye(n_classes)[rng.integers(0, n_classes, 40)]  # certain items: shares of 0 and 1
    posterior[40:60] = 1.0 / n_classes  # every class tied
    posterior[60:80, :2] = posterior[60:80, :2].sum(axis=1, keepdims=True) / 2  # two classes tied
    posterior = np.asarray(posterior, order=order)
    confusion = rng.dirichlet(np.ones(n_classes), n_classes)
    np.testing.assert_array_equal(entropy(posterior), _reference_entropy(posterior))
    assert not np.signbit(entropy(posterior)).any()
    np.testing.assert_array_equal(expected_error_reduction(posterior, confusion), _reference_gain(posterior, confusion))
    assert (expected_error_reduction(posterior, confusion)[:40] == 0).all()
    top2 = np.sort(posterior, axis=1)[:, -2:]
    np.testing.assert_array_equal(margin(posterior), top2[:, 1] - top2[:, 0])


def test_average_confusion_leaves_out_workers_without_an_estimate():
    known = np.array([[[0.9, 0.1], [0.2, 0.8]], [[0.6, 0.4], [0.4, 0.6]]])
    with_unknown = np.concatenate([known, np.full((1, 2, 2), np.nan)])
    expected = (3 * known[0] + 1 * known[1]) / 4
    np.testing.assert_allclose(average_confusion(with_unknown, np.array([3, 1, 50])), expected)
    np.testing.assert_allclose(average_confusion(np.full((2, 2, 2), np.nan), np.array([3, 1])), 0.5)
