"""Gold in the fit: the seeded split of the gold, clamped items, held-out scoring, and bad gold.

The kernels' part (every registered model answers an item with gold in the fit with its gold class) is in
``tests/test_conformance.py``; this file covers the split, the pipeline and the faces.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdspark.block import GoldSplit, build_blocks
from crowdspark.engine.resident import read_block, write_block
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
