"""Zero-Based Skill (ZBS; crowd-kit's ``ZeroBasedSkill``).

Notation
--------
K workers, C classes.  ``skill[k]`` weighs every label of worker k in a vote; ``acc[k]`` is the fraction
of worker k's labels equal to the current answer of their item; ``lr`` the learning rate.

Every skill starts at ``1 / C + eps`` (the first vote is a majority vote).  Each sweep computes the weighted
vote of every item with the current skills and counts, per worker, the labels that agree with it (an
additive statistic); the driver then moves the skills towards those agreements by a gradient step on
``sum_k (acc[k] - skill[k])^2 / 2``: ``skill <- skill + lr * (acc - skill)``.  The learning rate starts at
``lr_init`` and is multiplied by ``lr_reduce_factor`` at sweeps ``lr_steps_to_reduce``, ``2 *
lr_steps_to_reduce`` ...  The answer is the weighted vote with the final skills; the posterior is its
vote shares.

The objective per label is the fraction of labels that agree with the sweep's answers; the fit stops when
the largest change of a skill is below ``tol`` (``Update.change``): with ``lr = 1`` the skills then equal
the agreements of the answers they produce, a fixed point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from crowdspark.block import Block
from crowdspark.models.base import Footprint, ItemResult, Model, Preset, Schedule, State, Update
from crowdspark.models.common import worker_label_counts
from crowdspark.models.weighted_vote import (
    check_ties,
    first_ties,
    pick_labels,
    vote_shares,
    weighted_scores,
    worker_agreement,
)
from crowdspark.stats import Stats
from crowdspark.validation import check_float, check_int

__all__ = ["ZeroBasedSkill"]


@dataclass(frozen=True)
class ZeroBasedSkill(Model):
    """Weighted votes whose weights follow each worker's agreement with the vote by gradient steps.

    Parameters
    ----------
    n_workers, n_classes : int
        K and C.
    seed : int
        Seed of the tie-breaking draws.
    max_iter : int
        Largest number of sweeps (crowd-kit runs exactly this many; at a fixed point, where the fit stops,
        every further sweep changes nothing).
    tol : float
        Stop when no skill changes by more than this in a sweep (0: run every sweep).
    lr_init : float
        Learning rate of the first sweeps.
    lr_steps_to_reduce : int
        The learning rate is multiplied by ``lr_reduce_factor`` every this many sweeps.
    lr_reduce_factor : float
        Factor of each reduction of the learning rate, in (0, 1].
    eps : float
        Every skill starts at ``1 / C + eps``.
    ties : str
        How ties between top scores are broken: ``"random"`` (a uniform draw from the seed and the item) or
        ``"first"`` (the first class in the class order, as crowd-kit does).
    """

    n_workers: int
    n_classes: int
    seed: int = 0
    max_iter: int = 100
    tol: float = 1e-9
    lr_init: float = 1.0
    lr_steps_to_reduce: int = 20
    lr_reduce_factor: float = 0.5
    eps: float = 1e-5
    ties: str = "random"

    name: ClassVar[str] = "zbs"
    title: ClassVar[str] = "Zero-Based Skill"
    api_name: ClassVar[str] = "ZeroBasedSkill"
    description: ClassVar[str] = (
        "weighted votes whose worker skills follow the agreement with the vote by gradient steps (crowd-kit's "
        "ZeroBasedSkill)"
    )
    worker_params: ClassVar[tuple[str, ...]] = ("skill",)
    param_domains: ClassVar[dict[str, tuple[str, str]]] = {
        "skill": ("real", "K"), "labels": ("nonnegative", "K"), "accuracy": ("probability", "K")}
    #: with ``ties="random"``, the tied votes of the fit are broken by draws keyed by the item
    random_fit: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("zbs.max_iter", self.max_iter, minimum=1)
        check_float("zbs.tol", self.tol, minimum=0.0)
        check_float("zbs.lr_init", self.lr_init, minimum=0.0, strict_min=True)
        check_int("zbs.lr_steps_to_reduce", self.lr_steps_to_reduce, minimum=1)
        check_float("zbs.lr_reduce_factor", self.lr_reduce_factor, minimum=0.0, maximum=1.0, strict_min=True)
        check_float("zbs.eps", self.eps, minimum=0.0)
        check_ties(self.name, self.ties)

    @property
    def schedule(self) -> Schedule:
        return Schedule(max_sweeps=self.max_iter, tol=self.tol)

    def learning_rate(self, sweep: int) -> float:
        """The learning rate of ``sweep`` (1-based): ``lr_init * lr_reduce_factor ** (sweep // steps)``."""
        return self.lr_init * self.lr_reduce_factor ** (sweep // self.lr_steps_to_reduce)

    def footprint(self) -> Footprint:
        """Two values per worker (skill, labels) and the vote scores (n, C) of a block."""
        k, c = self.n_workers, self.n_classes
        return Footprint(params=2 * k + c, item=c, state=0, label=0, largest=(("workers", k),))

    def init_block(self, block: Block) -> tuple[State, Stats]:
        return None, {"labels": worker_label_counts(block, self.n_workers)}

    def init_params(self, stats: Stats) -> dict[str, np.ndarray]:
        skill = np.full(self.n_workers, 1.0 / self.n_classes + self.eps)
        return {"skill": skill, "labels": stats["labels"]}

    def _answers(self, block: Block, skill: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scores = weighted_scores(block, skill, self.n_classes)
        return scores, pick_labels(block, scores, self.seed, self.ties)

    def local_step(self, block: Block, state: State, params: Any, sweep: int) -> tuple[State, Stats]:
        _, label = self._answers(block, params["skill"])
        return None, {"agree": worker_agreement(block, label, self.n_workers)}

    def global_step(self, stats: Stats, params: Any, sweep: int) -> Update:
        labels, skill = params["labels"], params["skill"]
        accuracy = np.divide(stats["agree"], labels, out=np.zeros_like(labels), where=labels > 0)
        new_skill = skill + self.learning_rate(sweep) * (accuracy - skill)
        objective = float(stats["agree"].sum() / max(labels.sum(), 1.0))
        change = float(np.max(np.abs(new_skill - skill))) if skill.size else 0.0
        return Update(params={"skill": new_skill, "labels": labels, "accuracy": accuracy}, objective=objective,
                      change=change)

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        scores, label = self._answers(block, params["skill"])
        return ItemResult(posterior=vote_shares(block, scores), label=label)

    def worker_start(self, confusion: np.ndarray, accuracy: np.ndarray) -> dict[str, np.ndarray]:
        """``skill``: the table's accuracy."""
        return {"skill": np.asarray(accuracy, dtype=np.float64)}

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        """``n_labels``, ``skill`` (the weight of the worker's labels) and ``accuracy`` (the agreement with the
        answers of the last sweep)."""
        labels = params["labels"]
        accuracy = params.get("accuracy", np.full(labels.shape, np.nan))
        return {"n_labels": labels.round().astype(np.int64), "skill": params["skill"], "accuracy": accuracy}


ZeroBasedSkill.presets = {"crowd-kit": Preset(first_ties)}
