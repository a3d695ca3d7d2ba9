"""The local engine: every block in one Python process (tests, small data, pandas users)."""

from __future__ import annotations

from typing import Any

from crowdspark.block import Block
from crowdspark.engine.base import BlockFn, Engine, ItemFn
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
        """Write every block's state (keyed by the block's first item id) to ``path/states.pkl``."""
        import os
        import pickle

        os.makedirs(path, exist_ok=True)
        keyed = {str(b.item_ids[0]): s for b, s in zip(self.blocks, self.states) if b.n_items}
        with open(os.path.join(path, "states.pkl"), "wb") as handle:
            pickle.dump(keyed, handle, protocol=5)

    def load_states(self, path: str) -> None:
        """Restore the states written by :meth:`save_states` (the blocks must be the same)."""
        import os
        import pickle

        with open(os.path.join(path, "states.pkl"), "rb") as handle:
            keyed = pickle.load(handle)
        self.states = [keyed[str(b.item_ids[0])] for b in self.blocks]

    def map_items(self, fn: ItemFn, value: Any) -> list[tuple[Block, ItemResult]]:
        """Per-item results of every block, in block order."""
        return [(block, fn(block, self.states[j], value)) for j, block in enumerate(self.blocks)]
