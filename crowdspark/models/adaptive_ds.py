"""Adaptive Dawid-Skene (``ads``): full confusion matrices or one accuracy per worker, whichever the crowd
supports, chosen by an information criterion on the fitted likelihood.

Notation
--------
K workers, C classes, two structures ``m``: ``m = 0`` the full Dawid-Skene model (a confusion matrix
``pi[k, 0]`` per worker, :mod:`crowdspark.models.dawid_skene`), ``m = 1`` the one-coin model (``pi[k, 1]``
with one accuracy on the diagonal, :mod:`crowdspark.models.one_coin`).  ``alpha[m]`` are each structure's
class proportions, ``s`` the smoothing of both M-steps.  ``LL[m] = log p(L | pi[:, m], alpha[m])`` is the
log-likelihood of the labels at structure m's parameters and ``d[m]`` its number of free parameters:
``d[0] = K C (C - 1) + C - 1``, ``d[1] = K + C - 1``.

Both structures are fitted in the same sweeps from the same data: one E-step computes the log scores of every
item under both (``log_pi`` stacked as (K, 2, C, C): one pass over the labels), and the additive statistics
are the expected confusion and class counts of both, (K, 2, C, C) and (2, C).  The driver runs each
structure's M-step and, every sweep, chooses the structure with the lower criterion:
AIC ``-2 LL[m] + 2 d[m]`` (the default) or BIC ``-2 LL[m] + d[m] log(n_labels)``.  The answers are the chosen
structure's posteriors.  The objective the loop watches is the sum of both structures' log posteriors per
label, which EM never decreases.

A run that starts from a previous run's model (``--warm-start``, an incremental night) keeps that run's
structure (``structure_kept`` in ``summary.json``), as ``dds`` keeps its number of levels, so the answers
of a nightly job do not switch models from one night to the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from crowdspark.block import Block
from crowdspark.models.base import Footprint, ItemResult, State, Update
from crowdspark.models.common import (
    argmax_random_ties,
    confusion_counts,
    fix_scores,
    label_loglik,
    normalize_log,
    tie_uniforms,
)
from crowdspark.models.dawid_skene import DawidSkene, ds_e_step, ds_m_step
from crowdspark.models.one_coin import one_coin_log_pi, one_coin_log_prior, one_coin_m_step
from crowdspark.stats import Stats
from crowdspark.validation import check_choice

__all__ = ["AdaptiveDawidSkene", "STRUCTURES", "structure_scores"]

#: the structures, in the order of ``log_pi``'s second axis
STRUCTURES = ("full", "one-coin")
CRITERIA = ("aic", "bic")


def n_free_params(n_workers: int, n_classes: int) -> np.ndarray:
    """``d[m]``, the free parameters of each structure, shape (2,)."""
    shared = n_classes - 1
    return np.array([n_workers * n_classes * (n_classes - 1) + shared, n_workers + shared], dtype=np.float64)


def structure_scores(log_lik: np.ndarray, n_params: np.ndarray, n_labels: float, criterion: str) -> np.ndarray:
    """The criterion of each structure (lower is better).

    Parameters
    ----------
    log_lik : ndarray, shape (M,)
        ``LL[m]``.
    n_params : ndarray, shape (M,)
        ``d[m]``.
    n_labels : float
    criterion : {"aic", "bic"}

    Returns
    -------
    ndarray, shape (M,)
    """
    per_param = 2.0 if criterion == "aic" else float(np.log(max(n_labels, 1.0)))
    return -2.0 * log_lik + per_param * n_params


def _e_step(block: Block, log_pi: np.ndarray, log_alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Posteriors of both structures, (n, 2, C), and their log evidence per item, (n, 2)."""
    return normalize_log(fix_scores(block, log_alpha + label_loglik(block, log_pi)), axis=2)


def _block_stats(block: Block, posterior: np.ndarray, n_workers: int, n_classes: int) -> Stats:
    return {
        "confusion": confusion_counts(block, posterior, n_workers, n_classes),
        "classes": posterior.sum(axis=0),
    }


@dataclass(frozen=True)
class AdaptiveDawidSkene(DawidSkene):
    """Dawid-Skene with full confusion matrices or one accuracy per worker, chosen per run by AIC or BIC.

    Parameters
    ----------
    n_workers, n_classes, seed, max_iter, tol, smoothing : int or float
        As :class:`~crowdspark.models.dawid_skene.DawidSkene` (``smoothing`` in both structures' M-steps).
    criterion : str
        How the structure is chosen: ``"aic"`` (``-2 LL + 2 d``) or ``"bic"`` (``-2 LL + d log n_labels``).
    structure : str
        ``"auto"`` (choose by ``criterion``), or ``"full"`` / ``"one-coin"`` to fix it.
    stop, m_step : str
        ``"change"`` and ``"map"`` only (crowd-kit's rule and M-step are ``ds``'s options).
    """

    criterion: str = "aic"
    structure: str = "auto"

    name: ClassVar[str] = "ads"
    title: ClassVar[str] = "adaptive Dawid-Skene"
    api_name: ClassVar[str] = "AdaptiveDawidSkene"
    description: ClassVar[str] = (
        "full confusion matrices or one accuracy per worker, fitted together and chosen by AIC; "
        "a warm start keeps the previous run's choice"
    )
    shared_params: ClassVar[tuple[str, ...]] = ("log_alpha", "structure")
    param_domains: ClassVar[dict[str, tuple[str, str]]] = {
        "log_pi": ("log_simplex", "K*CC"), "log_alpha": ("log_simplex", "*C"), "structure": ("index", "*")}
    stop_rules: ClassVar[tuple[str, ...]] = ("change",)
    m_steps: ClassVar[tuple[str, ...]] = ("map",)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("ads.criterion", self.criterion, list(CRITERIA))
        check_choice("ads.structure", self.structure, ["auto", *STRUCTURES])

    def _m_step(self, stats: Stats) -> dict[str, np.ndarray]:
        full = ds_m_step(stats["confusion"][:, 0], stats["classes"][0], self.smoothing)
        coin = one_coin_m_step(stats["confusion"][:, 1], stats["classes"][1], self.smoothing)
        return {
            "log_pi": np.stack([full["log_pi"], coin["log_pi"]], axis=1),
            "log_alpha": np.stack([full["log_alpha"], coin["log_alpha"]]),
        }

    def _fixed_structure(self) -> np.ndarray:
        """The configured structure's index, shape (1,), or -1 for ``"auto"``."""
        return np.array([STRUCTURES.index(self.structure) if self.structure != "auto" else -1], dtype=np.int64)

    def footprint(self) -> Footprint:
        """Both structures' confusion matrices (K, 2, C, C) and the scores of both over the true class (n, 2, C)."""
        k, c = self.n_workers, self.n_classes
        return Footprint(params=2 * (k * c * c + c), item=2 * c,
                         largest=(("workers", k), ("structures", 2), ("classes", c), ("classes", c)))

    def init_block(self, block: Block) -> tuple[State, Stats]:
        state, stats = super().init_block(block)  # both structures start from the same majority-vote counts
        return state, {"confusion": np.repeat(stats["confusion"][:, None], 2, axis=1),
                       "classes": np.repeat(stats["classes"][None], 2, axis=0)}

    def init_params(self, stats: Stats) -> dict[str, Any]:
        params = self._m_step(stats)
        params["n_labels"] = float(stats["confusion"][:, 0].sum())
        fixed = self._fixed_structure()
        params["structure"] = np.maximum(fixed, 0)
        params["kept"] = bool(fixed[0] >= 0)
        params["log_lik"] = np.full(2, np.nan)
        return params

    def local_step(self, block: Block, state: State, params: Any, sweep: int) -> tuple[State, Stats]:
        posterior, log_evidence = _e_step(block, params["log_pi"], params["log_alpha"])
        stats = _block_stats(block, posterior, self.n_workers, self.n_classes)
        stats["log_evidence"] = log_evidence.sum(axis=0)
        return None, stats

    def _log_prior(self, params: Any) -> np.ndarray:
        s = self.smoothing
        accuracy = np.exp(np.diagonal(params["log_pi"][:, 1], axis1=1, axis2=2)[:, 0])
        return np.array([
            s * (params["log_pi"][:, 0].sum() + params["log_alpha"][0].sum()),
            one_coin_log_prior(accuracy, params["log_alpha"][1], s),
        ])

    def choose(self, log_lik: np.ndarray, params: Any) -> np.ndarray:
        """The structure's index, shape (1,): the kept or configured one, else the criterion's choice."""
        if params["kept"]:
            return params["structure"]
        scores = structure_scores(log_lik, n_free_params(self.n_workers, self.n_classes), params["n_labels"],
                                  self.criterion)
        return np.array([int(np.argmin(scores))], dtype=np.int64)

    def global_step(self, stats: Stats, params: Any, sweep: int) -> Update:
        log_lik = np.asarray(stats["log_evidence"], dtype=np.float64)
        objective = float((log_lik + self._log_prior(params)).sum() / params["n_labels"])
        new = self._m_step(stats)
        new.update(n_labels=params["n_labels"], kept=params["kept"], log_lik=log_lik,
                   structure=self.choose(log_lik, params))
        return Update(params=new, objective=objective)

    def _chosen(self, params: Any) -> tuple[np.ndarray, np.ndarray]:
        m = int(params["structure"][0])
        return params["log_pi"][:, m], params["log_alpha"][m]

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        posterior, _ = ds_e_step(block, *self._chosen(params))
        label = argmax_random_ties(posterior, tie_uniforms(block, self.seed))
        return ItemResult(posterior=posterior, label=label)

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        log_pi, log_alpha = self._chosen(params)
        pi, alpha = np.exp(log_pi), np.exp(log_alpha)
        return {
            "n_labels": init_stats["confusion"][:, 0].sum(axis=(1, 2)).round().astype(np.int64),
            "confusion": pi,
            "accuracy": np.einsum("t,ktt->k", alpha, pi),
        }

    def export_params(self, params: Any) -> dict[str, np.ndarray]:
        return {key: params[key] for key in ("log_pi", "log_alpha", "structure")}

    def warm_start(self, params: Any, previous: dict[str, np.ndarray], old_index: np.ndarray,
                   workers_only: bool = False) -> Any:
        """As :meth:`Model.warm_start`; a previous run's model (not a worker table) also fixes the structure."""
        new = super().warm_start(params, previous, old_index, workers_only=workers_only)
        if not workers_only and self.structure == "auto":
            new["kept"] = True
        elif self.structure != "auto":
            new["structure"] = self._fixed_structure()
        return new

    def worker_start(self, confusion: np.ndarray, accuracy: np.ndarray) -> dict[str, np.ndarray]:
        """Both structures from the table: its confusion matrices (full) and its accuracies (one-coin)."""
        full = np.log(np.maximum(confusion, 1e-300))
        return {"log_pi": np.stack([full, one_coin_log_pi(np.asarray(accuracy, np.float64), self.n_classes)], 1)}

    def item_responsibilities(self, block: Block, params: Any) -> np.ndarray:
        """Both structures' posteriors over the true class, halved so that each row sums to 1, shape (n, 2 C),
        structure-major."""
        posterior = _e_step(block, params["log_pi"], params["log_alpha"])[0]
        return 0.5 * posterior.reshape(block.n_items, -1)

    def carried_from_sums(self, label_sums: np.ndarray, item_sums: np.ndarray) -> Stats:
        n_workers, _, n_classes = label_sums.shape
        return {"confusion": 2.0 * label_sums.reshape(n_workers, 2, n_classes, n_classes),
                "classes": 2.0 * item_sums.reshape(2, n_classes)}

    def summary(self, params: Any) -> dict[str, Any]:
        m = int(params["structure"][0])
        log_lik = np.asarray(params["log_lik"], dtype=np.float64)
        n_params = n_free_params(self.n_workers, self.n_classes)
        scores = structure_scores(log_lik, n_params, params["n_labels"], self.criterion)
        reason = ("kept from the warm-start model" if params["kept"] and self.structure == "auto" else
                  "set by ads.structure" if self.structure != "auto" else f"lower {self.criterion.upper()}")
        return {
            "class_proportions": np.exp(params["log_alpha"][m]).tolist(),
            "structure": STRUCTURES[m],
            "structure_selection": {
                "criterion": self.criterion,
                "reason": reason,
                "log_likelihood": dict(zip(STRUCTURES, log_lik.tolist())),
                "n_params": dict(zip(STRUCTURES, n_params.tolist())),
                "score": dict(zip(STRUCTURES, scores.tolist())),
            },
        }
