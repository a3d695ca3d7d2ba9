"""Gold in the fit: the seeded split of the gold, clamped items, held-out scoring, and bad gold.

The kernels' part (every registered model answers an item with gold in the fit with its gold class) is in
``tests/test_conformance.py``; this file covers the split, the pipeline and the faces.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdspark.block import GoldSplit, build_blocks
from crowdspark.engine.spark.resident import read_block, write_block
from crowdspark.rng import item_keys, uniforms
from tests.helpers import DATA, frames_to_blocks


@pytest.fixture(scope="module")
def rte():
    labels = pd.read_csv(DATA / "rte" / "labels.csv", dtype=str)
    gold = pd.read_csv(DATA / "rte" / "truth.csv", dtype=str)
    return labels, gold


def _fixed_and_scored(blocks) -> tuple[set[str], set[str]]:
    fixed = {str(i) for b in blocks for i in b.item_ids[b.fixed >= 0]}
    scored = {str(i) for b in blocks for i in b.item_ids[b.truth >= 0]}
    return fixed, scored


def test_the_split_depends_on_the_item_ids_and_the_seed_only(rte):
    labels, gold = rte
    split = GoldSplit(fit_fraction=0.3, seed=4)
    fixed, scored = _fixed_and_scored(frames_to_blocks(labels, gold, max_labels=10**6, split=split)[0])
    assert not fixed & scored and len(fixed | scored) == len(gold)
    assert 0.25 < len(fixed) / len(gold) < 0.35
    # other block sizes and another row order: the same items on each side
    shuffled = labels.sample(frac=1.0, random_state=1)
    again = frames_to_blocks(shuffled, gold, max_labels=97, split=split)[0]
    assert _fixed_and_scored(again) == (fixed, scored)
    # another seed, another split; a smaller fraction of the same seed, a subset
    other, _ = _fixed_and_scored(frames_to_blocks(labels, gold, split=GoldSplit(0.3, seed=5))[0])
    assert other != fixed
    fewer, _ = _fixed_and_scored(frames_to_blocks(labels, gold, split=GoldSplit(0.1, seed=4))[0])
    assert fewer < fixed and 0.06 < len(fewer) / len(gold) < 0.14


def test_the_split_is_independent_of_the_models_draws(rte):
    """The split's draws are not the tie-break draws of seed 0, sweep 0 (the seeds being equal)."""
    labels, gold = rte
    ids = np.array(sorted(set(gold["item"])), dtype=object)
    in_fit = GoldSplit(0.5, seed=0).in_fit(item_keys(ids))
    tie_draw = uniforms(0, 0, item_keys(ids)) < 0.5
    assert 0.4 < np.mean(in_fit == tie_draw) < 0.6


def test_every_gold_item_scores_without_a_split_and_none_with_all_of_it_in_the_fit(rte):
    labels, gold = rte
    for split, n_fixed in ((None, 0), (GoldSplit(0.0, 3), 0), (GoldSplit(1.0, 3), len(gold))):
        fixed, scored = _fixed_and_scored(frames_to_blocks(labels, gold, split=split)[0])
        assert len(fixed) == n_fixed and len(scored) == len(gold) - n_fixed


def test_a_spilled_block_keeps_its_fixed_items(tmp_path):
    blocks = build_blocks(np.array(["a", "a", "b", "c"], dtype=object), np.array([0, 1, 0, 1]),
                          np.array([0, 1, 1, 1]), np.array([1, 1, 0, -1]), split=GoldSplit(1.0))
    path = str(tmp_path / "block.npz")
    write_block(path, blocks[0])
    back = read_block(path)
    np.testing.assert_array_equal(back.fixed, [1, 0, -1])
    np.testing.assert_array_equal(back.truth, [-1, -1, -1])


# ---- the run: gold in the fit, scored on held-out gold only ---------------------------------------------------


def _config(fraction: float, algorithm: str = "ds", seed: int = 2, engine: str = "local", **extra):
    from crowdspark.config import load_config

    overrides = [f"gold.fit_fraction={fraction}", f"gold.split_seed={seed}"]
    overrides += [f"{key}={value}" for key, value in extra.items()]
    return load_config(overrides=overrides, algorithm=algorithm, engine_name=engine)


def _run(config, labels, gold):
    from crowdspark.pipeline import aggregate_frames

    return aggregate_frames(config, labels, gold)


def _held_out(gold: pd.DataFrame, fraction: float, seed: int) -> np.ndarray:
    ids = gold["item"].to_numpy(dtype=object)
    return ~GoldSplit(fraction, seed).in_fit(item_keys(ids))


@pytest.mark.parametrize("algorithm", ["ds", "idbla-cvb0"])
def test_held_out_gold_never_enters_the_fit(rte, algorithm):
    """Changing the truth of every held-out gold item changes no parameter and no answer; changing the gold
    the fit uses does."""
    labels, gold = rte
    config = _config(0.3, algorithm)
    base = _run(config, labels, gold)
    held = _held_out(gold, 0.3, 2)
    assert base.summary["gold_split"] == {"fit_fraction": 0.3, "seed": 2, "fit_items": int((~held).sum()),
                                          "held_out_items": int(held.sum())}
    flipped = gold.assign(truth=np.where(held, np.where(gold["truth"] == "0", "1", "0"), gold["truth"]))
    other = _run(config, labels, flipped)
    pd.testing.assert_frame_equal(other.items, base.items)
    pd.testing.assert_frame_equal(other.workers, base.workers)
    def path(run):
        return [(h["objective"], h["change"]) for h in run.summary["history"]]

    assert path(other) == path(base) and len(path(base)) > 2
    assert other.summary["metrics"]["error_rate"] != base.summary["metrics"]["error_rate"]
    # the gold in the fit does move the fit
    moved = gold.assign(truth=np.where(~held, np.where(gold["truth"] == "0", "1", "0"), gold["truth"]))
    assert not _run(config, labels, moved).workers.equals(base.workers)


def test_items_in_the_fit_keep_their_gold_and_metrics_use_the_held_out_gold_only(rte):
    labels, gold = rte
    run = _run(_config(0.3), labels, gold)
    items = run.items.set_index("item")
    truth = gold.set_index("item")["truth"]
    held = pd.Series(_held_out(gold, 0.3, 2), index=gold["item"])
    fixed = truth[~held]
    assert (items.loc[fixed.index, "label"] == fixed).all()
    assert (items.loc[fixed.index, "confidence"] == 1.0).all()
    scored = truth[held]
    metrics = run.summary["metrics"]
    assert metrics["n_gold"] == len(scored) == run.summary["gold_split"]["held_out_items"]
    assert metrics["error_rate"] == pytest.approx((items.loc[scored.index, "label"] != scored).mean())
    assert run.summary["counts"]["gold_items"] == len(gold)


def test_no_gold_in_the_fit_gives_the_answers_of_a_run_without_the_setting(rte):
    labels, gold = rte
    plain = _run(_config(0.0), labels, gold)
    from crowdspark.config import load_config

    before = _run(load_config(algorithm="ds", engine_name="local"), labels, gold)
    pd.testing.assert_frame_equal(plain.items, before.items)
    assert plain.summary["metrics"] == before.summary["metrics"]
    assert plain.summary["gold_split"]["fit_items"] == 0


def test_all_gold_in_the_fit_leaves_nothing_to_score(rte):
    labels, gold = rte
    run = _run(_config(1.0), labels, gold)
    assert run.summary["metrics"]["n_gold"] == 0 and run.summary["metrics"]["error_rate"] is None
    assert run.summary["gold_split"]["held_out_items"] == 0
    # a fraction below 1 that leaves nothing to score (a small gold) says so
    few = _run(_config(0.9), labels, gold.iloc[:3])
    assert few.summary["gold_split"]["held_out_items"] == 0
    assert any("no gold is left to score" in w for w in few.summary["warnings"])


def test_a_fit_fraction_without_gold_is_a_warning(rte):
    labels, _ = rte
    run = _run(_config(0.3), labels, None)
    assert "gold_split" not in run.summary
    assert any("gold.fit_fraction = 0.3 but the run has no gold" in w for w in run.summary["warnings"])


def test_bad_gold_gets_the_existing_treatment_with_gold_in_the_fit(rte):
    from crowdspark.errors import InputError

    labels, gold = rte
    unknown = pd.concat([gold, pd.DataFrame({"item": ["no-such-item"], "truth": ["1"]})], ignore_index=True)
    run = _run(_config(0.5), labels, unknown)
    assert run.summary["counts"]["gold_items_without_labels"] == 1
    split = run.summary["gold_split"]
    assert split["fit_items"] + split["held_out_items"] == len(gold)
    outside = gold.assign(truth=np.where(gold.index == 5, "7", gold["truth"]))
    with pytest.raises(InputError, match=r"'truth'.*'7'"):
        _run(_config(0.5), labels, outside)


@pytest.mark.parametrize("value", [-0.1, 1.5, "half", float("nan")])
def test_fit_fraction_outside_0_1_is_a_config_error(value):
    from crowdspark.config import GoldConfig
    from crowdspark.errors import ConfigError

    with pytest.raises(ConfigError, match="gold.fit_fraction"):
        GoldConfig(fit_fraction=value)


@pytest.mark.spark
def test_the_spark_engine_holds_the_same_gold_fixed(spark, tmp_path, rte):
    from crowdspark.pipeline import aggregate

    labels, gold = rte
    labels.to_csv(tmp_path / "labels.csv", index=False)
    gold.to_csv(tmp_path / "gold.csv", index=False)
    config = _config(0.3, engine="spark", **{"engine.small_input_bytes": 0})
    remote = aggregate(config, str(tmp_path / "labels.csv"), str(tmp_path / "out"), str(tmp_path / "gold.csv"),
                       spark)
    local = _run(_config(0.3), labels, gold)
    assert remote.summary["engine"] == "spark"
    assert remote.summary["gold_split"] == local.summary["gold_split"]
    assert remote.summary["metrics"] == pytest.approx(local.summary["metrics"])
    items = pd.read_parquet(tmp_path / "out" / "items").set_index("item").sort_index()
    assert (items["label"] == local.items.set_index("item").sort_index()["label"]).all()


# ---- gold majority vote ----------------------------------------------------------------------------------------

TINY = pd.DataFrame(
    [("g1", "a", "x"), ("g1", "b", "x"), ("g1", "c", "y"),
     ("g2", "a", "y"), ("g2", "b", "x"), ("g2", "c", "y"),
     ("i1", "a", "x"), ("i1", "b", "y"), ("i1", "c", "y"), ("i1", "d", "x"),
     ("i2", "a", "y"), ("i2", "d", "x")],
    columns=["item", "worker", "label"])
TINY_GOLD = pd.DataFrame({"item": ["g1", "g2"], "truth": ["x", "y"]})


@pytest.mark.parametrize("rule, d_skill", [("pooled", 4 / 6), ("ignore", 0.0), ("value", 0.25)])
def test_gold_majority_vote_weighs_workers_by_their_accuracy_on_the_gold(rule, d_skill):
    """a: 2/2 right on the gold, b: 1/2, c: 1/2, d: no gold label (the rule's weight)."""
    config = _config(1.0, "gold-mv", **{"gold-mv.on_missing_skill": f'"{rule}"', "gold-mv.default_skill": 0.25})
    run = _run(config, TINY, TINY_GOLD)
    workers = run.workers.set_index("worker")
    np.testing.assert_allclose(workers["skill"], [1.0, 0.5, 0.5, d_skill])
    np.testing.assert_allclose(workers["accuracy"][:3], [1.0, 0.5, 0.5])
    assert np.isnan(workers.loc["d", "accuracy"]) and workers["n_gold_labels"].tolist() == [2, 2, 2, 0]
    items = run.items.set_index("item")
    # i1: x gets a + d = 1 + d, y gets b + c = 1; i2: y gets a = 1, x gets d
    x_share = (1 + d_skill) / (2 + d_skill)
    np.testing.assert_allclose(items.loc["i1", "posterior"], [x_share, 1 - x_share])
    np.testing.assert_allclose(items.loc["i2", "posterior"], [d_skill / (1 + d_skill), 1 / (1 + d_skill)])
    assert items.loc["i2", "label"] == "y" and items.loc[["g1", "g2"], "label"].tolist() == ["x", "y"]


def test_gold_majority_vote_without_gold_in_the_fit_is_a_config_error(rte):
    from crowdspark.errors import ConfigError

    labels, gold = rte
    with pytest.raises(ConfigError, match=r"gold-mv weighs each worker.*no gold.*gold.fit_fraction=0.3"):
        _run(_config(0.3, "gold-mv"), labels, None)
    with pytest.raises(ConfigError, match=r"gold.fit_fraction = 0:"):
        _run(_config(0.0, "gold-mv"), labels, gold)


def test_gold_majority_vote_whose_gold_has_no_labels_warns(rte):
    labels, gold = rte
    elsewhere = gold.assign(item="other-" + gold["item"])
    run = _run(_config(0.5, "gold-mv"), labels, elsewhere)
    assert any("gold-mv had no labelled gold item in the fit" in w for w in run.summary["warnings"])


def test_the_command_line_refuses_gold_mv_without_gold(tmp_path, capsys):
    from crowdspark.cli import main

    TINY.to_csv(tmp_path / "labels.csv", index=False)
    code = main(["aggregate", "--labels", str(tmp_path / "labels.csv"), "--algorithm", "gold-mv", "--engine",
                 "local", "--output", str(tmp_path / "out")])
    assert code == 2 and not (tmp_path / "out").exists()
    assert "--set gold.fit_fraction=0.3" in capsys.readouterr().err
