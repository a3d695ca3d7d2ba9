"""GLAD (Whitehill, Ruvolo, Wu, Bergsma & Movellan 2009) for C classes: worker abilities, item difficulties.

Notation
--------
K workers, C classes; in a block n items and m labels.  Worker k has an ability ``alpha[k]`` (any real);
item i a log inverse difficulty ``beta[i]`` (crowd-kit's parameterization: the inverse difficulty is
``exp(beta[i]) > 0``).  For a label of worker k on item i, ``x = alpha[k] exp(beta[i])`` and ``s = sigmoid(x)``:
the label is the true class with probability ``s``, and each other class with ``(1 - s) / (C - 1)``.  The
true classes have the fixed prior ``1 / C`` (crowd-kit's ``labels_priors`` default); ``alpha`` and ``beta`` have
normal priors N(``alpha_prior_mean``, 1) and N(``beta_prior_mean``, 1).

EM on the blocks
----------------
A sweep is one EM iteration.  On each block (executors), with the broadcast abilities and the block's own
difficulties: the E-step gives every item's posterior ``q`` over its true class; then the M-step of the
block's difficulties (per-item parameters, kept with the block as its state: ``stateful``) takes
``beta_steps`` Fisher-scoring steps on each item's expected complete log-likelihood with its prior (each step
at most 1 in absolute value); then the block adds, per worker, the gradient ``sum w (p - s)`` and the
Fisher information ``sum w^2 s (1 - s)`` of the abilities at the new difficulties (``w = exp(beta)``, ``p =
q[item, label]``).  The driver takes one Newton step per ability with its prior: the expected complete
log-likelihood is concave in ``alpha`` for fixed ``beta``, so the step uses its exact Hessian.  crowd-kit
optimizes ``alpha`` and ``beta`` jointly by conjugate gradients (at most 25 steps per EM iteration); the
fixed points are the same (the MAP of the same objective), the paths differ.

The objective per label is the log marginal likelihood of the labels plus the log priors of ``alpha`` and
``beta`` (up to constants), at the parameters the sweep's E-step used; the fit stops when it changes by
less than ``tol``.  The final posteriors use the last parameters; ties between top posteriors are broken by
``ties``.  Items with gold in the fit have their posterior clamped in the E-step, so abilities and
difficulties learn from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from crowdspark.block import Block
from crowdspark.models.base import ItemResult, Model, Preset, Schedule, State, Update
from crowdspark.models.common import (
    class_match_scores,
    fix_scores,
    normalize_log,
    per_item_sum,
    worker_label_counts,
)
from crowdspark.models.weighted_vote import check_ties, first_ties, pick_labels
from crowdspark.stats import Stats
from crowdspark.validation import check_float, check_int

__all__ = ["Glad"]

#: largest change of an item's ``beta`` in one Fisher-scoring step
_MAX_BETA_STEP = 1.0
#: largest change of a worker's ``alpha`` in one Newton step
_MAX_ALPHA_STEP = 2.0


def _softplus(x: np.ndarray) -> np.ndarray:
    """``log(1 + exp(x))``, stable for any x."""
    return np.logaddexp(0.0, x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


@dataclass(frozen=True)
class Glad(Model):
    """GLAD: each worker an ability, each item a difficulty; EM with Newton M-steps.

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
    alpha_prior_mean : float
        Mean of the normal prior N(mean, 1) of every worker's ability; abilities start there.
    beta_prior_mean : float
        Mean of the normal prior N(mean, 1) of every item's log inverse difficulty; they start there.
    beta_steps : int
        Fisher-scoring steps of the items' difficulties per EM iteration.
    ties : str
        How ties between top posteriors are broken: ``"random"`` (a draw from the seed and the item) or
        ``"first"`` (the first class in the class order, as crowd-kit does).
    """

    n_workers: int
    n_classes: int
    seed: int = 0
    max_iter: int = 100
    tol: float = 1e-5
    alpha_prior_mean: float = 1.0
    beta_prior_mean: float = 1.0
    beta_steps: int = 3
    ties: str = "random"

    name: ClassVar[str] = "glad"
    title: ClassVar[str] = "GLAD"
    api_name: ClassVar[str] = "GLAD"
    description: ClassVar[str] = (
        "worker abilities and item difficulties (Whitehill et al. 2009); EM with Newton M-steps"
    )
    stateful: ClassVar[bool] = True
    item_extras: ClassVar[dict[str, str]] = {"beta": "double"}
    worker_params: ClassVar[tuple[str, ...]] = ("alpha",)
    api_attributes: ClassVar[dict[str, tuple[str, str]]] = {"alphas_": ("workers", "alpha"),
                                                           "betas_": ("items", "beta")}

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("glad.max_iter", self.max_iter, minimum=1)
        check_float("glad.tol", self.tol, minimum=0.0)
        check_float("glad.alpha_prior_mean", self.alpha_prior_mean)
        check_float("glad.beta_prior_mean", self.beta_prior_mean)
        check_int("glad.beta_steps", self.beta_steps, minimum=1)
        check_ties(self.name, self.ties)

    @property
    def schedule(self) -> Schedule:
        return Schedule(max_sweeps=self.max_iter, tol=self.tol)

    def _beta(self, block: Block, state: State) -> np.ndarray:
        """The block's ``beta`` (n,): its state, or the prior mean for items never fitted."""
        if state is None:
            return np.full(block.n_items, self.beta_prior_mean)
        return state["beta"]

    def _log_scores(self, block: Block, alpha: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log joint scores over the true class (n, C), gold imposed, and ``x`` per label (m,)."""
        x = alpha[block.worker] * np.exp(beta)[block.item_of_label]
        log_right = -_softplus(-x)
        log_wrong = -_softplus(x) - np.log(max(self.n_classes - 1, 1))
        scores = class_match_scores(block, self.n_classes, log_right, log_wrong) - np.log(self.n_classes)
        return fix_scores(block, scores), x

    def _posterior(self, block: Block, alpha: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior over the true class (n, C) and the log evidence of each item (n,)."""
        scores, _ = self._log_scores(block, alpha, beta)
        return normalize_log(scores)

    def _fit_beta(self, block: Block, alpha: np.ndarray, beta: np.ndarray, p: np.ndarray) -> np.ndarray:
        """``beta_steps`` Fisher-scoring steps of every item's ``beta`` (n,) for the posteriors ``p`` (m,)."""
        a = alpha[block.worker]
        for _ in range(self.beta_steps):
            ax = a * np.exp(beta)[block.item_of_label]
            s = _sigmoid(ax)
            grad = per_item_sum(block, ax * (p - s)) - (beta - self.beta_prior_mean)
            info = per_item_sum(block, ax * ax * s * (1.0 - s)) + 1.0
            beta = beta + np.clip(grad / info, -_MAX_BETA_STEP, _MAX_BETA_STEP)
        return beta

    def init_block(self, block: Block) -> tuple[State, Stats]:
        return {"beta": np.full(block.n_items, self.beta_prior_mean)}, {
            "labels": worker_label_counts(block, self.n_workers)}

    def init_params(self, stats: Stats) -> dict[str, Any]:
        return {"alpha": np.full(self.n_workers, self.alpha_prior_mean), "labels": stats["labels"]}

    def step_params(self, params: Any) -> Any:
        return {"alpha": params["alpha"]}

    def local_step(self, block: Block, state: State, params: Any, sweep: int) -> tuple[State, Stats]:
        alpha, beta = params["alpha"], self._beta(block, state)
        posterior, log_evidence = self._posterior(block, alpha, beta)
        log_prior = -0.5 * np.sum((beta - self.beta_prior_mean) ** 2)
        p = posterior[block.item_of_label, block.label]
        beta = self._fit_beta(block, alpha, beta, p)
        w = np.exp(beta)[block.item_of_label]
        s = _sigmoid(alpha[block.worker] * w)
        return {"beta": beta}, {
            "grad": np.bincount(block.worker, weights=w * (p - s), minlength=self.n_workers),
            "info": np.bincount(block.worker, weights=w * w * s * (1.0 - s), minlength=self.n_workers),
            "right": np.bincount(block.worker, weights=s, minlength=self.n_workers),
            "log_evidence": np.array(log_evidence.sum() + log_prior),
        }

    def global_step(self, stats: Stats, params: Any, sweep: int) -> Update:
        alpha, labels = params["alpha"], params["labels"]
        offset = alpha - self.alpha_prior_mean
        objective = float((stats["log_evidence"] - 0.5 * np.sum(offset ** 2)) / max(labels.sum(), 1.0))
        step = (stats["grad"] - offset) / (stats["info"] + 1.0)
        new_alpha = alpha + np.clip(step, -_MAX_ALPHA_STEP, _MAX_ALPHA_STEP)
        accuracy = np.divide(stats["right"], labels, out=np.full(labels.shape, np.nan), where=labels > 0)
        return Update(params={"alpha": new_alpha, "labels": labels, "accuracy": accuracy}, objective=objective)

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        beta = self._beta(block, state)
        posterior, _ = self._posterior(block, params["alpha"], beta)
        label = pick_labels(block, posterior, self.seed, self.ties)
        return ItemResult(posterior=posterior, label=label, extra={"beta": beta})

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        """``n_labels``, ``alpha`` (the ability) and ``accuracy`` (the mean probability ``sigmoid(alpha
        exp(beta))`` that the worker's labels are right, over their labels, at the last sweep)."""
        labels = params["labels"]
        accuracy = params.get("accuracy", np.full(labels.shape, np.nan))
        return {"n_labels": labels.round().astype(np.int64), "alpha": params["alpha"], "accuracy": accuracy}

    def export_params(self, params: Any) -> dict[str, np.ndarray]:
        return {"alpha": params["alpha"]}

    def worker_start(self, confusion: np.ndarray, accuracy: np.ndarray) -> dict[str, np.ndarray]:
        """``alpha`` such that an item of the prior mean difficulty gets the table's accuracy (clipped to
        [0.01, 0.99])."""
        acc = np.clip(np.asarray(accuracy, dtype=np.float64), 0.01, 0.99)
        return {"alpha": np.log(acc / (1.0 - acc)) / np.exp(self.beta_prior_mean)}

    def summary(self, params: Any) -> dict[str, Any]:
        """The fixed class prior (``1 / C`` each, crowd-kit's ``priors_``)."""
        return {"class_proportions": [1.0 / self.n_classes] * self.n_classes}


Glad.presets = {"crowd-kit": Preset(first_ties)}
