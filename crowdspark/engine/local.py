"""The local engine: every block in one Python process (tests, small data, pandas users).

The blocks of a pass run on a pool of threads, one per usable core (numpy's and scipy's sparse kernels
release the GIL), and their results are taken in block order: the summed statistics are added in the order
one thread would add them, so every answer is the same bit for bit on any number of threads.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import pandas as pd

from crowdspark.block import Block
from crowdspark.engine.base import BlockFn, Engine, ItemBatchFn, ItemFn
from crowdspark.errors import ConfigError
from crowdspark.io.datatree import load_tree, save_tree
from crowdspark.models.base import ItemResult, State
from crowdspark.stats import Stats, add_stats

__all__ = ["LocalEngine", "usable_cores"]

T = TypeVar("T")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, else ``os.cpu_count()``), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class LocalEngine(Engine):
    """Holds a list of blocks and their states in memory.

    Parameters
    ----------
    blocks : list of Block
    threads : int, optional
        Blocks computed at once; default :func:`usable_cores`.  Any number gives the same answers.
    """

    name = "local"

    def __init__(self, blocks: list[Block], threads: int | None = None) -> None:
        self.blocks = list(blocks)
        self.states: list[State] = [None] * len(self.blocks)
        self.threads = usable_cores() if threads is None else threads
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1, but got {self.threads}")

    def map_reduce(self, fn: BlockFn, value: Any, *, stateful: bool, sweep: int = 0) -> Stats:
        total: Stats = {}
        states = self.states
        for j, (state, stats) in enumerate(self._in_order(lambda j: fn(self.blocks[j], states[j], value))):
            if stateful:
                self.states[j] = state
            total = add_stats(total, stats)
        return total

    def _in_order(self, task: Callable[[int], T]) -> Iterator[T]:
        """``task(j)`` of every block index ``j``, yielded in block order, on :attr:`threads` threads.

        At most ``threads + 1`` results exist at once (those computing and the one yielded), so a pass holds
        a few blocks' results, not all of them.
        """
        n = len(self.blocks)
        if self.threads == 1 or n < 2:
            for j in range(n):
                yield task(j)
            return
        with ThreadPoolExecutor(min(self.threads, n), thread_name_prefix="crowdspark-block") as pool:
            pending: deque[Future] = deque()
            for j in range(n):
                pending.append(pool.submit(task, j))
                if len(pending) > self.threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()

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

        states = self.states

        def batch(j: int):
            block = self.blocks[j]
            return to_batch(block, fn(block, states[j], value))

        return pa.Table.from_batches(list(self._in_order(batch)))

    def map_items(self, fn: ItemFn, value: Any) -> list[tuple[Block, ItemResult]]:
        """Per-item results of every block, in block order."""
        return list(self._item_results(fn, value))

    def _item_results(self, fn: ItemFn, value: Any) -> Iterator[tuple[Block, ItemResult]]:
        """Each block with its per-item results, one block at a time (a caller that keeps less than the results
        lets each go before the next is computed)."""
        states = self.states
        yield from self._in_order(lambda j: (self.blocks[j], fn(self.blocks[j], states[j], value)))
