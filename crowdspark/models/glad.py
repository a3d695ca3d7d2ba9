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
fixed points are the same (the MAP of the same objective), the paths differ.  ``m_step="cg"`` (the
``crowd-kit`` preset) takes crowd-kit's path instead: scipy's conjugate gradients and line search, driven
one evaluation per pass (:mod:`crowdspark.models.conjugate`), the blocks keeping their items' ``beta``,
direction, gradients and posteriors.

The objective per label is the log marginal likelihood of the labels plus the log priors of ``alpha`` and
``beta`` (up to constants), at the parameters the sweep's E-step used; the fit stops when it changes by
less than ``tol`` (or, with ``stop="crowd-kit"``, crowd-kit's rule on crowd-kit's objective, tested one
iteration late).  The final posteriors use the last parameters (with crowd-kit's rule, the last E-step's);
ties between top posteriors are broken by ``ties``.  Items with gold in the fit have their posterior clamped
in the E-step, so abilities and difficulties learn from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from crowdspark.block import Block
from crowdspark.models.base import Footprint, ItemResult, Model, Preset, Schedule, State, Update
from crowdspark.models.common import (
    class_match_scores,
    fix_scores,
    normalize_log,
    per_item_sum,
    worker_label_counts,
)
from crowdspark.models.weighted_vote import check_ties, first_ties, pick_labels
from crowdspark.errors import ConfigError
from crowdspark.models.conjugate import CgSums, cg_after_trial, cg_start, line_search_class, state_from_tree, state_to_tree
from crowdspark.stats import Stats
from crowdspark.validation import check_choice, check_float, check_int

__all__ = ["Glad"]

#: the stopping rules of ``glad.stop``
STOP_RULES = ("change", "crowd-kit")
#: the M-steps of ``glad.m_step``
M_STEPS = ("newton", "cg")
#: crowd-kit's M-step: at most this many conjugate-gradient steps, stopped when no gradient entry exceeds
#: the tolerance (its ``m_step_max_iter`` and ``m_step_tol``)
CG_STEPS, CG_GTOL = 25, 1e-2
#: evaluations a line search may take (scipy's ``scalar_search_wolfe1``), and so passes per CG step
_CG_PASSES_PER_STEP = 100

#: largest change of an item's ``beta`` in one Fisher-scoring step
_MAX_BETA_STEP = 1.0
#: largest change of a worker's ``alpha`` in one Newton step
_MAX_ALPHA_STEP = 2.0


def _softplus(x: np.ndarray) -> np.ndarray:
    """``log(1 + exp(x))``, stable for any x."""
    return np.logaddexp(0.0, x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _objective(stats: Stats, offset: np.ndarray, labels: np.ndarray) -> float:
    """The objective per label: the summed log evidence with the difficulties' log priors, plus the abilities'
    log prior (``offset``: each ``alpha`` minus its prior mean, (K,)), over the labels."""
    return float((stats["log_evidence"] - 0.5 * np.sum(offset ** 2)) / max(labels.sum(), 1.0))


def _accuracy(stats: Stats, labels: np.ndarray) -> np.ndarray:
    """Each worker's expected share of right labels (K,), NaN without labels."""
    return np.divide(stats["right"], labels, out=np.full(labels.shape, np.nan), where=labels > 0)


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
    m_step_rounds : int
        Passes of the M-step per EM iteration: each takes ``beta_steps`` steps of the difficulties in the
        blocks and one Newton step of the abilities on the driver, with the E-step's posteriors kept in the
        blocks (from 2 on); one EM iteration is then ``m_step_rounds`` sweeps.
    stop : {"change", "crowd-kit"}
        ``"change"``: stop when the objective per label moves by less than ``tol``.  ``"crowd-kit"``:
        crowd-kit's rule: stop at the first EM iteration t >= 2 at which crowd-kit's objective (the expected
        complete log-likelihood with the log priors, over m C, at the parameters after M-step t with the
        posteriors of E-step t) rises by less than ``tol`` or falls, and answer with E-step t's posteriors
        and M-step t's parameters.  Iteration t's objective is computed in
        the first pass of iteration t + 1, so the test runs one iteration late and costs no pass.
    m_step : {"newton", "cg"}
        ``"newton"``: the steps above.  ``"cg"``: crowd-kit's M-step, scipy's conjugate gradients over all of
        ``alpha`` and ``beta`` (at most 25 steps, gradient tolerance 1e-2) with its line search, one pass
        per evaluation (:mod:`crowdspark.models.conjugate`); needs ``stop="crowd-kit"``, whose test then
        runs at the end of each M-step.  Set by the ``crowd-kit`` preset.
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
    m_step_rounds: int = 1
    stop: str = "change"
    m_step: str = "newton"

    name: ClassVar[str] = "glad"
    title: ClassVar[str] = "GLAD"
    api_name: ClassVar[str] = "GLAD"
    description: ClassVar[str] = (
        "worker abilities and item difficulties (Whitehill et al. 2009); EM with Newton M-steps"
    )
    stateful: ClassVar[bool] = True
    item_extras: ClassVar[dict[str, str]] = {"beta": "double"}
    worker_params: ClassVar[tuple[str, ...]] = ("alpha",)
    param_domains: ClassVar[dict[str, tuple[str, str]]] = {"alpha": ("real", "K")}
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
        check_int("glad.m_step_rounds", self.m_step_rounds, minimum=1)
        check_choice("glad.stop", self.stop, STOP_RULES)
        check_choice("glad.m_step", self.m_step, M_STEPS)
        if self.m_step == "cg" and (self.stop != "crowd-kit" or self.m_step_rounds != 1):
            raise ConfigError(
                f"glad.m_step = 'cg' is crowd-kit's M-step and runs with crowd-kit's stopping rule, but got "
                f"glad.stop = {self.stop!r} and glad.m_step_rounds = {self.m_step_rounds}: set glad.stop = "
                "'crowd-kit' and leave glad.m_step_rounds at 1 (the crowd-kit preset sets both)")
        if self.m_step == "cg":
            line_search_class()

    @property
    def schedule(self) -> Schedule:
        if self.m_step == "cg":  # the model reports the change: -inf when crowd-kit's rule stops the fit
            return Schedule(max_sweeps=self.max_iter * (1 + CG_STEPS * _CG_PASSES_PER_STEP), tol=self.tol)
        return Schedule(max_sweeps=self.max_iter * self.m_step_rounds, tol=self.tol,
                        stop="rise" if self.stop == "crowd-kit" else "change")

    @property
    def _keeps_posteriors(self) -> bool:
        """Whether the blocks keep the E-step's posteriors in their state (several M-step passes, or
        crowd-kit's stopping rule)."""
        return self.m_step_rounds > 1 or self.stop == "crowd-kit"

    def _e_sweep(self, sweep: int) -> bool:
        """Whether ``sweep`` (1-based) starts an EM iteration with an E-step."""
        return (sweep - 1) % self.m_step_rounds == 0

    def _beta(self, block: Block, state: State) -> np.ndarray:
        """The block's ``beta`` (n,): its state, or the prior mean for items never fitted."""
        if state is None:
            return np.full(block.n_items, self.beta_prior_mean)
        return state["beta"]

    def _label_logs(self, block: Block, alpha: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log probability of each label (m,) if it is the true class, and if it is a given other class."""
        x = alpha[block.worker] * np.exp(beta)[block.item_of_label]
        return -_softplus(-x), -_softplus(x) - np.log(max(self.n_classes - 1, 1))

    def _log_scores(self, block: Block, log_right: np.ndarray, log_wrong: np.ndarray) -> np.ndarray:
        """Log joint scores over the true class (n, C), gold imposed, from :meth:`_label_logs`."""
        scores = class_match_scores(block, self.n_classes, log_right, log_wrong) - np.log(self.n_classes)
        return fix_scores(block, scores)

    def _posterior(self, block: Block, alpha: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior over the true class (n, C) and the log evidence of each item (n,)."""
        return normalize_log(self._log_scores(block, *self._label_logs(block, alpha, beta)))

    def _e_step(self, block: Block, alpha: np.ndarray,
                beta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The E-step: the posterior (n, C), the block's log evidence plus the log prior of its ``beta`` (0-d),
        and the label log probabilities of :meth:`_label_logs` (m,) it used."""
        log_right, log_wrong = self._label_logs(block, alpha, beta)
        posterior, log_evidence = normalize_log(self._log_scores(block, log_right, log_wrong))
        log_prior = -0.5 * np.sum((beta - self.beta_prior_mean) ** 2)
        return posterior, np.array(log_evidence.sum() + log_prior), log_right, log_wrong

    def _crowdkit_terms(self, block: Block, posterior: np.ndarray, beta: np.ndarray, log_right: np.ndarray,
                        log_wrong: np.ndarray) -> float:
        """The block's part of crowd-kit's objective (before the division by m C): the expected complete
        log-likelihood of its labels under ``posterior`` (n, C) with the log probabilities of
        :meth:`_label_logs` (m,), and the log N(``beta_prior_mean``, 1) densities of its ``beta`` (n,)."""
        p = posterior[block.item_of_label, block.label]
        prior = -0.5 * np.sum((beta - self.beta_prior_mean) ** 2) - 0.5 * np.log(2.0 * np.pi) * block.n_items
        return float(np.sum(p * log_right + (1.0 - p) * log_wrong) + prior)

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

    def footprint(self) -> Footprint:
        """A few values per worker (alpha, its gradient and information), the posterior (n, C) of a block, the
        per-label weights and probabilities of a sweep, and the difficulties (with the posteriors, when the blocks
        keep them) the blocks keep."""
        k, c = self.n_workers, self.n_classes
        return Footprint(params=4 * k, item=c, state=1 + (c if self._keeps_posteriors else 0), label=3,
                         largest=(("workers", k),))

    def init_block(self, block: Block) -> tuple[State, Stats]:
        return {"beta": np.full(block.n_items, self.beta_prior_mean)}, {
            "labels": worker_label_counts(block, self.n_workers)}

    def init_params(self, stats: Stats) -> dict[str, Any]:
        return {"alpha": np.full(self.n_workers, self.alpha_prior_mean), "labels": stats["labels"]}

    def step_params(self, params: Any) -> Any:
        if self.m_step != "cg":
            return {"alpha": params["alpha"]}
        search = params.get("search")
        trial = 0.0 if search is None or search["done"] else search["trial"]
        point = params["alpha"] if trial == 0.0 else search["x"] + trial * search["p"]
        return {"alpha": point, "e_step": search is None or search["done"], "commit": params.get("commit"),
                "trial": trial}

    def local_step(self, block: Block, state: State, params: Any, sweep: int) -> tuple[State, Stats]:
        if self.m_step == "cg":
            return self._cg_pass(block, state, params)
        alpha, beta = params["alpha"], self._beta(block, state)
        if not self._e_sweep(sweep):
            return self._m_pass(block, alpha, beta, state["q"], sweep)
        posterior, log_evidence, log_right, log_wrong = self._e_step(block, alpha, beta)
        new_state, stats = self._m_pass(block, alpha, beta, posterior, sweep)
        stats["log_evidence"] = log_evidence
        if self.stop == "crowd-kit":
            kept = None if state is None else state.get("q")
            terms = 0.0 if kept is None else self._crowdkit_terms(block, kept, beta, log_right, log_wrong)
            stats["crowdkit"] = np.array(terms)
            new_state.update(q_kept=posterior if kept is None else kept, beta_kept=beta)
        return new_state, stats

    def _cg_pass(self, block: Block, state: State, params: Any) -> tuple[State, Stats]:
        """One evaluation of crowd-kit's M-step: the pending commit applied to the block's ``beta``, direction
        ``p`` and gradient ``g`` (n,), an E-step first when a new EM iteration starts, then minus the
        expected complete log-likelihood with the log priors at ``beta + trial p`` and its gradient, as the
        sums of :class:`~crowdspark.models.conjugate.CgSums` (the abilities' part of the gradient per worker)."""
        beta = self._beta(block, state)
        direction, gradient, trial_gradient = (state or {}).get("p"), (state or {}).get("g"), (state or {}).get("gt")
        if params["commit"] is not None:
            step, coef = params["commit"]
            beta = beta + step * direction
            gradient, direction = trial_gradient, -trial_gradient + coef * direction
        alpha, stats = params["alpha"], {}
        if params["e_step"]:
            posterior, stats["log_evidence"], _, _ = self._e_step(block, alpha, beta)
        else:
            posterior = state["q"]
        point = beta + params["trial"] * direction if params["trial"] else beta
        p = posterior[block.item_of_label, block.label]
        log_right, log_wrong = self._label_logs(block, alpha, point)
        w = np.exp(point)[block.item_of_label]
        ax = alpha[block.worker] * w
        s = _sigmoid(ax)
        grad = -(per_item_sum(block, ax * (p - s)) - (point - self.beta_prior_mean))
        if params["e_step"]:
            gradient, direction = grad, -grad
        f = -self._crowdkit_terms(block, posterior, point, log_right, log_wrong)
        stats.update(
            f=np.array(f),
            grad_alpha=-np.bincount(block.worker, weights=w * (p - s), minlength=self.n_workers),
            right=np.bincount(block.worker, weights=s, minlength=self.n_workers),
            dot_p=np.array(grad @ direction), dot_self=np.array(grad @ grad), dot_g=np.array(grad @ gradient),
            n_large=np.array(float(np.sum(np.abs(grad) > CG_GTOL))),
        )
        return {"beta": beta, "p": direction, "g": gradient, "gt": grad, "q": posterior}, stats

    def _cg_global(self, stats: Stats, params: Any) -> Update:
        """The driver's side of crowd-kit's M-step after one evaluation, and crowd-kit's rule at its end."""
        labels, point = params["labels"], self.step_params(params)["alpha"]
        offset = point - self.alpha_prior_mean
        f = float(stats["f"]) + 0.5 * np.sum(offset ** 2) + 0.5 * np.log(2.0 * np.pi) * self.n_workers
        sums = CgSums(f, stats["grad_alpha"] + offset, float(stats["dot_p"]), float(stats["dot_self"]),
                      float(stats["dot_g"]), float(stats["n_large"]))
        new = {**params, "commit": None}
        if "log_evidence" in stats:  # a new EM iteration: its E-step, and its M-step's start point
            new["em"] = params.get("em", 0) + 1
            new["objective"] = _objective(stats, offset, labels)
            new["accuracy"] = _accuracy(stats, labels)
            search = cg_start(params["alpha"], f, sums, CG_GTOL, CG_STEPS)
        else:
            search = cg_after_trial(state_from_tree(params["search"]), sums)
        new["search"], new["alpha"], new["commit"] = state_to_tree(search), search.x, search.commit
        if not search.done:
            return Update(params=new, objective=new["objective"], change=math.inf)
        # the M-step ended: crowd-kit's objective after it, with this EM iteration's posteriors
        crowdkit = -search.old_fval / max(labels.sum() * self.n_classes, 1.0)
        previous = params.get("crowdkit_objective") if new["em"] > 1 else None
        new["crowdkit_objective"] = crowdkit
        stop = (previous is not None and crowdkit - previous < self.tol) or new["em"] >= self.max_iter
        extra = {"crowdkit_objective": crowdkit, "em_iteration": float(new["em"])}
        return Update(params=new, objective=new["objective"], change=-math.inf if stop else math.inf, extra=extra)

    def _m_pass(self, block: Block, alpha: np.ndarray, beta: np.ndarray, posterior: np.ndarray,
                sweep: int) -> tuple[State, Stats]:
        """One pass of the M-step for the posteriors (n, C): the block's new ``beta`` (its state, with the
        posteriors and the sweep when it keeps them) and the abilities' gradient, information and ``right``."""
        p = posterior[block.item_of_label, block.label]
        beta = self._fit_beta(block, alpha, beta, p)
        w = np.exp(beta)[block.item_of_label]
        s = _sigmoid(alpha[block.worker] * w)
        state = {"beta": beta, "q": posterior, "sweep": np.array(sweep)} if self._keeps_posteriors else {"beta": beta}
        return state, {
            "grad": np.bincount(block.worker, weights=w * (p - s), minlength=self.n_workers),
            "info": np.bincount(block.worker, weights=w * w * s * (1.0 - s), minlength=self.n_workers),
            "right": np.bincount(block.worker, weights=s, minlength=self.n_workers),
        }

    def global_step(self, stats: Stats, params: Any, sweep: int) -> Update:
        if self.m_step == "cg":
            return self._cg_global(stats, params)
        alpha, labels = params["alpha"], params["labels"]
        offset = alpha - self.alpha_prior_mean
        step = (stats["grad"] - offset) / (stats["info"] + 1.0)
        new_alpha = alpha + np.clip(step, -_MAX_ALPHA_STEP, _MAX_ALPHA_STEP)
        accuracy = _accuracy(stats, labels)
        new = {"alpha": new_alpha, "labels": labels, "accuracy": accuracy}
        if "log_evidence" not in stats:  # a later pass of the M-step: the EM iteration goes on
            return Update(params={**params, **new, "sweep": sweep}, objective=params["objective"], change=math.inf)
        objective = _objective(stats, offset, labels)
        if not self._keeps_posteriors:
            return Update(params=new, objective=objective)
        new.update(sweep=sweep, objective=objective)
        if self.stop != "crowd-kit":
            return Update(params=new, objective=objective)
        if sweep <= self.m_step_rounds:  # the first EM iteration: no objective of an earlier one to compare
            return Update(params=new, objective=objective, change=math.inf)
        # crowd-kit's objective of the EM iteration before this sweep's E-step, at the parameters this sweep used
        terms = float(stats["crowdkit"]) - 0.5 * np.sum(offset ** 2) - 0.5 * np.log(2.0 * np.pi) * self.n_workers
        crowdkit = terms / max(labels.sum() * self.n_classes, 1.0)
        previous = params.get("crowdkit_objective")
        new["crowdkit_objective"] = crowdkit
        return Update(params=new, objective=objective, change=math.inf if previous is None else crowdkit - previous,
                      extra={"crowdkit_objective": crowdkit})

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        beta = self._beta(block, state)
        if self.m_step == "cg" and state is not None and "q" in state:
            # the last E-step's posteriors, and the difficulties with the M-step's last step
            commit = params.get("commit")
            beta = beta + commit[0] * state["p"] if commit is not None else beta
            posterior = state["q"]
        elif self.stop == "crowd-kit" and state is not None and "q" in state:
            # a sweep after the parameters' one: the fit stopped at the EM iteration before that sweep's E-step
            late = int(state["sweep"]) > int(params.get("sweep", 0))
            posterior, beta = (state["q_kept"], state["beta_kept"]) if late else (state["q"], beta)
        else:
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


def crowdkit_m_step(model: Glad) -> Glad:
    """``model`` with crowd-kit's tie rule, M-step and stopping rule: the body of the ``crowd-kit`` preset."""
    return replace(first_ties(model), m_step="cg", stop="crowd-kit")


Glad.presets = {"crowd-kit": Preset(crowdkit_m_step)}
