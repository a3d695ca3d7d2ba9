"""Evaluation against gold labels, as additive statistics.

Gold labels travel inside the blocks (``Block.truth``, ``-1`` where an item has none), so every metric is
computed per block as a sum and combined like any other statistic; the same code serves both engines.

* ``error_rate``: fraction of gold items whose predicted label differs from the gold label.
* ``nll``: mean over gold items of ``-log posterior[gold class]`` (posterior floored at 1e-300).
* per-level average labeling error (paper 5.3.4): ``E_i`` is the fraction of item i's labels that differ
  from its gold label; averaged over the gold items of each difficulty level.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from crowdspark.block import Block
from crowdspark.stats import Stats

__all__ = ["gold_stats", "level_error_stats", "metrics_from_stats", "labeling_error"]

_FLOOR = 1e-300


def gold_stats(block: Block, posterior: np.ndarray, label: np.ndarray) -> Stats:
    """Counts for ``error_rate`` and ``nll`` over the gold items of a block.

    Parameters
    ----------
    posterior : ndarray, shape (n, C)
    label : ndarray of int, shape (n,)

    Returns
    -------
    dict with ``gold_n``, ``gold_errors``, ``gold_nll_sum`` (0-d arrays)
    """
    has = block.truth >= 0
    truth = block.truth[has]
    p_truth = posterior[has][np.arange(truth.shape[0]), truth] if truth.size else np.zeros(0)
    return {
        "gold_n": np.array(int(has.sum()), dtype=np.int64),
        "gold_errors": np.array(int(np.count_nonzero(label[has] != truth)), dtype=np.int64),
        "gold_nll_sum": np.array(float(-np.log(np.maximum(p_truth, _FLOOR)).sum())),
    }


def labeling_error(block: Block) -> np.ndarray:
    """``E_i``: fraction of each item's labels that differ from its gold label (NaN without gold), shape (n,)."""
    wrong = (block.label != block.truth[block.item_of_label]).astype(np.float64)
    n_wrong = np.add.reduceat(wrong, block.offsets[:-1]) if block.n_items else np.zeros(0)
    out = n_wrong / block.labels_per_item()
    out[block.truth < 0] = np.nan
    return out


def level_error_stats(block: Block, level: np.ndarray, n_levels: int) -> Stats:
    """Sums for the per-level average labeling error.

    Parameters
    ----------
    level : ndarray of int, shape (n,)
        Predicted difficulty level of each item (0 = easiest).
    n_levels : int
        H.

    Returns
    -------
    dict with ``level_gold_n`` (H,) and ``level_error_sum`` (H,)
    """
    has = block.truth >= 0
    e = labeling_error(block)[has]
    lv = np.asarray(level)[has]
    return {
        "level_gold_n": np.bincount(lv, minlength=n_levels).astype(np.int64),
        "level_error_sum": np.bincount(lv, weights=e, minlength=n_levels),
    }


def metrics_from_stats(stats: Stats) -> dict[str, Any]:
    """Turn summed gold statistics into the ``metrics`` section of a run summary."""
    n = int(stats.get("gold_n", 0))
    out: dict[str, Any] = {"n_gold": n}
    if n:
        out["error_rate"] = float(stats["gold_errors"]) / n
        out["nll"] = float(stats["gold_nll_sum"]) / n
    else:
        out["error_rate"] = None
        out["nll"] = None
    if "level_gold_n" in stats:
        counts = stats["level_gold_n"]
        with np.errstate(invalid="ignore", divide="ignore"):
            avg = stats["level_error_sum"] / counts
        out["level_gold_items"] = counts.astype(int).tolist()
        out["level_labeling_error"] = [None if not np.isfinite(v) else float(v) for v in avg]
    return out
