"""Gold majority vote (crowd-kit's ``GoldMajorityVote``): a vote weighted by each worker's accuracy on gold.

Notation
--------
K workers, C classes.  ``g[k]`` is the number of worker k's labels on items with gold in the fit
(``Block.fixed``), ``r[k]`` how many of them equal the gold class; ``skill[k] = r[k] / g[k]`` is worker k's
accuracy on the gold and the weight of each of its labels.  The score of class c for item i is the sum of
the skills of the workers who labelled it c; the posterior is the scores normalized per item (uniform where
they sum to 0) and the answer the top class (ties by the ``ties`` rule).  Items with gold in the fit are
answered with their gold class.

A worker without a label on the gold (``g[k] = 0``) gets, by ``on_missing_skill``: ``"pooled"`` the accuracy
of all gold labels together (``sum r / sum g``: a worker nobody has measured counts as an average label;
1 when there is no gold label at all, which makes the fit a plain majority vote), ``"ignore"`` weight 0 (its
labels do not count; crowd-kit drops them), or ``"value"`` the weight ``default_skill``.  crowd-kit raises an
error for such a worker unless told otherwise; crowdspark's default keeps a nightly run going when a new
worker has not met a gold item yet.

One pass over the data: the gold counts per worker are additive; the answers need only the K skills.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from crowdspark.block import Block
from crowdspark.models.base import Footprint, ItemResult, Model, Preset, State
from crowdspark.models.common import worker_label_counts
from crowdspark.models.weighted_vote import check_ties, first_ties, pick_labels, vote_shares, weighted_scores
from crowdspark.stats import Stats
from crowdspark.validation import check_choice, check_float

__all__ = ["GoldMajorityVote", "MISSING_SKILL_RULES", "gold_label_counts"]

#: what a worker without a label on the gold weighs (see the module docstring)
MISSING_SKILL_RULES = ("pooled", "ignore", "value")


def gold_label_counts(block: Block, n_workers: int) -> tuple[np.ndarray, np.ndarray]:
    """Each worker's labels on items with gold in the fit, and how many equal the gold class, float64 (K,) each."""
    gold = block.fixed[block.item_of_label]
    on_gold = gold >= 0
    right = on_gold & (block.label == gold)
    return (np.bincount(block.worker, weights=on_gold, minlength=n_workers),
            np.bincount(block.worker, weights=right, minlength=n_workers))


@dataclass(frozen=True)
class GoldMajorityVote(Model):
    """A vote weighted by each worker's accuracy on the gold in the fit.

    Parameters
    ----------
    n_workers, n_classes : int
        K and C.
    seed : int
        Seed of the tie-breaking draws.
    on_missing_skill : str
        The weight of a worker with no label on the gold: ``"pooled"`` (the accuracy of all gold labels),
        ``"ignore"`` (0) or ``"value"`` (``default_skill``).
    default_skill : float
        The weight of such a worker with ``on_missing_skill = "value"``, >= 0.
    ties : str
        How ties between top scores are broken: ``"random"`` (a uniform draw from the seed and the item) or
        ``"first"`` (the first class in the class order, as crowd-kit does).
    """

    n_workers: int
    n_classes: int
    seed: int = 0
    on_missing_skill: str = "pooled"
    default_skill: float = 0.5
    ties: str = "random"

    name: ClassVar[str] = "gold-mv"
    title: ClassVar[str] = "gold majority vote"
    api_name: ClassVar[str] = "GoldMajorityVote"
    description: ClassVar[str] = (
        "a vote weighted by each worker's accuracy on the gold in the fit (crowd-kit's GoldMajorityVote); "
        "needs --gold and gold.fit_fraction > 0"
    )
    needs_fit_gold: ClassVar[bool] = True
    #: with ``ties="random"``, tied votes are broken by draws keyed by the item
    random_fit: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(f"{self.name}.on_missing_skill", self.on_missing_skill, MISSING_SKILL_RULES)
        check_float(f"{self.name}.default_skill", self.default_skill, minimum=0.0)
        check_ties(self.name, self.ties)

    def footprint(self) -> Footprint:
        """Two values per worker (gold labels, right ones) and the vote scores (n, C) of a block."""
        k, c = self.n_workers, self.n_classes
        return Footprint(params=2 * k + c, item=c, state=0, label=0, largest=(("workers", k),))

    def init_block(self, block: Block) -> tuple[State, Stats]:
        gold, right = gold_label_counts(block, self.n_workers)
        return None, {"gold_labels": gold, "gold_right": right, "labels": worker_label_counts(block, self.n_workers)}

    def missing_skill(self, gold: np.ndarray, right: np.ndarray) -> float:
        """The weight of a worker without a label on the gold (``on_missing_skill``)."""
        if self.on_missing_skill == "ignore":
            return 0.0
        if self.on_missing_skill == "value":
            return self.default_skill
        total = float(gold.sum())
        return float(right.sum()) / total if total > 0 else 1.0

    def init_params(self, stats: Stats) -> dict[str, np.ndarray]:
        gold, right = stats["gold_labels"], stats["gold_right"]
        accuracy = np.divide(right, gold, out=np.full(gold.shape, np.nan), where=gold > 0)
        skill = np.where(gold > 0, accuracy, self.missing_skill(gold, right))
        return {"skill": skill, "accuracy": accuracy, "gold_labels": gold, "labels": stats["labels"]}

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        scores = weighted_scores(block, params["skill"], self.n_classes)
        return ItemResult(posterior=vote_shares(block, scores),
                          label=pick_labels(block, scores, self.seed, self.ties))

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        """``n_labels``, ``n_gold_labels`` (labels on the gold in the fit), ``accuracy`` (on those labels; NaN
        without any) and ``skill`` (the weight of the worker's labels)."""
        return {"n_labels": params["labels"].round().astype(np.int64),
                "n_gold_labels": params["gold_labels"].round().astype(np.int64),
                "accuracy": params["accuracy"], "skill": params["skill"]}


GoldMajorityVote.presets = {"crowd-kit": Preset(first_ties)}
