"""The core: counter-based randomness, additive statistics, blocks."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from crowdspark.block import block_counts, build_blocks
from crowdspark.rng import driver_generator, item_keys, uniforms
from crowdspark.stats import add_stats, sum_stats


def test_item_keys_are_stable_golden_values():
    # pandas' SipHash with its fixed key; a change here would change every seeded result
    keys = item_keys(np.array(["266", "a"], dtype=object))
    assert keys.dtype == np.uint64
    assert keys.tolist() == [1751025013863577894, 13950350942979735504]


def test_item_keys_hash_ids_as_strings():
    assert item_keys(np.array([266, 7], dtype=object)).tolist() == item_keys(np.array(["266", "7"], dtype=object)).tolist()


def test_uniforms_are_pure_functions_of_seed_sweep_key_stream():
    keys = item_keys(np.array([f"i{j}" for j in range(1000)], dtype=object))
    a = uniforms(3, 5, keys, 1)
    np.testing.assert_array_equal(a, uniforms(3, 5, keys, 1))
    # a subset (another partitioning) gives the same draws for the same items
    np.testing.assert_array_equal(a[::7], uniforms(3, 5, keys[::7], 1))
    for other in (uniforms(4, 5, keys, 1), uniforms(3, 6, keys, 1), uniforms(3, 5, keys, 2)):
        assert np.mean(np.abs(a - other) > 0) > 0.99
    assert np.all((a >= 0) & (a < 1))


def test_uniforms_are_uniform_and_uncorrelated_across_sweeps():
    keys = item_keys(np.array([f"item-{j}" for j in range(200_000)], dtype=object))
    u = uniforms(0, 1, keys)
    v = uniforms(0, 2, keys)
    assert sps.kstest(u, "uniform").pvalue > 1e-3
    # consecutive integer keys are the worst case for a weak mixer
    w = uniforms(0, 1, np.arange(200_000, dtype=np.uint64))
    assert sps.kstest(w, "uniform").pvalue > 1e-3
    assert abs(np.corrcoef(u, v)[0, 1]) < 0.01


def test_driver_generator_is_seeded_by_seed_and_sweep():
    assert driver_generator(1, 2).random() == driver_generator(1, 2).random()
    assert driver_generator(1, 2).random() != driver_generator(1, 3).random()


def test_add_stats_has_a_zero_and_does_not_mutate():
    a = {"x": np.array([1.0, 2.0]), "n": np.array(3)}
    b = {"x": np.array([0.5, 0.5]), "n": np.array(1)}
    total = add_stats(a, b)
    np.testing.assert_array_equal(total["x"], [1.5, 2.5])
    assert int(total["n"]) == 4
    np.testing.assert_array_equal(a["x"], [1.0, 2.0])
    assert add_stats({}, a)["x"] is not a["x"]
    assert sum_stats([a, None, {}, b])["n"] == 4
    with pytest.raises(ValueError, match="same names"):
        add_stats(a, {"y": np.array(1)})


def _rows():
    items = np.array(["b", "a", "b", "c", "a", "b", "c", "c"], dtype=object)
    workers = np.array([0, 1, 1, 0, 1, 2, 2, 2])
    labels = np.array([1, 0, 1, 1, 1, 0, 0, 1])
    truth = np.array([1, 0, 1, -1, 0, 1, -1, -1])
    return items, workers, labels, truth


def test_build_blocks_groups_labels_by_item():
    items, workers, labels, truth = _rows()
    (block,) = build_blocks(items, workers, labels, truth)
    assert block.n_items == 3 and block.n_labels == 8
    for j, item in enumerate(block.item_ids):
        rows = np.flatnonzero(items == item)
        sl = slice(block.offsets[j], block.offsets[j + 1])
        assert sorted(zip(block.worker[sl], block.label[sl])) == sorted(zip(workers[rows], labels[rows]))
        assert np.all(block.item_of_label[sl] == j)
        assert block.truth[j] == truth[rows[0]]
    # item "a" has worker 1 twice, item "c" has worker 2 twice
    assert block.duplicate_pairs == 2


def test_build_blocks_splits_between_items_only():
    items, workers, labels, truth = _rows()
    blocks = build_blocks(items, workers, labels, truth, max_labels=3)
    assert sum(b.n_labels for b in blocks) == 8
    assert sorted(np.concatenate([b.item_ids for b in blocks])) == ["a", "b", "c"]
    # every item is whole: its label count equals its row count
    for b in blocks:
        for j, item in enumerate(b.item_ids):
            assert b.offsets[j + 1] - b.offsets[j] == np.count_nonzero(items == item)
    counts = sum_stats(block_counts(b) for b in blocks)
    assert int(counts["n_items"]) == 3 and int(counts["n_labels"]) == 8 and int(counts["n_gold_items"]) == 2


def test_build_blocks_is_independent_of_row_order():
    items, workers, labels, truth = _rows()
    perm = np.random.default_rng(0).permutation(len(items))
    (a,) = build_blocks(items, workers, labels, truth)
    (b,) = build_blocks(items[perm], workers[perm], labels[perm], truth[perm])
    da = {i: sorted(zip(a.worker[a.offsets[j]:a.offsets[j + 1]], a.label[a.offsets[j]:a.offsets[j + 1]])) for j, i in enumerate(a.item_ids)}
    db = {i: sorted(zip(b.worker[b.offsets[j]:b.offsets[j + 1]], b.label[b.offsets[j]:b.offsets[j + 1]])) for j, i in enumerate(b.item_ids)}
    assert da == db


def test_label_order_and_duplicate_pairs_match_their_references():
    """The combined-key sort equals np.lexsort (also on the overflow fallback); duplicates equal np.unique's."""
    from crowdspark.block import _count_duplicate_pairs, _label_order

    rng = np.random.default_rng(3)
    for m in (0, 1, 2, 7, 500):
        codes = rng.integers(0, 40, m)
        worker = rng.integers(0, 6, m).astype(np.int32)
        label = rng.integers(0, 3, m).astype(np.int32)
        if m == 0:
            continue
        reference = np.lexsort((label, worker, codes))
        np.testing.assert_array_equal(_label_order(codes, worker, label, 40), reference)
        np.testing.assert_array_equal(_label_order(codes, worker, label, 2**61), reference)  # lexsort path
        item, who = codes[reference].astype(np.int32), worker[reference]
        _, n = np.unique(item.astype(np.int64) * 6 + who, return_counts=True)
        assert _count_duplicate_pairs(item, who) == int(np.count_nonzero(n > 1))



def test_sorted_rows_equal_the_rows_in_lexsort_order():
    """The sorted, decoded key gives the rows of the lexsort order (also on the overflow fallback), and
    ``blocks_from_codes`` the gold of each item from any of its rows."""
    from crowdspark.block import _sorted_rows, blocks_from_codes

    rng = np.random.default_rng(4)
    for m in (1, 2, 7, 500):
        codes = rng.integers(0, 40, m)
        worker = rng.integers(0, 6, m).astype(np.int32)
        label = rng.integers(0, 3, m).astype(np.int32)
        order = np.lexsort((label, worker, codes))
        for n_items, threads in ((40, 1), (40, 2), (2**61, 1)):
            got = _sorted_rows(codes, worker, label, n_items, threads)
            for array, expected in zip(got, (codes[order], worker[order], label[order])):
                np.testing.assert_array_equal(array, expected)
            assert (got[0].dtype, got[1].dtype, got[2].dtype) == (np.int64, np.int32, np.int32)
        present, dense = np.unique(codes, return_inverse=True)
        item_gold = rng.integers(-1, 3, len(present)).astype(np.int32)
        uniques = np.array([f"i{j:02d}" for j in present], dtype=object)
        (block,) = blocks_from_codes(dense, uniques, worker, label, item_gold[dense], max_labels=10**6)
        np.testing.assert_array_equal(block.truth, item_gold)

def test_sorted_rows_on_two_threads_equal_the_rows_in_lexsort_order(monkeypatch):
    """The two halves of the key range, sorted on two threads, give the lexsort order (items 0..n-1, the
    middle item on either side, workers and labels at their largest codes)."""
    import crowdspark.block as block_module

    monkeypatch.setattr(block_module, "PARALLEL_SORT_ROWS", 10)
    rng = np.random.default_rng(5)
    for n_items, n_workers, n_classes in ((1, 3, 2), (2, 1, 2), (9, 1000, 7), (1000, 5, 5)):
        m = 5000
        codes = rng.integers(0, n_items, m)
        worker = rng.integers(0, n_workers, m).astype(np.int32)
        label = rng.integers(0, n_classes, m).astype(np.int32)
        order = np.lexsort((label, worker, codes))
        got = block_module._sorted_rows(codes, worker, label, n_items, threads=2)
        for array, expected in zip(got, (codes[order], worker[order], label[order])):
            np.testing.assert_array_equal(array, expected)


def test_build_blocks_of_nothing():
    assert build_blocks(np.array([], dtype=object), np.array([]), np.array([])) == []


def test_spark_block_builder_makes_the_local_engines_blocks():
    """The Arrow encoding of the Spark engine and pandas' build_blocks give identical blocks."""
    import pickle

    import pandas as pd
    import pyarrow as pa

    from crowdspark.io.rules import Encoding, order_classes
    from crowdspark.io.spark_reader import _blocks_from_arrow
    from tests.helpers import DATA

    frame = pd.read_csv(DATA / "rte" / "labels.csv", dtype=str)
    gold = pd.read_csv(DATA / "rte" / "truth.csv", dtype=str)
    frame["truth"] = frame["item"].map(dict(zip(gold["item"], gold["truth"])))
    frame.loc[frame["item"].str.endswith("7"), "truth"] = None  # some items without gold
    enc = Encoding(tuple(sorted(frame["worker"].unique())), tuple(order_classes(list(frame["label"].unique()))))
    batches = pa.Table.from_pandas(frame.sample(frac=1.0, random_state=1), preserve_index=False).to_batches(max_chunksize=999)
    spark_blocks = [pickle.loads(b.column(0)[0].as_py()) for b in _blocks_from_arrow(iter(batches), enc, 3000)]
    truth = enc.class_codes(frame["truth"].fillna("\0none").to_numpy(dtype=object))
    local_blocks = build_blocks(
        frame["item"].to_numpy(dtype=object), enc.worker_codes(frame["worker"].to_numpy(dtype=object)),
        enc.class_codes(frame["label"].to_numpy(dtype=object)), truth, max_labels=3000,
    )
    assert len(spark_blocks) == len(local_blocks) > 1
    for a, b in zip(spark_blocks, local_blocks):
        for name in ("item_ids", "item_keys", "offsets", "item_of_label", "worker", "label", "truth"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        assert a.duplicate_pairs == b.duplicate_pairs
    assert list(_blocks_from_arrow(iter([]), enc, 3000)) == []
