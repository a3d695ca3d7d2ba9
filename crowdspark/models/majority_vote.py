"""Majority vote (paper eq. 1).

Each item's predicted label is its most frequent label; ties are broken uniformly at random by a draw keyed
on (seed, item key), so the choice does not depend on partitioning.  The posterior is the vote shares.
Workers are described by their agreement with the majority label.  Items with gold in the fit
(``Block.fixed``) get their gold class, and workers are compared with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from crowdspark.block import Block
from crowdspark.models.base import ItemResult, Model, State
from crowdspark.models.common import (
    argmax_random_ties,
    confusion_counts,
    fix_labels,
    fix_scores,
    tie_uniforms,
    vote_counts,
)
from crowdspark.stats import Stats

__all__ = ["MajorityVote", "majority_labels"]


def majority_labels(block: Block, n_classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Vote counts and the majority label of each item.

    Returns
    -------
    votes : ndarray of float64, shape (n, C)
    label : ndarray of int32, shape (n,)
        Most voted class, ties broken by :func:`crowdspark.rng.uniforms` with sweep 0, stream 0.
    """
    votes = vote_counts(block, n_classes)
    return votes, argmax_random_ties(votes, tie_uniforms(block, seed))


def one_hot(label: np.ndarray, n_classes: int) -> np.ndarray:
    """Shape (n,) int -> shape (n, C) float one-hot."""
    out = np.zeros((label.shape[0], n_classes))
    out[np.arange(label.shape[0]), label] = 1.0
    return out


@dataclass(frozen=True)
class MajorityVote(Model):
    """Majority vote with seeded random tie-breaking.

    Parameters
    ----------
    n_workers, n_classes : int
        K and C.
    seed : int
        Seed of the tie-breaking draws.
    """

    n_workers: int
    n_classes: int
    seed: int = 0

    name: ClassVar[str] = "mv"
    title: ClassVar[str] = "majority vote"
    api_name: ClassVar[str] = "MajorityVote"
    description: ClassVar[str] = (
        "the most frequent label of each item; ties broken at random from the seed; posterior = vote shares"
    )

    def init_block(self, block: Block) -> tuple[State, Stats]:
        _, label = majority_labels(block, self.n_classes, self.seed)
        label = fix_labels(block, label)
        agreement = confusion_counts(block, one_hot(label, self.n_classes), self.n_workers, self.n_classes)
        return None, {"agreement": agreement}

    def init_params(self, stats: Stats) -> dict[str, np.ndarray]:
        return {"agreement": stats["agreement"]}

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        votes, label = majority_labels(block, self.n_classes, self.seed)
        posterior = fix_scores(block, votes / votes.sum(axis=1, keepdims=True), log=False)
        return ItemResult(posterior=posterior, label=fix_labels(block, label))

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        """Confusion against the majority label, or the gold of the fit (rows: that class; NaN rows: never
        seen)."""
        counts = params["agreement"]  # (K, C, C)
        n_labels = counts.sum(axis=(1, 2))
        with np.errstate(invalid="ignore", divide="ignore"):
            confusion = counts / counts.sum(axis=2, keepdims=True)
            accuracy = np.trace(counts, axis1=1, axis2=2) / n_labels
        return {"n_labels": n_labels.astype(np.int64), "confusion": confusion, "accuracy": accuracy}
