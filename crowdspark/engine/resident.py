"""Blocks that stay in the Python worker processes between sweeps (the Spark engine's resident mode).

PySpark keeps a cached RDD as pickled bytes in the JVM: every sweep, every block is streamed to a Python
worker and unpickled again (measured: most of a sweep's time at 10M labels, see BENCHMARKS.md).  In
resident mode the cached RDD holds only a small :class:`BlockHandle` per block; the block itself is
written once to a spill file on the executor's local disk and, the first time a Python worker process
meets the handle, loaded into that process's memory, where it stays (with the arrays memoized on it, such
as its incidence matrix) for the next sweeps.  Python workers are reused between tasks
(``spark.python.worker.reuse``, on by default), so after the first sweep a task only looks the block up.

A lost handle partition is recomputed from the lineage, which spills the block again.  Spill files are on
the local disk of the machine that built them: this is safe when every task can read that disk, i.e. on
a local master (``local[*]``), which is where the engine turns it on by default
(``engine.resident_blocks = "auto"``).  On a cluster the blocks travel from Spark's cache as usual.
"""

from __future__ import annotations

import os
import pickle
import uuid
from dataclasses import dataclass

from crowdspark.block import Block

__all__ = ["BlockHandle", "spill", "resolve", "forget"]

#: this Python process's resident blocks, by handle key
_RESIDENT: dict[str, Block] = {}


@dataclass(frozen=True)
class BlockHandle:
    """Where a spilled block is, and the engine it belongs to.

    Attributes
    ----------
    key : str
        Unique id of the block (``<engine id>/<uuid>``).
    path : str
        The spill file (a pickled :class:`~crowdspark.block.Block`).
    """

    key: str
    path: str

    @property
    def engine_id(self) -> str:
        return self.key.split("/", 1)[0]


def spill(directory: str, engine_id: str, block: Block) -> BlockHandle:
    """Write ``block`` to a new file under ``directory`` and return its handle."""
    os.makedirs(directory, exist_ok=True)
    name = uuid.uuid4().hex
    path = os.path.join(directory, f"{name}.block")
    tmp = path + ".tmp"
    with open(tmp, "wb") as handle:
        pickle.dump(block, handle, protocol=5)
    os.replace(tmp, path)
    return BlockHandle(key=f"{engine_id}/{name}", path=path)


def resolve(element: Block | BlockHandle) -> Block:
    """The block behind ``element`` (a block is returned as it is)."""
    if not isinstance(element, BlockHandle):
        return element
    block = _RESIDENT.get(element.key)
    if block is None:
        # blocks of other (finished) engines are dropped when a new engine's block arrives
        for key in [k for k in _RESIDENT if not k.startswith(element.engine_id + "/")]:
            del _RESIDENT[key]
        with open(element.path, "rb") as handle:
            block = pickle.load(handle)
        _RESIDENT[element.key] = block
    return block


def forget(engine_id: str) -> None:
    """Drop this process's resident blocks of ``engine_id``."""
    for key in [k for k in _RESIDENT if k.startswith(engine_id + "/")]:
        del _RESIDENT[key]
