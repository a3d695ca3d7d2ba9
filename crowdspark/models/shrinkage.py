"""Full confusion matrices shrunk towards each worker's one-coin matrix, the strength learned per crowd by
empirical Bayes (``ads.shrinkage = "empirical-bayes"``).

Notation
--------
K workers, C classes.  ``N[k, t, c]`` are worker k's expected confusion counts (labels c on items of true
class t), ``n[k, t] = sum_c N[k, t, c]``, ``s`` the smoothing pseudo-count.  ``p[k]`` is worker k's one-coin
accuracy (:func:`~crowdspark.models.one_coin.one_coin_accuracy`) and ``m[k]`` its one-coin matrix: ``p[k]`` on
the diagonal, ``(1 - p[k]) / (C - 1)`` off it.

Each row of a worker's confusion matrix has the prior ``pi[k, t] ~ Dirichlet(A[t] m[k, t])``: centred on the
worker's one-coin row, with ``A[t]`` pseudo-labels per row of true class t, shared by all workers.  ``A[t]``
maximizes the marginal (Dirichlet-multinomial) likelihood of the counts of every worker's row t,

    ML[t](A) = sum_k log Gamma(A) - log Gamma(A + n[k, t]) + sum_c log Gamma(A m[k, t, c] + N[k, t, c])
                                                             - log Gamma(A m[k, t, c]),

over the fixed grid :data:`STRENGTHS` (deterministic, the same on every engine), and the M-step is the
posterior mean with the smoothing added, ``pi[k, t] ~ N[k, t] + A[t] m[k, t] + s``.  A worker with few labels
of class t stays near one accuracy; a prolific one keeps its own row.  ``A[t]`` is large where the workers'
rows scatter around their one-coin rows no more than their counts explain, small where they carry a pattern of
their own.

A shrunk matrix has fewer effective free parameters than a full one: one accuracy per worker plus, per row,
``(C - 1) n[k, t] / (n[k, t] + A[t])`` (the share of the row that its own counts set), at most
``C (C - 1)``: :func:`effective_worker_params`, the number AIC charges.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from crowdspark.models.common import normalize_rows, one_coin_confusion
from crowdspark.models.one_coin import one_coin_accuracy

__all__ = ["STRENGTHS", "effective_worker_params", "empirical_strength", "shrunk_m_step"]

#: the candidate strengths ``A``: 51 log-spaced values from 0.1 to 10,000 pseudo-labels per row
STRENGTHS = np.exp(np.linspace(np.log(0.1), np.log(1e4), 51))


def empirical_strength(counts: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """``A[t]``, the grid strength of largest marginal likelihood of every worker's row t.

    Parameters
    ----------
    counts : ndarray, shape (K, C, C)
        ``N[k, t, c]``.
    centre : ndarray, shape (K, C, C)
        ``m[k]``, rows on the simplex with no zero.

    Returns
    -------
    ndarray, shape (C,)
    """
    n = counts.sum(axis=2)
    marginal = np.empty((STRENGTHS.size, counts.shape[1]))
    for g, a in enumerate(STRENGTHS):
        am = a * centre
        rows = gammaln(a) - gammaln(a + n) + (gammaln(am + counts) - gammaln(am)).sum(axis=2)
        marginal[g] = rows.sum(axis=0)
    return STRENGTHS[np.argmax(marginal, axis=0)]


def _centre_and_strength(counts: np.ndarray, smoothing: float) -> tuple[np.ndarray, np.ndarray]:
    """``m`` (K, C, C) and ``A`` (C,)."""
    centre = one_coin_confusion(one_coin_accuracy(counts, smoothing), counts.shape[1])
    return centre, empirical_strength(counts, centre)


def shrunk_m_step(confusion: np.ndarray, classes: np.ndarray, smoothing: float) -> dict[str, np.ndarray]:
    """The shrunk confusion matrices and the class proportions from expected counts.

    Parameters
    ----------
    confusion : ndarray, shape (K, C, C)
    classes : ndarray, shape (C,)
    smoothing : float

    Returns
    -------
    dict with ``log_pi`` (K, C, C), ``log_alpha`` (C,) and ``strength`` (C,), ``A``
    """
    centre, strength = _centre_and_strength(confusion, smoothing)
    return {
        "log_pi": np.log(normalize_rows(confusion + strength[None, :, None] * centre, smoothing)),
        "log_alpha": np.log(normalize_rows(classes, smoothing)),
        "strength": strength,
    }


def effective_worker_params(confusion: np.ndarray, strength: np.ndarray) -> float:
    """The shrunk matrices' free parameters summed over workers:
    ``sum_k min(C (C - 1), 1 + sum_t (C - 1) n[k, t] / (n[k, t] + A[t]))``.

    Parameters
    ----------
    confusion : ndarray, shape (K, C, C)
    strength : ndarray, shape (C,)

    Returns
    -------
    float
    """
    c = confusion.shape[1]
    n = confusion.sum(axis=2)
    own = 1.0 + ((c - 1) * n / (n + strength[None, :])).sum(axis=1)
    return float(np.minimum(own, c * (c - 1)).sum())
