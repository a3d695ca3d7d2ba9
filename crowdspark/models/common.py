"""Building blocks shared by the model kernels.

Notation: ``n`` items and ``m`` labels in a block, ``K`` workers, ``C`` classes.  Arrays named ``resp``
hold per-item weights over true classes (responsibilities or posteriors), shape (n, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from crowdspark.block import Block
from crowdspark.rng import uniforms

if TYPE_CHECKING:  # scipy is imported where a matrix is built: the report reads worker tables without it
    import scipy.sparse as sp

__all__ = [
    "fix_scores",
    "fix_labels",
    "vote_counts",
    "argmax_random_ties",
    "per_item_sum",
    "incidence",
    "label_loglik",
    "class_match_scores",
    "to_fortran",
    "confusion_counts",
    "worker_label_counts",
    "normalize_log",
    "shifted_exp",
    "normalize_rows",
    "one_coin_confusion",
]


def _fixed_rows(block: Block) -> np.ndarray:
    """Local indices of the items whose true class the fit holds fixed (``block.fixed >= 0``), int64;
    memoized on the block like :func:`incidence`."""
    rows = block.__dict__.get("_fixed_rows")
    if rows is None:
        rows = np.flatnonzero(block.fixed >= 0)
        object.__setattr__(block, "_fixed_rows", rows)
    return rows


def fix_scores(block: Block, scores: np.ndarray, log: bool = True) -> np.ndarray:
    """Per-item scores over the true class with the gold of the fit imposed (``Block.fixed``).

    Every model passes its per-item scores through this kernel where it computes posteriors or draws, so an
    item with gold in the fit gets its gold class: the E-step's responsibilities, a sampler's draws and the
    final posterior put all their weight on it, and the worker parameters learn from it.

    Parameters
    ----------
    scores : ndarray, shape (n, ..., C)
        With ``log``: log scores (unnormalized log posteriors, the class axis last, other latent axes such as
        levels before it); every class but the gold one becomes ``-inf``, so a normalization gives the
        posterior given ``T_i = gold`` and its log normalizer is ``log p(L_i, T_i = gold)``.  Without ``log``:
        shape (n, C), probabilities or non-negative weights; the row becomes the one-hot of the gold class.
    log : bool

    Returns
    -------
    ndarray, the shape and dtype of ``scores``
        ``scores`` itself, changed in place when writable, else a changed copy (``scores`` when no item of
        the block is fixed).
    """
    rows = _fixed_rows(block)
    if rows.size == 0:
        return scores
    if not scores.flags.writeable:
        scores = scores.copy()
    gold = block.fixed[rows].astype(np.int64)
    index = gold.reshape((-1,) + (1,) * (scores.ndim - 1))
    if log:
        kept = np.take_along_axis(scores[rows], index, axis=-1)
        kept[np.all(np.isneginf(kept), axis=tuple(range(1, kept.ndim)))] = 0.0
        fixed = np.full(scores[rows].shape, -np.inf, dtype=scores.dtype)
    else:
        kept = np.ones(index.shape, dtype=scores.dtype)
        fixed = np.zeros(scores[rows].shape, dtype=scores.dtype)
    np.put_along_axis(fixed, index, kept, axis=-1)
    scores[rows] = fixed
    return scores


def fix_labels(block: Block, label: np.ndarray) -> np.ndarray:
    """Per-item classes (n,) with the gold class of every item the fit holds fixed (a new array when some
    item is fixed, else ``label``); for models whose answers are classes, not scores (a vote, a draw)."""
    rows = _fixed_rows(block)
    if rows.size == 0:
        return label
    out = np.array(label, copy=True)
    out[rows] = block.fixed[rows]
    return out


def vote_counts(block: Block, n_classes: int) -> np.ndarray:
    """Number of labels of each class per item, shape (n, C)."""
    flat = block.item_of_label.astype(np.int64) * n_classes + block.label
    return np.bincount(flat, minlength=block.n_items * n_classes).reshape(block.n_items, n_classes).astype(
        np.float64
    )


def argmax_random_ties(scores: np.ndarray, u: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """Row-wise argmax, ties broken uniformly at random by ``u``.

    Parameters
    ----------
    scores : ndarray, shape (n, C)
    u : ndarray of float in [0, 1), shape (n,)
        One uniform draw per row.
    rtol : float
        Scores within ``rtol`` (relative to the row maximum) of the maximum count as tied.

    Returns
    -------
    ndarray of int32, shape (n,)
    """
    best = scores.max(axis=1, keepdims=True)
    tied = scores >= best - rtol * np.abs(best)
    n_tied = tied.sum(axis=1)
    pick = np.minimum((u * n_tied).astype(np.int64), n_tied - 1)
    # index of the pick-th True in each row
    rank = np.cumsum(tied, axis=1) - 1
    hit = tied & (rank == pick[:, None])
    return hit.argmax(axis=1).astype(np.int32)


def per_item_sum(block: Block, values: np.ndarray) -> np.ndarray:
    """Sum per-label values over each item's labels.

    Parameters
    ----------
    values : ndarray, shape (m, ...)

    Returns
    -------
    ndarray, shape (n, ...)
    """
    if block.n_items == 0:
        return np.zeros((0,) + values.shape[1:], dtype=values.dtype)
    return np.add.reduceat(values, block.offsets[:-1], axis=0)


def incidence(block: Block, n_workers: int, n_classes: int, dtype: type = np.float64) -> sp.csc_matrix:
    """The block's label incidence matrix ``A``, shape (K * C, n), with values of ``dtype``.

    ``A[k * C + c, i]`` is the number of labels ``c`` worker ``k`` gave item ``i`` (duplicates count).
    Labels are grouped by item, so this is a CSC matrix over the block's own arrays (``offsets`` is its
    column pointer): building it costs one pass over the labels.  Sums over labels become sparse-dense
    products: ``A.T @ table`` gathers and adds per-label table rows per item (the E-step), ``A @ resp``
    adds per-item weights per (worker, label) (the M-step's expected counts).  A product with a table of
    another dtype would copy ``A`` to the common type every call, so one matrix per dtype is memoized on
    the block for the life of the Python object (they share the index arrays; never pickled, see
    :class:`~crowdspark.block.Block`).
    """
    import scipy.sparse as sp

    shape = (n_workers * n_classes, block.n_items)
    cached = block.__dict__.get("_incidence")  # (shape, {dtype: matrix})
    if cached is None or cached[0] != shape:
        # the index arrays in scipy's own index type, so that the constructor keeps them without a copy
        index = sp_index_dtype(max(shape[0], block.n_labels))
        flat = block.worker.astype(index) * n_classes + block.label.astype(index, copy=False)
        double = sp.csc_matrix((shared_ones(block.n_labels, np.float64), flat, block.offsets.astype(index)),
                               shape=shape, copy=False)
        cached = (shape, {np.dtype(np.float64): double})
        object.__setattr__(block, "_incidence", cached)
    matrices = cached[1]
    dtype = np.dtype(dtype)
    if dtype not in matrices:
        base = matrices[np.dtype(np.float64)]
        values = shared_ones(block.n_labels, dtype)
        matrices[dtype] = sp.csc_matrix((values, base.indices, base.indptr), shape=shape, copy=False)
    return matrices[dtype]


def sp_index_dtype(largest: int) -> type:
    """The index type scipy's sparse constructors use for indices up to ``largest``: int32 when it fits."""
    return np.int32 if largest <= np.iinfo(np.int32).max else np.int64


#: one read-only array of ones per dtype in this process, which incidence matrices share as their values
_ONES: dict[np.dtype, np.ndarray] = {}


def shared_ones(n: int, dtype: type) -> np.ndarray:
    """``n`` ones of ``dtype``: a read-only view of one array per process and dtype, grown as needed.

    Every incidence matrix of a process shares it, instead of holding ``m`` ones of its own (8 bytes per label
    in float64: 31 MB for a block of 3.85M labels, written when the block is first used).  scipy copies a view
    of less than half its array, so a block much shorter than the longest one seen gets its own ones, as before.
    """
    dtype = np.dtype(dtype)
    ones = _ONES.get(dtype)
    if ones is None or len(ones) < n:
        ones = np.ones(n, dtype=dtype)
        ones.flags.writeable = False
        _ONES[dtype] = ones
    return ones[:n]


def label_cells(block: Block, stride: int) -> np.ndarray:
    """``worker * stride + label`` per label, int64 (m,): the base of a flat count index.

    Memoized on the block (like :func:`incidence`) for the last ``stride`` asked.
    """
    cached = block.__dict__.get("_label_cells")
    if cached is not None and cached[0] == stride:
        return cached[1]
    cells = block.worker.astype(np.int64) * stride + block.label
    object.__setattr__(block, "_label_cells", (stride, cells))
    return cells


def label_loglik(block: Block, log_pi: np.ndarray) -> np.ndarray:
    """Sum of log label probabilities per item for every configuration of the latent variables.

    Parameters
    ----------
    log_pi : ndarray, shape (K, ..., C)
        ``log_pi[k, ..., c]`` is the log probability that worker k says c given the latent configuration
        ``...`` (e.g. the true class t, or the pair (h, t)).

    Returns
    -------
    ndarray, shape (n, ...), of ``log_pi``'s dtype, Fortran-ordered
        ``out[i, ...] = sum over labels (k, c) of item i of log_pi[k, ..., c]``.
    """
    n_workers, n_classes = log_pi.shape[0], log_pi.shape[-1]
    latent_shape = log_pi.shape[1:-1]
    # table[k * C + c, latent] = log_pi[k, latent..., c]
    table = np.moveaxis(log_pi, -1, 1).reshape(n_workers * n_classes, -1)
    out = incidence(block, n_workers, n_classes, log_pi.dtype).T @ table
    # items along the contiguous axis (Fortran order): the per-item reductions that follow (max, sum, the
    # posterior normalization) then run over contiguous columns, several times faster than along short rows
    # (docs/decisions/0104-fortran-order.md)
    return to_fortran(out).reshape((block.n_items,) + latent_shape)


_TRANSPOSE_ROWS = 1024


def class_match_scores(block: Block, n_classes: int, match: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Per item and class t, the sum over the item's labels of ``match`` where the label is t and ``other``
    where it is not: the log-likelihood of one-coin-like models, whose label terms depend only on whether
    the label equals the true class.

    Parameters
    ----------
    match, other : ndarray of float64, shape (m,)
        Each label's term when it equals the true class, and when it does not.

    Returns
    -------
    ndarray of float64, shape (n, C)
    """
    flat = block.item_of_label.astype(np.int64) * n_classes + block.label
    gain = np.bincount(flat, weights=match - other, minlength=block.n_items * n_classes)
    return gain.reshape(block.n_items, n_classes) + per_item_sum(block, other)[:, None]


def to_fortran(a: np.ndarray) -> np.ndarray:
    """A Fortran-ordered copy of the 2-D array ``a`` (n, D), made in slices of rows.

    Each slice is read and written while it is in cache; ``np.asfortranarray`` writes D long columns at
    once and is slower (BENCHMARKS.md, "Kernel and data-path choices").
    """
    out = np.empty(a.shape, dtype=a.dtype, order="F")
    for start in range(0, a.shape[0], _TRANSPOSE_ROWS):
        out[start:start + _TRANSPOSE_ROWS] = a[start:start + _TRANSPOSE_ROWS]
    return out


def confusion_counts(block: Block, resp: np.ndarray, n_workers: int, n_classes: int) -> np.ndarray:
    """Expected label counts per worker, latent configuration and observed class.

    Parameters
    ----------
    resp : ndarray, shape (n, ...)
        Per-item weights over latent configurations (e.g. (n, C) over true classes, or (n, H, C)).

    Returns
    -------
    ndarray of float64, shape (K, ..., C)
        ``out[k, ..., c] = sum over labels of worker k with class c of resp[item, ...]``.
    """
    latent_shape = resp.shape[1:]
    flat = np.asarray(incidence(block, n_workers, n_classes) @ resp.reshape(resp.shape[0], -1))
    # flat[k * C + c, latent] -> (K, latent..., C)
    out = flat.reshape((n_workers, n_classes) + latent_shape)
    return np.moveaxis(out, 1, -1)


def worker_label_counts(block: Block, n_workers: int) -> np.ndarray:
    """Number of labels per worker, shape (K,)."""
    return np.bincount(block.worker, minlength=n_workers).astype(np.float64)


def shifted_exp(
    log_scores: np.ndarray, axis: int | tuple[int, ...] = -1, out: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unnormalized probabilities ``exp(log_scores - max)`` along ``axis``, their sum and log normalizer.

    Parameters
    ----------
    log_scores : ndarray
    axis : int or tuple of int
    out : ndarray, optional
        Where to write the weights; ``out=log_scores`` overwrites the scores (no new array of their size).

    Returns
    -------
    weights : ndarray, same shape and dtype as ``log_scores``
        ``exp(log_scores - max)``; the largest weight of each slice is 1.
    total : ndarray of float64
        Sum of ``weights`` over ``axis``, ``axis`` kept with length 1 (``weights / total`` are the
        probabilities); accumulated in float64 whatever the scores' dtype.
    log_norm : ndarray of float64
        ``logsumexp`` over ``axis`` (the log normalizer), with ``axis`` removed.
    """
    top = np.max(log_scores, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    weights = np.subtract(log_scores, top, out=out)
    np.exp(weights, out=weights)
    total = np.sum(weights, axis=axis, keepdims=True, dtype=np.float64)
    log_norm = np.log(total) + top
    return weights, total, np.squeeze(log_norm, axis=axis)


def normalize_log(log_scores: np.ndarray, axis: int | tuple[int, ...] = -1) -> tuple[np.ndarray, np.ndarray]:
    """Normalize log scores into probabilities along ``axis``.

    Returns
    -------
    probs : ndarray, same shape as ``log_scores``
    log_norm : ndarray
        ``logsumexp`` over ``axis`` (the log normalizer), with ``axis`` removed.
    """
    probs, total, log_norm = shifted_exp(log_scores, axis)
    probs /= total
    return probs, log_norm


def normalize_rows(counts: np.ndarray, pseudo: float | np.ndarray = 0.0) -> np.ndarray:
    """Add pseudo-counts and normalize along the last axis."""
    counts = counts + pseudo
    return counts / counts.sum(axis=-1, keepdims=True)


def tie_uniforms(block: Block, seed: int, sweep: int = 0, stream: int = 0) -> np.ndarray:
    """Per-item uniforms for breaking ties (see :mod:`crowdspark.rng`)."""
    return uniforms(seed, sweep, block.item_keys, stream)


def one_coin_confusion(accuracy: np.ndarray, n_classes: int) -> np.ndarray:
    """Confusion matrices (K, C, C) of workers right with probability ``accuracy`` (K,) and otherwise giving
    any other class alike."""
    accuracy = np.asarray(accuracy, dtype=np.float64)
    off = (1.0 - accuracy) / max(n_classes - 1, 1)
    out = np.broadcast_to(off[:, None, None], (accuracy.shape[0], n_classes, n_classes)).copy()
    out[:, np.arange(n_classes), np.arange(n_classes)] = accuracy[:, None]
    return out
