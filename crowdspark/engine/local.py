"""The local engine: every block in one Python process (tests, small data, pandas users)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pandas as pd

from crowdspark.block import Block
from crowdspark.engine.base import BlockFn, Engine, ItemBatchFn, ItemFn
from crowdspark.errors import ConfigError
from crowdspark.io.datatree import load_tree, save_tree
from crowdspark.models.base import ItemResult, State
from crowdspark.stats import Stats, add_stats

__all__ = ["LocalEngine"]


class LocalEngine(Engine):
    """Holds a list of blocks and their states in memory.

    Parameters
    ----------
    blocks : list of Block
    """

    name = "local"

    def __init__(self, blocks: list[Block]) -> None:
        self.blocks = list(blocks)
        self.states: list[State] = [None] * len(self.blocks)

    def map_reduce(self, fn: BlockFn, value: Any, *, stateful: bool, sweep: int = 0) -> Stats:
        total: Stats = {}
        for j, block in enumerate(self.blocks):
            state, stats = fn(block, self.states[j], value)
            if stateful:
                self.states[j] = state
            total = add_stats(total, stats)
        return total

    def save_states(self, path: str) -> None:
        """Write every block's state, keyed by the block's first item id, to ``path/states.npz``
        (:mod:`crowdspark.io.datatree`: arrays and JSON, no pickle)."""
        os.makedirs(path, exist_ok=True)
        keyed = {str(b.item_ids[0]): s for b, s in zip(self.blocks, self.states) if b.n_items}
        save_tree(os.path.join(path, "states.npz"), keyed)

    def load_states(self, path: str) -> None:
        """Restore the states written by :meth:`save_states` (the blocks must be the same).

        Raises
        ------
        ConfigError
            If the file cannot be read or holds no state for one of the blocks.
        """
        source = os.path.join(path, "states.npz")
        try:
            keyed = load_tree(source)
            self.states = [keyed[str(b.item_ids[0])] for b in self.blocks]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"the checkpoint's block states in {source!r} cannot be used ({type(exc).__name__}: {exc}); "
                "delete the checkpoint to start over"
            ) from exc

    def items(self, fn: ItemFn, value: Any, to_batch: ItemBatchFn, schema: str) -> pd.DataFrame:
        """The item table as a pandas DataFrame (array columns hold numpy arrays)."""
        return self.item_table(fn, value, to_batch).to_pandas()

    def item_table(self, fn: ItemFn, value: Any, to_batch: ItemBatchFn):
        """The item table as a pyarrow Table: the blocks' batches, with no Python object per item."""
        import pyarrow as pa

        return pa.Table.from_batches([to_batch(block, result) for block, result in self._item_results(fn, value)])

    def map_items(self, fn: ItemFn, value: Any) -> list[tuple[Block, ItemResult]]:
        """Per-item results of every block, in block order."""
        return list(self._item_results(fn, value))

    def _item_results(self, fn: ItemFn, value: Any) -> Iterator[tuple[Block, ItemResult]]:
        """Each block with its per-item results, one block at a time (a caller that keeps less than the results
        lets each go before the next is computed)."""
        for j, block in enumerate(self.blocks):
            yield block, fn(block, self.states[j], value)
