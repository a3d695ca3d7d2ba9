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

    def map_items(self, fn: ItemFn, value: Any) -> list[tuple[Block, ItemResult]]:
        """Per-item results of every block, in block order."""
        return [(block, fn(block, self.states[j], value)) for j, block in enumerate(self.blocks)]
