"""What an incremental run carries from night to night: the additive statistics of the items it does not refit
(incremental EM in the sense of Neal & Hinton 1998), sized by workers and classes, never by items.

Notation: K workers, C classes, R the number of a model's per-item responsibilities
(:meth:`~crowdspark.models.base.Model.item_responsibilities`: the posterior over the true class, R = C, or over
(level, class) pairs, R = H C).  An item's contribution to a model's carried statistics depends only on its
labels and its responsibilities ``rho`` (R,) at its last fit:

* ``label_sums[k, r, c]`` = the sum of ``rho[r]`` over its labels of class c by worker k, shape (K, R, C);
* ``item_sums[r]`` = ``rho[r]``, shape (R,);

and :meth:`~crowdspark.models.base.Model.carried_from_sums` turns their totals into the statistics its
``local_step`` returns.  A night refits the items its new labels touch: it subtracts each one's previous
contribution (its earlier labels and the responsibilities the previous run kept for it in the lake) and adds
the new one; every other item's contribution stays as it was.  With a decay ``lambda`` < 1, a contribution
fitted ``a`` days before a run weighs ``lambda ** a`` in that run's totals: the totals are multiplied by
``lambda ** days`` from one run to the next, and a refitted item's previous contribution is subtracted with the
weight it has by then.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import scipy.sparse as sp

from crowdspark.block import Block
from crowdspark.models.base import Model, State
from crowdspark.models.common import confusion_counts
from crowdspark.stats import Stats

__all__ = ["Carried", "SUM_KEYS", "carry_block", "carried_stats", "label_sums", "responsibilities_fn"]

#: the additive values of a carry pass over blocks (:func:`carry_block`)
SUM_KEYS = ("label_sums", "item_sums", "worker_labels", "n_items", "n_labels")


@dataclass(frozen=True)
class Carried:
    """A run's carried summary: every item's contribution, summed.

    Attributes
    ----------
    label_sums : ndarray of float64, shape (K, R, C)
    item_sums : ndarray of float64, shape (R,)
        The contributions of the run's items, each weighted by ``decay ** (days since the item's last fit)``;
        workers in the order of the run's saved model.
    worker_labels : ndarray of float64, shape (K,)
        Labels of each worker over the run's items (not decayed).
    n_items, n_labels : int
        Items and labels of the run's result.
    as_of : str
        The run's as-of date (``YYYY-MM-DD``).
    full_refit_as_of : str
        The as-of date of the full refit this run continues (its own for a full refit).
    fingerprint : dict
        The configuration the values depend on (:func:`crowdspark.pipeline.incremental.fingerprint`).
    """

    label_sums: np.ndarray
    item_sums: np.ndarray
    worker_labels: np.ndarray
    n_items: int
    n_labels: int
    as_of: str
    full_refit_as_of: str
    fingerprint: dict[str, Any] = field(default_factory=dict)

    def to_tree(self) -> dict[str, Any]:
        """The summary as a :mod:`crowdspark.io.datatree` tree (arrays and JSON values only)."""
        return {"label_sums": self.label_sums, "item_sums": self.item_sums, "worker_labels": self.worker_labels,
                "n_items": int(self.n_items), "n_labels": int(self.n_labels), "as_of": self.as_of,
                "full_refit_as_of": self.full_refit_as_of, "fingerprint": self.fingerprint}

    @classmethod
    def from_tree(cls, tree: dict[str, Any]) -> Carried:
        """Read :meth:`to_tree`'s tree (``KeyError``/``TypeError``/``ValueError`` when it is not one)."""
        label_sums = np.asarray(tree["label_sums"], dtype=np.float64)
        item_sums = np.asarray(tree["item_sums"], dtype=np.float64)
        worker_labels = np.asarray(tree["worker_labels"], dtype=np.float64)
        if label_sums.ndim != 3 or item_sums.shape != label_sums.shape[1:2] or worker_labels.shape != label_sums.shape[:1]:
            raise ValueError(f"inconsistent shapes {label_sums.shape}, {item_sums.shape}, {worker_labels.shape}")
        return cls(label_sums, item_sums, worker_labels, int(tree["n_items"]), int(tree["n_labels"]),
                   str(tree["as_of"]), str(tree["full_refit_as_of"]), dict(tree["fingerprint"]))

    def for_workers(self, old_index: np.ndarray) -> Carried:
        """The summary in another worker order: worker ``j`` is this summary's ``old_index[j]`` (``-1``: a worker
        it has not seen, with zeros).  Every worker of this summary must be in the new order."""
        known = old_index >= 0
        if int(known.sum()) != self.label_sums.shape[0]:
            raise ValueError("the new worker order must hold every carried worker")
        label_sums = np.zeros((len(old_index),) + self.label_sums.shape[1:])
        label_sums[known] = self.label_sums[old_index[known]]
        worker_labels = np.zeros(len(old_index))
        worker_labels[known] = self.worker_labels[old_index[known]]
        return replace(self, label_sums=label_sums, worker_labels=worker_labels)

    def decayed(self, factor: float) -> Carried:
        """The contributions weighted by ``factor`` more (the counts of labels and items stay)."""
        return replace(self, label_sums=self.label_sums * factor, item_sums=self.item_sums * factor)


def carried_stats(model: Model, label_sums: np.ndarray, item_sums: np.ndarray) -> Stats:
    """The model's carried statistics for these sums, negative round-off removed (a refitted item's
    contribution is subtracted from a total it was added to)."""
    return model.carried_from_sums(np.maximum(label_sums, 0.0), np.maximum(item_sums, 0.0))


def label_sums(worker: np.ndarray, label: np.ndarray, resp: np.ndarray, n_workers: int,
               n_classes: int) -> np.ndarray:
    """``label_sums`` of labels given one by one.

    Parameters
    ----------
    worker, label : ndarray of int, shape (m,)
        Worker and class index of each label.
    resp : ndarray of float64, shape (m, R)
        The (weighted) responsibilities of each label's item.

    Returns
    -------
    ndarray of float64, shape (K, R, C)
    """
    m, width = resp.shape
    rows = worker.astype(np.int64) * n_classes + label.astype(np.int64)
    incidence = sp.csr_matrix((np.ones(m), (rows, np.arange(m))), shape=(n_workers * n_classes, m))
    flat = np.asarray(incidence @ resp)  # (K C, R)
    return np.moveaxis(flat.reshape(n_workers, n_classes, width), 1, 2)


def carry_block(model: Model, block: Block, state: State, params: Any) -> tuple[State, Stats]:
    """Block function of a carry pass: the block's items' contributions at ``params`` (:data:`SUM_KEYS`)."""
    resp = model.item_responsibilities(block, params)
    return state, {
        "label_sums": confusion_counts(block, resp, model.n_workers, model.n_classes),
        "item_sums": resp.sum(axis=0),
        "worker_labels": np.bincount(block.worker, minlength=model.n_workers).astype(np.float64),
        "n_items": np.array(block.n_items),
        "n_labels": np.array(block.n_labels),
    }


def responsibilities_fn(model: Model, block: Block, state: State, params: Any) -> np.ndarray:
    """Item function (:meth:`crowdspark.engine.base.Engine.items`) giving each item's responsibilities."""
    return model.item_responsibilities(block, params)
