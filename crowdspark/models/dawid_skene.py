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

crowd-kit's DawidSkene, as options (``stop="crowd-kit"``, ``m_step="crowd-kit"``; the pandas API's defaults)
------------------------------------------------------------------------------------------------------------
crowd-kit 1.4 starts from the same majority-vote shares and alternates the same E- and M-steps, with two
differences.  Its M-step (``m_step="crowd-kit"``, :func:`crowdkit_m_step`) has no prior: each expected count
of a label worker k gave is floored at ``1e-10`` and ``pi[k, t]`` is normalized over those labels only (so a
true class on which k's items carry no mass gets the uniform distribution over the labels k gave, not over
the C classes), and ``alpha`` is the mean posterior, floored at ``1e-10`` where it is used.  Its loop
(``stop="crowd-kit"``) runs at most ``max_iter`` iterations of E-step then M-step and computes after each
its objective, :func:`crowdkit_objective` (the expected log-likelihood of the labels, every label adding
its item's log class proportions, at the new parameters under the E-step's posteriors, plus their entropy,
over the number of labels); it stops at the first iteration whose objective rises by less than ``tol``
(1e-5) or falls (``if new_loss - loss < tol: break``, the first iteration compared with ``-inf``), and
answers with that iteration's E-step; its ``errors_`` and ``priors_`` are that iteration's M-step.
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
from crowdspark.validation import check_choice, check_float, check_int

__all__ = ["DawidSkene", "crowdkit_m_step", "crowdkit_objective", "ds_e_step", "ds_m_step"]

#: the stopping rules of ``ds.stop`` (and of the models built on ds that have crowd-kit's rule)
STOP_RULES = ("change", "crowd-kit")
#: the M-steps of ``ds.m_step``
M_STEPS = ("map", "crowd-kit")
#: crowd-kit's floor of its probabilities (``_EPS`` of its Dawid-Skene module)
CROWDKIT_EPS = 1e-10


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


def crowdkit_m_step(confusion: np.ndarray, classes: np.ndarray) -> dict[str, np.ndarray]:
    """crowd-kit's M-step: maximum-likelihood parameters, each count floored at ``1e-10``.

    ``pi[k, t]`` is normalized over the labels worker k gave (those with counts summed over t above one half:
    each label adds 1 there); the labels k never gave get probability 0 (``log`` floored at ``1e-300``: no
    label of k uses them).  ``alpha`` is the mean posterior, its log floored at ``log(1e-10)`` (crowd-kit
    floors the proportions in its E-step, without normalizing again).

    Parameters
    ----------
    confusion : ndarray, shape (K, C, C)
        Expected counts ``N[k, t, c]``.
    classes : ndarray, shape (C,)
        Expected class counts (they sum to the number of items).

    Returns
    -------
    dict with ``log_pi`` (K, C, C) and ``log_alpha`` (C,)
    """
    given = confusion.sum(axis=1, keepdims=True) > 0.5  # (K, 1, C)
    counts = np.where(given, np.maximum(confusion, CROWDKIT_EPS), 0.0)
    pi = counts / counts.sum(axis=-1, keepdims=True)
    alpha = classes / classes.sum()
    return {"log_pi": np.log(np.maximum(pi, 1e-300)), "log_alpha": np.log(np.maximum(alpha, CROWDKIT_EPS))}


def crowdkit_objective(stats: Stats, old: dict[str, Any], new: dict[str, Any]) -> float:
    """crowd-kit's objective after a sweep (its ``_evidence_lower_bound`` over the number of labels): the
    expected log-likelihood of the labels and the log class proportions under the sweep's posteriors ``q``,
    with the new parameters, where every label (not every item) adds its item's log proportions, plus the
    entropy of ``q``.

    ``q`` is the posterior under the ``old`` parameters, so its entropy is ``log p(L | old)`` less the
    expected complete log-likelihood under ``old``: everything comes from the sweep's summed statistics.

    Parameters
    ----------
    stats : Stats
        The sweep's ``confusion`` (K, C, C), ``classes`` (C,) and ``log_evidence`` (scalar).
    old, new : dict
        ``log_pi`` (K, C, C) and ``log_alpha`` (C,) before and after the sweep's M-step; ``n_labels``.

    Returns
    -------
    float
    """
    confusion, floor = stats["confusion"], np.log(CROWDKIT_EPS)  # crowd-kit clips its probabilities at 1e-10
    entropy = stats["log_evidence"] - np.sum(confusion * old["log_pi"]) - stats["classes"] @ old["log_alpha"]
    expected = (np.sum(confusion * np.maximum(new["log_pi"], floor))
                + confusion.sum(axis=(0, 2)) @ np.maximum(new["log_alpha"], floor))
    return float((expected + entropy) / old["n_labels"])


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
        Stop when the objective per label changes by less than this (with ``stop="crowd-kit"``: when
        crowd-kit's objective rises by less than this, or falls).
    smoothing : float
        Dirichlet pseudo-count ``s`` > 0 (of the ``map`` M-step).
    stop : {"change", "crowd-kit"}
        The convergence test.  ``"change"``: the objective (the log posterior per label) moves by less than
        ``tol``.  ``"crowd-kit"``: crowd-kit's: stop at the first iteration where crowd-kit's objective
        (:func:`crowdkit_objective`) rises by less than ``tol`` or falls, and answer with that iteration's
        E-step.
    m_step : {"map", "crowd-kit"}
        ``"map"``: the MAP estimate with ``smoothing``.  ``"crowd-kit"``: crowd-kit's maximum-likelihood
        M-step (:func:`crowdkit_m_step`; ``smoothing`` is not used).
    """

    n_workers: int
    n_classes: int
    seed: int = 0
    max_iter: int = 100
    tol: float = 1e-6
    smoothing: float = 0.5
    stop: str = "change"
    m_step: str = "map"

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
    #: the values of ``stop`` and ``m_step`` the model has (a model built on ds may have fewer)
    stop_rules: ClassVar[tuple[str, ...]] = STOP_RULES
    m_steps: ClassVar[tuple[str, ...]] = M_STEPS

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(f"{self.name}.max_iter", self.max_iter, minimum=1)
        check_float(f"{self.name}.tol", self.tol, minimum=0.0)
        check_float(f"{self.name}.smoothing", self.smoothing, minimum=0.0, strict_min=True)
        check_choice(f"{self.name}.stop", self.stop, self.stop_rules)
        check_choice(f"{self.name}.m_step", self.m_step, self.m_steps)

    @property
    def schedule(self) -> Schedule:
        return Schedule(max_sweeps=self.max_iter, tol=self.tol)  # crowd-kit's rule: the model reports the change

    def _m_step(self, stats: Stats) -> dict[str, np.ndarray]:
        """The M-step chosen by ``m_step``, with ``n_labels`` left to the caller."""
        if self.m_step == "crowd-kit":
            return crowdkit_m_step(stats["confusion"], stats["classes"])
        return ds_m_step(stats["confusion"], stats["classes"], self.smoothing)

    def init_block(self, block: Block) -> tuple[State, Stats]:
        votes = vote_counts(block, self.n_classes)
        shares = fix_scores(block, votes / votes.sum(axis=1, keepdims=True), log=False)
        return None, _block_stats(block, shares, self.n_workers, self.n_classes)

    def init_params(self, stats: Stats) -> dict[str, Any]:
        params = self._m_step(stats)
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
        return self._update(stats, params, self._m_step(stats), objective, sweep)

    def _update(self, stats: Stats, params: Any, new: dict[str, Any], objective: float, sweep: int) -> Update:
        """The sweep's update from the M-step's parameters ``new``.

        With ``stop="crowd-kit"`` the objective is crowd-kit's and the change the model reports is its signed
        rise since the last sweep (``inf`` at the first), so a fall stops the fit too; ``new`` keeps the
        parameters of the sweep's E-step (``answer_log_pi``, ``answer_log_alpha``), whose posteriors are the
        answers, as crowd-kit's are its last E-step's (at convergence and at ``max_iter``), while the worker
        table and the class proportions are the last M-step's (crowd-kit's ``errors_`` and ``priors_``).
        """
        new["n_labels"] = params["n_labels"]
        if self.stop != "crowd-kit":
            return Update(params=new, objective=objective)
        objective = crowdkit_objective(stats, params, new)
        previous = params.get("crowdkit_objective")
        new.update(crowdkit_objective=objective, answer_log_pi=params["log_pi"], answer_log_alpha=params["log_alpha"])
        return Update(params=new, objective=objective,
                      change=float("inf") if previous is None else objective - float(previous))

    def step_params(self, params: Any) -> Any:
        """``log_pi`` and ``log_alpha`` (the E-step's), without the answers' parameters."""
        return {key: value for key, value in params.items() if not key.startswith("answer_")}

    def _answer_params(self, params: Any) -> tuple[np.ndarray, np.ndarray]:
        """The parameters of the E-step that gives the answers: the last sweep's with ``stop="crowd-kit"``,
        else the last M-step's."""
        if "answer_log_pi" in params:
            return params["answer_log_pi"], params["answer_log_alpha"]
        return params["log_pi"], params["log_alpha"]

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        posterior, _ = ds_e_step(block, *self._answer_params(params))
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
        return ds_e_step(block, *self._answer_params(params))[0]

    def carried_from_sums(self, label_sums: np.ndarray, item_sums: np.ndarray) -> Stats:
        return {"confusion": label_sums, "classes": item_sums}

    def summary(self, params: Any) -> dict[str, Any]:
        return {"class_proportions": np.exp(params["log_alpha"]).tolist()}
