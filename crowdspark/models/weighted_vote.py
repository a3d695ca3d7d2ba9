"""Weighted votes: the kernels shared by the models that weigh each worker's labels by a skill.

Notation: ``n`` items and ``m`` labels in a block, ``K`` workers, ``C`` classes; ``w[k]`` is worker k's
weight (its skill).  The score of class c for item i is ``sum of w[k] over the labels c of item i``.

Ties between the top scores are broken by the model's ``ties`` rule: ``"random"`` draws uniformly among
them from (seed, item key) (:func:`crowdspark.models.common.tie_uniforms`, the same draw at every sweep),
``"first"`` takes the first tied class in the class order (crowd-kit's rule: pandas' ``idxmax`` over the
sorted labels).

Items with gold in the fit (``Block.fixed``) get their gold class: :func:`pick_labels` returns it and
:func:`vote_shares` gives its one-hot, so the skills a model learns from its answers learn from the gold.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from crowdspark.block import Block
from crowdspark.models.common import argmax_random_ties, fix_labels, fix_scores, tie_uniforms
from crowdspark.validation import check_choice

__all__ = ["TIE_RULES", "check_ties", "first_ties", "weighted_scores", "vote_shares", "pick_labels", "worker_agreement"]

#: how ties between the top scores are broken
TIE_RULES = ("random", "first")


def check_ties(name: str, ties: str) -> str:
    """``ties`` if it is one of :data:`TIE_RULES`, else ConfigError naming ``<name>.ties``."""
    return check_choice(f"{name}.ties", ties, TIE_RULES)


def first_ties(model: Any) -> Any:
    """``model`` with crowd-kit's tie rule (``ties="first"``): the body of the models' ``crowd-kit`` presets."""
    return replace(model, ties="first")


def weighted_scores(block: Block, weight: np.ndarray, n_classes: int) -> np.ndarray:
    """Summed weights of each class's labels per item.

    Parameters
    ----------
    weight : ndarray of float, shape (K,)

    Returns
    -------
    ndarray of float64, shape (n, C)
    """
    flat = block.item_of_label.astype(np.int64) * n_classes + block.label
    sums = np.bincount(flat, weights=weight[block.worker], minlength=block.n_items * n_classes)
    return sums.reshape(block.n_items, n_classes)


def vote_shares(block: Block, scores: np.ndarray) -> np.ndarray:
    """Scores normalized per item, shape (n, C); an item whose scores sum to 0 or less is uniform, an item
    with gold in the fit the one-hot of its gold class."""
    total = scores.sum(axis=1, keepdims=True)
    positive = total[:, 0] > 0
    out = np.full(scores.shape, 1.0 / scores.shape[1])
    out[positive] = scores[positive] / total[positive]
    return fix_scores(block, out, log=False)


def pick_labels(block: Block, scores: np.ndarray, seed: int, ties: str) -> np.ndarray:
    """The top-scoring class of each item, ties broken by the ``ties`` rule, int32 (n,); the gold class of an
    item with gold in the fit."""
    u = np.zeros(block.n_items) if ties == "first" else tie_uniforms(block, seed)
    return fix_labels(block, argmax_random_ties(scores, u))


def worker_agreement(block: Block, label: np.ndarray, n_workers: int) -> np.ndarray:
    """Number of each worker's labels equal to their item's ``label`` (n,), float64 (K,)."""
    agree = (block.label == label[block.item_of_label]).astype(np.float64)
    return np.bincount(block.worker, weights=agree, minlength=n_workers)
