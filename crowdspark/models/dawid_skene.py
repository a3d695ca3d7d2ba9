"""Dawid-Skene EM (Dawid & Skene 1979; paper section 3.3).

Notation
--------
K workers, C classes.  ``pi[k, t, c]`` is the probability that worker k labels c an item whose true class
is t (worker k's confusion matrix); ``alpha[t]`` the class proportions.  ``s`` is the Dirichlet smoothing
pseudo-count added to every confusion cell and every class count in the M-step, which makes the M-step the
MAP estimate under a ``Dirichlet(1 + s)`` prior.

The fit starts from majority-vote shares (an M-step on them), then alternates an E-step on every block
(posteriors over T_i, in log space) and an M-step on the driver (counts -> parameters).  The objective is
the log posterior per label, ``(log p(L | pi, alpha) + s * (sum log pi + sum log alpha)) / n_labels``,
which EM never decreases.  Items with gold in the fit (``Block.fixed``) have ``T_i`` observed: their
posterior is their gold class (:func:`~crowdspark.models.common.fix_scores`) and their term of the
objective ``log p(L_i, T_i | pi, alpha)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from crowdspark.block import Block
from crowdspark.models.base import ItemResult, Model, Schedule, State, Update
from crowdspark.models.common import (
    argmax_random_ties,
    confusion_counts,
    fix_scores,
    label_loglik,
    normalize_log,
    normalize_rows,
    tie_uniforms,
    vote_counts,
)
from crowdspark.stats import Stats
from crowdspark.validation import check_float, check_int

__all__ = ["DawidSkene", "ds_e_step", "ds_m_step"]


def ds_e_step(block: Block, log_pi: np.ndarray, log_alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Posterior over the true class of each item (the gold class for an item with gold in the fit).

    Parameters
    ----------
    log_pi : ndarray, shape (K, C, C)
    log_alpha : ndarray, shape (C,)

    Returns
    -------
    posterior : ndarray, shape (n, C)
    log_evidence : ndarray, shape (n,)
        ``log p(L_i | pi, alpha)`` per item (``log p(L_i, T_i | pi, alpha)`` for an item with gold in the fit).
    """
    return normalize_log(fix_scores(block, log_alpha + label_loglik(block, log_pi)), axis=1)


def ds_m_step(confusion: np.ndarray, classes: np.ndarray, smoothing: float) -> dict[str, np.ndarray]:
    """MAP parameters from expected counts.

    Parameters
    ----------
    confusion : ndarray, shape (K, C, C)
        Expected counts ``N[k, t, c]``.
    classes : ndarray, shape (C,)
        Expected class counts.
    smoothing : float
        Pseudo-count ``s``.

    Returns
    -------
    dict with ``log_pi`` (K, C, C) and ``log_alpha`` (C,)
    """
    return {
        "log_pi": np.log(normalize_rows(confusion, smoothing)),
        "log_alpha": np.log(normalize_rows(classes, smoothing)),
    }


def _block_stats(block: Block, posterior: np.ndarray, n_workers: int, n_classes: int) -> Stats:
    return {
        "confusion": confusion_counts(block, posterior, n_workers, n_classes),
        "classes": posterior.sum(axis=0),
    }


@dataclass(frozen=True)
class DawidSkene(Model):
    """Dawid-Skene EM, initialized from majority vote.

    Parameters
    ----------
    n_workers, n_classes : int
        K and C.
    seed : int
        Seed of the tie-breaking draws of the final labels.
    max_iter : int
        Largest number of EM iterations.
    tol : float
        Stop when the objective per label changes by less than this.
    smoothing : float
        Dirichlet pseudo-count ``s`` > 0.
    """

    n_workers: int
    n_classes: int
    seed: int = 0
    max_iter: int = 100
    tol: float = 1e-6
    smoothing: float = 0.5

    name: ClassVar[str] = "ds"
    title: ClassVar[str] = "Dawid-Skene"
    api_name: ClassVar[str] = "DawidSkene"
    description: ClassVar[str] = (
        "one confusion matrix per worker; MAP EM from majority vote"
    )
    worker_params: ClassVar[tuple[str, ...]] = ("log_pi",)
    shared_params: ClassVar[tuple[str, ...]] = ("log_alpha",)
    param_domains: ClassVar[dict[str, tuple[str, str]]] = {"log_pi": ("log_simplex", "KCC"),
                                                           "log_alpha": ("log_simplex", "C")}
    carried_stats: ClassVar[tuple[str, ...]] = ("confusion", "classes")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(f"{self.name}.max_iter", self.max_iter, minimum=1)
        check_float(f"{self.name}.tol", self.tol, minimum=0.0)
        check_float(f"{self.name}.smoothing", self.smoothing, minimum=0.0, strict_min=True)

    @property
    def schedule(self) -> Schedule:
        return Schedule(max_sweeps=self.max_iter, tol=self.tol)

    def init_block(self, block: Block) -> tuple[State, Stats]:
        votes = vote_counts(block, self.n_classes)
        shares = fix_scores(block, votes / votes.sum(axis=1, keepdims=True), log=False)
        return None, _block_stats(block, shares, self.n_workers, self.n_classes)

    def init_params(self, stats: Stats) -> dict[str, Any]:
        params = ds_m_step(stats["confusion"], stats["classes"], self.smoothing)
        params["n_labels"] = float(stats["confusion"].sum())
        return params

    def local_step(self, block: Block, state: State, params: Any, sweep: int) -> tuple[State, Stats]:
        posterior, log_evidence = ds_e_step(block, params["log_pi"], params["log_alpha"])
        stats = _block_stats(block, posterior, self.n_workers, self.n_classes)
        stats["log_evidence"] = np.array(log_evidence.sum())
        return None, stats

    def global_step(self, stats: Stats, params: Any, sweep: int) -> Update:
        s = self.smoothing
        log_prior = s * (params["log_pi"].sum() + params["log_alpha"].sum())
        objective = float((stats["log_evidence"] + log_prior) / params["n_labels"])
        new = ds_m_step(stats["confusion"], stats["classes"], s)
        new["n_labels"] = params["n_labels"]
        return Update(params=new, objective=objective)

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        posterior, _ = ds_e_step(block, params["log_pi"], params["log_alpha"])
        label = argmax_random_ties(posterior, tie_uniforms(block, self.seed))
        return ItemResult(posterior=posterior, label=label)

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        pi = np.exp(params["log_pi"])
        alpha = np.exp(params["log_alpha"])
        return {
            "n_labels": init_stats["confusion"].sum(axis=(1, 2)).round().astype(np.int64),
            "confusion": pi,
            "accuracy": np.einsum("t,ktt->k", alpha, pi),
        }

    def export_params(self, params: Any) -> dict[str, np.ndarray]:
        return {"log_pi": params["log_pi"], "log_alpha": params["log_alpha"]}

    def worker_start(self, confusion: np.ndarray, accuracy: np.ndarray) -> dict[str, np.ndarray]:
        """``log_pi`` from the table's confusion matrices (a zero cell floored at 1e-300)."""
        return {"log_pi": np.log(np.maximum(confusion, 1e-300))}

    def item_responsibilities(self, block: Block, params: Any) -> np.ndarray:
        """The posterior over each item's true class, shape (n, C)."""
        return ds_e_step(block, params["log_pi"], params["log_alpha"])[0]

    def carried_from_sums(self, label_sums: np.ndarray, item_sums: np.ndarray) -> Stats:
        return {"confusion": label_sums, "classes": item_sums}

    def summary(self, params: Any) -> dict[str, Any]:
        return {"class_proportions": np.exp(params["log_alpha"]).tolist()}
