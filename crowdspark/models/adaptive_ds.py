"""Adaptive Dawid-Skene (``ads``): full confusion matrices or one accuracy per worker, whichever the crowd
supports, chosen by an information criterion on the fitted likelihood or by how well each predicts labels it
was not fitted on.

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
structure's M-step.  The answers are the chosen structure's posteriors.  The objective the loop watches is the
sum of both structures' log posteriors per label, which EM never decreases.

The structure is chosen by ``criterion``:

- ``"aic"`` (the default): ``-2 LL[m] + 2 d[m]``; ``"bic"``: ``-2 LL[m] + d[m] log(n_labels)`` (every sweep,
  one stage).
- ``"heldout"``: once both structures have converged on all labels, a second stage of the fit
  (:meth:`AdaptiveDawidSkene.next_stage`) fits both again on each of F folds' training labels
  (:mod:`crowdspark.models.holdout`: a fold is a mask on labels keyed by (seed, item, worker)), started from
  the all-labels fit, for ``holdout_iter`` sweeps, and keeps the structure with the fewest parameters whose
  held-out label log-likelihood ``HLL[m]`` is within one standard error of the best
  (:func:`~crowdspark.models.holdout.one_se_choice`).  The all-labels parameters are left as they were: no
  refit is needed.

With ``shrinkage = "empirical-bayes"`` the full structure's matrices are shrunk towards each worker's one-coin
matrix by a Dirichlet prior whose strength per true class is learned from the crowd
(:mod:`crowdspark.models.shrinkage`): a worker with few labels keeps close to one accuracy, a prolific one its
own matrix; AIC and BIC then charge the shrunk matrices their effective number of parameters.

A candidate structure is one entry of :data:`CANDIDATES` (its M-step from expected counts and its number of
free parameters); the E-step, the folds and the choice are written once for all of them.

A run that starts from a previous run's model (``--warm-start``, an incremental night) keeps that run's
structure (``structure_kept`` in ``summary.json``), as ``dds`` keeps its number of levels, so the answers
of a nightly job do not switch models from one night to the next.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from collections.abc import Callable
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
from crowdspark.models.base import Schedule
from crowdspark.models.dawid_skene import DawidSkene, ds_e_step, ds_m_step
from crowdspark.models.holdout import fold_stats, one_se_choice
from crowdspark.models.one_coin import one_coin_log_pi, one_coin_log_prior, one_coin_m_step
from crowdspark.models.shrinkage import effective_worker_params, shrunk_m_step
from crowdspark.stats import Stats
from crowdspark.validation import check_choice, check_int

__all__ = ["AdaptiveDawidSkene", "STRUCTURES", "structure_scores"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    """A worker structure ``ads`` can choose: its M-step and its number of free parameters.

    Attributes
    ----------
    m_step : callable
        ``(confusion (K, C, C), classes (C,), smoothing) -> {"log_pi": (K, C, C), "log_alpha": (C,)}``.
    n_worker_params : callable
        ``(C) ->`` free parameters per worker.
    """

    m_step: Callable[[np.ndarray, np.ndarray, float], dict[str, np.ndarray]]
    n_worker_params: Callable[[int], int]


#: the candidate structures, in the order of ``log_pi``'s second axis
CANDIDATES: dict[str, Candidate] = {
    "full": Candidate(ds_m_step, lambda c: c * (c - 1)),
    "one-coin": Candidate(one_coin_m_step, lambda c: 1),
}
STRUCTURES = tuple(CANDIDATES)
#: the candidates from the fewest parameters per worker to the most (the one-standard-error rule's order)
SIMPLEST_FIRST = np.argsort([cand.n_worker_params(3) for cand in CANDIDATES.values()], kind="stable")
CRITERIA = ("aic", "bic", "heldout")
SHRINKAGES = ("none", "empirical-bayes")


def n_free_params(n_workers: int, n_classes: int) -> np.ndarray:
    """``d[m]``, the free parameters of each structure, shape (M,)."""
    shared = n_classes - 1
    return np.array([n_workers * cand.n_worker_params(n_classes) + shared for cand in CANDIDATES.values()],
                    dtype=np.float64)


def candidates_m_step(confusion: np.ndarray, classes: np.ndarray, smoothing: float) -> dict[str, np.ndarray]:
    """Every candidate's M-step.

    Parameters
    ----------
    confusion : ndarray, shape (K, M, C, C)
    classes : ndarray, shape (M, C)
    smoothing : float

    Returns
    -------
    dict with ``log_pi`` (K, M, C, C) and ``log_alpha`` (M, C)
    """
    fits = [cand.m_step(confusion[:, m], classes[m], smoothing) for m, cand in enumerate(CANDIDATES.values())]
    return {"log_pi": np.stack([f["log_pi"] for f in fits], axis=1),
            "log_alpha": np.stack([f["log_alpha"] for f in fits])}


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
    """Dawid-Skene with full confusion matrices or one accuracy per worker, chosen per run by AIC (or BIC, or
    held-out label likelihood).

    Parameters
    ----------
    n_workers, n_classes, seed, max_iter, tol, smoothing : int or float
        As :class:`~crowdspark.models.dawid_skene.DawidSkene` (``smoothing`` in both structures' M-steps;
        ``max_iter`` bounds the fit on all labels, the held-out stage adds at most ``holdout_iter`` sweeps).
    criterion : str
        How the structure is chosen: ``"aic"`` (``-2 LL + 2 d``), ``"bic"`` (``-2 LL + d log n_labels``) or
        ``"heldout"`` (held-out label log-likelihood over ``folds`` folds, the one-standard-error rule).
    structure : str
        ``"auto"`` (choose by ``criterion``), or ``"full"`` / ``"one-coin"`` to fix it.
    folds : int
        F in [2, 20], the folds of ``"heldout"``: each fold's fit leaves out about 1/F of the labels.
    holdout_iter : int
        Sweeps of the folds' fits, started from the fit on all labels (at least 2: the held-out likelihood is
        scored at the last sweep's E-step, whose parameters the previous sweep fitted without the fold).
    stop, m_step : str
        ``"change"`` and ``"map"`` only (crowd-kit's rule and M-step are ``ds``'s options).
    shrinkage : str
        ``"none"``, or ``"empirical-bayes"``: the full matrices shrunk towards each worker's one-coin matrix,
        the strength per class learned from the crowd (a worker with few labels stays near one accuracy).
    """

    criterion: str = "aic"
    structure: str = "auto"
    folds: int = 5
    holdout_iter: int = 5
    shrinkage: str = "none"

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
        check_int("ads.folds", self.folds, minimum=2, maximum=20)
        check_int("ads.holdout_iter", self.holdout_iter, minimum=2)
        check_choice("ads.shrinkage", self.shrinkage, list(SHRINKAGES))

    @property
    def schedule(self) -> Schedule:
        """``max_iter`` sweeps on all labels, and ``holdout_iter`` more for the held-out stage."""
        extra = self.holdout_iter if self._holds_out() else 0
        return Schedule(max_sweeps=self.max_iter + extra, tol=self.tol)

    def _holds_out(self) -> bool:
        """Whether a cold run of this configuration chooses the structure by held-out likelihood."""
        return self.criterion == "heldout" and self.structure == "auto"

    def _m_step(self, stats: Stats) -> dict[str, Any]:
        return self._fit_structures(stats["confusion"], stats["classes"])

    def _fit_structures(self, confusion: np.ndarray, classes: np.ndarray) -> dict[str, Any]:
        """Every structure's M-step, ``log_pi`` (K, M, C, C) and ``log_alpha`` (M, C); with shrinkage, the full
        structure's matrices shrunk, its strength ``A`` (C,) and its effective worker parameters (a float)."""
        fits: dict[str, Any] = candidates_m_step(confusion, classes, self.smoothing)
        if self.shrinkage == "empirical-bayes":
            shrunk = shrunk_m_step(confusion[:, 0], classes[0], self.smoothing)
            fits["log_pi"][:, 0] = shrunk["log_pi"]
            fits["strength"] = shrunk["strength"]
            fits["worker_params"] = effective_worker_params(confusion[:, 0], shrunk["strength"])
        return fits

    def _n_params(self, params: Any) -> np.ndarray:
        """``d[m]``, shape (M,): the shrunk full structure counts its effective parameters."""
        n_params = n_free_params(self.n_workers, self.n_classes)
        if "worker_params" in params:
            n_params[0] = params["worker_params"] + self.n_classes - 1
        return n_params

    def _fixed_structure(self) -> np.ndarray:
        """The configured structure's index, shape (1,), or -1 for ``"auto"``."""
        return np.array([STRUCTURES.index(self.structure) if self.structure != "auto" else -1], dtype=np.int64)

    def footprint(self) -> Footprint:
        """Both structures' confusion matrices (K, 2, C, C) and the scores of both over the true class (n, 2, C);
        with the held-out stage, those of the F folds' fits too."""
        k, c, m = self.n_workers, self.n_classes, len(STRUCTURES)
        if not self._holds_out():
            return Footprint(params=m * (k * c * c + c), item=m * c,
                             largest=(("workers", k), ("structures", m), ("classes", c), ("classes", c)))
        f = 1 + self.folds  # the held-out stage adds every fold's fit
        return Footprint(params=f * m * (k * c * c + c), item=f * m * c,
                         largest=(("workers", k), ("fits", f), ("structures", m), ("classes", c), ("classes", c)))

    def init_block(self, block: Block) -> tuple[State, Stats]:
        state, stats = super().init_block(block)  # both structures start from the same majority-vote counts
        return state, {"confusion": np.repeat(stats["confusion"][:, None], len(STRUCTURES), axis=1),
                       "classes": np.repeat(stats["classes"][None], len(STRUCTURES), axis=0)}

    def init_params(self, stats: Stats) -> dict[str, Any]:
        params = self._m_step(stats)
        params["n_labels"] = float(stats["confusion"][:, 0].sum())
        fixed = self._fixed_structure()
        params["structure"] = np.maximum(fixed, 0)
        params["kept"] = bool(fixed[0] >= 0)
        params["log_lik"] = np.full(len(STRUCTURES), np.nan)
        params["stage"] = 0
        return params

    def local_step(self, block: Block, state: State, params: Any, sweep: int) -> tuple[State, Stats]:
        if params["stage"] == 1:
            return None, fold_stats(block, params["fold_log_pi"], params["fold_log_alpha"], self.seed)
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
        """The structure's index, shape (1,): the kept or configured one, else the information criterion's
        choice (AIC for ``"heldout"`` until its held-out stage has chosen)."""
        if params["kept"]:
            return params["structure"]
        criterion = "aic" if self.criterion == "heldout" else self.criterion
        scores = structure_scores(log_lik, self._n_params(params), params["n_labels"], criterion)
        return np.array([int(np.argmin(scores))], dtype=np.int64)

    def global_step(self, stats: Stats, params: Any, sweep: int) -> Update:
        if params["stage"] == 1:
            return self._heldout_step(stats, params)
        log_lik = np.asarray(stats["log_evidence"], dtype=np.float64)
        objective = float((log_lik + self._log_prior(params)).sum() / params["n_labels"])
        new = self._m_step(stats)
        new.update(n_labels=params["n_labels"], kept=params["kept"], log_lik=log_lik,
                   structure=self.choose(log_lik, params), stage=0)
        change = None
        if sweep >= self.max_iter and self._opens_heldout(params):
            # out of sweeps on all labels: the held-out stage still runs (its own holdout_iter sweeps)
            log.warning("ads: the fit on all labels reached max_iter=%d before converging; the held-out stage "
                        "starts from it", self.max_iter)
            new["full_fit_stopped"] = True
            change = -np.inf
        return Update(params=new, objective=objective, change=change)

    def _opens_heldout(self, params: Any) -> bool:
        return self.criterion == "heldout" and not params["kept"]

    def next_stage(self, params: Any) -> Any | None:
        """Once the fit on all labels has converged, with ``criterion = "heldout"`` and no kept structure: the
        held-out stage, every fold's fit started from the fit on all labels; ``None`` after it."""
        if params["stage"] != 0 or not self._opens_heldout(params):
            return None
        new = dict(params)
        new["stage"] = 1
        new["holdout_sweeps"] = 0
        new["fold_log_pi"] = np.repeat(params["log_pi"][:, None], self.folds, axis=1)
        new["fold_log_alpha"] = np.repeat(params["log_alpha"][None], self.folds, axis=0)
        log.info("ads: fit on all labels converged; fitting %d folds for the held-out likelihood", self.folds)
        return new

    def _heldout_step(self, stats: Stats, params: Any) -> Update:
        """A sweep of the held-out stage: every fold's M-step, the held-out log-likelihood of the E-step's
        parameters and the structure it chooses; the all-labels parameters stay as they are."""
        fits = [self._fit_structures(stats["fold_confusion"][:, f], stats["fold_classes"][f])
                for f in range(self.folds)]
        heldout = np.asarray(stats["heldout"], dtype=np.float64)
        new = dict(params)
        new["fold_log_pi"] = np.stack([fit["log_pi"] for fit in fits], axis=1)
        new["fold_log_alpha"] = np.stack([fit["log_alpha"] for fit in fits])
        new["heldout"] = heldout
        choice, standard_error = one_se_choice(heldout.sum(axis=0), np.asarray(stats["heldout_cross"]),
                                               float(stats["heldout_items"]), SIMPLEST_FIRST)
        new["heldout_se"] = standard_error
        new["structure"] = np.array([choice], dtype=np.int64)
        new["holdout_sweeps"] = params["holdout_sweeps"] + 1
        objective = float(np.asarray(stats["fold_evidence"]).sum() / max(params["n_labels"], 1.0))
        done = new["holdout_sweeps"] >= self.holdout_iter
        extra = {"stage": 1.0, **{f"heldout_{name}": float(v) / max(params["n_labels"], 1.0)
                                  for name, v in zip(STRUCTURES, heldout.sum(axis=0))}}
        return Update(params=new, objective=objective, change=-np.inf if done else None, extra=extra)

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
        n_params = self._n_params(params)
        heldout = params.get("heldout")
        if self.criterion == "heldout":
            # lower is better, as the information criteria: minus the held-out log-likelihood
            scores = (-np.asarray(heldout).sum(axis=0) if heldout is not None
                      else np.full(len(STRUCTURES), np.nan))
            chosen_by = "held-out log-likelihood (one-standard-error rule)"
        else:
            scores = structure_scores(log_lik, n_params, params["n_labels"], self.criterion)
            chosen_by = f"lower {self.criterion.upper()}"
        reason = ("kept from the warm-start model" if params["kept"] and self.structure == "auto" else
                  "set by ads.structure" if self.structure != "auto" else chosen_by)
        selection: dict[str, Any] = {
            "criterion": self.criterion,
            "reason": reason,
            "log_likelihood": dict(zip(STRUCTURES, log_lik.tolist())),
            "n_params": dict(zip(STRUCTURES, n_params.tolist())),
            "score": dict(zip(STRUCTURES, scores.tolist())),
        }
        if "strength" in params:
            selection["shrinkage"] = {"method": self.shrinkage,
                                      "strength": np.asarray(params["strength"], dtype=np.float64).tolist()}
        if heldout is not None:
            selection["heldout"] = {
                "folds": self.folds,
                "sweeps": int(params["holdout_sweeps"]),
                "log_likelihood": dict(zip(STRUCTURES, np.asarray(heldout).sum(axis=0).tolist())),
                "standard_error": dict(zip(STRUCTURES, np.asarray(params["heldout_se"]).tolist())),
                "full_fit_converged": not params.get("full_fit_stopped", False),
            }
        return {
            "class_proportions": np.exp(params["log_alpha"][m]).tolist(),
            "structure": STRUCTURES[m],
            "structure_selection": selection,
        }
