"""Building blocks shared by the model kernels.

Notation: ``n`` items and ``m`` labels in a block, ``K`` workers, ``C`` classes.  Arrays named ``resp``
hold per-item weights over true classes (responsibilities or posteriors), shape (n, ...).
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from crowdspark.block import Block
from crowdspark.rng import uniforms

__all__ = [
    "vote_counts",
    "argmax_random_ties",
    "per_item_sum",
    "label_loglik",
    "confusion_counts",
    "worker_label_counts",
    "normalize_log",
    "normalize_rows",
]


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


def label_loglik(block: Block, log_pi: np.ndarray) -> np.ndarray:
    """Sum of log label probabilities per item for every configuration of the latent variables.

    Parameters
    ----------
    log_pi : ndarray, shape (K, ..., C)
        ``log_pi[k, ..., c]`` is the log probability that worker k says c given the latent configuration
        ``...`` (e.g. the true class t, or the pair (h, t)).

    Returns
    -------
    ndarray, shape (n, ...)
        ``out[i, ...] = sum over labels (k, c) of item i of log_pi[k, ..., c]``.
    """
    return per_item_sum(block, log_pi[block.worker, ..., block.label])


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
    flat_resp = resp.reshape(resp.shape[0], -1)
    index = block.worker.astype(np.int64) * n_classes + block.label
    size = n_workers * n_classes
    out = np.empty((flat_resp.shape[1], size))
    for j in range(flat_resp.shape[1]):
        out[j] = np.bincount(index, weights=flat_resp[block.item_of_label, j], minlength=size)
    # out[j, k * C + c] -> (K, latent..., C)
    out = out.reshape(flat_resp.shape[1], n_workers, n_classes).transpose(1, 0, 2)
    return out.reshape((n_workers,) + latent_shape + (n_classes,))


def worker_label_counts(block: Block, n_workers: int) -> np.ndarray:
    """Number of labels per worker, shape (K,)."""
    return np.bincount(block.worker, minlength=n_workers).astype(np.float64)


def normalize_log(log_scores: np.ndarray, axis: int | tuple[int, ...] = -1) -> tuple[np.ndarray, np.ndarray]:
    """Normalize log scores into probabilities along ``axis``.

    Returns
    -------
    probs : ndarray, same shape as ``log_scores``
    log_norm : ndarray
        ``logsumexp`` over ``axis`` (the log normalizer), with ``axis`` removed.
    """
    log_norm = logsumexp(log_scores, axis=axis, keepdims=True)
    probs = np.exp(log_scores - log_norm)
    return probs, np.squeeze(log_norm, axis=axis)


def normalize_rows(counts: np.ndarray, pseudo: float | np.ndarray = 0.0) -> np.ndarray:
    """Add pseudo-counts and normalize along the last axis."""
    counts = counts + pseudo
    return counts / counts.sum(axis=-1, keepdims=True)


def tie_uniforms(block: Block, seed: int, sweep: int = 0, stream: int = 0) -> np.ndarray:
    """Per-item uniforms for breaking ties (see :mod:`crowdspark.rng`)."""
    return uniforms(seed, sweep, block.item_keys, stream)
