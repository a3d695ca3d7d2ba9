"""What a run's tasks do to each block after the fit: its evaluation statistics and its item rows.

The Spark engine ships these functions to the executors, whose Python workers import this module to
unpickle them, so it imports only what the tasks run (numpy, the models' base, metrics, quality signals,
the item table's Arrow form), never pandas or the run's configuration and model registry.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from crowdspark.block import Block
from crowdspark.io.tables import item_batch
from crowdspark.metrics import gold_stats, level_error_stats
from crowdspark.models.base import ItemResult, LevelModel, Model, State
from crowdspark.quality import quality_block_stats, with_item_quality
from crowdspark.stats import Stats

__all__ = ["evaluate_block", "finish_with_quality", "block_item_batch"]


def evaluate_block(model: Model, quality_bins: int, block: Block, state: State,
                   params: Any) -> tuple[State, Stats]:
    """One block's gold statistics (and level errors, and with ``quality_bins`` its quality statistics)
    from its final results; the state unchanged."""
    result = model.finish_block(block, state, params)
    stats = gold_stats(block, result.posterior, result.label)
    if isinstance(model, LevelModel) and "level" in result.extra:
        stats.update(level_error_stats(block, result.extra["level"], model.n_levels))
    if quality_bins:
        stats.update(quality_block_stats(block, result, model.n_workers, quality_bins))
    return state, stats


def finish_with_quality(model: Model, confusion: np.ndarray, block: Block, state: State,
                        params: Any) -> ItemResult:
    """One block's final item results with the per-item quality columns; ``confusion`` is (C, C)."""
    return with_item_quality(model.finish_block(block, state, params), block, confusion)


def block_item_batch(block: Block, result: ItemResult, classes: tuple[str, ...], extras: dict[str, str]):
    """One block's item rows as an Arrow record batch (:func:`crowdspark.io.tables.item_batch`)."""
    return item_batch(block.item_ids, result, classes, extras)
