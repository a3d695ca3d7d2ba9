"""What an engine offers the fit loop.

An engine holds blocks of items (and each block's per-item ``state``) and applies block functions to them.
A block function has the signature ``fn(block, state, value) -> (state, stats)``; ``value`` is what the
driver sends to every block (the global parameters), ``stats`` are additive (:mod:`crowdspark.stats`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from crowdspark.block import Block
from crowdspark.models.base import ItemResult, State
from crowdspark.stats import Stats

__all__ = ["Engine", "BlockFn", "ItemFn", "ItemBatchFn", "ItemHeadFn", "WrittenItems"]

BlockFn = Callable[[Block, State, Any], tuple[State, Stats]]
ItemFn = Callable[[Block, State, Any], ItemResult]
#: a block's per-item results -> an Arrow record batch of the item table
ItemBatchFn = Callable[[Block, ItemResult], Any]
#: (what was kept of the item batches so far, or None; the next batch) -> what is kept: a small Arrow table
ItemHeadFn = Callable[[Any, Any], Any]


@dataclass
class WrittenItems:
    """What :meth:`Engine.write_items` wrote.

    Attributes
    ----------
    rows : int
        Rows written.
    kept : pyarrow.Table or None
        What ``head`` kept of each partition's batches, concatenated (``None`` without ``head``, or when no
        partition had a batch).
    """

    rows: int
    kept: Any = None


class Engine:
    """Interface implemented by :class:`~crowdspark.engine.local.LocalEngine` and the Spark engine."""

    #: a short name for summaries ("local", "spark")
    name: str = "engine"

    def map_reduce(self, fn: BlockFn, value: Any, *, stateful: bool, sweep: int = 0) -> Stats:
        """Apply ``fn`` to every block, keep the returned states if ``stateful``, return the summed stats."""
        raise NotImplementedError

    def begin_sweeps(self, stateful: bool) -> None:
        """A fit starts: the engine may prepare to run many sweeps."""

    def end_sweeps(self) -> None:
        """The fit's sweeps are over (always called after :meth:`begin_sweeps`, also on errors)."""

    @contextmanager
    def sweeps_held(self) -> Iterator[None]:
        """A scope in which the stateless passes after a fit (its evaluation) may reuse what the fit's sweeps
        set up; whatever is held is released when the scope ends.  Nothing to hold by default."""
        yield

    def save_states(self, path: str) -> None:
        """Write every block's state under ``path`` (for checkpoints)."""
        raise NotImplementedError

    def load_states(self, path: str) -> None:
        """Restore the states written by :meth:`save_states` for the same blocks."""
        raise NotImplementedError

    def items(self, fn: ItemFn, value: Any, to_batch: ItemBatchFn, schema: str) -> Any:
        """The item table: ``to_batch(block, fn(block, state, value))`` of every block, as one table.

        The local engine returns a pandas DataFrame, the Spark engine a lazy Spark DataFrame of ``schema``
        (Spark DDL) that stays valid until :meth:`close`.
        """
        raise NotImplementedError

    def write_items(self, fn: ItemFn, value: Any, to_batch: ItemBatchFn, schema: str, directory: str,
                    head: ItemHeadFn | None = None) -> WrittenItems | None:
        """Write the item table (:meth:`items`) as Parquet into ``directory`` from where the blocks are, when
        this engine can, folding ``head`` over each partition's item batches on the way; ``None`` when it
        wrote nothing (write :meth:`items`)."""
        return None

    def report(self) -> dict[str, Any]:
        """Entries of the run summary about how the engine ran (none by default)."""
        return {}

    def close(self) -> None:
        """Release cached data."""
