"""Blocks that stay in the Python worker processes between sweeps (the Spark engine's resident mode).

PySpark keeps a cached RDD as pickled bytes in the JVM: every sweep, every block is streamed to a Python
worker and unpickled again, which takes longer than the sweep's own work at 10M labels
(docs/decisions/0079-resident-blocks.md).  In resident mode the cached RDD holds only a small
:class:`BlockHandle` per block; the
block itself is written once to a spill file on the executor's local disk and, the first time a Python worker
process meets the handle, loaded into that process's memory, where it stays (with the arrays memoized on it,
such as its incidence matrix) for the next sweeps.  Python workers are reused between tasks
(``spark.python.worker.reuse``, on by default), so after the first sweep a task only looks the block up.

A lost handle partition is recomputed from the lineage, which spills the block again.  Spill files are on
the local disk of the machine that built them: this is safe when every task can read that disk, i.e. on
a local master (``local[*]``), which is where the engine turns it on by default
(``spark.resident_blocks = "auto"``).  On a cluster the blocks travel from Spark's cache as usual.

Spill folders (``crowdspark-blocks-<engine id>-<random>``) are created by the driver with mode 0700 and
carry crowdspark's marker (kind ``spill``, with the driver's process id and host name): the engine deletes
its folder when it closes, and a new engine deletes the folders whose owner process is gone from this host
(:func:`remove_stale_spill_directories`).  With ``spark.resident_blocks = "on"`` on a cluster, an executor on another
machine creates the folder there with the same marker, naming the process its Python workers share; the first
spill on that host after the executor is gone deletes it.  A spill file is a data-only ``.npz`` archive of the block's
arrays (:func:`write_block`), read with ``allow_pickle=False``.

A block may be spilled before the run's encoding is known (the one-pass prepare on a local master,
:mod:`crowdspark.engine.spark.blocks`): its codes index its partition's dictionaries, and its handle names a
*remap file* (:func:`write_remap`: the partition's worker and class maps into the run's codes, also
data-only) that :func:`resolve` applies as it loads the block.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import uuid
from dataclasses import dataclass

import numpy as np

from crowdspark.block import Block, remap_block
from crowdspark.errors import ConfigError
from crowdspark.io.files import LocalFiles
from crowdspark.io.lock import process_alive
from crowdspark.io.marker import SPILL, delete_owned, read_marker, write_marker

__all__ = [
    "BlockHandle",
    "spill",
    "resolve",
    "forget",
    "write_block",
    "read_block",
    "write_remap",
    "make_spill_directory",
    "remove_spill_directory",
    "remove_stale_spill_directories",
    "SPILL_PREFIX",
]

log = logging.getLogger(__name__)

#: name prefix of spill folders
SPILL_PREFIX = "crowdspark-blocks-"

#: this Python process's resident blocks, by handle key
_RESIDENT: dict[str, Block] = {}

#: this Python process's remap files, by path
_REMAPS: dict[str, tuple[np.ndarray, np.ndarray]] = {}

#: the Block's integer arrays, stored as they are
_ARRAYS = ("item_keys", "offsets", "item_of_label", "worker", "label", "truth", "fixed")


@dataclass(frozen=True)
class BlockHandle:
    """Where a spilled block is, and the engine it belongs to.

    Attributes
    ----------
    key : str
        Unique id of the block (``<engine id>/<uuid>``).
    path : str
        The spill file (:func:`write_block`).
    remap : str, optional
        The remap file (:func:`write_remap`) to apply to the spilled block's codes when it is loaded;
        ``None``: the block is in the run's codes.
    """

    key: str
    path: str
    remap: str | None = None

    @property
    def engine_id(self) -> str:
        return self.key.split("/", 1)[0]


def write_block(path: str, block: Block) -> None:
    """Write ``block`` to ``path`` (created with mode 0600) as an ``.npz`` archive of its arrays.

    ``item_ids`` (strings) are stored as Arrow's string layout: the UTF-8 bytes of all ids
    (``item_id_bytes``, uint8) and their offsets (``item_id_offsets``, int64, shape (n + 1,)), so that no
    entry needs pickle.
    """
    import pyarrow as pa

    ids = pa.array(np.asarray(block.item_ids, dtype=object), type=pa.large_string())
    _, offsets, data = ids.buffers()
    arrays = {name: getattr(block, name) for name in _ARRAYS}
    arrays["item_id_offsets"] = np.frombuffer(offsets, dtype=np.int64)[ids.offset : ids.offset + len(ids) + 1]
    arrays["item_id_bytes"] = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    arrays["duplicate_pairs"] = np.asarray(block.duplicate_pairs, dtype=np.int64)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        np.savez(handle, **arrays)


def read_block(path: str) -> Block:
    """The block written by :func:`write_block` (``item_ids`` back as an object array of str)."""
    import pyarrow as pa

    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    offsets = arrays.pop("item_id_offsets")
    data = arrays.pop("item_id_bytes")
    ids = pa.LargeStringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets), pa.py_buffer(data))
    item_ids = ids.to_numpy(zero_copy_only=False)
    return Block(item_ids=item_ids, duplicate_pairs=int(arrays.pop("duplicate_pairs")), **arrays)


def write_remap(path: str, worker_map: np.ndarray, class_map: np.ndarray) -> None:
    """Write a partition's code maps (int32, shapes (K_p,) and (C_p,): its worker and class codes -> the
    run's) to ``path`` (created with mode 0600) as an ``.npz`` archive."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        np.savez(handle, worker=worker_map, label=class_map)


def _remap(path: str) -> tuple[np.ndarray, np.ndarray]:
    """The maps of the remap file at ``path`` (read once per process)."""
    maps = _REMAPS.get(path)
    if maps is None:
        with np.load(path, allow_pickle=False) as archive:
            maps = (archive["worker"], archive["label"])
        _REMAPS[path] = maps
    return maps


def spill(directory: str, engine_id: str, block: Block) -> BlockHandle:
    """Write ``block`` to a new file under ``directory`` and return its handle."""
    if not os.path.isdir(directory):
        _make_executor_spill_directory(directory, engine_id)
    name = uuid.uuid4().hex
    path = os.path.join(directory, f"{name}.block.npz")
    tmp = path + ".tmp"
    write_block(tmp, block)
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
        for path in [p for p in _REMAPS if os.path.dirname(p) != os.path.dirname(element.path)]:
            del _REMAPS[path]
        block = read_block(element.path)
        if element.remap is not None:
            block = remap_block(block, *_remap(element.remap))
        _RESIDENT[element.key] = block
    return block


def forget(engine_id: str) -> None:
    """Drop this process's resident blocks of ``engine_id``."""
    for key in [k for k in _RESIDENT if k.startswith(engine_id + "/")]:
        del _RESIDENT[key]
    _REMAPS.clear()


def make_spill_directory(root: str, engine_id: str) -> str:
    """Create the spill folder of engine ``engine_id`` under ``root`` (mode 0700, with its marker)."""
    os.makedirs(root, exist_ok=True)
    directory = tempfile.mkdtemp(prefix=f"{SPILL_PREFIX}{engine_id}-", dir=root)
    write_marker(LocalFiles(), directory, SPILL, pid=os.getpid(), host=socket.gethostname(), engine=engine_id)
    return directory


def _make_executor_spill_directory(directory: str, engine_id: str) -> None:
    """Create ``directory`` on a machine that does not have the driver's: mode 0700, marked with this host and the
    process that outlives this executor's Python workers (their parent: PySpark's daemon, or the executor), so the
    first spill of a later run on this host deletes it once that executor is gone; the stale folders of this
    host are deleted first."""
    remove_stale_spill_directories(os.path.dirname(directory))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    if read_marker(LocalFiles(), directory) is None:
        write_marker(LocalFiles(), directory, SPILL, pid=os.getppid(), host=socket.gethostname(), engine=engine_id)


def remove_spill_directory(directory: str) -> None:
    """Delete a spill folder (marker checked; a folder that is not one is kept, with a warning)."""
    if not os.path.lexists(directory):
        return
    try:
        delete_owned(LocalFiles(), directory, (SPILL,), "Remove it by hand if it is not needed.")
    except (ConfigError, OSError) as exc:
        log.warning("spill folder kept: %s", exc)


def remove_stale_spill_directories(root: str) -> list[str]:
    """Delete the spill folders under ``root`` whose owner process is gone from this host.

    Only folders with a spill marker naming this host and a process id that no longer runs are deleted;
    other users' folders (unreadable, mode 0700), folders of running processes or other hosts, and
    folders without a marker are kept.

    Returns
    -------
    list of str
        The folders deleted.
    """
    if not os.path.isdir(root):
        return []
    host = socket.gethostname()
    removed = []
    for name in sorted(os.listdir(root)):
        directory = os.path.join(root, name)
        if not name.startswith(SPILL_PREFIX) or not os.path.isdir(directory) or os.path.islink(directory):
            continue
        marker = read_marker(LocalFiles(), directory)
        if marker is None or marker.get("kind") != SPILL or marker.get("host") != host:
            continue
        pid = marker.get("pid")
        if not isinstance(pid, int) or process_alive(pid):
            continue
        try:
            delete_owned(LocalFiles(), directory, (SPILL,), "")
        except (ConfigError, OSError) as exc:
            log.warning("could not delete the stale spill folder %s: %s", directory, exc)
            continue
        removed.append(directory)
        log.info("deleted the spill folder %s of process %d, which is gone", directory, pid)
    return removed
