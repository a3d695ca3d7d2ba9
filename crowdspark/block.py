"""Blocks: the labels of a set of items, as integer arrays.

A block is what every model kernel works on.  All labels of an item are in the same block, so per-item
quantities (posteriors, sampled labels) are computed without communication.  Within a block, labels are
grouped by item: the labels of local item ``j`` are ``offsets[j]:offsets[j + 1]``.

Notation used in docstrings: ``n`` items in the block, ``m`` labels in the block, ``K`` workers, ``C``
classes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from crowdspark.rng import item_keys as _item_keys
from crowdspark.rng import named_uniforms

__all__ = ["Block", "GoldSplit", "build_blocks", "blocks_from_codes", "block_counts", "remap_block",
           "DEFAULT_MAX_BLOCK_LABELS"]

DEFAULT_MAX_BLOCK_LABELS = 2_000_000


@dataclass(frozen=True)
class Block:
    """The labels of some items.

    Attributes
    ----------
    item_ids : ndarray of object (str), shape (n,)
        The items' ids as read (strings).
    item_keys : ndarray of uint64, shape (n,)
        Stable 64-bit keys, the source of per-item randomness.
    offsets : ndarray of int64, shape (n + 1,)
        Labels of item ``j`` are rows ``offsets[j]:offsets[j + 1]``.
    item_of_label : ndarray of int32, shape (m,)
        Local item index of each label (non-decreasing).
    worker : ndarray of int32, shape (m,)
        Dense worker index in ``0..K-1``.
    label : ndarray of int32, shape (m,)
        Class index in ``0..C-1``.
    truth : ndarray of int32, shape (n,)
        Gold class index of each item that the fit does not use (held-out gold: what every gold-based figure
        scores), ``-1`` elsewhere.
    duplicate_pairs : int
        Number of (item, worker) pairs with more than one label (all labels are kept).
    fixed : ndarray of int32, shape (n,)
        Gold class index of each item whose true class the fit holds fixed (gold in the fit,
        :class:`GoldSplit`), ``-1`` elsewhere; an item has at most one of ``truth`` and ``fixed``.  Omitted:
        no item is fixed.
    """

    item_ids: np.ndarray
    item_keys: np.ndarray
    offsets: np.ndarray
    item_of_label: np.ndarray
    worker: np.ndarray
    label: np.ndarray
    truth: np.ndarray
    duplicate_pairs: int = 0
    fixed: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.fixed is None:
            object.__setattr__(self, "fixed", np.full(self.item_ids.shape[0], -1, dtype=np.int32))

    def __getstate__(self) -> dict:
        # memoized derived data (``_incidence``, see models.common) is rebuilt where it is used, never shipped
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    @property
    def n_items(self) -> int:
        return int(self.item_ids.shape[0])

    @property
    def n_labels(self) -> int:
        return int(self.label.shape[0])

    def labels_per_item(self) -> np.ndarray:
        """Number of labels of each item, shape (n,)."""
        return np.diff(self.offsets)


@dataclass(frozen=True)
class GoldSplit:
    """Which gold items the fit holds fixed and which it is scored on.

    An item is in the fit when a uniform draw keyed by ``seed`` and its id
    (:func:`crowdspark.rng.named_uniforms`) is below ``fit_fraction``: the same items on every engine, reader
    and partitioning, and, for one seed, the items of a smaller fraction are among those of a larger one.

    Attributes
    ----------
    fit_fraction : float
        Share of the gold items, in [0, 1], whose true class the fit holds fixed (0: the gold only scores).
    seed : int
        Seed of the split.
    """

    fit_fraction: float = 0.0
    seed: int = 0

    def in_fit(self, keys: np.ndarray) -> np.ndarray:
        """Whether each item (by its key, shape (n,)) goes to the fit when it has gold, bool (n,)."""
        if self.fit_fraction <= 0.0:
            return np.zeros(np.shape(keys)[0], dtype=bool)
        return named_uniforms("gold-split", self.seed, keys) < self.fit_fraction


def _count_duplicate_pairs(item_of_label: np.ndarray, worker: np.ndarray) -> int:
    """Number of (item, worker) pairs with more than one label; the labels are sorted by (item, worker)."""
    if item_of_label.size < 2:
        return 0
    repeat = (item_of_label[1:] == item_of_label[:-1]) & (worker[1:] == worker[:-1])
    # a pair with k > 1 labels is a run of k - 1 repeats: count the runs' first repeats
    first = repeat.copy()
    first[1:] &= ~repeat[:-1]
    return int(np.count_nonzero(first))


def _label_order(codes: np.ndarray, worker: np.ndarray, label: np.ndarray, n_items: int) -> np.ndarray:
    """Stable order of the rows by (item, worker, label), int64 (m,).

    One stable argsort of the combined key ``(item * K + worker) * C + label``, which is faster than
    ``np.lexsort`` of the three (BENCHMARKS.md, "Kernel and data-path choices"), unless that key could
    overflow int64.
    """
    K = int(worker.max()) + 1
    C = int(label.max()) + 1
    if n_items * K * C < 2**62:
        key = (codes.astype(np.int64) * K + worker) * C + label
        return np.argsort(key, kind="stable")
    return np.lexsort((label, worker, codes))


#: rows from which :func:`_sorted_rows` sorts two halves of the key range on two threads
PARALLEL_SORT_ROWS = 1 << 20


def _sorted_rows(codes: np.ndarray, worker: np.ndarray, label: np.ndarray, n_items: int,
                 threads: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows sorted by (item, worker, label): codes (int64), worker and label (int32), each (m,).

    Rows with equal keys are equal, so the order among them does not matter: the key packs the three codes into
    the bits of one int64 (item, then worker, then label, each in as many bits as its largest code needs), is
    sorted by value and unpacked by shifts and masks, which is faster than ordering the three columns by its
    argsort (BENCHMARKS.md, "The Spark data path: blocks and write"), unless the bits exceed 63.  With
    ``threads > 1`` and at least :data:`PARALLEL_SORT_ROWS` rows, the keys below and above the middle item are
    sorted on two threads (numpy's sort releases the GIL) and put one after the other: the same sorted array.
    """
    label_bits = max(int(label.max()).bit_length(), 1)
    worker_bits = max(int(worker.max()).bit_length(), 1)
    item_shift = worker_bits + label_bits
    if max(int(n_items) - 1, 1).bit_length() + item_shift > 62:
        order = np.lexsort((label, worker, codes))
        return codes[order].astype(np.int64), worker[order], label[order]
    key = codes.astype(np.int64)
    key <<= item_shift
    key |= worker.astype(np.int64) << label_bits
    key |= label
    if threads > 1 and len(key) >= PARALLEL_SORT_ROWS:
        from concurrent.futures import ThreadPoolExecutor

        low = key < (np.int64(n_items // 2) << item_shift)
        halves = (key[low], key[~low])
        del key, low
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(np.ndarray.sort, halves))
        key = np.concatenate(halves)
        del halves
    else:
        key.sort()
    label_sorted = (key & ((1 << label_bits) - 1)).astype(np.int32)
    worker_sorted = ((key >> label_bits) & ((1 << worker_bits) - 1)).astype(np.int32)
    key >>= item_shift
    return key, worker_sorted, label_sorted


def build_blocks(
    item_ids: np.ndarray,
    worker: np.ndarray,
    label: np.ndarray,
    truth: np.ndarray | None = None,
    max_labels: int = DEFAULT_MAX_BLOCK_LABELS,
    split: GoldSplit | None = None,
) -> list[Block]:
    """Group encoded label rows by item into blocks of at most ``max_labels`` labels.

    An item is never split; an item with more than ``max_labels`` labels gets a block of its own.

    Parameters
    ----------
    item_ids : array-like of str, shape (m,)
        Item id of each label row.
    worker, label : ndarray of int, shape (m,)
        Encoded worker and class of each row.
    truth : ndarray of int, shape (m,), optional
        Gold class index of the row's item (``-1`` for none), repeated on every row of the item.
    max_labels : int
        Largest number of labels in one block.
    split : GoldSplit, optional
        Which gold items go to the fit (``Block.fixed``) rather than to scoring (``Block.truth``); default:
        none.

    Returns
    -------
    list of Block
        Items in id order, each item's labels in (worker, label) order; empty list for empty input.
    """
    item_ids = np.asarray(item_ids, dtype=object)
    if item_ids.size == 0:
        return []
    # items sorted by id: the blocks, and every sum over them, do not depend on the order in which rows
    # arrive (Spark's shuffle order varies between runs)
    import pandas as pd

    codes, uniques = pd.factorize(item_ids, sort=True)
    return blocks_from_codes(codes, np.asarray(uniques, dtype=object), worker, label, truth, max_labels, split)


def blocks_from_codes(
    codes: np.ndarray,
    uniques: np.ndarray,
    worker: np.ndarray,
    label: np.ndarray,
    truth: np.ndarray | None = None,
    max_labels: int = DEFAULT_MAX_BLOCK_LABELS,
    split: GoldSplit | None = None,
    threads: int = 1,
) -> list[Block]:
    """:func:`build_blocks` for rows whose items are already factorized.

    Parameters
    ----------
    codes : ndarray of int, shape (m,)
        Index of each row's item in ``uniques``.
    uniques : ndarray of object (str), shape (n,)
        Item ids, sorted (the block order follows them).
    worker, label, truth, max_labels, split
        As in :func:`build_blocks`.
    threads : int
        Threads the sort of the rows may use (the same blocks on any number).
    """
    if len(codes) == 0:
        return []
    row_codes = codes
    n = len(uniques)
    codes, worker, label = _sorted_rows(np.asarray(codes), np.asarray(worker, dtype=np.int32),
                                        np.asarray(label, dtype=np.int32), n, threads)
    counts = np.bincount(codes, minlength=n)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    item_truth = np.full(n, -1, dtype=np.int32)
    if truth is not None:
        # the rows of an item share its gold: any row's value is the item's
        item_truth[np.asarray(row_codes)] = np.asarray(truth, dtype=np.int32)
    uniques = np.asarray(uniques, dtype=object)
    keys = _item_keys(uniques)
    item_fixed = np.full(len(uniques), -1, dtype=np.int32)
    if split is not None:
        in_fit = (item_truth >= 0) & split.in_fit(keys)
        item_fixed[in_fit] = item_truth[in_fit]
        item_truth = np.where(in_fit, -1, item_truth).astype(np.int32)

    blocks = []
    start = 0
    while start < n:
        # largest end such that offsets[end] - offsets[start] <= max_labels, at least one item
        end = int(np.searchsorted(offsets, offsets[start] + max_labels, side="right")) - 1
        end = max(end, start + 1)
        end = min(end, n)
        lo, hi = offsets[start], offsets[end]
        item_of_label = (codes[lo:hi] - start).astype(np.int32)
        blocks.append(
            Block(
                item_ids=uniques[start:end],
                item_keys=keys[start:end],
                offsets=offsets[start : end + 1] - lo,
                item_of_label=item_of_label,
                worker=worker[lo:hi],
                label=label[lo:hi],
                truth=item_truth[start:end],
                duplicate_pairs=_count_duplicate_pairs(item_of_label, worker[lo:hi]),
                fixed=item_fixed[start:end],
            )
        )
        start = end
    return blocks


def block_counts(block: Block) -> dict[str, np.ndarray]:
    """Additive counts describing a block: items, labels, duplicate (item, worker) pairs, held-out gold items
    (``n_gold_items``) and gold items in the fit (``n_fixed_items``)."""
    return {
        "n_items": np.array(block.n_items, dtype=np.int64),
        "n_labels": np.array(block.n_labels, dtype=np.int64),
        "duplicate_pairs": np.array(block.duplicate_pairs, dtype=np.int64),
        "n_gold_items": np.array(int(np.count_nonzero(block.truth >= 0)), dtype=np.int64),
        "n_fixed_items": np.array(int(np.count_nonzero(block.fixed >= 0)), dtype=np.int64),
    }


def remap_block(block: Block, worker_map: np.ndarray, class_map: np.ndarray) -> Block:
    """``block`` with its partition codes replaced by the run's (labels re-sorted within an item when the
    class map does not keep their order).

    Parameters
    ----------
    block : Block
        Codes into its partition's dictionaries.
    worker_map, class_map : ndarray of int32, shapes (K_p,) and (C_p,)
        The run's code of each partition code.
    """
    worker = worker_map[block.worker]
    label = class_map[block.label]
    item_of_label = block.item_of_label
    if not bool(np.all(np.diff(class_map) > 0)):
        order = _label_order(item_of_label, worker, label, block.n_items)
        item_of_label, worker, label = item_of_label[order], worker[order], label[order]
    truth = np.where(block.truth >= 0, class_map[np.maximum(block.truth, 0)], -1).astype(np.int32)
    fixed = np.where(block.fixed >= 0, class_map[np.maximum(block.fixed, 0)], -1).astype(np.int32)
    return replace(block, worker=worker, label=label, item_of_label=item_of_label, truth=truth, fixed=fixed)
