"""Labels to blocks on the executors in one pass: validate, encode and build blocks in the same tasks.

The labels (left-joined with gold) are shuffled by item once.  Each task of that shuffle's reduce side
(:func:`_partition_pass`) counts its rows and nulls, collects its distinct labels, gold classes and workers
(its *partition dictionaries*), encodes its rows against them and builds its blocks
(:func:`crowdspark.block.blocks_from_codes`).  It emits one small :class:`PartitionSummary` followed by its
blocks, pickled, one row each; the rows are cached by Spark.

The driver then merges the summaries (:func:`merge_summaries`): row and null counts, the class set (at most
:data:`~crowdspark.io.rules.MAX_CLASSES` labels are ever listed per partition), the sorted worker dictionary
(size K per partition).  It raises the errors of :mod:`crowdspark.io.rules` with their messages and counts,
and otherwise broadcasts the run's encoding; :func:`remapped_blocks` maps each partition's codes to the run's
codes as the blocks leave the cache.  No label-level data reaches the driver.

On a local master whose engine keeps its blocks resident (:mod:`crowdspark.engine.spark.resident`), the pass writes
each block straight to the engine's spill folder and emits its handle instead of the pickled block
(:func:`spilled_partitions`): the driver collects the summaries and handles (no cache), writes each
partition's code maps to a remap file (:func:`remapped_handles`), and the Python worker applies them when it
first loads a block.  No block goes through Spark's cache or the driver.

The blocks equal those of the older multi-pass reader (:func:`crowdspark.io.spark_reader.block_rdd`): a
partition's workers, sorted, are a subset of the run's sorted workers, so their order (and the blocks' label
order) is kept; classes, whose order may be configured, are re-sorted within each item when it is not.
"""

from __future__ import annotations

import os
import pickle
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from crowdspark.block import Block, GoldSplit, blocks_from_codes, remap_block
from crowdspark.engine.spark.resident import BlockHandle, remove_spill_directory, spill, write_remap
from crowdspark.io.rules import MAX_CLASSES, Encoding, sorted_codes, sorted_item_codes

__all__ = ["PartitionSummary", "MergedSummary", "summarized_blocks", "collect_summaries", "merge_summaries",
           "BlockBuild", "remapped_blocks", "spilled_partitions", "remapped_handles", "handle_rdd"]

_ROLES = ("item", "worker", "label")

_SPLIT_SETTING = "spark.sql.files.maxPartitionBytes"

#: Spark's default for :data:`_SPLIT_SETTING` as the session reports it when nobody set it
_SPARK_DEFAULT_SPLIT = "134217728b"

#: the largest input split of the pass on a local master (:func:`one_wave_reads`)
LOCAL_MAX_SPLIT_BYTES = 1 << 30


@dataclass(frozen=True)
class PartitionSummary:
    """What one partition of the shuffle by item holds.

    Attributes
    ----------
    rows : int
        Label rows.
    nulls : dict
        Null values per column role (``item``, ``worker``, ``label``).
    labels : tuple of str
        The distinct labels, sorted (at most ``MAX_CLASSES + 1``: more means the wrong column).
    classes : tuple of str
        The partition's class dictionary: its labels and gold classes, sorted; label and gold codes of its
        blocks index it.
    workers : pyarrow.Array of string
        The partition's worker dictionary, sorted; worker codes of its blocks index it.
    items : int
        Distinct items.
    gold_items : int
        Distinct items with gold.
    first_item : str or None
        The smallest item id.
    built : bool
        Whether the partition built its blocks (not when it has nulls or too many labels).
    """

    rows: int
    nulls: dict[str, int]
    labels: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()
    workers: Any = None
    items: int = 0
    gold_items: int = 0
    first_item: str | None = None
    built: bool = False


def _sorted_unique(column):
    """The distinct values of an Arrow string column, sorted (byte order, which is code-point order)."""
    import pyarrow.compute as pc

    unique = pc.unique(column)
    return unique.take(pc.sort_indices(unique))


def _recoded(codes: np.ndarray, values, dictionary) -> np.ndarray:
    """``codes`` into ``values`` (an Arrow array) as codes into ``dictionary``, a superset, int32 (m,)."""
    import pyarrow.compute as pc

    position = np.append(pc.index_in(values, value_set=dictionary).to_numpy(zero_copy_only=False), -1)
    return position.astype(np.int32)[codes]


_SUMMARY, _BLOCK = 0, 1


def _row(payload: PartitionSummary | Block | BlockHandle):
    import pyarrow as pa

    kind = _SUMMARY if isinstance(payload, PartitionSummary) else _BLOCK
    return pa.RecordBatch.from_pydict({"kind": pa.array([kind], pa.int8()),
                                       "payload": [pickle.dumps(payload, protocol=5)]})


def _partition_pass(batches: Iterator, max_labels: int, split: GoldSplit | None,
                    spill_to: tuple[str, str] | None = None) -> Iterator:
    """mapInArrow function: one partition's label rows -> its :class:`PartitionSummary`, then its blocks (with
    ``spill_to``, a spill folder and engine id: each block written there, and its handle in its place).

    Rows with nulls, or more than ``MAX_CLASSES`` distinct labels, build no block: the run fails on the
    driver with the merged counts.
    """
    import pyarrow as pa

    batches = list(batches)
    if not batches:
        yield _row(PartitionSummary(rows=0, nulls=dict.fromkeys(_ROLES, 0)))
        return
    table = pa.Table.from_batches(batches)
    del batches
    nulls = {role: int(table[role].null_count) for role in _ROLES}
    summary = PartitionSummary(rows=table.num_rows, nulls=nulls)
    if table.num_rows == 0 or any(nulls.values()):
        yield _row(summary)
        return
    labels, label = sorted_codes(table["label"])
    if len(labels) > MAX_CLASSES:
        yield _row(replace(summary, labels=tuple(labels[: MAX_CLASSES + 1].to_pylist())))
        return
    has_gold = "truth" in table.column_names
    truth = None
    classes = labels
    if has_gold:
        truths, truth = sorted_codes(table["truth"])
        classes = _sorted_unique(pa.chunked_array([labels, truths]))
        label, truth = _recoded(label, labels, classes), _recoded(truth, truths, classes)
    workers, worker = sorted_codes(table["worker"])
    codes, uniques = sorted_item_codes(table["item"])
    del table
    blocks = blocks_from_codes(codes, uniques, worker, label, truth, max_labels=max_labels, split=split)
    gold_items = sum(int(np.count_nonzero(b.truth >= 0)) + int(np.count_nonzero(b.fixed >= 0)) for b in blocks)
    yield _row(replace(summary, labels=tuple(labels.to_pylist()), classes=tuple(classes.to_pylist()),
                       workers=workers, items=len(uniques), gold_items=gold_items, first_item=str(uniques[0]),
                       built=True))
    for block in blocks:
        yield _row(block if spill_to is None else spill(*spill_to, block))


def summarized_blocks(frame, n_partitions: int, max_labels: int, split: GoldSplit | None = None):
    """The cached DataFrame of pickled summaries and blocks (column ``payload``), one shuffle by item.

    Parameters
    ----------
    frame : pyspark DataFrame
        String columns ``item``, ``worker``, ``label`` and, with gold, ``truth`` (null: no gold).
    n_partitions : int
    max_labels : int
        Largest number of labels in one block.
    split : GoldSplit, optional
        Which gold items the fit holds fixed (the rest are held out for scoring).

    Returns
    -------
    pyspark DataFrame
        Columns ``kind`` (0 summary, 1 block) and ``payload`` (pickled); persisted (``MEMORY_AND_DISK``), not
        yet computed; every partition's first row is its summary.
    """
    from pyspark import StorageLevel

    return _passed_rows(frame, n_partitions, max_labels, split, None).persist(StorageLevel.MEMORY_AND_DISK)


def _passed_rows(frame, n_partitions: int, max_labels: int, split: GoldSplit | None, spill_to: tuple[str, str] | None):
    """The pass's rows (:func:`_partition_pass`) after one shuffle by item, lazily."""
    from pyspark.sql.types import BinaryType, ByteType, StructField, StructType

    fn = partial(_partition_pass, max_labels=max_labels, split=split, spill_to=spill_to)
    # a StructType, not the DDL string "kind byte, payload binary", which the JVM parses in a call of its own
    schema = StructType([StructField("kind", ByteType()), StructField("payload", BinaryType())])
    return frame.repartition(n_partitions, "item").mapInArrow(fn, schema)


@contextmanager
def one_wave_reads(spark) -> Iterator[None]:
    """On a local master, while the scope lasts (the pass is planned and run), files are read in one split
    per core where Spark would cut more.

    Spark cuts a file read into splits of ``min(spark.sql.files.maxPartitionBytes, input bytes per core)``:
    with the default 128 MiB, two 168 MiB files on two cores become three tasks (128, 128 and 2 x 40 MiB),
    and the last runs alone.  Raised to :data:`LOCAL_MAX_SPLIT_BYTES`, the split is the input's bytes per core,
    one wave of equal tasks up to 1 GiB per core (docs/decisions/0230-one-wave-reads.md).  A value set in the
    session is kept, and so is the setting after the scope.
    """
    previous = spark.conf.get(_SPLIT_SETTING)
    if previous != _SPARK_DEFAULT_SPLIT or not spark.sparkContext.master.startswith("local"):
        yield
        return
    spark.conf.set(_SPLIT_SETTING, str(LOCAL_MAX_SPLIT_BYTES))
    try:
        yield
    finally:
        spark.conf.set(_SPLIT_SETTING, previous)


def spilled_partitions(frame, n_partitions: int, max_labels: int, split: GoldSplit | None,
                       spill_to: tuple[str, str]) -> list[tuple[PartitionSummary, list[BlockHandle]]]:
    """Each partition's summary and the handles of its blocks, written to ``spill_to`` (a spill folder and
    engine id on a disk every task can read), by one Spark job whose reads take one wave
    (:func:`one_wave_reads`); arguments as :func:`summarized_blocks`."""
    partitions: list[tuple[PartitionSummary, list[BlockHandle]]] = []
    with one_wave_reads(frame.sparkSession):
        rows = _passed_rows(frame, n_partitions, max_labels, split, spill_to).collect()
    for kind, payload in rows:
        element = pickle.loads(payload)
        if kind == _SUMMARY:
            partitions.append((element, []))
        else:
            partitions[-1][1].append(element)
    return partitions


def collect_summaries(cached) -> list[PartitionSummary]:
    """Compute and cache every row of ``cached`` (one Spark job) and fetch the partitions' summaries."""
    rows = cached.filter(f"kind = {_SUMMARY}").select("payload").collect()
    return [pickle.loads(row[0]) for row in rows]


@dataclass(frozen=True)
class MergedSummary:
    """The summaries of all partitions, merged on the driver.

    Attributes
    ----------
    rows : int
    nulls : dict
        Null values per column role.
    labels : list of str
        The distinct labels, sorted (more than ``MAX_CLASSES`` when the label column is wrong).
    classes_seen : list of str
        Labels and the gold classes of labelled items, sorted.
    workers : pyarrow.Array of string
        Every worker, sorted.
    items : int
    gold_items : int
        Gold items that have a label.
    first_item : str or None
    """

    rows: int
    nulls: dict[str, int]
    labels: list[str]
    classes_seen: list[str]
    workers: Any
    items: int
    gold_items: int
    first_item: str | None


def merge_summaries(summaries: list[PartitionSummary]) -> MergedSummary:
    """Merge partition summaries (sizes: partitions x (workers + classes))."""
    import pyarrow as pa

    built = [s for s in summaries if s.built]
    workers = [s.workers for s in built]
    merged = (_sorted_unique(pa.chunked_array([w.cast(pa.string()) for w in workers], type=pa.string())) if workers else pa.array([], pa.string()))
    firsts = [s.first_item for s in built if s.first_item is not None]
    return MergedSummary(
        rows=sum(s.rows for s in summaries),
        nulls={role: sum(s.nulls[role] for s in summaries) for role in _ROLES},
        labels=sorted({label for s in summaries for label in s.labels}),
        classes_seen=sorted({c for s in built for c in s.classes}),
        workers=merged,
        items=sum(s.items for s in built),
        gold_items=sum(s.gold_items for s in built),
        first_item=min(firsts) if firsts else None,
    )


def _new_remap_file(directory: str, worker_map: np.ndarray, class_map: np.ndarray) -> str:
    """The path of a new remap file of the maps in the spill folder ``directory``."""
    path = os.path.join(directory, f"{uuid.uuid4().hex}.remap.npz")
    write_remap(path, worker_map, class_map)
    return path


def _partition_maps(summary: PartitionSummary, workers, classes: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The maps of a built partition's worker and class codes to the run's ``workers`` (a sorted Arrow array) and
    ``classes``, int32 (K_p,) and (C_p,)."""
    import pyarrow.compute as pc

    worker_map = pc.index_in(summary.workers, value_set=workers).to_numpy(zero_copy_only=False).astype(np.int32)
    position = {c: i for i, c in enumerate(classes)}
    class_map = np.array([position.get(c, -1) for c in summary.classes], dtype=np.int32)
    if (worker_map < 0).any() or (class_map < 0).any():
        raise RuntimeError("internal error: a worker or class is not in the run's encoding")
    return worker_map, class_map


def remapped_handles(partitions: list[tuple[PartitionSummary, list[BlockHandle]]],
                     encoding: Encoding) -> list[list[BlockHandle]]:
    """Each partition's handles (:func:`spilled_partitions`) naming a new remap file of its codes into
    ``encoding``'s, written next to its spill files by the driver."""
    import pyarrow as pa

    workers = pa.array(encoding.workers, type=pa.string())
    out = []
    for summary, handles in partitions:
        if handles:
            remap = _new_remap_file(os.path.dirname(handles[0].path),
                                    *_partition_maps(summary, workers, encoding.classes))
            handles = [replace(handle, remap=remap) for handle in handles]
        out.append(handles)
    return out


def _remap_partition(broadcast, rows: Iterator) -> Iterator[Block]:
    """One partition's rows of :func:`summarized_blocks` -> its blocks in the run's codes."""
    workers, classes = broadcast.value
    summary: PartitionSummary | None = None
    for row in rows:
        payload = pickle.loads(row[1])
        if summary is None:
            if not isinstance(payload, PartitionSummary):
                raise RuntimeError("internal error: a partition of blocks does not start with its summary")
            summary = payload
            if summary.built:  # else an empty partition: no block follows
                worker_map, class_map = _partition_maps(summary, workers, classes)
            continue
        yield remap_block(payload, worker_map, class_map)


def remapped_blocks(cached, encoding: Encoding):
    """The RDD of blocks in the run's encoding, read from ``cached`` (:func:`summarized_blocks`), lazily.

    The broadcast of the encoding stays alive while the RDD may be recomputed (it is a few MB at most).
    """
    import pyarrow as pa

    sc = cached.sparkSession.sparkContext
    broadcast = sc.broadcast((pa.array(encoding.workers, type=pa.string()), encoding.classes))
    return cached.rdd.mapPartitions(partial(_remap_partition, broadcast))


def _handles(partition: list[BlockHandle]) -> list[BlockHandle]:
    return partition


def handle_rdd(sc, partitions: list[list[BlockHandle]], tasks: int):
    """The RDD of the handles in ``tasks`` partitions (fewer when there are fewer lists), lazily.

    Handle j of list p goes to partition (p + j) % tasks, in list order: the grouping a sweep session of
    ``tasks`` tasks makes of the pass's partitions (:func:`crowdspark.engine.spark.engine._regroup`), made here on the
    driver, where the handles are. The session then starts without a Spark job to regroup them.
    """
    from crowdspark.engine.spark.engine import round_robin_keys  # the driver's: the pass's workers need none of it

    tasks = max(1, min(tasks, len(partitions)))
    dealt: list[list[BlockHandle]] = [[] for _ in range(tasks)]
    for p, handles in enumerate(partitions):
        for task, handle in round_robin_keys(tasks, p, handles):
            dealt[task].append(handle)
    return sc.parallelize(dealt, tasks).flatMap(_handles)


class BlockBuild:
    """The Spark engine's blocks in the making, over its whole life: one pass over the labels gives the
    partitions' summaries (:attr:`merged`: what the driver needs to encode the run), then :meth:`engine` builds
    the engine over blocks in the run's codes.  Where the blocks live (Spark's cache, or the engine's spill
    folder on a local master, :func:`crowdspark.engine.spark.engine.spill_target`) stays inside this package.

    Parameters
    ----------
    spark : SparkSession
    frame : pyspark DataFrame
        The canonical labels left-joined with gold (``item``, ``worker``, ``label``, ``truth``).
    n_partitions : int
        Partitions of the pass's shuffle by item.
    max_labels : int
        The largest block (``engine.max_block_labels``).
    split : GoldSplit, optional
        Which gold items the fit holds fixed.
    resident_blocks : str
        ``spark.resident_blocks``.

    Raises
    ------
    InputError
        The pass's errors (:func:`merge_summaries`); whatever the pass made is removed first.
    """

    def __init__(self, spark, frame, n_partitions: int, max_labels: int, split: GoldSplit | None,
                 resident_blocks: str) -> None:
        from crowdspark.engine.spark.engine import spill_target

        self._spark = spark
        self._cached = None
        self._partitions: list[tuple[PartitionSummary, list[BlockHandle]]] | None = None
        self._spill_to = spill_target(spark.sparkContext, resident_blocks)
        try:
            if self._spill_to is None:
                self._cached = summarized_blocks(frame, n_partitions, max_labels, split)
                summaries = collect_summaries(self._cached)
            else:
                self._partitions = spilled_partitions(frame, n_partitions, max_labels, split, self._spill_to)
                summaries = [summary for summary, _ in self._partitions]
            self.merged = merge_summaries(summaries)
        except BaseException:
            self.discard()
            raise

    def engine(self, encoding: Encoding, **options: Any):
        """The :class:`~crowdspark.engine.spark.engine.SparkEngine` over the blocks in ``encoding``'s codes,
        its blocks materialized; ``options`` are its other keyword arguments.  The build holds nothing after."""
        from crowdspark.engine.spark.engine import SparkEngine

        try:
            if self._spill_to is None:
                blocks = remapped_blocks(self._cached, encoding)
            else:  # in the partitions a sweep session will have: one per slot of the local master
                sc = self._spark.sparkContext
                blocks = handle_rdd(sc, remapped_handles(self._partitions, encoding), sc.defaultParallelism)
            engine = SparkEngine(blocks, spilled=self._spill_to, **options)
        except BaseException:
            self.discard()
            raise
        try:
            if self._spill_to is None:  # spilled blocks are built: their handles cost nothing until first used
                engine.materialize()
        except BaseException:
            engine.close()
            raise
        finally:
            self._release_cache()
        return engine

    def discard(self) -> None:
        """Remove what the pass made: the cached rows, or the spill folder and its blocks."""
        self._release_cache()
        if self._spill_to is not None:
            remove_spill_directory(self._spill_to[0])

    def _release_cache(self) -> None:
        if self._cached is not None:
            self._cached.unpersist()
            self._cached = None
