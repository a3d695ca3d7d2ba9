"""Reading, validating and encoding labels with Spark, and building the cached RDD of blocks.

The rules and messages are those of :mod:`crowdspark.data`; here they are computed with Spark
aggregations, so that nothing item-level is collected to the driver.  What reaches the driver is sized by
workers and classes: the distinct workers (to number them), the distinct labels (refused beyond about
:data:`crowdspark.data.MAX_CLASSES` + 1 of them are ever fetched), and counts.

Blocks are built on the executors: labels are left-joined with gold, repartitioned by item (so every label
of an item lands in one partition), and each partition is encoded in Arrow (worker and class codes,
items factorized in sorted order) and grouped into blocks by :func:`crowdspark.block.blocks_from_codes`,
the function behind the local engine's :func:`crowdspark.block.build_blocks` (a test checks both give the
same blocks).  The blocks travel from Arrow to Python as one pickled binary value per block.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd

from crowdspark.block import Block
from crowdspark.config import GoldConfig, InputConfig
from crowdspark.data import (
    MAX_CLASSES,
    Encoding,
    decide_classes,
    gold_conflict_error,
    gold_outside_error,
    infer_format,
    is_local,
    missing_columns_error,
    null_error,
    resolve_local_paths,
)
from crowdspark.errors import InputError

__all__ = [
    "read_spark_frame", "resolve_format", "COLUMNAR_FORMATS", "SparkLabels", "prepare_labels_spark",
    "prepare_gold_spark", "block_rdd", "input_bytes", "to_pandas_strings",
]

log = logging.getLogger(__name__)


# formats whose files Spark reads column by column: re-reading the three label columns costs less than
# caching them (see ``engine.cache_input``)
COLUMNAR_FORMATS = ("parquet", "orc")


def resolve_format(path: str, fmt: str, what: str) -> str:
    """``fmt``, or with ``"auto"`` the format inferred from the files' extensions (local paths checked)."""
    files = resolve_local_paths(path, what) if is_local(path) else None
    return infer_format(path, files, what) if fmt == "auto" else fmt


def read_spark_frame(spark, path: str, fmt: str, what: str):
    """Read a file, folder or glob (local or any Hadoop filesystem) as a DataFrame.

    CSV is read with a header and without type inference (every column a string).
    """
    from pyspark.errors import AnalysisException

    fmt = resolve_format(path, fmt, what)
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "false")
    try:
        # the path itself (not the resolved files): Spark then discovers partition columns (date=...)
        return reader.load(path)
    except AnalysisException as exc:
        raise InputError(f"cannot read {what} at {path!r} as {fmt}: {exc}") from exc


def input_bytes(spark, frame, limit: int) -> int | None:
    """Total size of the files behind ``frame``, from the filesystem's listing (no Spark job).

    Stops counting once the total exceeds ``limit`` (or after 1000 files) and returns what it has then.
    ``None`` when the frame has no input files (built in memory) or a file cannot be listed.
    """
    try:
        files = frame.inputFiles()
    except Exception:  # noqa: BLE001 - a plan without file sources
        return None
    if not files:
        return None
    jvm = spark.sparkContext._jvm
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    total = 0
    for count, name in enumerate(files):
        if total > limit or count >= 1000:
            return max(total, limit + 1)
        try:
            path = jvm.org.apache.hadoop.fs.Path(name)
            total += int(path.getFileSystem(hadoop).getFileStatus(path).getLen())
        except Exception:  # noqa: BLE001 - unreadable listing: do not guess
            return None
    return total


def to_pandas_strings(frame) -> pd.DataFrame:
    """Collect ``frame`` to the driver with every column cast to string (nulls stay missing), as the
    pandas readers of :mod:`crowdspark.data` return it."""
    from pyspark.sql import functions as F

    return frame.select(*[F.col(f"`{c}`").cast("string").alias(c) for c in frame.columns]).toPandas()


@dataclass(frozen=True)
class SparkLabels:
    """Validated labels: a (persisted) DataFrame with string columns ``item``, ``worker``, ``label``."""

    frame: object
    encoding: Encoding
    source: str
    n_rows: int
    observed_classes: tuple[str, ...] = ()


def _check_columns(frame, cols: dict[str, str], what: str, source: str, prefix: str) -> None:
    missing = [c for c in cols.values() if c not in frame.columns]
    if missing:
        raise missing_columns_error(what, source, missing, list(frame.columns), [f"{prefix}.{k}" for k in cols])


def prepare_labels_spark(frame, cfg: InputConfig, source: str, persist: bool = True) -> SparkLabels:
    """Validate a labels DataFrame and build its encoding (see :func:`crowdspark.data.prepare_labels`).

    With ``persist`` the selected columns are cached (``MEMORY_AND_DISK``) so that validation and block
    building read the input once; the caller unpersists ``frame`` when the blocks are built.
    """
    from pyspark.sql import functions as F

    from pyspark import StorageLevel

    cols = {"item": cfg.item, "worker": cfg.worker, "label": cfg.label}
    _check_columns(frame, cols, "labels", source, "input")
    frame = frame.select(*[F.col(f"`{column}`").cast("string").alias(role) for role, column in cols.items()])
    # with ``persist``, read the input once: validation and block building both scan it (the caller
    # unpersists it once the blocks are built)
    if persist:
        frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
    # three small jobs: rows and nulls; the distinct labels, at most MAX_CLASSES + 1 of them fetched (a wrong
    # label column is refused before it is collected); the distinct workers.  Measured at 10M labels (Parquet,
    # local[2]) against the former approx_count_distinct guard and one union-distinct job: 4.5 s vs 7.1 s
    aggs = [F.count(F.lit(1)).alias("rows")] + [F.sum(F.col(role).isNull().cast("long")).alias(role) for role in cols]
    row = frame.agg(*aggs).collect()[0]
    if row["rows"] == 0:
        raise InputError(f"labels at {source!r} have no rows; there is nothing to aggregate.")
    for role, column in cols.items():
        if row[role]:
            raise null_error("labels", source, column, int(row[role]))
    labels = [r[0] for r in frame.select("label").distinct().limit(MAX_CLASSES + 1).collect()]
    if len(labels) > MAX_CLASSES:
        raise InputError(
            f"labels at {source!r}: column {cfg.label!r} has at least {MAX_CLASSES + 1} distinct values "
            f"(more than {MAX_CLASSES}); is it the label column? Set --set input.label=<column>."
        )
    classes = decide_classes(sorted(labels), cfg.classes, source, cfg.label)
    workers = tuple(sorted(r[0] for r in frame.select("worker").distinct().collect()))
    return SparkLabels(
        frame=frame,
        encoding=Encoding(workers, tuple(classes)),
        source=source,
        n_rows=int(row["rows"]),
        observed_classes=tuple(labels),
    )


@dataclass(frozen=True)
class SparkGold:
    """Validated gold: DataFrame with string columns ``item``, ``truth``, one row per item."""

    frame: object
    source: str
    repeated_rows: int


def prepare_gold_spark(frame, cfg: GoldConfig, classes: list[str], source: str) -> SparkGold:
    """Validate a gold DataFrame (see :func:`crowdspark.data.prepare_gold`)."""
    from pyspark.sql import functions as F

    cols = {"item": cfg.item, "truth": cfg.truth}
    _check_columns(frame, cols, "gold", source, "gold")
    frame = frame.select(*[F.col(f"`{column}`").cast("string").alias(role) for role, column in cols.items()])
    row = frame.agg(
        F.count(F.lit(1)).alias("rows"),
        *[F.sum(F.col(role).isNull().cast("long")).alias(role) for role in cols],
    ).collect()[0]
    for role, column in cols.items():
        if row[role]:
            raise InputError(f"gold at {source!r}: column {column!r} has {row[role]} null value(s); remove these rows.")
    truths = [r[0] for r in frame.select("truth").distinct().limit(len(classes) + 11).collect()]
    outside = sorted(set(truths) - set(classes))
    if outside:
        raise gold_outside_error(source, cfg.truth, outside, list(classes))
    per_item = frame.groupBy("item").agg(F.countDistinct("truth").alias("n"))
    check = per_item.agg(F.count(F.lit(1)).alias("items"), F.max("n").alias("most")).collect()[0]
    if check["most"] and check["most"] > 1:
        example = per_item.filter(F.col("n") > 1).limit(1).collect()[0]
        raise gold_conflict_error(source, example["item"], int(example["n"]))
    distinct = frame.distinct()
    n_distinct = int(check["items"])
    return SparkGold(frame=distinct, source=source, repeated_rows=int(row["rows"]) - n_distinct)


def _codes(column, values: tuple[str, ...]) -> np.ndarray:
    """Index of each value of an Arrow string column in ``values`` (``-1`` where absent or null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    codes = pc.index_in(column, value_set=pa.array(values, type=pa.string()))
    return pc.fill_null(codes, -1).to_numpy(zero_copy_only=False).astype(np.int32)


def _sorted_item_codes(column) -> tuple[np.ndarray, np.ndarray]:
    """Factorize an Arrow string column: per-row codes into the sorted distinct ids (object array)."""
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(column).combine_chunks()
    dictionary = encoded.dictionary
    order = pc.sort_indices(dictionary).to_numpy()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    codes = rank[encoded.indices.to_numpy(zero_copy_only=False)]
    uniques = dictionary.take(order).to_numpy(zero_copy_only=False).astype(object)
    return codes, uniques


def _blocks_from_arrow(batches: Iterator, encoding: Encoding, max_labels: int) -> Iterator:
    """mapInArrow function: one partition's label rows -> pickled blocks (one row each).

    Encoding stays in Arrow (C++) until the per-item ids: no Python object per label is created.
    """
    import pyarrow as pa

    from crowdspark.block import blocks_from_codes

    batches = list(batches)
    if not batches:  # an empty partition (fewer items than partitions)
        return
    table = pa.Table.from_batches(batches)
    if table.num_rows == 0:
        return
    worker = _codes(table["worker"], encoding.workers)
    label = _codes(table["label"], encoding.classes)
    if (worker < 0).any() or (label < 0).any():
        raise InputError("internal encoding error: a worker or label is not in the run's encoding")
    truth = _codes(table["truth"], encoding.classes) if "truth" in table.column_names else None
    codes, uniques = _sorted_item_codes(table["item"])
    del table, batches
    for block in blocks_from_codes(codes, uniques, worker, label, truth, max_labels=max_labels):
        yield pa.RecordBatch.from_pydict({"block": [pickle.dumps(block, protocol=5)]})


def block_rdd(labels: SparkLabels, gold: SparkGold | None, n_partitions: int, max_labels: int):
    """The RDD of :class:`~crowdspark.block.Block`, partitioned by item, not yet cached.

    Parameters
    ----------
    labels : SparkLabels
    gold : SparkGold or None
        Joined onto the labels so that each block knows its items' gold classes.
    n_partitions : int
    max_labels : int
        Largest number of labels in one block.
    """
    frame = labels.frame
    if gold is not None:
        frame = frame.join(gold.frame, on="item", how="left")
    frame = frame.repartition(n_partitions, "item")
    fn = partial(_blocks_from_arrow, encoding=labels.encoding, max_labels=max_labels)
    blobs = frame.mapInArrow(fn, "block binary")
    return blobs.rdd.map(_unpickle_block)


def _unpickle_block(row) -> Block:
    return pickle.loads(row[0])


def gold_items_without_labels(labels: SparkLabels, gold: SparkGold) -> int:
    """Number of gold items that have no label (counted, not scored)."""
    return int(gold.frame.join(labels.frame.select("item").distinct(), on="item", how="left_anti").count())
