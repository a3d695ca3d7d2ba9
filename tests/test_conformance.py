"""Every registered algorithm keeps the kernel contract (one test per property, over ``algorithm_names()``).

A new algorithm is covered by registering it: additive statistics (any split of the items into blocks gives
the same answer), posteriors that are distributions, same seed -> same answer, the Spark engine's answer on
1 and 3 partitions equal to the local engine's, answers that do not depend on how items and workers are
named, items with gold in the fit (``Block.fixed``) answered with their gold class, a worker table that holds
what the pipeline reads of it, and one whole run (read, fit, quality signals, write, report) with the model's own
quick settings (``Model.quick_settings``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import json

from crowdspark.block import GoldSplit
from crowdspark.config import load_config
from crowdspark.errors import ModelContractError
from crowdspark.models.base import checked_worker_table
from crowdspark.models.registry import algorithm_names, build_model, model_class
from crowdspark.pipeline import aggregate
from crowdspark.stats import sum_stats
from tests.helpers import DATA, fitted_answers, frames_to_blocks

SEED = 3


@pytest.fixture(scope="module")
def frames():
    labels = pd.read_csv(DATA / "temp" / "labels.csv", dtype=str)
    gold = pd.read_csv(DATA / "temp" / "truth.csv", dtype=str)
    return labels, gold


def make(name: str, n_workers: int, n_classes: int, seed: int = SEED):
    return build_model(name, model_class(name).quick_settings(), n_workers, n_classes, seed)


def answers(name: str, blocks, enc, seed: int = SEED, engine=None):
    """``(ids, labels, posteriors)`` sorted by item id, from a fit on ``engine`` (local by default)."""
    return fitted_answers(make(name, enc.n_workers, enc.n_classes, seed), blocks, engine)[1:]


def decided(post: np.ndarray) -> np.ndarray:
    """Items whose top posterior is not tied (their label does not depend on a tie-break draw)."""
    top = np.sort(post, axis=1)
    return top[:, -1] - top[:, -2] > 1e-9


def assert_same(a, b, atol=1e-9):
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_allclose(a[2], b[2], atol=atol, rtol=0)


@pytest.mark.parametrize("name", algorithm_names())
def test_statistics_are_additive_over_any_split(frames, name):
    labels, gold = frames
    one, enc = frames_to_blocks(labels, gold, max_labels=10**6)
    many, _ = frames_to_blocks(labels, gold, max_labels=60)
    assert len(one) == 1 and len(many) > 50
    model = make(name, enc.n_workers, enc.n_classes)
    whole = model.init_block(one[0])[1]
    parts = sum_stats([model.init_block(b)[1] for b in many])
    assert whole.keys() == parts.keys()
    for key in whole:
        np.testing.assert_allclose(parts[key], whole[key], rtol=1e-12, atol=1e-9, err_msg=key)
    assert_same(answers(name, one, enc), answers(name, many, enc))


@pytest.mark.parametrize("name", algorithm_names())
def test_posteriors_are_distributions_and_labels_their_argmax(frames, name):
    blocks, enc = frames_to_blocks(*frames, max_labels=500)
    _, labels, post = answers(name, blocks, enc)
    assert post.shape == (len(labels), enc.n_classes) and np.all(post >= 0)
    np.testing.assert_allclose(post.sum(axis=1), 1.0, atol=1e-9)
    best = post.max(axis=1)
    np.testing.assert_allclose(post[np.arange(len(labels)), labels], best, atol=1e-12)


@pytest.mark.parametrize("name", algorithm_names())
def test_same_seed_same_answer(frames, name):
    blocks, enc = frames_to_blocks(*frames, max_labels=500)
    assert_same(answers(name, blocks, enc), answers(name, blocks, enc), atol=0)


def renamed(labels: pd.DataFrame, gold: pd.DataFrame, items: bool, workers: bool):
    """The same crowd with new item and/or worker ids in another sort order; also returns new -> old item ids."""
    item_ids = sorted(labels["item"].unique())
    new_item = {old: (f"q{len(item_ids) - j:05d}" if items else old) for j, old in enumerate(item_ids)}
    worker_ids = sorted(labels["worker"].unique())
    new_worker = {old: (f"v{(7 * j) % len(worker_ids):04d}-{j}" if workers else old)
                  for j, old in enumerate(worker_ids)}
    out = labels.assign(item=labels["item"].map(new_item), worker=labels["worker"].map(new_worker))
    return out, gold.assign(item=gold["item"].map(new_item)), {v: k for k, v in new_item.items()}


@pytest.mark.parametrize("what", ["workers", "items"])
@pytest.mark.parametrize("name", algorithm_names())
def test_answers_do_not_depend_on_the_names_of_items_and_workers(frames, name, what):
    labels, gold = frames
    blocks, enc = frames_to_blocks(labels, gold, max_labels=500)
    ids, lab, post = answers(name, blocks, enc)
    new_labels, new_gold, back = renamed(labels, gold, items=what == "items", workers=what == "workers")
    new_blocks, new_enc = frames_to_blocks(new_labels, new_gold, max_labels=500)
    assert new_enc.classes == enc.classes
    new_ids, new_lab, new_post = answers(name, new_blocks, new_enc)
    order = np.argsort(np.array([back[i] for i in new_ids]), kind="stable")
    new_lab, new_post = new_lab[order], new_post[order]
    cls = model_class(name)
    model = cls(enc.n_workers, enc.n_classes)
    # a sampler's per-item sums change their rounding with the workers' order, and a fit that draws per-item
    # random numbers draws others for renamed items: another draw of the same answer
    if model.schedule.samples or (what == "items" and cls.random_fit):
        assert np.mean(lab == new_lab) >= 0.95
        return
    np.testing.assert_allclose(new_post, post, atol=1e-9, rtol=0)
    both = decided(post) & decided(new_post)
    assert both.mean() > 0.8
    np.testing.assert_array_equal(new_lab[both], lab[both])


@pytest.mark.parametrize("name", algorithm_names())
def test_clamped_items_keep_their_gold_label(frames, name):
    """Gold in the fit that contradicts the model's own answer on every third item: those items get their gold
    class, with all the posterior on it, on blocks of several sizes."""
    labels, _ = frames
    blocks, enc = frames_to_blocks(labels, max_labels=500)
    ids, free, _ = answers(name, blocks, enc)
    chosen = np.arange(0, len(ids), 3)
    forced = (free[chosen] + 1) % enc.n_classes
    gold = pd.DataFrame({"item": ids[chosen], "truth": np.asarray(enc.classes, dtype=object)[forced]})
    for max_labels in (60, 10**6):
        fixed, _ = frames_to_blocks(labels, gold, max_labels=max_labels, split=GoldSplit(fit_fraction=1.0))
        assert sum(int((b.fixed >= 0).sum()) for b in fixed) == len(chosen)
        assert all((b.truth < 0).all() for b in fixed)
        _, got, post = answers(name, fixed, enc)
        np.testing.assert_array_equal(got[chosen], forced)
        np.testing.assert_allclose(post[chosen, forced], 1.0, atol=1e-12)


@pytest.mark.spark
@pytest.mark.parametrize("name", algorithm_names())
def test_spark_engine_gives_the_local_answer_on_1_and_3_partitions(spark, frames, name):
    from crowdspark.engine.spark.engine import SparkEngine

    blocks, enc = frames_to_blocks(*frames, max_labels=500)
    local = answers(name, blocks, enc)
    for partitions in (1, 3):
        engine = SparkEngine(spark.sparkContext.parallelize(blocks, partitions))
        try:
            remote = answers(name, blocks, enc, engine=engine)
        finally:
            engine.close()
        assert_same(local, remote, atol=1e-9)


@pytest.mark.parametrize("name", algorithm_names())
def test_worker_table_holds_what_the_pipeline_reads(frames, name):
    split = GoldSplit(0.5, 0) if model_class(name).needs_fit_gold else None
    blocks, enc = frames_to_blocks(*frames, max_labels=500, split=split)
    model = make(name, enc.n_workers, enc.n_classes)
    result = fitted_answers(model, blocks)[0]
    table = checked_worker_table(model, result.params, result.init_stats)
    confusion = model.worker_confusion(table)
    known = ~np.isnan(confusion).any(axis=(1, 2))
    assert confusion.shape == (enc.n_workers, enc.n_classes, enc.n_classes) and known.mean() > 0.5
    assert np.all(confusion[known] >= 0)
    np.testing.assert_allclose(confusion[known].sum(axis=2), 1.0, atol=1e-9)
    n_labels = sum(np.bincount(b.worker, minlength=enc.n_workers) for b in blocks)
    np.testing.assert_array_equal(np.asarray(table["n_labels"]), n_labels)


def test_a_worker_table_without_a_skill_column_is_refused_naming_the_model(frames):
    blocks, enc = frames_to_blocks(*frames, max_labels=500)
    model = make("mv", enc.n_workers, enc.n_classes)
    result = fitted_answers(model, blocks)[0]
    broken = type("CountsOnly", (type(model),), {
        "worker_table": lambda self, params, init_stats: {"n_labels": np.zeros(self.n_workers)}})
    with pytest.raises(ModelContractError, match=r"CountsOnly \('mv'\).*'n_labels'\].*'confusion', 'accuracy'"):
        checked_worker_table(broken(**vars(model)), result.params, result.init_stats)
    short = type("ShortTable", (type(model),), {"worker_table": lambda self, params, init_stats: {
        "n_labels": np.zeros(self.n_workers), "accuracy": np.ones(self.n_workers - 1)}})
    with pytest.raises(ModelContractError, match="column 'accuracy' has shape"):
        checked_worker_table(short(**vars(model)), result.params, result.init_stats)


@pytest.mark.slow
@pytest.mark.parametrize("name", algorithm_names())
def test_each_model_runs_the_whole_pipeline(tmp_path, name):
    settings = [f"{name}.{key}={value}" for key, value in model_class(name).quick_settings().items()]
    config = load_config(overrides=[*settings, "gold.fit_fraction=0.5"], algorithm=name, engine_name="local")
    out = tmp_path / "run"
    result = aggregate(config, str(DATA / "temp" / "labels.csv"), str(out), str(DATA / "temp" / "truth.csv"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["algorithm"] == result.summary["algorithm"] == name
    assert summary["metrics"]["error_rate"] < 0.5 and "quality" in summary
    workers = pd.read_parquet(out / "workers")
    assert {"n_labels", "agreement", "spammer"} <= set(workers.columns)
    assert {"confusion", "accuracy"} & set(workers.columns)
    items = pd.read_parquet(out / "items")
    assert len(items) == summary["counts"]["items"] and items["confidence"].between(0, 1 + 1e-9).all()
    from crowdspark.report import write_report

    page = write_report(str(out))
    assert "<figure" in open(page, encoding="utf-8").read()
