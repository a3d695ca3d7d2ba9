"""crowd-kit's data metrics over encoded labels: Krippendorff's alpha with any distance, and the label
probabilities of a worker of known skill behind ``consistency`` and ``uncertainty`` (:mod:`crowdspark.api`).

Notation: ``m`` labels (rows), ``n`` items, ``C`` classes (the distinct labels of the rows), ``s_r`` the
skill of the worker of row ``r``.

* Krippendorff's alpha with a distance ``d`` (C, C): over the items with ``m_i >= 2``, the observed
  disagreement ``D_o = sum_i n_i d n_i^T / (m_i - 1) / N`` and the expected one ``D_e = N_c d N_c^T /
  (N (N - 1))``; ``alpha = 1 - D_o / D_e``.  With the binary distance (``d = 1 - I``) this is the nominal
  alpha of :func:`crowdspark.quality.alpha_from_stats`, which computes it.
* One-coin label probabilities: a worker of skill ``s`` gives the true class with probability ``s`` and
  each other class with ``(1 - s) / (C - 1)``; ``P[r, c]`` is the probability of row ``r``'s label if the
  true class were ``c``.
"""

from __future__ import annotations

import numpy as np

from crowdspark.block import blocks_from_codes
from crowdspark.models.common import vote_counts
from crowdspark.quality import agreement_stats, alpha_from_stats
from crowdspark.stats import sum_stats

__all__ = ["alpha", "label_probabilities"]


def alpha(item: np.ndarray, label: np.ndarray, n_classes: int, distance: np.ndarray) -> float | None:
    """Krippendorff's alpha of labels with a distance between classes.

    Parameters
    ----------
    item, label : ndarray of int, shape (m,)
        Item code and class code of each label.
    n_classes : int
        C.
    distance : ndarray of float64, shape (C, C)
        ``distance[j, l]``: the distance between classes ``j`` and ``l``.

    Returns
    -------
    float or None
        ``None`` without an item of two labels; 1.0 when those items' labels are all of one class.
    """
    n_items = int(item.max()) + 1 if len(item) else 0
    blocks = blocks_from_codes(np.asarray(item), np.arange(n_items).astype(str).astype(object),
                               np.zeros(len(item), dtype=np.int32), label)
    if np.array_equal(distance, 1.0 - np.eye(n_classes)):
        return alpha_from_stats(sum_stats(agreement_stats(b, np.zeros(b.n_items, dtype=np.int64), 1, n_classes)
                                          for b in blocks))
    counts = np.concatenate([vote_counts(b, n_classes) for b in blocks]) if blocks else np.zeros((0, n_classes))
    m = counts.sum(axis=1)
    counts, m = counts[m >= 2], m[m >= 2]
    totals = counts.sum(axis=0)
    n = float(totals.sum())
    if n == 0:
        return None
    if np.count_nonzero(totals) <= 1:
        return 1.0
    observed = float((np.einsum("ij,jl,il->i", counts, distance, counts) / (m - 1)).sum()) / n
    expected = float(totals @ distance @ totals) / (n * (n - 1))
    return 1.0 - observed / expected


def label_probabilities(label: np.ndarray, skill: np.ndarray, n_classes: int) -> np.ndarray:
    """``P[r, c]``: the probability of row ``r``'s label from a worker of skill ``skill[r]`` if the true class
    were ``c`` (NaN where the skill is NaN).

    Parameters
    ----------
    label : ndarray of int, shape (m,)
    skill : ndarray of float64, shape (m,)
    n_classes : int
        C; with one class every probability is 1.

    Returns
    -------
    ndarray of float64, shape (m, C)
    """
    if n_classes == 1:
        return np.ones((len(label), 1))
    skill = np.asarray(skill, dtype=np.float64)[:, None]
    given = np.arange(n_classes)[None, :] == np.asarray(label)[:, None]
    return np.where(given, skill, (1.0 - skill) / (n_classes - 1))
