"""BWA, Bayesian weighted average (Li, Rubinstein & Cohn, "Truth Inference at Scale: A Bayesian Model for
Adjudicating Highly Redundant Crowd Annotations", WWW 2019).

Notation
--------
K workers, C classes; in a block n items and m labels.  Each class t is a one-versus-rest regression of its
own: ``y[i, j, t] = 1`` when worker j labelled item i with t, else 0, and ``y ~ Normal(z[i, t], 1 / v[j, t])``
around the item's score ``z[i, t]``, with the worker's precision ``v[j, t] ~ Gamma(a_v / 2, b_v[t] / 2)``
(shape, rate) and ``z[i, t] ~ Normal(mu[t], 1 / lam)``.  ``mu[t]`` is the mean score of class t over the items.
``b_v[t]`` is set once from the majority-vote shares ``z0``: ``a_v * corr * mean over labels of z0 (1 - z0)``,
the prior's mean squared residual, where ``corr = 4 (1 - 1/C)`` with ``prior_correction`` (the paper's
correction of the one-versus-rest prior for C classes) and 1 without.

The fit (the paper's EM)
------------------------
It starts from ``z = z0`` and alternates, for every class at once:

* driver: ``mu[t] = mean_i z[i, t]`` and ``v[j, t] = (a_v + N[j]) / (b_v[t] + sum over j's labels of
  (z[i, t] - y[i, j, t])^2)`` (the posterior mean of the precision; ``N[j]`` is j's number of labels);
* blocks: ``z[i, t] = (lam mu[t] + sum over i's labels of v[j, t] y[i, j, t]) / (lam + sum over i's labels of
  v[j, t])``, the precision-weighted average of the item's labels shrunk towards ``mu[t]``.

A class has converged when no item's score moved by more than ``tol`` relative to its new value (plus
1e-8) in a sweep; its parameters are then held, and the fit stops when every class has converged (the
change a sweep reports is the number of scores that still moved).  The objective per label recorded in the
history is the log joint density of the labels, scores and precisions at the sweep's values, up to
constants (BWA's updates do not maximize one objective, so it need not rise).  An item's posterior is its
scores normalized over the classes; the answer is the top score, ties broken at random.  Items with gold in
the fit have the one-hot of their gold class as their scores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from crowdspark.block import Block
from crowdspark.models.base import Footprint, ItemResult, Model, Schedule, State, Update
from crowdspark.models.common import (
    argmax_random_ties,
    confusion_counts,
    fix_scores,
    per_item_sum,
    tie_uniforms,
    vote_counts,
    worker_label_counts,
)
from crowdspark.stats import Stats
from crowdspark.validation import check_float, check_int

__all__ = ["Bwa", "bwa_scores"]

#: the absolute part of the convergence test of a score (numpy's ``allclose`` default, as the paper's code)
_ATOL = 1e-8
#: floor of ``b_v`` relative to ``a_v``: a crowd whose every item is unanimous keeps finite precisions
_B_FLOOR = 1e-12


def _one_hot(block: Block, n_classes: int) -> np.ndarray:
    """``y`` of every label, float64 (m, C)."""
    y = np.zeros((block.n_labels, n_classes))
    y[np.arange(block.n_labels), block.label] = 1.0
    return y


def _start_scores(block: Block, n_classes: int) -> np.ndarray:
    """``z0``: the majority-vote shares (the gold one-hot for an item with gold in the fit), (n, C)."""
    votes = vote_counts(block, n_classes)
    return fix_scores(block, votes / np.maximum(votes.sum(axis=1, keepdims=True), 1.0), log=False)


def bwa_scores(block: Block, v: np.ndarray, mu: np.ndarray, lam: float) -> np.ndarray:
    """Every item's scores ``z`` given the precisions and class means (the gold one-hot where the fit has it).

    Parameters
    ----------
    v : ndarray of float64, shape (K, C)
    mu : ndarray of float64, shape (C,)
    lam : float

    Returns
    -------
    ndarray of float64, shape (n, C)
    """
    n_classes = mu.shape[0]
    weight = v[block.worker]  # (m, C)
    flat = block.item_of_label.astype(np.int64) * n_classes + block.label
    chosen = np.bincount(flat, weights=weight[np.arange(block.n_labels), block.label],
                         minlength=block.n_items * n_classes).reshape(block.n_items, n_classes)
    z = (lam * mu + chosen) / (lam + per_item_sum(block, weight))
    return fix_scores(block, z, log=False)


def _residuals(block: Block, z: np.ndarray, n_workers: int) -> np.ndarray:
    """``sum over j's labels of (z[i, t] - y[i, j, t])^2`` per worker and class, (K, C)."""
    r2 = (z[block.item_of_label] - _one_hot(block, z.shape[1])) ** 2
    return np.stack([np.bincount(block.worker, weights=r2[:, t], minlength=n_workers) for t in range(z.shape[1])],
                    axis=1)


@dataclass(frozen=True)
class Bwa(Model):
    """BWA: a precision per worker and class, one-versus-rest regressions of the labels; the paper's EM.

    Parameters
    ----------
    n_workers, n_classes : int
        K and C.
    seed : int
        Seed of the tie-breaking draws of the final labels.
    max_iter : int
        Largest number of sweeps.
    tol : float
        A class has converged when no item's score moves by more than this, relative to the score (plus
        1e-8), in a sweep; the fit stops when every class has.
    a_v : float
        ``a_v`` > 0: twice the shape of the Gamma prior of every worker's precision (its weight in labels).
    lam : float
        ``lam`` > 0: the prior precision of every score around its class mean.
    prior_correction : bool
        Scale the prior's mean squared residual by ``4 (1 - 1/C)`` (the paper's correction for C classes).
    """

    n_workers: int
    n_classes: int
    seed: int = 0
    max_iter: int = 500
    tol: float = 1e-3
    a_v: float = 15.0
    lam: float = 1.0
    prior_correction: bool = True

    name: ClassVar[str] = "bwa"
    title: ClassVar[str] = "Bayesian weighted average"
    api_name: ClassVar[str] = "BWA"
    description: ClassVar[str] = (
        "a precision per worker and class; scores are precision-weighted averages of the labels (BWA, WWW 2019)"
    )
    worker_params: ClassVar[tuple[str, ...]] = ("v",)
    shared_params: ClassVar[tuple[str, ...]] = ("mu", "b_v")
    param_domains: ClassVar[dict[str, tuple[str, str]]] = {"v": ("positive", "KC"), "mu": ("probability", "C"),
                                                           "b_v": ("positive", "C")}

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(f"{self.name}.max_iter", self.max_iter, minimum=1)
        check_float(f"{self.name}.tol", self.tol, minimum=0.0)
        check_float(f"{self.name}.a_v", self.a_v, minimum=0.0, strict_min=True)
        check_float(f"{self.name}.lam", self.lam, minimum=0.0, strict_min=True)

    @property
    def schedule(self) -> Schedule:
        # the change is the number of scores that still moved: the fit stops when none did
        return Schedule(max_sweeps=self.max_iter, tol=0.5)

    def footprint(self) -> Footprint:
        k, c = self.n_workers, self.n_classes
        return Footprint(params=k * c * c + 3 * k * c, item=3 * c, label=3 * c,
                         largest=(("workers", k), ("classes", c), ("classes", c)))

    def _precisions(self, residuals: np.ndarray, n_labels: np.ndarray, b_v: np.ndarray) -> np.ndarray:
        return (self.a_v + n_labels[:, None]) / (b_v + residuals)

    def init_block(self, block: Block) -> tuple[State, Stats]:
        z = _start_scores(block, self.n_classes)
        return None, {
            "labels": worker_label_counts(block, self.n_workers),
            "spread": (z * (1.0 - z))[block.item_of_label].sum(axis=0),
            "residuals": _residuals(block, z, self.n_workers),
            "scores": z.sum(axis=0),
            "items": np.array(float(block.n_items)),
        }

    def init_params(self, stats: Stats) -> dict[str, Any]:
        corr = 4.0 * (1.0 - 1.0 / self.n_classes) if self.prior_correction else 1.0
        spread = stats["spread"] / max(float(stats["labels"].sum()), 1.0)
        b_v = np.maximum(self.a_v * corr * spread, _B_FLOOR * self.a_v)
        mu = stats["scores"] / max(float(stats["items"]), 1.0)
        v = self._precisions(stats["residuals"], stats["labels"], b_v)
        return {"v": v, "mu": mu, "b_v": b_v, "labels": stats["labels"], "previous_v": v, "previous_mu": mu,
                "start": np.array(1.0), "moving": np.ones(self.n_classes),
                "confusion": np.zeros((self.n_workers, self.n_classes, self.n_classes))}

    def step_params(self, params: Any) -> Any:
        return {key: value for key, value in params.items() if key != "confusion"}

    def local_step(self, block: Block, state: State, params: Any, sweep: int) -> tuple[State, Stats]:
        z = bwa_scores(block, params["v"], params["mu"], self.lam)
        if params["start"]:
            previous = _start_scores(block, self.n_classes)
        else:
            previous = bwa_scores(block, params["previous_v"], params["previous_mu"], self.lam)
        moved = (np.abs(z - previous) > _ATOL + self.tol * np.abs(z)).sum(axis=0).astype(np.float64)
        return None, {
            "residuals": _residuals(block, z, self.n_workers),
            "scores": z.sum(axis=0),
            "deviation": ((z - params["mu"]) ** 2).sum(axis=0),
            "moved": moved,
            "items": np.array(float(block.n_items)),
            "confusion": confusion_counts(block, _answers(block, z, self.seed), self.n_workers, self.n_classes),
        }

    def global_step(self, stats: Stats, params: Any, sweep: int) -> Update:
        v, mu, labels = params["v"], params["mu"], params["labels"]
        objective = self._log_joint(stats, params) / max(float(labels.sum()), 1.0)
        moving = (params["moving"] > 0) & (stats["moved"] > 0)
        new_v = np.where(moving, self._precisions(stats["residuals"], labels, params["b_v"]), v)
        new_mu = np.where(moving, stats["scores"] / max(float(stats["items"]), 1.0), mu)
        new = dict(params, v=new_v, mu=new_mu, previous_v=v, previous_mu=mu, start=np.array(0.0),
                   moving=moving.astype(np.float64), confusion=stats["confusion"])
        return Update(params=new, objective=objective, change=float(stats["moved"][moving].sum()),
                      extra={"classes_moving": float(moving.sum())})

    def _log_joint(self, stats: Stats, params: Any) -> float:
        """``log p(y, z, v | mu)`` up to constants at the sweep's scores and the precisions they used."""
        v, labels = params["v"], params["labels"]
        log_v = np.log(v)
        prior_v = ((self.a_v / 2.0 - 1.0) * log_v - params["b_v"] / 2.0 * v).sum()
        labels_term = (0.5 * labels[:, None] * log_v - 0.5 * v * stats["residuals"]).sum()
        return float(prior_v + labels_term - 0.5 * self.lam * stats["deviation"].sum())

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        posterior = fix_scores(block, _normalized(bwa_scores(block, params["v"], params["mu"], self.lam)), log=False)
        return ItemResult(posterior=posterior, label=argmax_random_ties(posterior, tie_uniforms(block, self.seed)))

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        """``n_labels``; ``precision`` (K, C), the fitted ``v``; ``confusion`` (K, C, C), each worker's labels
        counted against the items' answers (rows without labels uniform); ``accuracy``, the share of their
        labels equal to the answer.  (BWA's scores are shrunk averages, not calibrated probabilities, so
        counting against them would understate every worker.)"""
        counts = params["confusion"]
        rows = counts.sum(axis=2, keepdims=True)
        confusion = np.where(rows > 0, counts / np.where(rows > 0, rows, 1.0), 1.0 / self.n_classes)
        n_labels = init_stats["labels"]
        right = np.einsum("ktt->k", counts)
        return {
            "n_labels": n_labels.round().astype(np.int64),
            "confusion": confusion,
            "accuracy": np.where(n_labels > 0, right / np.maximum(n_labels, 1.0), 1.0 / self.n_classes),
            "precision": params["v"],
        }

    def export_params(self, params: Any) -> dict[str, np.ndarray]:
        return {"v": params["v"], "mu": params["mu"], "b_v": params["b_v"]}

    def worker_start(self, confusion: np.ndarray, accuracy: np.ndarray) -> dict[str, np.ndarray]:
        """``v`` from the table's confusion matrices: per class t, one over the worker's expected squared
        residual of the indicator of t with uniform classes, ``(sum_s pi[s, t] - 2 pi[t, t] + 1) / C``."""
        pi = np.asarray(confusion, dtype=np.float64)
        diagonal = np.diagonal(pi, axis1=1, axis2=2)
        expected = (pi.sum(axis=1) - 2.0 * diagonal + 1.0) / self.n_classes
        return {"v": 1.0 / np.maximum(expected, 1e-6)}

    def summary(self, params: Any) -> dict[str, Any]:
        return {"class_means": params["mu"].tolist(), "b_v": params["b_v"].tolist()}


def _answers(block: Block, z: np.ndarray, seed: int) -> np.ndarray:
    """The one-hot of every item's answer, the top score (ties broken as the final labels'), (n, C)."""
    answers = np.zeros_like(z)
    answers[np.arange(block.n_items), argmax_random_ties(z, tie_uniforms(block, seed))] = 1.0
    return answers


def _normalized(z: np.ndarray) -> np.ndarray:
    """Scores normalized over the classes (uniform where they sum to 0), (n, C)."""
    total = z.sum(axis=1, keepdims=True)
    return np.where(total > 0, z / np.where(total > 0, total, 1.0), 1.0 / z.shape[1])
