"""Karger-Oh-Shah message passing (KOS; Karger, Oh & Shah 2014), for two classes.

Notation
--------
Labels are edges (i, j) between items i and workers j with ``A_ij = +1`` for class 0 and ``-1`` for class
1.  Items send workers ``x_{i->j} = sum over the item's other labels j' of A_ij' y_{j'->i}``; workers send
items ``y_{j->i} = sum over the worker's other labels i' of A_i'j x_{i'->j}``.  The answer of item i is the
sign of ``sum_j A_ij y_{j->i}`` (class 0 when positive).

Both sums "over the other labels" are a total minus the edge's own term.  An item's total is block-local;
a worker's total ``S_j = sum_i A_ij x_{i->j}`` is an additive statistic.  So each block keeps its edges'
``x`` as per-item state (``stateful``), the driver keeps ``S`` (size K), and a sweep is
``y = S_j - A_ij x``, then ``x = (item total of A y) - A y``, then the new ``S``.  Messages grow
geometrically with the sweeps, so every sweep divides ``y`` by ``max_j |S_j|``: a common positive factor,
which changes no sign and no answer, and keeps the messages finite for any number of sweeps.

The first ``y`` is 1 on every edge (``S = 1``, ``x = 0``: the first ``x`` is the item's vote without the
edge's own label), where the paper draws ``y`` from N(1, 1); the answers do not depend on that start once
the messages have converged to their leading direction.  A sweep is one of crowd-kit's ``n_iter``
iterations; the fit stops early when the normalized worker totals ``S / max|S|`` change by less than
``tol``.  The objective is the share of labels that agree with the sweep's answers.

KOS has no probabilistic model: the posterior is the answer (1 on the chosen class), 1/2 each on an item
whose sum is 0 (whose label is drawn from the seed).  An item with gold in the fit (``Block.fixed``) is
answered with its gold class; the messages do not use it (they carry no per-item answer to fix).  For a stateless scoring of new items, ``y_{j->i} =
S_j`` (the worker's total, to which a new item never contributed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from crowdspark.block import Block
from crowdspark.errors import ConfigError
from crowdspark.models.base import Footprint, ItemResult, Model, Schedule, State, Update
from crowdspark.models.common import fix_labels, fix_scores, per_item_sum, tie_uniforms, worker_label_counts
from crowdspark.models.weighted_vote import worker_agreement
from crowdspark.stats import Stats
from crowdspark.validation import check_float, check_int

__all__ = ["Kos"]

#: an item sum within this fraction of the largest worker message is a tie
_TIE_RTOL = 1e-12


def _signs(block: Block) -> np.ndarray:
    """``A_ij`` per label: +1 for class 0, -1 for class 1, float64 (m,)."""
    return 1.0 - 2.0 * block.label


def _item_messages(block: Block, a: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The items' totals ``sum_j A_ij y_{j->i}`` (n,) and the messages ``x_{i->j}`` (m,)."""
    ay = a * y
    total = per_item_sum(block, ay)
    return total, total[block.item_of_label] - ay


@dataclass(frozen=True)
class Kos(Model):
    """Karger-Oh-Shah message passing between items and workers; two classes only.

    Parameters
    ----------
    n_workers, n_classes : int
        K and C (C must be 2, or 1 when the labels hold one class).
    seed : int
        Seed of the draws that break ties (items whose messages sum to 0).
    max_iter : int
        Largest number of worker-message updates (crowd-kit's ``n_iter``).
    tol : float
        Stop when no normalized worker total ``S_j / max|S|`` changes by more than this (0: run every
        update).
    """

    n_workers: int
    n_classes: int
    seed: int = 0
    max_iter: int = 100
    tol: float = 1e-9

    name: ClassVar[str] = "kos"
    title: ClassVar[str] = "Karger-Oh-Shah"
    api_name: ClassVar[str] = "KOS"
    description: ClassVar[str] = (
        "message passing between items and workers (Karger, Oh & Shah); two classes only"
    )
    stateful: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("kos.max_iter", self.max_iter, minimum=1)
        check_float("kos.tol", self.tol, minimum=0.0)
        if self.n_classes > 2:
            raise ConfigError(
                f"kos is for two classes, but the labels have {self.n_classes}; choose an algorithm for any "
                "number of classes (e.g. --algorithm ds, wawa, zbs or mmsr), or map the labels to two classes"
            )

    @property
    def schedule(self) -> Schedule:
        return Schedule(max_sweeps=self.max_iter, tol=self.tol)

    def _worker_stats(self, block: Block, a: np.ndarray, x: np.ndarray, total: np.ndarray) -> Stats:
        decided = fix_labels(block, np.where(total > 0, 0, 1))
        return {
            "sums": np.bincount(block.worker, weights=a * x, minlength=self.n_workers),
            "agree": worker_agreement(block, decided, self.n_workers),
        }

    def footprint(self) -> Footprint:
        """Four values per worker and the messages ``x`` (one per label) a block keeps."""
        k, c = self.n_workers, self.n_classes
        return Footprint(params=4 * k, item=2, state=0, label=2, largest=(("workers", k),))

    def init_block(self, block: Block) -> tuple[State, Stats]:
        return {"x": np.zeros(block.n_labels)}, {"labels": worker_label_counts(block, self.n_workers)}

    def init_params(self, stats: Stats) -> dict[str, np.ndarray]:
        """The start ``y = 1`` on every edge: totals ``S = 1`` and messages ``x = 0``."""
        ones = np.ones(self.n_workers)
        return {"sums": ones, "agree": np.zeros(self.n_workers), "labels": stats["labels"], "reliability": ones}

    def step_params(self, params: Any) -> Any:
        return {"sums": params["sums"]}

    def local_step(self, block: Block, state: State, params: Any, sweep: int) -> tuple[State, Stats]:
        a = _signs(block)
        y = self._worker_messages(block, a, state["x"], params["sums"])
        total, x = _item_messages(block, a, y)
        return {"x": x}, self._worker_stats(block, a, x, total)

    def _worker_messages(self, block: Block, a: np.ndarray, x: np.ndarray | None, sums: np.ndarray) -> np.ndarray:
        """``y_{j->i} = S_j - A_ij x_{i->j}`` divided by ``max|S|`` (m,); ``S_j`` alone without ``x``."""
        y = sums[block.worker] if x is None else sums[block.worker] - a * x
        return y / _scale(sums)

    def global_step(self, stats: Stats, params: Any, sweep: int) -> Update:
        labels = params["labels"]
        reliability = _normalized(stats["sums"])
        change = float(np.max(np.abs(reliability - params["reliability"]))) if reliability.size else 0.0
        objective = float(stats["agree"].sum() / max(labels.sum(), 1.0))
        new = {"sums": stats["sums"], "agree": stats["agree"], "labels": labels, "reliability": reliability}
        return Update(params=new, objective=objective, change=change)

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        a = _signs(block)
        y = self._worker_messages(block, a, None if state is None else state["x"], params["sums"])
        total = per_item_sum(block, a * y)
        tied = np.abs(total) <= _TIE_RTOL * max(1.0, float(np.abs(y).max(initial=0.0)))
        draw = tie_uniforms(block, self.seed) < 0.5
        label = np.where(tied, np.where(draw, 0, 1), np.where(total > 0, 0, 1)).astype(np.int32)
        if self.n_classes == 1:
            return ItemResult(posterior=np.ones((block.n_items, 1)), label=np.zeros(block.n_items, np.int32))
        posterior = np.zeros((block.n_items, 2))
        posterior[np.arange(block.n_items), label] = 1.0
        posterior[tied] = 0.5
        return ItemResult(posterior=fix_scores(block, posterior, log=False), label=fix_labels(block, label))

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        """``n_labels``, ``reliability`` (the worker's total message ``S_j / max|S|``, in [-1, 1]: negative for
        a worker who mostly contradicts the answers) and ``accuracy`` (agreement with the last answers)."""
        labels = params["labels"]
        accuracy = np.divide(params["agree"], labels, out=np.full(labels.shape, np.nan), where=labels > 0)
        return {"n_labels": labels.round().astype(np.int64), "reliability": params["reliability"],
                "accuracy": accuracy}


def _scale(sums: np.ndarray) -> float:
    """``max_j |S_j|``, or 1 when every total is 0."""
    top = float(np.abs(sums).max(initial=0.0))
    return top if top > 0 else 1.0


def _normalized(sums: np.ndarray) -> np.ndarray:
    return sums / _scale(sums)
