"""Held-out label likelihood: how well candidate worker models, each fitted without some labels, predict them.

Notation
--------
K workers, C classes, S candidate structures (confusion-matrix models that share one E-step, e.g. ``ads``'s
full and one-coin matrices), F folds.  Every label ``j`` (item ``i``, worker ``k``, class ``c``) belongs to
one fold ``g[j]``, drawn from a uniform keyed by the run's seed and the pair (item key, worker)
(:func:`label_folds`): the same fold on any engine, partitioning or block split, and all labels of one pair
in the same fold.  Fold ``f``'s fit uses the labels outside ``f``: its parameters ``pi_f[k, s]`` (C, C) and
``alpha_f[s]`` (C,), and its posterior ``q_f[i, s]`` (C,) over an item's true class given the item's labels
outside ``f``.  The held-out log-likelihood of candidate ``s`` is

    HLL[s] = sum over labels j of log sum_t q_{g[j]}[i, s, t] pi_{g[j]}[k, s, t, c],

the log probability the model fitted without a label gives that label, seen from the item's other labels
(``K``-fold cross-validation of the label likelihood).  It measures what AIC only approximates: how much a
candidate's extra parameters overfit, including the matrices of workers with a few labels each.

The statistics stay additive: a fold is a mask on labels, and fold ``f``'s expected counts are the counts over
all labels weighted by ``q_f`` minus those over fold ``f``'s labels, so one pass over a block gives every
fold's statistics, (K, F, S, C, C) and (F, S, C), plus the held-out sums (F, S).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from crowdspark.block import Block
from crowdspark.models.common import fix_scores, incidence, shared_ones, sp_index_dtype
from crowdspark.rng import named_uniforms
from crowdspark.stats import Stats

__all__ = ["label_folds", "fold_stats", "one_se_choice"]

#: odd 64-bit multiplier that spreads the worker index over the pair key (the golden ratio's)
_WORKER_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


def pair_keys(item_keys: np.ndarray, worker: np.ndarray) -> np.ndarray:
    """A 64-bit key per (item key, worker index) pair, uint64 (m,)."""
    with np.errstate(over="ignore"):
        spread = (np.asarray(worker, np.uint64) + np.uint64(1)) * _WORKER_MULTIPLIER
        return np.asarray(item_keys, dtype=np.uint64) + spread


def label_folds(block: Block, seed: int, n_folds: int) -> np.ndarray:
    """The fold of each label, int64 (m,): ``floor(F u)``, ``u`` the uniform keyed by ``seed`` and the label's
    (item key, worker) pair (:func:`crowdspark.rng.named_uniforms`, name ``"heldout-fold"``)."""
    keys = pair_keys(block.item_keys[block.item_of_label], block.worker)
    return np.minimum((named_uniforms("heldout-fold", seed, keys) * n_folds).astype(np.int64), n_folds - 1)


class _FoldIndex:
    """A block's fold layout: the folds, the row indices a sweep gathers, and the sparse sums over a fold's
    own labels.

    Attributes
    ----------
    fold : ndarray of int64, shape (m,)
    item_rows : ndarray of int64, shape (m,)
        ``i F + g`` of each label: its row in per-(item, fold) tables.
    cells : ndarray of int64, shape (m,)
        ``(k F + g) C + c`` of each label: its row in per-(worker, fold, class) tables.
    by_item : csr_matrix, shape (n F, m)
        Row ``i F + g`` adds the labels of item ``i`` in fold ``g``.
    by_cell : csr_matrix, shape (K F C, m)
        Row ``(k F + g) C + c`` adds the labels of class ``c`` by worker ``k`` in fold ``g``.
    """

    def __init__(self, block: Block, seed: int, n_folds: int, n_workers: int, n_classes: int) -> None:
        m = block.n_labels
        self.fold = label_folds(block, seed, n_folds)
        self.item_rows = block.item_of_label.astype(np.int64) * n_folds + self.fold
        self.cells = (block.worker.astype(np.int64) * n_folds + self.fold) * n_classes + block.label
        index = sp_index_dtype(max(block.n_items * n_folds, n_workers * n_folds * n_classes, m))
        ones = shared_ones(m, np.float64)
        columns = np.arange(m, dtype=index)
        self.by_item = sp.csr_matrix((ones, (self.item_rows.astype(index), columns)),
                                     shape=(block.n_items * n_folds, m))
        self.by_cell = sp.csr_matrix((ones, (self.cells.astype(index), columns)),
                                     shape=(n_workers * n_folds * n_classes, m))


def _fold_index(block: Block, seed: int, n_folds: int, n_workers: int, n_classes: int) -> _FoldIndex:
    """:class:`_FoldIndex` of the block, memoized on it for the last (seed, F, K, C) asked (like
    :func:`crowdspark.models.common.incidence`: never pickled)."""
    key = (seed, n_folds, n_workers, n_classes)
    cached = block.__dict__.get("_fold_index")
    if cached is None or cached[0] != key:
        cached = (key, _FoldIndex(block, seed, n_folds, n_workers, n_classes))
        object.__setattr__(block, "_fold_index", cached)
    return cached[1]


def fold_stats(block: Block, log_pi: np.ndarray, log_alpha: np.ndarray, seed: int) -> Stats:
    """One pass of every fold's E-step over a block: the folds' expected counts and the held-out sums.

    Parameters
    ----------
    log_pi : ndarray, shape (K, F, S, C, C)
        ``log pi_f[k, s, t, c]``.
    log_alpha : ndarray, shape (F, S, C)
    seed : int
        The run's seed (the folds' key).

    Returns
    -------
    dict
        ``fold_confusion`` (K, F, S, C, C): expected counts over each fold's training labels;
        ``fold_classes`` (F, S, C); ``fold_evidence`` (F, S): ``log p`` of the training labels;
        ``heldout`` (F, S): the held-out log-likelihood of each fold's labels; ``heldout_labels`` (F,);
        ``heldout_cross`` (S, S): ``sum_i h_i h_i^T`` of the items' held-out log-likelihoods ``h_i`` (S,);
        ``heldout_items``: the number of items.
    """
    n_workers, n_folds, n_struct, n_classes = log_pi.shape[:4]
    n, m = block.n_items, block.n_labels
    sc = n_struct * n_classes
    index = _fold_index(block, seed, n_folds, n_workers, n_classes)
    # every fold's fit summed over all of an item's labels: (n, F S C), rows in C order
    by_label = np.moveaxis(log_pi, 4, 1).reshape(n_workers * n_classes, n_folds * sc)
    total = np.asarray(incidence(block, n_workers, n_classes).T @ by_label).reshape(n * n_folds, sc)
    # each label under its own fold's fit, (m, S C), and their sums per (item, fold)
    own = np.take(np.moveaxis(log_pi, 4, 2).reshape(n_workers * n_folds * n_classes, sc), index.cells, axis=0)
    total -= index.by_item @ own  # every fold's fit on its training labels
    scores = fix_scores(block, total.reshape(n, n_folds, n_struct, n_classes) + log_alpha[None])
    posterior, log_evidence = _normalize_classes(scores)
    # p(label | the item's labels outside its fold) = sum_t q[t] pi[t, label]
    np.exp(own, out=own)
    own *= np.take(posterior.reshape(n * n_folds, sc), index.item_rows, axis=0)
    label_ll = np.log(_sum_classes(own.reshape(m, n_struct, n_classes)))  # (m, S)
    heldout = np.stack([np.bincount(index.fold, weights=label_ll[:, s], minlength=n_folds)
                        for s in range(n_struct)], axis=1)
    item_ll = np.stack([np.bincount(block.item_of_label, weights=label_ll[:, s], minlength=n)
                        for s in range(n_struct)], axis=1)  # (n, S): each item's held-out labels
    flat = posterior.reshape(n, n_folds * sc)
    all_counts = np.asarray(incidence(block, n_workers, n_classes) @ flat)  # [k C + c, (f, s, t)]
    all_counts = all_counts.reshape(n_workers, n_classes, n_folds, n_struct, n_classes)
    own_counts = np.asarray(index.by_cell @ np.take(flat.reshape(n * n_folds, sc), index.item_rows, axis=0))
    own_counts = own_counts.reshape(n_workers, n_folds, n_classes, n_struct, n_classes)
    counts = np.moveaxis(all_counts, 1, 4) - np.moveaxis(own_counts, 2, 4)  # (K, F, S, C_t, C_c)
    return {
        "fold_confusion": np.maximum(counts, 0.0),
        "fold_classes": posterior.sum(axis=0),
        "fold_evidence": log_evidence.sum(axis=0),
        "heldout": heldout,
        "heldout_labels": np.bincount(index.fold, minlength=n_folds).astype(np.float64),
        "heldout_cross": item_ll.T @ item_ll,
        "heldout_items": np.array(float(n)),
    }


def _sum_classes(values: np.ndarray) -> np.ndarray:
    """The sum over the last, short axis (C), as C - 1 vector additions: faster than a reduction along a short
    contiguous axis."""
    out = values[..., 0].copy()
    for t in range(1, values.shape[-1]):
        out += values[..., t]
    return out


def _normalize_classes(log_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`crowdspark.models.common.normalize_log` over the last, short axis (C) of a C-ordered array,
    with the reductions written as C - 1 vector operations."""
    top = log_scores[..., 0].copy()
    for t in range(1, log_scores.shape[-1]):
        np.maximum(top, log_scores[..., t], out=top)
    top[~np.isfinite(top)] = 0.0
    probs = np.exp(log_scores - top[..., None])
    total = _sum_classes(probs)
    probs /= total[..., None]
    return probs, np.log(total) + top


def one_se_choice(heldout: np.ndarray, cross: np.ndarray, n_items: float, order: np.ndarray) -> tuple[int, np.ndarray]:
    """The simplest candidate whose held-out log-likelihood is within one standard error of the best's.

    The one-standard-error rule of cross-validation (Hastie, Tibshirani & Friedman, *The Elements of
    Statistical Learning*, 7.10): a richer candidate is kept only when its gain over a simpler one is larger
    than the noise of the held-out estimate.  The standard error of the difference between two candidates is
    that of a sum over items of their per-item differences ``d_i`` (items are independent; an item's labels are
    not): ``sqrt(n * var(d))``.

    Parameters
    ----------
    heldout : ndarray, shape (S,)
        ``HLL[s]``, summed over folds.
    cross : ndarray, shape (S, S)
        ``sum_i h_i h_i^T``, ``h_i`` (S,) the held-out log-likelihood of item i's labels under each candidate.
    n_items : float
    order : ndarray of int, shape (S,)
        The candidates from the simplest to the richest.

    Returns
    -------
    choice : int
    standard_error : ndarray, shape (S,)
        Of each candidate's difference from the best.
    """
    best = int(np.argmax(heldout))
    n = max(float(n_items), 1.0)
    diff = heldout[best] - heldout
    square = cross[best, best] - 2.0 * cross[best] + np.diagonal(cross)  # sum_i (h_best - h_s)_i^2
    standard_error = np.sqrt(np.maximum(square - diff ** 2 / n, 0.0))
    for s in order:
        if diff[s] <= standard_error[s]:
            return int(s), standard_error
    return best, standard_error
