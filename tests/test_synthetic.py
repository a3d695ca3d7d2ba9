"""Synthetic data: reproducibility, invariants, planted parameters, the paper's statistics, the Spark writer."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowdspark import synthetic
from crowdspark.errors import ConfigError
from crowdspark.synthetic import PAPER, dawid_skene_data, idbla_data, paper_synthetic, write_parquet


def _load_job():
    """jobs/ is not a package: load jobs/generate.py by path."""
    path = Path(__file__).resolve().parents[1] / "jobs" / "generate.py"
    spec = importlib.util.spec_from_file_location("crowdspark_jobs_generate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _codes(labels: pd.DataFrame, truth: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(worker index, label, truth, level) of every label row, as integers."""
    merged = labels.merge(truth, on="item", how="left", validate="many_to_one")
    level = merged["level"].to_numpy() if "level" in merged else np.zeros(len(merged), dtype=np.int64)
    worker = merged["worker"].str[1:].astype(int).to_numpy()
    return worker, merged["label"].astype(int).to_numpy(), merged["truth"].astype(int).to_numpy(), level


def _empirical_pi(labels: pd.DataFrame, truth: pd.DataFrame, shape: tuple[int, int, int, int]) -> tuple:
    """Empirical P(label | worker, level, truth), shape (K, H, C, C), and the row counts (K, H, C)."""
    k, h, c, _ = shape
    worker, label, true, level = _codes(labels, truth)
    counts = np.bincount(((worker * h + level) * c + true) * c + label, minlength=k * h * c * c).reshape(shape)
    rows = counts.sum(axis=-1)
    return counts / np.maximum(rows, 1)[..., None], rows


# ---------------------------------------------------------------------------------------------- reproducibility


def test_same_seed_same_data_and_different_seed_different_data():
    first = idbla_data(300, 12, 3, 2, 4, seed=5)
    again = idbla_data(300, 12, 3, 2, 4, seed=5)
    other = idbla_data(300, 12, 3, 2, 4, seed=6)
    pd.testing.assert_frame_equal(first[0], again[0])
    pd.testing.assert_frame_equal(first[1], again[1])
    np.testing.assert_array_equal(first[2]["pi"], again[2]["pi"])
    assert not first[0]["label"].equals(other[0]["label"])
    assert not first[0]["worker"].equals(other[0]["worker"])
    assert not np.allclose(first[2]["pi"], other[2]["pi"])


def test_full_chunks_do_not_depend_on_the_number_of_items():
    small, small_truth, _ = dawid_skene_data(120, 10, 3, 3, seed=1, chunk_items=40)
    large, large_truth, _ = dawid_skene_data(170, 10, 3, 3, seed=1, chunk_items=40)
    pd.testing.assert_frame_equal(small, large.iloc[: len(small)])
    pd.testing.assert_frame_equal(small_truth, large_truth.iloc[:120])


def test_paper_synthetic_is_reproducible():
    a, b = paper_synthetic(3), paper_synthetic(3)
    pd.testing.assert_frame_equal(a[0], b[0])
    assert not a[0].equals(paper_synthetic(4)[0])


# ---------------------------------------------------------------------------------------------- invariants


def test_dawid_skene_shapes_ids_and_distinct_workers():
    labels, truth, params = dawid_skene_data(2000, 50, 4, 7, seed=0, chunk_items=600)
    assert list(labels.columns) == ["item", "worker", "label"]
    assert list(truth.columns) == ["item", "truth"]
    assert all(labels[col].dtype == object for col in labels.columns)
    assert len(labels) == 2000 * 7 and len(truth) == 2000
    assert truth["item"].tolist() == [f"i{i:06d}" for i in range(2000)]
    assert labels["worker"].str.fullmatch(r"w\d{4}").all()
    per_item = labels.groupby("item")["worker"].agg(["size", "nunique"])
    assert (per_item["size"] == 7).all() and (per_item["nunique"] == 7).all()
    assert set(labels["label"]) <= {"0", "1", "2", "3"} and set(truth["truth"]) <= {"0", "1", "2", "3"}
    assert params["pi"].shape == (50, 4, 4) and params["alpha"].shape == (4,) and params["weights"].shape == (50,)
    np.testing.assert_allclose(params["pi"].sum(axis=-1), 1.0)
    assert set(params) == {"alpha", "pi", "weights"}


def test_worker_activity_is_skewed_but_every_worker_distinct_per_item():
    labels, _, params = dawid_skene_data(5000, 40, 2, 5, seed=2, activity_sigma=1.5)
    per_worker = labels["worker"].value_counts()
    assert per_worker.max() > 5 * per_worker.median()
    flat = dawid_skene_data(5000, 40, 2, 5, seed=2, activity_sigma=0.0)[0]["worker"].value_counts()
    assert flat.max() < 1.3 * flat.min()


def test_ids_widen_with_the_counts():
    assert synthetic._id_width(1_000_000, 6) == 6 and synthetic._id_width(1_000_001, 6) == 7
    labels, truth, _ = dawid_skene_data(10, 12_000, 2, 3, seed=0)
    assert labels["worker"].str.fullmatch(r"w\d{5}").all()
    assert truth["item"].iloc[-1] == "i000009"


def test_format_ids_matches_python_formatting():
    numbers = np.array([0, 7, 42, 99_999, 1_234_567])
    out = synthetic._format_ids("w", numbers, 7).to_pylist()
    assert out == [f"w{n:07d}" for n in numbers]


def test_successive_sampling_inclusion_probabilities():
    weights = np.array([0.6, 0.3, 0.1])
    rng = np.random.Generator(np.random.Philox(0))
    chosen = synthetic._distinct_workers(rng, weights, 200_000, 2)
    assert (chosen[:, 0] != chosen[:, 1]).all()
    # P(k in sample) = w_k + sum_{j != k} w_j w_k / (1 - w_j)
    expected = [w + sum(v * w / (1 - v) for j, v in enumerate(weights) if j != k) for k, w in enumerate(weights)]
    observed = np.bincount(chosen.ravel(), minlength=3) / 200_000
    np.testing.assert_allclose(observed, expected, atol=0.005)


def test_all_workers_on_every_item_uses_the_fallback_and_gives_permutations():
    weights = np.array([0.97, 0.01, 0.01, 0.01])
    rng = np.random.Generator(np.random.Philox(1))
    chosen = synthetic._distinct_workers(rng, weights, 500, 4)
    assert (np.sort(chosen, axis=1) == np.arange(4)).all()


# ---------------------------------------------------------------------------------------------- planted parameters


def test_dawid_skene_planted_confusions_match_the_empirical_ones():
    labels, truth, params = dawid_skene_data(30_000, 8, 3, 4, seed=3, activity_sigma=0.3, accuracy=(0.4, 0.9))
    empirical, rows = _empirical_pi(labels, truth, (8, 1, 3, 3))
    assert rows.min() > 1000
    np.testing.assert_allclose(empirical[:, 0], params["pi"], atol=0.04)
    diagonal = np.einsum("ktt->kt", params["pi"])
    assert diagonal.min() >= 0.4 and diagonal.max() <= 0.9
    realized_alpha = truth["truth"].astype(int).value_counts(normalize=True).sort_index().to_numpy()
    np.testing.assert_allclose(realized_alpha, params["alpha"], atol=0.01)


def test_idbla_planted_parameters_match_and_harder_levels_are_noisier():
    labels, truth, params = idbla_data(40_000, 6, 3, 3, 3, seed=4, activity_sigma=0.3, level_proportions=[2, 1, 1],
                                       class_proportions=[0.5, 0.3, 0.2])  # fmt: skip
    assert params["pi"].shape == (6, 3, 3, 3)
    np.testing.assert_allclose(params["beta"], [0.5, 0.25, 0.25])
    empirical, rows = _empirical_pi(labels, truth, (6, 3, 3, 3))
    assert rows.min() > 500
    np.testing.assert_allclose(empirical, params["pi"], atol=0.06)
    np.testing.assert_allclose(truth["level"].value_counts(normalize=True).sort_index(), params["beta"], atol=0.01)
    worker, label, true, level = _codes(labels, truth)
    accuracy_by_level = [np.mean(label[level == h] == true[level == h]) for h in range(3)]
    assert accuracy_by_level[0] > accuracy_by_level[1] + 0.1 > accuracy_by_level[2] + 0.2
    # level h mixes the level-0 matrix towards uniform by level_noise[h]
    d = params["level_noise"]
    np.testing.assert_allclose(params["pi"][:, 2], (1 - d[2]) * params["pi"][:, 0] + d[2] / 3)


# ---------------------------------------------------------------------------------------------- the paper's set


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_paper_synthetic_matches_the_reported_statistics(seed):
    labels, truth, params = paper_synthetic(seed)
    assert len(truth) == 1000 and labels["worker"].nunique() <= 100
    assert abs(len(labels) - PAPER["n_labels"]) <= 0.1 * PAPER["n_labels"]
    merged = labels.merge(truth, on="item")
    accuracy = (merged["label"] == merged["truth"]).groupby(merged["worker"]).mean()
    assert abs(accuracy.mean() - PAPER["mean_accuracy"]) <= 0.04
    assert abs(accuracy.max() - PAPER["best_accuracy"]) <= 0.04
    rho = params["rho"]
    assert rho.shape == (100,) and rho.max() == pytest.approx(0.74)
    assert np.mean((rho >= 0.03) & (rho <= 0.2)) >= 0.9
    proportions = truth["truth"].value_counts(normalize=True).reindex(list("01234"), fill_value=0)
    np.testing.assert_allclose(proportions, PAPER["class_proportions"], atol=0.05)
    by_level = (merged["label"] == merged["truth"]).groupby(merged["level"]).mean()
    assert set(truth["level"]) == {0, 1} and by_level[0] > by_level[1] + 0.15


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: dawid_skene_data(10, 5, 3, 6, 0), r"labels_per_item must be an integer <= 5, but got 6"),
        (lambda: dawid_skene_data(10, 5, 1, 2, 0), r"n_classes must be an integer >= 2, but got 1"),
        (lambda: dawid_skene_data(10, 5, 3, 2, -1), r"seed must be an integer >= 0, but got -1"),
        (lambda: dawid_skene_data(10, 5, 3, 2, 0, accuracy=(0.9, 0.5)), r"accuracy\[1\] must be a number >= 0.9"),
        (lambda: dawid_skene_data(10, 5, 3, 2, 0, accuracy=0.5), r"accuracy must be a pair \(low, high\)"),
        (lambda: dawid_skene_data(10, 5, 3, 2, 0, class_proportions=[1, 2]), r"class_proportions must be 3 non"),
        (lambda: idbla_data(10, 5, 3, 2, 2, 0, level_noise=[0.5, 0.1]), r"level_noise must be non-decreasing"),
        (lambda: idbla_data(10, 5, 3, 2, 2, 0, level_noise=[0.5]), r"level_noise must be 2 numbers in \[0, 1\]"),
    ],
)
def test_invalid_parameters_are_reported(call, message):
    with pytest.raises(ConfigError, match=message):
        call()


def test_writer_rejects_unknown_generators_and_sizes_for_paper():
    with pytest.raises(ConfigError, match=r"generator must be one of \['ds', 'idbla', 'paper'\], but got 'bcc'"):
        write_parquet(None, "/x", "bcc", 10, 5, 3, 2, 0)
    with pytest.raises(ConfigError, match=r"generator 'paper' has fixed sizes and options, but got \['n_items'\]"):
        write_parquet(None, "/x", "paper", 10, None, None, None, 0)
    with pytest.raises(ConfigError, match=r"options must be among .*, but got \['accuracies'\]"):
        write_parquet(None, "/x", "ds", 10, 5, 3, 2, 0, accuracies=(0.5, 0.6))


# ---------------------------------------------------------------------------------------------- Spark


def _read_sorted(path: str) -> pd.DataFrame:
    frame = pd.read_parquet(path)
    text = [c for c in frame.columns if frame[c].dtype != object and pd.api.types.is_string_dtype(frame[c])]
    frame = frame.astype({c: object for c in text})  # pandas 3 reads text as str; the generators give object
    keys = [c for c in ("item", "worker") if c in frame.columns]
    return frame.sort_values(keys).reset_index(drop=True)


@pytest.mark.spark
def test_spark_writer_is_partition_independent_and_equals_pandas(spark, tmp_path):
    from chispa import assert_df_equality

    args = ("idbla", 900, 25, 4, 3, 11)
    one = write_parquet(spark, str(tmp_path / "one"), *args, 1, n_levels=3, chunk_items=200)
    three = write_parquet(spark, str(tmp_path / "three"), *args, 3, n_levels=3, chunk_items=200)
    assert one["n_chunks"] == 5 and three["truth_path"] == str(tmp_path / "three_truth")
    assert_df_equality(spark.read.parquet(one["path"]), spark.read.parquet(three["path"]), ignore_row_order=True)
    assert len(list((tmp_path / "three").glob("*.parquet"))) == 3

    labels, truth, params = idbla_data(900, 25, 4, 3, 3, 11, chunk_items=200)
    expected = labels.sort_values(["item", "worker"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(_read_sorted(one["path"]), expected)
    pd.testing.assert_frame_equal(_read_sorted(three["truth_path"]), truth)
    np.testing.assert_array_equal(three["params"]["pi"], params["pi"])


@pytest.mark.spark
def test_generate_job_writes_ds_and_paper(spark, tmp_path):
    job = _load_job()
    parse_args, run = job.parse_args, job.run

    out = str(tmp_path / "ds")
    summary = run(spark, parse_args(["--kind", "ds", "--labels", "3000", "--items", "1000", "--workers", "20",
                                     "--classes", "5", "--seed", "2", "--output", out]))  # fmt: skip
    labels, truth, _ = dawid_skene_data(1000, 20, 5, 3, seed=2)
    pd.testing.assert_frame_equal(_read_sorted(out), labels.sort_values(["item", "worker"]).reset_index(drop=True))
    pd.testing.assert_frame_equal(_read_sorted(summary["truth_path"]), truth)

    paper_out = str(tmp_path / "paper")
    run(spark, parse_args(["--kind", "paper", "--seed", "1", "--output", paper_out, "--partitions", "2"]))
    expected = paper_synthetic(1)[0].sort_values(["item", "worker"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(_read_sorted(paper_out), expected)


def test_generate_job_rejects_labels_not_divisible_by_items():
    job = _load_job()
    labels_per_item, parse_args = job.labels_per_item, job.parse_args

    args = parse_args(["--labels", "1001", "--items", "10", "--output", "/x"])
    with pytest.raises(ConfigError, match=r"--labels must be a multiple of --items, but got 1001 and 10"):
        labels_per_item(args)
