"""Worker Agreement with Aggregate (Wawa; crowd-kit's ``Wawa``).

Notation
--------
K workers, C classes.  ``skill[k]`` is the fraction of worker k's labels that equal the majority-vote label
of their item (its agreement with the aggregate); the answer is the vote in which every label of worker k
weighs ``skill[k]``.

One pass over the data: majority vote per block, agreement counts per worker (additive), then the
weighted vote per block with the summed skills.  The posterior is the weighted vote shares (uniform for an
item all of whose workers have skill 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from crowdspark.block import Block
from crowdspark.models.base import Footprint, ItemResult, Model, Preset, State
from crowdspark.models.common import vote_counts, worker_label_counts
from crowdspark.models.weighted_vote import (
    check_ties,
    first_ties,
    pick_labels,
    vote_shares,
    weighted_scores,
    worker_agreement,
)
from crowdspark.stats import Stats

__all__ = ["Wawa"]


@dataclass(frozen=True)
class Wawa(Model):
    """A vote weighted by each worker's agreement with the majority vote.

    Parameters
    ----------
    n_workers, n_classes : int
        K and C.
    seed : int
        Seed of the tie-breaking draws.
    ties : str
        How ties between top scores are broken, in the majority vote and in the weighted vote: ``"random"``
        (a uniform draw from the seed and the item) or ``"first"`` (the first class in the class order, as
        crowd-kit does).
    """

    n_workers: int
    n_classes: int
    seed: int = 0
    ties: str = "random"

    name: ClassVar[str] = "wawa"
    title: ClassVar[str] = "Worker Agreement with Aggregate"
    api_name: ClassVar[str] = "Wawa"
    description: ClassVar[str] = (
        "a vote weighted by each worker's agreement with the majority vote (crowd-kit's Wawa); one pass"
    )
    #: with ``ties="random"``, the tied votes of the fit are broken by draws keyed by the item
    random_fit: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ties(self.name, self.ties)

    def footprint(self) -> Footprint:
        """Two values per worker (skill, labels) and the vote scores (n, C) of a block."""
        k, c = self.n_workers, self.n_classes
        return Footprint(params=2 * k + c, item=c, state=0, label=0, largest=(("workers", k),))

    def init_block(self, block: Block) -> tuple[State, Stats]:
        label = pick_labels(block, vote_counts(block, self.n_classes), self.seed, self.ties)
        return None, {
            "agree": worker_agreement(block, label, self.n_workers),
            "labels": worker_label_counts(block, self.n_workers),
        }

    def init_params(self, stats: Stats) -> dict[str, np.ndarray]:
        labels = stats["labels"]
        skill = np.divide(stats["agree"], labels, out=np.zeros_like(labels), where=labels > 0)
        return {"skill": skill, "labels": labels}

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        scores = weighted_scores(block, params["skill"], self.n_classes)
        return ItemResult(posterior=vote_shares(block, scores),
                          label=pick_labels(block, scores, self.seed, self.ties))

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        """``n_labels`` and ``accuracy``: the agreement with the majority vote, which is the worker's weight."""
        return {"n_labels": params["labels"].round().astype(np.int64), "accuracy": params["skill"]}



Wawa.presets = {"crowd-kit": Preset(first_ties)}
