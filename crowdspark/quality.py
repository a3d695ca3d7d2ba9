"""Quality signals of a run as additive statistics: agreement, uncertainty, worker quality, calibration and the
gain of one more label (docs/quality.md).

Every function here is pure numpy over one block of items and its final results; the sums of the statistics
over blocks give the run's figures, so both engines compute them the same way and no item-level data reaches
the driver.

Notation: ``n`` items in the block, ``m`` labels, ``K`` workers, ``C`` classes, ``B`` calibration bins;
``n_ic`` is the number of labels of class c on item i, ``m_i = sum_c n_ic``.

* Krippendorff's alpha (nominal): over the items with ``m_i >= 2``, the observed disagreement
  ``D_o = sum_i (m_i^2 - sum_c n_ic^2) / (m_i - 1) / N`` and the expected one
  ``D_e = (N^2 - sum_c N_c^2) / (N (N - 1))``, with ``N_c = sum_i n_ic`` and ``N = sum_c N_c``;
  ``alpha = 1 - D_o / D_e`` (1 when every such label is of one class, as nltk and crowd-kit).
* Per-class agreement: the share of pairs of labels of one item, the first of class c, whose second is
  also c: ``sum_i n_ic (n_ic - 1) / (m_i - 1) / N_c`` (the diagonal of Krippendorff's coincidence matrix over
  its row sum).
* Vote entropy (nats): the entropy of an item's label shares ``n_ic / m_i``; posterior entropy (nats): the
  entropy of its posterior.
* Spammer score (Raykar & Yu 2012): ``S_k = sum_{c < c'} ||pi_kc - pi_kc'||^2 / (C (C - 1))`` of worker k's
  confusion matrix ``pi_k`` (rows: true class): 0 when every row is the same (the labels do not depend on
  the true class: a spammer), 1 for a perfect (or perfectly permuted) worker.  Estimated from the worker's
  labels against the inferred classes, without the bias of few labels (:func:`spammer_score`).
* Spammer probability: the posterior probability, from worker k's labels against the inferred classes, that
  the worker agrees with them only at chance rate ``p0_k = sum_c r_kc s_kc / n_k^2`` (``r_kc``: its labels on
  items of class c, ``s_kc``: its labels of class c, ``n_k`` its labels) rather than at a rate
  ``q ~ Uniform(p0_k, 1)``, with prior odds 1 (:func:`spammer_probability`).
* Expected error reduction of one more label, from a worker of the run's average confusion ``pi`` (C, C):
  ``sum_y max_c p_c pi_cy - max_c p_c`` for an item whose posterior is ``p``.
* Margin: ``p_(1) - p_(2)``, the gap between an item's two most probable classes (what one more label
  contests); the relabel queue's order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import betainc, betaln, expit

from crowdspark.block import Block
from crowdspark.models.base import ItemResult
from crowdspark.models.common import vote_counts
from crowdspark.stats import Stats

__all__ = [
    "ITEM_COLUMNS",
    "entropy",
    "item_quality",
    "agreement_stats",
    "calibration_stats",
    "gold_worker_stats",
    "alpha_from_stats",
    "class_agreement_from_stats",
    "calibration_from_stats",
    "spammer_score",
    "spammer_probability",
    "average_confusion",
    "expected_error_reduction",
    "quality_block_stats",
    "with_item_quality",
    "margin",
]

#: the ``items/`` columns :func:`item_quality` adds, with their Spark SQL types
ITEM_COLUMNS = {
    "n_labels": "long",
    "vote_entropy": "double",
    "agreement": "double",
    "posterior_entropy": "double",
    "relabel_gain": "double",
    "margin": "double",
}


def entropy(shares: np.ndarray) -> np.ndarray:
    """Entropy in nats of each row of ``shares`` (n, C) whose rows sum to 1, shape (n,)."""
    positive = shares > 0
    logs = np.log(shares, out=np.zeros_like(shares, dtype=np.float64), where=positive)  # 0 where a share is 0
    return 0.0 - (shares * logs).sum(axis=1)  # 0.0, not -0.0, for a certain row


def item_quality(block: Block, posterior: np.ndarray, label: np.ndarray, confusion: np.ndarray) -> dict[str, Any]:
    """The per-item quality columns (:data:`ITEM_COLUMNS`) of one block.

    Parameters
    ----------
    posterior : ndarray of float64, shape (n, C)
    label : ndarray of int, shape (n,)
        The inferred class of each item.
    confusion : ndarray of float64, shape (C, C)
        The confusion of the worker one more label would come from (:func:`average_confusion`).

    Returns
    -------
    dict of str to ndarray, each of shape (n,)
    """
    n_classes = posterior.shape[1]
    counts = vote_counts(block, n_classes)
    m = counts.sum(axis=1)
    shares = counts / np.maximum(m, 1)[:, None]
    return {
        "n_labels": m.astype(np.int64),
        "vote_entropy": entropy(shares),
        "agreement": shares[np.arange(block.n_items), label],
        "posterior_entropy": entropy(posterior),
        "relabel_gain": expected_error_reduction(posterior, confusion),
        "margin": margin(posterior),
    }


def agreement_stats(block: Block, label: np.ndarray, n_workers: int, n_classes: int) -> Stats:
    """Sums for Krippendorff's alpha, the per-class agreement and each worker's agreement with the aggregate.

    Parameters
    ----------
    label : ndarray of int, shape (n,)
        The inferred class of each item.

    Returns
    -------
    dict
        ``alpha_disagreement`` (0-d), ``alpha_class_labels`` (C,) (``N_c`` over items with two labels or more),
        ``alpha_class_pairs`` (C,) (``sum_i n_ic (n_ic - 1) / (m_i - 1)``) and ``worker_confusion``
        (K, C, C): labels of each worker by its item's inferred class (row) and the label given (column).
    """
    counts = vote_counts(block, n_classes)
    m = counts.sum(axis=1)
    paired = m >= 2
    counts, m = counts[paired], m[paired]
    inferred = np.asarray(label, dtype=np.int64)[block.item_of_label]
    flat = (block.worker.astype(np.int64) * n_classes + inferred) * n_classes + block.label
    return {
        "alpha_disagreement": np.array(float(((m * m - (counts * counts).sum(axis=1)) / (m - 1)).sum())),
        "alpha_class_labels": counts.sum(axis=0),
        "alpha_class_pairs": (counts * (counts - 1) / (m - 1)[:, None]).sum(axis=0),
        "worker_confusion": np.bincount(flat, minlength=n_workers * n_classes * n_classes).reshape(
            n_workers, n_classes, n_classes),
    }


def calibration_stats(block: Block, posterior: np.ndarray, label: np.ndarray, n_bins: int) -> Stats:
    """Sums of the reliability table over the block's held-out gold items (``Block.truth``).

    The bin of an item is ``floor(confidence * B)`` (confidence 1 in the last bin).

    Returns
    -------
    dict
        ``calibration_n`` (B,) items, ``calibration_confidence`` (B,) summed confidence, ``calibration_correct``
        (B,) items whose inferred class is the gold one.
    """
    has = block.truth >= 0
    label = np.asarray(label)[has]
    confidence = posterior[has][np.arange(label.shape[0]), label]
    bins = np.minimum((confidence * n_bins).astype(np.int64), n_bins - 1)
    correct = (label == block.truth[has]).astype(np.float64)
    return {
        "calibration_n": np.bincount(bins, minlength=n_bins).astype(np.int64),
        "calibration_confidence": np.bincount(bins, weights=confidence, minlength=n_bins),
        "calibration_correct": np.bincount(bins, weights=correct, minlength=n_bins),
    }


def gold_worker_stats(block: Block, label: np.ndarray, n_workers: int, n_classes: int) -> Stats:
    """Sums over the block's held-out gold items (``Block.truth``): each worker's labels on them and the right
    ones, and the inferred labels against the gold.

    Returns
    -------
    dict
        ``gold_worker_labels`` (K,) and ``gold_worker_right`` (K,) (labels equal to the gold), ``gold_confusion``
        (C, C): held-out gold items by true class (row) and inferred label (column).
    """
    has = block.truth >= 0
    if not has.any():  # no label to look at
        return {"gold_worker_labels": np.zeros(n_workers, dtype=np.int64),
                "gold_worker_right": np.zeros(n_workers, dtype=np.int64),
                "gold_confusion": np.zeros((n_classes, n_classes), dtype=np.int64)}
    truth = block.truth[block.item_of_label]
    on = truth >= 0
    worker = block.worker[on]
    right = block.label[on] == truth[on]
    pairs = block.truth[has].astype(np.int64) * n_classes + np.asarray(label, dtype=np.int64)[has]
    return {
        "gold_worker_labels": np.bincount(worker, minlength=n_workers),
        "gold_worker_right": np.bincount(worker[right], minlength=n_workers),
        "gold_confusion": np.bincount(pairs, minlength=n_classes * n_classes).reshape(n_classes, n_classes),
    }


def alpha_from_stats(stats: Stats) -> float | None:
    """Krippendorff's alpha (nominal) from summed :func:`agreement_stats`; ``None`` without an item of two
    labels."""
    n_c = np.asarray(stats["alpha_class_labels"], dtype=np.float64)
    n = float(n_c.sum())
    if n == 0:
        return None
    if np.count_nonzero(n_c) <= 1:
        return 1.0
    observed = float(stats["alpha_disagreement"]) / n
    expected = (n * n - float((n_c * n_c).sum())) / (n * (n - 1))
    return 1.0 - observed / expected


def class_agreement_from_stats(stats: Stats) -> np.ndarray:
    """Per-class agreement (C,) from summed :func:`agreement_stats`; NaN for a class no paired label has."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(stats["alpha_class_pairs"]) / np.asarray(stats["alpha_class_labels"])


def calibration_from_stats(stats: Stats) -> dict[str, Any]:
    """The expected calibration error and the reliability table from summed :func:`calibration_stats`.

    Returns
    -------
    dict
        ``n_gold``; ``ece`` = ``sum_b n_b / N |accuracy_b - confidence_b|`` (``None`` without gold);
        ``bins``: one row per bin (``low``, ``high``, ``items``, ``mean_confidence``, ``accuracy``; the last two
        ``None`` for an empty bin).
    """
    count = np.asarray(stats["calibration_n"], dtype=np.float64)
    n_bins, total = count.shape[0], float(count.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        confidence = np.asarray(stats["calibration_confidence"]) / count
        accuracy = np.asarray(stats["calibration_correct"]) / count
    gap = np.where(count > 0, np.abs(accuracy - confidence), 0.0)
    rows = [{"low": b / n_bins, "high": (b + 1) / n_bins, "items": int(count[b]),
             "mean_confidence": float(confidence[b]) if count[b] else None,
             "accuracy": float(accuracy[b]) if count[b] else None} for b in range(n_bins)]
    return {"n_gold": int(total), "ece": float((count * gap).sum() / total) if total else None, "bins": rows}


def spammer_score(counts: np.ndarray) -> np.ndarray:
    """Raykar & Yu's spammer score of each worker, from its labels against the inferred classes, with the
    finite-sample bias removed.

    Row c of ``counts[k]`` is worker k's labels on items inferred to be of class c; its shares ``r_c`` estimate
    the row of the worker's confusion matrix.  ``||r_c - r_c'||^2`` is estimated without bias by
    ``U_c + U_c' - 2 r_c . r_c'``, with ``U_c = (n_c sum_y r_cy^2 - 1) / (n_c - 1)`` the unbiased estimate of
    ``sum_y r_cy^2`` from the row's ``n_c`` labels; the score is the mean of these over the pairs of rows with
    two labels or more each, halved (a perfect worker: 1; a worker whose labels ignore the class: 0 in
    expectation, so a spammer with few labels does not look better than it is).

    Parameters
    ----------
    counts : ndarray, shape (K, C, C)
        ``counts[k, c, y]``: labels ``y`` of worker k on items inferred to be of class c.

    Returns
    -------
    ndarray of float64, shape (K,)
        NaN for a worker without two rows of two labels or more.
    """
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.sum(axis=2)
    enough = n >= 2
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = counts / n[:, :, None]
        square = np.where(enough, (n * (shares * shares).sum(axis=2) - 1) / (n - 1), 0.0)
    shares = np.where(enough[:, :, None], shares, 0.0)
    cross = np.einsum("kcy,kdy->kcd", shares, shares)
    distance = square[:, :, None] + square[:, None, :] - 2 * cross
    n_classes = counts.shape[1]
    pairs = enough[:, :, None] & enough[:, None, :] & ~np.eye(n_classes, dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (distance * pairs).sum(axis=(1, 2)) / pairs.sum(axis=(1, 2)) / 2


def spammer_probability(counts: np.ndarray) -> np.ndarray:
    """The posterior probability that each worker agrees with the inferred classes only at chance rate.

    With ``n`` labels of the worker, ``d`` of them equal to their item's inferred class, and the chance rate
    ``p0 = sum_c r_c s_c / n^2`` of its row sums ``r`` (labels by inferred class) and column sums ``s`` (labels
    by class given), two models of ``d``: the spammer's, agreement at rate ``p0`` (its labels do not depend on
    the class), and the worker's, agreement at a rate ``q ~ Uniform(p0, 1)``.  Their Bayes factor, with prior
    odds 1, gives ``P(spammer | d) = L0 / (L0 + L1)`` with ``L0 = p0^d (1 - p0)^(n - d)`` and
    ``L1 = int_p0^1 q^d (1 - q)^(n - d) dq / (1 - p0)``.  Unlike a point estimate of the rank-one distance,
    this weighs the evidence by the number of labels: in 5 classes, a uniform spammer's 20 labels give a
    median probability of 0.87, those of a worker right half the time 0.05 (``tests/test_quality.py``).  A
    worker agreeing less often than chance (an adversarial or permuted one) also gets a high probability: its
    labels are of no use as they are; :func:`spammer_score` tells them apart.

    Parameters
    ----------
    counts : ndarray, shape (K, C, C)
        As in :func:`spammer_score`.

    Returns
    -------
    ndarray of float64, shape (K,)
        NaN for a worker without labels or whose labels and classes are all one class (``p0 = 1``: agreement
        tells nothing).
    """
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.sum(axis=(1, 2))
    chance_pairs = (counts.sum(axis=2) * counts.sum(axis=1)).sum(axis=1)  # p0 n^2
    scored = (n > 0) & ~np.isclose(chance_pairs, n * n)
    n = np.where(scored, n, 1.0)
    d = np.where(scored, np.trace(counts, axis1=1, axis2=2), 0.0)
    p0 = np.where(scored, np.clip(chance_pairs / (n * n), 0.0, 1.0), 0.5)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_chance = np.where(d > 0, d * np.log(p0), 0.0) + (n - d) * np.log1p(-p0)
        # int_p0^1 q^d (1 - q)^(n - d) dq = B(d + 1, n - d + 1) I_{1 - p0}(n - d + 1, d + 1)
        log_worker = betaln(d + 1, n - d + 1) + np.log(betainc(n - d + 1, d + 1, 1 - p0)) - np.log1p(-p0)
        probability = expit(log_chance - log_worker)
    return np.where(scored, probability, np.nan)


def average_confusion(confusion: np.ndarray, n_labels: np.ndarray) -> np.ndarray:
    """The label-weighted average (C, C) of the workers' confusion matrices (K, C, C); a worker whose matrix
    is unknown (NaN, e.g. ``gold-mv``'s workers without a label on the gold) is left out; uniform rows when no
    worker is left."""
    known = ~np.isnan(confusion).any(axis=(1, 2))
    weights = np.where(known, np.asarray(n_labels, dtype=np.float64), 0.0)
    if weights.sum() <= 0:
        n_classes = confusion.shape[1]
        return np.full((n_classes, n_classes), 1.0 / n_classes)
    return np.einsum("k,kcy->cy", weights / weights.sum(), np.where(known[:, None, None], confusion, 0.0))


def _first_max(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(scores.argmax(axis=1), scores.max(axis=1))`` of (n, C) ``scores`` without NaN, a class column at a
    time (the first of tied classes, as ``argmax``)."""
    best = np.zeros(scores.shape[0], dtype=np.intp)
    top = scores[:, 0].copy()
    for c in range(1, scores.shape[1]):
        column = scores[:, c]
        better = column > top
        best[better] = c
        np.maximum(top, column, out=top)
    return best, top


def expected_error_reduction(posterior: np.ndarray, confusion: np.ndarray) -> np.ndarray:
    """How much one more label is expected to lower the chance that an item's inferred class is wrong.

    Parameters
    ----------
    posterior : ndarray of float64, shape (n, C)
    confusion : ndarray of float64, shape (C, C)
        ``P(label y | true class c)`` of the worker who gives the label.

    Returns
    -------
    ndarray of float64, shape (n,)
        ``sum_y max_c p_c pi_cy - max_c p_c`` (>= 0; exactly 0 when no label can change the class).
    """
    n, n_classes = posterior.shape
    best, top = _first_max(posterior)
    # sum_y p_best pi_best,y = max_c p_c: written per y, the gain is exactly 0 when no label changes the class;
    # one class column at a time, without the (n, C, C) table of joint probabilities
    gain = np.empty((n, n_classes))  # per item and label y, in C order: row sums in the order of the definition
    for y in range(n_classes):
        joint = posterior[:, 0] * confusion[0, y]
        for c in range(1, n_classes):
            np.maximum(joint, posterior[:, c] * confusion[c, y], out=joint)
        gain[:, y] = joint - top * confusion[best, y]
    return gain.sum(axis=1)


def margin(posterior: np.ndarray) -> np.ndarray:
    """The gap between each item's two most probable classes, ``p_(1) - p_(2)``.

    Parameters
    ----------
    posterior : ndarray of float64, shape (n, C), C >= 2

    Returns
    -------
    ndarray of float64, shape (n,)
        In [0, 1]; ``2 max_c p_c - 1`` for two classes.
    """
    first = np.maximum(posterior[:, 0], posterior[:, 1])
    second = np.minimum(posterior[:, 0], posterior[:, 1])
    for c in range(2, posterior.shape[1]):
        column = posterior[:, c]
        np.maximum(second, np.minimum(first, column), out=second)
        np.maximum(first, column, out=first)
    return first - second


def quality_block_stats(block: Block, result: ItemResult, n_workers: int, n_bins: int) -> Stats:
    """The quality statistics of one block from its final results: agreement (:func:`agreement_stats`), the
    reliability table over its held-out gold (:func:`calibration_stats`) and the workers' labels and the
    inferred labels on that gold (:func:`gold_worker_stats`)."""
    n_classes = result.posterior.shape[1]
    return {**agreement_stats(block, result.label, n_workers, n_classes),
            **calibration_stats(block, result.posterior, result.label, n_bins),
            **gold_worker_stats(block, result.label, n_workers, n_classes)}


def with_item_quality(result: ItemResult, block: Block, confusion: np.ndarray) -> ItemResult:
    """``result`` with the per-item quality columns (:data:`crowdspark.quality.ITEM_COLUMNS`) in its extras."""
    extra = {**result.extra, **item_quality(block, result.posterior, result.label, confusion)}
    return ItemResult(result.posterior, result.label, extra)
