"""MACE (Hovy, Berg-Kirkpatrick, Vaswani & Hovy 2013): per-worker competence and spamming strategy.

Notation
--------
K workers, C classes.  On each label, worker k is spamming with probability ``spam[k]`` and answers from
their strategy ``strategy[k]`` (C,); otherwise (probability ``know[k]``) they give the true class.  So a label
c on an item of true class t has probability ``spam[k] strategy[k, c] + know[k] [c == t]``.  True classes
have the uniform prior ``1 / C`` (as in crowd-kit and the paper).

EM on the blocks
----------------
A sweep is one iteration.  Each block computes its items' posteriors over the true class (E-step) and, per
label of class c with posterior ``p = q[item, c]`` and ``r = spam strategy[c] / (spam strategy[c] + know)``,
the expected spamming ``(1 - p) + p r`` and knowing ``p (1 - r)``; it adds them per worker (``spam``,
``know``) and per (worker, label) (``strategy``): additive statistics.  The driver's M-step is crowd-kit's:
``method="em"`` normalizes the counts with the pseudo-count ``smoothing / C``; ``method="vb"`` (the default,
crowd-kit's) is the variational update ``exp(digamma(count + prior)) / exp(digamma(total + priors))`` with
the Beta(``alpha``, ``beta``) prior on spamming and knowing and a symmetric Dirichlet(``strategy_prior``) on
the strategy.

Every worker starts with ``spam = know = 1/2`` and a uniform strategy, so the first E-step is a majority vote;
crowd-kit draws the start at random (a fixed ``random_state``, the same draw on each of its restarts) and
keeps the restart of highest likelihood; this model has one start and no restarts.  The objective per label
is the log marginal likelihood of the labels at the parameters the sweep's E-step used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy.special import digamma

from crowdspark.block import Block
from crowdspark.models.base import Footprint, ItemResult, Model, Preset, Schedule, State, Update
from crowdspark.models.common import (
    class_match_scores,
    fix_scores,
    label_cells,
    normalize_log,
    worker_label_counts,
)
from crowdspark.models.weighted_vote import check_ties, first_ties, pick_labels
from crowdspark.stats import Stats
from crowdspark.validation import check_choice, check_float, check_int

__all__ = ["Mace"]

#: floor of a label's spamming probability in the log scores (a zero strategy cell)
_TINY = 1e-300


def _variational(counts: np.ndarray, prior: np.ndarray | float) -> np.ndarray:
    """``exp(digamma(counts + prior)) / exp(digamma(row total))`` along the last axis (crowd-kit's VB)."""
    total = (counts + prior).sum(axis=-1, keepdims=True)
    return np.exp(digamma(counts + prior) - digamma(total))


@dataclass(frozen=True)
class Mace(Model):
    """MACE: each worker a competence (not spamming) and a spamming strategy; EM or variational Bayes.

    Parameters
    ----------
    n_workers, n_classes : int
        K and C.
    seed : int
        Seed of the tie-breaking draws of the final labels.
    max_iter : int
        Largest number of iterations (crowd-kit's ``n_iter``, which it always runs).
    tol : float
        Stop when the log marginal likelihood per label changes by less than this (0: run every iteration).
    method : str
        ``"vb"`` (variational Bayes with the priors below) or ``"em"`` (smoothed maximum likelihood).
    smoothing : float
        With ``method="em"``: ``smoothing / C`` is added to every count before normalizing (crowd-kit's
        ``smoothing_ = 0.01 / C``).
    alpha : float
        With ``method="vb"``: the Beta prior's pseudo-count of spamming.
    beta : float
        With ``method="vb"``: the Beta prior's pseudo-count of knowing.
    strategy_prior : float
        With ``method="vb"``: the symmetric Dirichlet prior of each strategy (crowd-kit's 10).
    ties : str
        How ties between top posteriors are broken: ``"random"`` (a draw from the seed and the item) or
        ``"first"`` (the first class in the class order, as crowd-kit does).
    """

    n_workers: int
    n_classes: int
    seed: int = 0
    max_iter: int = 50
    tol: float = 1e-5
    method: str = "vb"
    smoothing: float = 0.01
    alpha: float = 0.5
    beta: float = 0.5
    strategy_prior: float = 10.0
    ties: str = "random"

    name: ClassVar[str] = "mace"
    title: ClassVar[str] = "MACE"
    api_name: ClassVar[str] = "MACE"
    description: ClassVar[str] = (
        "per-worker competence and spamming strategy (Hovy et al. 2013); variational Bayes or EM"
    )
    worker_params: ClassVar[tuple[str, ...]] = ("spam", "know", "strategy")
    param_domains: ClassVar[dict[str, tuple[str, str]]] = {
        "spam": ("probability", "K"), "know": ("probability", "K"), "strategy": ("probability", "KC")}
    api_attributes: ClassVar[dict[str, Any]] = {"spamming_": ("workers", ("spamming", "competence")),
                                                "thetas_": ("workers", ("strategy",))}

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("mace.max_iter", self.max_iter, minimum=1)
        check_float("mace.tol", self.tol, minimum=0.0)
        check_choice("mace.method", self.method, ["vb", "em"])
        check_float("mace.smoothing", self.smoothing, minimum=0.0)
        for key in ("alpha", "beta", "strategy_prior"):
            check_float(f"mace.{key}", getattr(self, key), minimum=0.0, strict_min=True)
        check_ties(self.name, self.ties)

    @property
    def schedule(self) -> Schedule:
        return Schedule(max_sweeps=self.max_iter, tol=self.tol)

    def _tables(self, params: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per (worker, label class), flat (K C,): the log probability of the label when it is the true class
        ``log(spam strategy[c] + know)``, when it is not ``log(spam strategy[c])``, and the share ``r`` of
        spamming in the first."""
        spammed = params["spam"][:, None] * params["strategy"]
        total = spammed + params["know"][:, None]
        share = np.divide(spammed, total, out=np.zeros_like(spammed), where=total > 0)
        return (np.log(np.maximum(total, _TINY)).ravel(), np.log(np.maximum(spammed, _TINY)).ravel(),
                share.ravel())

    def _posterior(self, block: Block, tables: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Posterior over the true class (n, C), gold imposed, and each item's log evidence (n,)."""
        cells = label_cells(block, self.n_classes)
        scores = class_match_scores(block, self.n_classes, tables[0][cells], tables[1][cells])
        scores -= np.log(self.n_classes)
        return normalize_log(fix_scores(block, scores))

    def footprint(self) -> Footprint:
        """A label strategy (C,) and two rates per worker, and the posterior (n, C) of a block."""
        k, c = self.n_workers, self.n_classes
        return Footprint(params=k * (c + 2) + c, item=c, state=0, label=0, largest=(("workers", k), ("classes", c)))

    def init_block(self, block: Block) -> tuple[State, Stats]:
        return None, {"labels": worker_label_counts(block, self.n_workers)}

    def init_params(self, stats: Stats) -> dict[str, Any]:
        half = np.full(self.n_workers, 0.5)
        return {"spam": half, "know": half.copy(), "strategy": np.full((self.n_workers, self.n_classes),
                                                                       1.0 / self.n_classes),
                "labels": stats["labels"]}

    def step_params(self, params: Any) -> Any:
        return {key: params[key] for key in ("spam", "know", "strategy")}

    def local_step(self, block: Block, state: State, params: Any, sweep: int) -> tuple[State, Stats]:
        tables = self._tables(params)
        posterior, log_evidence = self._posterior(block, tables)
        cells = label_cells(block, self.n_classes)
        p = posterior[block.item_of_label, block.label]
        r = tables[2][cells]
        strategy = np.bincount(cells, weights=(1.0 - p) + p * r, minlength=self.n_workers * self.n_classes)
        strategy = strategy.reshape(self.n_workers, self.n_classes)
        return None, {
            "spam": strategy.sum(axis=1),
            "know": np.bincount(block.worker, weights=p * (1.0 - r), minlength=self.n_workers),
            "strategy": strategy,
            "log_evidence": np.array(log_evidence.sum()),
        }

    def _m_step(self, stats: Stats) -> dict[str, np.ndarray]:
        pair = np.stack([stats["spam"], stats["know"]], axis=1)
        if self.method == "vb":
            pair = _variational(pair, np.array([self.alpha, self.beta]))
            strategy = _variational(stats["strategy"], self.strategy_prior)
        else:
            pseudo = self.smoothing / self.n_classes
            pair = (pair + pseudo) / (pair + pseudo).sum(axis=1, keepdims=True)
            strategy = stats["strategy"] + pseudo
            strategy = strategy / strategy.sum(axis=1, keepdims=True)
        return {"spam": pair[:, 0], "know": pair[:, 1], "strategy": strategy}

    def global_step(self, stats: Stats, params: Any, sweep: int) -> Update:
        labels = params["labels"]
        objective = float(stats["log_evidence"] / max(labels.sum(), 1.0))
        return Update(params={**self._m_step(stats), "labels": labels}, objective=objective)

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        posterior, _ = self._posterior(block, self._tables(params))
        return ItemResult(posterior=posterior, label=pick_labels(block, posterior, self.seed, self.ties))

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        """``n_labels``, ``competence`` (the probability of not spamming), ``spamming`` (its complement),
        ``strategy`` (K, C: the classes a spamming worker gives) and ``accuracy`` (the probability that a label
        is right under the uniform class prior: ``competence + spamming / C``)."""
        total = params["spam"] + params["know"]
        spamming = params["spam"] / total
        strategy = params["strategy"] / params["strategy"].sum(axis=1, keepdims=True)
        return {"n_labels": params["labels"].round().astype(np.int64), "competence": 1.0 - spamming,
                "spamming": spamming, "strategy": strategy, "accuracy": 1.0 - spamming + spamming / self.n_classes}

    def export_params(self, params: Any) -> dict[str, np.ndarray]:
        return {key: params[key] for key in ("spam", "know", "strategy")}

    def worker_start(self, confusion: np.ndarray, accuracy: np.ndarray) -> dict[str, np.ndarray]:
        """From each listed worker's confusion matrix: ``know`` is its mean diagonal cell less its mean
        off-diagonal cell (MACE's ``P(c = t) - P(c != t)`` for a uniform strategy), clipped to [0.01, 0.99]; the
        strategy is uniform."""
        c = confusion.shape[-1]
        trace = np.einsum("ktt->k", confusion)
        off = (confusion.sum(axis=(1, 2)) - trace) / max(c * (c - 1), 1)
        know = np.clip(trace / c - off, 0.01, 0.99)
        return {"spam": 1.0 - know, "know": know, "strategy": np.full(confusion.shape[:2], 1.0 / c)}


Mace.presets = {"crowd-kit": Preset(first_ties)}
