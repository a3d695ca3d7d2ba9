"""One-coin Dawid-Skene EM (ZenCrowd's model; crowd-kit's ``OneCoinDawidSkene``).

Notation
--------
K workers, C classes.  ``p[k]`` is worker k's accuracy: the probability that k labels an item with its true
class; a wrong label is any other class with probability ``(1 - p[k]) / (C - 1)``.  So worker k's confusion
matrix is ``pi[k, t, c] = p[k]`` on the diagonal and ``(1 - p[k]) / (C - 1)`` off it.  ``alpha[t]`` are the
class proportions and ``s`` the smoothing pseudo-count: the M-step is the MAP estimate under a
``Beta(1 + s, 1 + s)`` prior on every ``p[k]`` and a ``Dirichlet(1 + s)`` prior on ``alpha``.

The fit is Dawid-Skene's (:mod:`crowdspark.models.dawid_skene`): a majority-vote start, E-steps on the blocks
and M-steps on the driver, with the same additive statistics (the expected confusion counts ``N[k, t, c]``
and class counts); only the M-step differs: ``p[k] = (sum_t N[k, t, t] + s) / (sum_tc N[k, t, c] + 2 s)``.
The objective is the log posterior per label, ``(log p(L | p, alpha) + s * sum_k (log p[k] + log(1 - p[k]))
+ s * sum_t log alpha[t]) / n_labels``, which EM never decreases.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from crowdspark.models.base import Preset, Update
from crowdspark.models.common import normalize_rows, one_coin_confusion
from crowdspark.models.dawid_skene import DawidSkene, crowdkit_objective  # noqa: F401 (re-exported)
from crowdspark.stats import Stats

__all__ = ["OneCoinDawidSkene", "crowdkit_objective", "one_coin_accuracy", "one_coin_log_pi", "one_coin_m_step"]


def one_coin_accuracy(confusion: np.ndarray, smoothing: float) -> np.ndarray:
    """Each worker's MAP accuracy from expected confusion counts.

    Parameters
    ----------
    confusion : ndarray, shape (K, C, C)
        Expected counts ``N[k, t, c]``.
    smoothing : float
        Pseudo-count ``s`` added to the right and to the wrong labels.

    Returns
    -------
    ndarray, shape (K,)
    """
    right = np.einsum("ktt->k", confusion)
    return (right + smoothing) / (confusion.sum(axis=(1, 2)) + 2.0 * smoothing)


def one_coin_log_pi(accuracy: np.ndarray, n_classes: int) -> np.ndarray:
    """The one-coin confusion matrices in log space.

    Parameters
    ----------
    accuracy : ndarray, shape (K,)
    n_classes : int

    Returns
    -------
    ndarray, shape (K, C, C)
        ``log p[k]`` on the diagonal, ``log((1 - p[k]) / (C - 1))`` off it.
    """
    return np.log(np.maximum(one_coin_confusion(accuracy, n_classes), 1e-300))


def one_coin_m_step(confusion: np.ndarray, classes: np.ndarray, smoothing: float) -> dict[str, np.ndarray]:
    """MAP parameters of the one-coin model from expected counts.

    Parameters
    ----------
    confusion : ndarray, shape (K, C, C)
    classes : ndarray, shape (C,)
    smoothing : float

    Returns
    -------
    dict with ``log_pi`` (K, C, C) and ``log_alpha`` (C,)
    """
    return {
        "log_pi": one_coin_log_pi(one_coin_accuracy(confusion, smoothing), confusion.shape[-1]),
        "log_alpha": np.log(normalize_rows(classes, smoothing)),
    }


def one_coin_log_prior(accuracy: np.ndarray, log_alpha: np.ndarray, smoothing: float) -> float:
    """``s * (sum_k log p[k] + log(1 - p[k]) + sum_t log alpha[t])``, the log prior up to a constant."""
    p = np.clip(accuracy, 1e-300, 1.0 - 1e-16)
    return float(smoothing * (np.log(p).sum() + np.log1p(-p).sum() + log_alpha.sum()))


@dataclass(frozen=True)
class OneCoinDawidSkene(DawidSkene):
    """One-coin Dawid-Skene EM, initialized from majority vote: one accuracy per worker.

    Parameters
    ----------
    n_workers, n_classes, seed, max_iter, tol : int or float
        As :class:`~crowdspark.models.dawid_skene.DawidSkene`.
    smoothing : float
        Pseudo-count ``s`` > 0 added to every worker's right and wrong labels and to every class count.
    stop : {"change", "crowd-kit"}
        The convergence test.  ``"change"``: the objective (the log posterior per label) moves by less than
        ``tol``.  ``"crowd-kit"``: crowd-kit's, set by the ``crowd-kit`` preset: stop at the first iteration
        where crowd-kit's objective rises by less than ``tol`` or falls, and answer with that iteration's E-step.
    m_step : {"map"}
        The one-coin M-step above (the ``crowd-kit`` preset takes crowd-kit's estimates with ``smoothing=1e-10``).
    """

    name: ClassVar[str] = "one-coin"
    title: ClassVar[str] = "one-coin Dawid-Skene"
    api_name: ClassVar[str] = "OneCoinDawidSkene"
    description: ClassVar[str] = (
        "one accuracy per worker, errors spread uniformly over the other classes; MAP EM from majority vote"
    )

    m_steps: ClassVar[tuple[str, ...]] = ("map",)

    def init_params(self, stats: Stats) -> dict[str, Any]:
        params = one_coin_m_step(stats["confusion"], stats["classes"], self.smoothing)
        params["n_labels"] = float(stats["confusion"].sum())
        return params

    def global_step(self, stats: Stats, params: Any, sweep: int) -> Update:
        s = self.smoothing
        accuracy = np.exp(np.diagonal(params["log_pi"], axis1=1, axis2=2)[:, 0])
        log_prior = one_coin_log_prior(accuracy, params["log_alpha"], s)
        objective = float((stats["log_evidence"] + log_prior) / params["n_labels"])
        return self._update(stats, params, one_coin_m_step(stats["confusion"], stats["classes"], s), objective, sweep)

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        table = super().worker_table(params, init_stats)
        table["accuracy"] = np.exp(np.diagonal(params["log_pi"], axis1=1, axis2=2)[:, 0])
        return table

    def worker_start(self, confusion: np.ndarray, accuracy: np.ndarray) -> dict[str, np.ndarray]:
        """``log_pi`` from the table's accuracies (the one-coin matrix of each)."""
        return {"log_pi": one_coin_log_pi(np.asarray(accuracy, dtype=np.float64), self.n_classes)}


def crowdkit_estimates(model: OneCoinDawidSkene) -> OneCoinDawidSkene:
    """``model`` with crowd-kit's unsmoothed M-step (a pseudo-count of 1e-10 keeps every log finite), its
    tolerance (1e-5) and its stopping rule (``stop="crowd-kit"``): the body of the ``crowd-kit`` preset."""
    return replace(model, smoothing=1e-10, tol=1e-5, stop="crowd-kit")


OneCoinDawidSkene.presets = {"crowd-kit": Preset(crowdkit_estimates)}
