"""Prepare the labels for a fit: validate, encode and group them into blocks held by an engine.

The pandas path (:func:`prepare_frames`) builds the blocks on the driver and holds them in a
:class:`~crowdspark.engine.local.LocalEngine`; the Spark path (:func:`prepare_spark`) validates with Spark
aggregations, builds the blocks on the executors and caches them in a
:class:`~crowdspark.engine.spark.engine.SparkEngine`.  Both apply the rules of :mod:`crowdspark.io.rules` and
return the same :class:`Prepared`, so everything after this step is the same for every engine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from crowdspark.block import Block, GoldSplit, blocks_from_codes
from crowdspark.config import RunConfig
from crowdspark.engine.base import Engine
from crowdspark.engine.local import LocalEngine, usable_cores
from crowdspark.errors import ConfigError, InputError
from crowdspark.io.pandas_reader import (
    check_encoded,
    gold_unmatched,
    prepare_gold,
    prepare_labels,
)
from crowdspark.io.rules import EmptyInputError, Encoding, too_many_labels_error
from crowdspark.pipeline.summary import Timer
from crowdspark.pipeline.window import Window

__all__ = ["Prepared", "prepare_frames", "prepare_spark", "local_blocks", "default_partitions",
           "LABELS_PER_PARTITION", "filtered_frame", "footer_row_count", "FOOTER_COUNT_FILES"]

log = logging.getLogger(__name__)

#: labels per partition above which the default partition count grows (block building holds a whole partition in
#: one Python worker: its Arrow columns, codes and blocks; docs/decisions/0109-partitions.md)
LABELS_PER_PARTITION = 4_000_000


@dataclass
class Prepared:
    """Validated labels held as blocks by an engine, and what the run reports about its input.

    Attributes
    ----------
    engine : Engine
        Holds the blocks (close it when done).
    encoding : Encoding
    counts : dict
        What the input held beyond the labels: ``unused_classes`` and, with gold,
        ``gold_items_without_labels`` and ``gold_repeated_rows``.
    warnings : list of str
        Warnings about the input (logged once).
    inputs : dict
        Sources and number of label rows, for ``summary.json``.
    layout : dict
        How the blocks are laid out, for the checkpoint fingerprint.
    report : dict
        Engine-specific entries of ``summary.json`` (``partitions``, ``input_cached``, ``sweep_sessions``).
    has_gold : bool
    timer : Timer
        The run's phase timings so far.
    """

    engine: Engine
    encoding: Encoding
    counts: dict[str, int]
    warnings: list[str]
    inputs: dict[str, Any]
    layout: dict[str, Any]
    report: dict[str, Any] = field(default_factory=dict)
    has_gold: bool = False
    timer: Timer = field(default_factory=Timer)


def _logged(messages: list[str | None]) -> list[str]:
    """The warnings about the input among ``messages`` (``None``: no warning), each logged once."""
    out = [m for m in messages if m]
    for message in out:
        log.warning("%s", message)
    return out


def _unused_classes(classes: tuple[str, ...], used: set[str]) -> int:
    return len([c for c in classes if c not in used])


def _categorical(column: pd.Series) -> pd.Categorical:
    """``column`` as a categorical with sorted categories (the columns of
    :class:`~crowdspark.io.pandas_reader.Labels` already are)."""
    if isinstance(column.dtype, pd.CategoricalDtype) and column.cat.categories.is_monotonic_increasing:
        return column.array
    codes, uniques = pd.factorize(column.to_numpy(dtype=object), sort=True)
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(pd.Index(uniques, dtype=object)))


def _row_codes(column: pd.Categorical, codes_of) -> np.ndarray:
    """``codes_of`` (an :class:`Encoding` method) applied to each distinct value of ``column`` and spread to
    its rows, int32 (m,)."""
    return codes_of(np.asarray(column.categories, dtype=object))[column.codes]


def local_blocks(labels_frame: pd.DataFrame, gold_frame: pd.DataFrame | None, encoding: Encoding,
                 max_labels: int, split: GoldSplit | None = None) -> list[Block]:
    """Blocks of validated pandas labels (``item``/``worker``/``label``) with optional gold, split into the
    gold the fit holds fixed and the held-out gold by ``split``.

    Workers, labels and gold are encoded once per distinct value and spread to the rows by their codes.
    """
    items = _categorical(labels_frame["item"])
    worker = _row_codes(_categorical(labels_frame["worker"]), encoding.worker_codes)
    label = _row_codes(_categorical(labels_frame["label"]), encoding.class_codes)
    check_encoded(labels_frame["worker"], worker, labels_frame["label"], label)
    truth = None
    if gold_frame is not None:
        truth_of_item = pd.Index(items.categories).map(dict(zip(gold_frame["item"], gold_frame["truth"])))
        truth = encoding.class_codes(np.asarray(truth_of_item, dtype=object))[items.codes]
    uniques = np.asarray(items.categories, dtype=object)
    return blocks_from_codes(items.codes, uniques, worker, label, truth, max_labels=max_labels, split=split,
                             threads=usable_cores())


def _selected(labels_source: str, selection: list[str], read):
    """Run ``read`` (which validates the labels); when they are empty after ``selection`` (the window, the
    filter), say which selection left nothing."""
    try:
        return read()
    except EmptyInputError:
        if not selection:
            raise
        raise InputError(
            f"labels at {labels_source!r}: no label is left after {' and '.join(selection)}; is the data of those "
            "days there, and are the window and the filter right?"
        ) from None


def prepare_frames(
    config: RunConfig,
    labels_raw: pd.DataFrame,
    gold_raw: pd.DataFrame | None = None,
    labels_source: str = "<DataFrame>",
    gold_source: str = "<DataFrame>",
    timer: Timer | None = None,
    window: Window | None = None,
    filter_applied: bool = False,
) -> Prepared:
    """Validate pandas frames and hold their blocks in a local engine.

    Parameters
    ----------
    config : RunConfig
    labels_raw : DataFrame
        Labels with the columns named by ``config.input``.
    gold_raw : DataFrame, optional
        Gold with the columns named by ``config.gold``.
    labels_source, gold_source : str
        Where the frames came from, for messages and the summary.
    timer : Timer, optional
        Gets the phases ``validate`` and ``blocks``.
    window : Window, optional
        The days to read (``input.date_column``, ``input.window_days``).
    filter_applied : bool
        ``labels_raw`` was selected by ``input.filter`` (by Spark, before collecting it); otherwise a filter is
        refused.
    """
    timer = timer or Timer()
    if config.input.filter and not filter_applied:
        raise ConfigError(
            f"input.filter ({config.input.filter!r}) needs the spark engine; filter the data first or use --engine spark"
        )
    label_rows = int(len(labels_raw))
    days = None
    if window is not None:
        labels_raw, days = window.filter_pandas(labels_raw, labels_source)
    selection = [f"input.filter {config.input.filter!r}"] if filter_applied else []
    if window is not None:
        selection.append(f"the window {window.describe()}")
    labels = _selected(labels_source, selection, lambda: prepare_labels(labels_raw, config.input, labels_source))
    enc = labels.encoding
    gold = None if gold_raw is None else prepare_gold(gold_raw, config.gold, list(enc.classes), gold_source,
                                                      labels.items)
    counts = {"unused_classes": _unused_classes(enc.classes, set(labels.frame["label"].cat.categories))}
    input_warnings: list[str] = []
    if gold is not None:
        counts["gold_items_without_labels"] = int((~gold.frame["item"].isin(labels.items)).sum())
        counts["gold_repeated_rows"] = gold.repeated_rows
        input_warnings = _logged([gold_unmatched(labels, gold)])
    timer.lap("validate")
    max_labels = config.engine.max_block_labels
    engine = LocalEngine(local_blocks(labels.frame, None if gold is None else gold.frame, enc, max_labels,
                                      config.gold.split()))
    timer.lap("blocks")
    inputs = {"labels": labels_source, "gold": gold_source if gold_raw is not None else None,
              "label_rows": label_rows, "labels_read": int(len(labels_raw))}
    if days is not None:
        inputs["days"] = days
    return Prepared(engine=engine, encoding=enc, counts=counts, warnings=input_warnings, inputs=inputs,
                    layout={"engine": "local", "max_block_labels": max_labels}, has_gold=gold is not None,
                    timer=timer)


def default_partitions(spark, n_labels: int) -> int:
    """The cluster's default parallelism, or more partitions when each would hold over
    :data:`LABELS_PER_PARTITION` labels (so block building stays within executor memory), rounded up to
    a multiple of the parallelism.

    The rounding keeps the cores' shares equal: a sweep session deals the blocks over one task per core
    (``docs/decisions/0109-partitions.md``).
    """
    slots = max(1, spark.sparkContext.defaultParallelism)
    needed = max(slots, -(-n_labels // LABELS_PER_PARTITION))
    return -(-needed // slots) * slots


def _cache_input(config: RunConfig, input_format: str | None) -> bool:
    """Whether Spark caches the label columns between counting them and the pass (``spark.cache_input``)."""
    from crowdspark.io.spark_reader import COLUMNAR_FORMATS

    if config.spark.cache_input != "auto":
        return config.spark.cache_input == "on"
    return input_format not in COLUMNAR_FORMATS


#: most Parquet footers the driver reads to count the labels' rows (beyond: a Spark job counts them)
FOOTER_COUNT_FILES = 256


def footer_row_count(frame, input_format: str | None) -> int | None:
    """The rows of ``frame`` as read from local Parquet files, from their footers on the driver (no Spark
    job); ``None`` when ``frame`` is not such a read or lists more than :data:`FOOTER_COUNT_FILES` files.

    ``frame`` must be the reader's frame itself (no filter, no window): the footers count every row.
    """
    from crowdspark.io.paths import is_local, strip_file_scheme

    if input_format != "parquet":
        return None
    files = frame.inputFiles()
    if not files or len(files) > FOOTER_COUNT_FILES or not all(is_local(f) for f in files):
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return sum(pq.read_metadata(strip_file_scheme(f)).num_rows for f in files)
    except (OSError, pa.ArrowException):  # Spark's count then reports the file with its message
        return None


def _row_count(labels, selected, raw, cache: bool, input_format: str | None) -> int:
    """The number of label rows (decides the partitions): Parquet footers when ``selected`` is the read
    itself, else a Spark count (which fills the cache of a cached frame)."""
    if not cache and selected is raw:
        counted = footer_row_count(raw, input_format)
        if counted is not None:
            return counted
    return (labels if cache else selected).count()


def filtered_frame(labels_raw, condition: str):
    """``labels_raw`` (a Spark DataFrame) filtered by ``condition`` (``input.filter``; empty: all rows)."""
    from crowdspark.io.spark_reader import filter_error

    if not condition:
        return labels_raw
    try:
        return labels_raw.filter(condition)
    except Exception as exc:  # AnalysisException or ParseException: the user's condition is wrong
        raise filter_error(condition, list(labels_raw.columns), exc) from exc


def _labels_with_gold(labels, gold):
    """The label rows, left-joined with gold's ``truth`` when there is gold."""
    return labels if gold is None else labels.join(gold.frame, on="item", how="left")


def _encoding(merged, config: RunConfig, source: str) -> Encoding:
    """The run's encoding from the merged partition summaries, or the input error they show (the checks and
    messages of :func:`crowdspark.io.spark_reader.prepare_labels_spark`, in the same order)."""
    from crowdspark.io.rules import MAX_CLASSES, decide_classes, empty_labels_error, null_error

    cfg = config.input
    if merged.rows == 0:
        raise empty_labels_error(source)
    for role in ("item", "worker", "label"):
        if merged.nulls[role]:
            raise null_error("labels", source, getattr(cfg, role), merged.nulls[role])
    if len(merged.labels) > MAX_CLASSES:
        raise too_many_labels_error(source, cfg.label)
    classes = decide_classes(merged.labels, cfg.classes, source, cfg.label)
    return Encoding(tuple(merged.workers.to_pylist()), tuple(classes))


def _gold_counts(merged, gold, classes: tuple[str, ...], config: RunConfig) -> tuple[dict[str, int], list[str]]:
    """Gold's counts and warnings from the merged summaries; raises for gold classes of labelled items outside
    ``classes``."""
    from crowdspark.io.rules import gold_outside_error
    from crowdspark.io.spark_reader import gold_unmatched_spark

    outside = sorted(set(merged.classes_seen) - set(classes))
    if outside:
        raise gold_outside_error(gold.source, config.gold.truth, outside, list(classes))
    without = gold.n_items - merged.gold_items
    counts = {"gold_items_without_labels": without, "gold_repeated_rows": gold.repeated_rows}
    return counts, _logged([gold_unmatched_spark(gold, without, merged.items, merged.first_item)])


def prepare_spark(
    spark,
    config: RunConfig,
    labels_raw,
    gold_raw=None,
    labels_source: str = "<DataFrame>",
    gold_source: str | None = None,
    timer: Timer | None = None,
    input_format: str | None = None,
    inject_task_failure: int = 0,
    window: Window | None = None,
) -> Prepared:
    """Validate Spark DataFrames and cache their blocks in a Spark engine, in one pass over the labels
    (:mod:`crowdspark.engine.spark.blocks`).

    Parameters
    ----------
    spark : SparkSession
    config : RunConfig
    labels_raw, gold_raw : pyspark DataFrame
        Labels (and gold) with the columns named by ``config.input`` (``config.gold``).
    labels_source, gold_source : str
        Where the frames came from, for messages and the summary.
    timer : Timer, optional
        Gets the phases ``validate`` (gold's checks, and the labels' row count when the partitions are not
        configured) and ``blocks`` (the pass).
    input_format : str, optional
        The format of the files ``labels_raw`` was read from (``None``: a DataFrame passed in); decides
        ``spark.cache_input = "auto"``.
    inject_task_failure : int
        Test hook (:class:`crowdspark.pipeline.fit.RunOptions`): the first attempt of partition 0 fails at
        this sweep (0 = off).
    window : Window, optional
        The days to read (``input.date_column``, ``input.window_days``); Spark prunes the others.
    """
    from pyspark import StorageLevel

    from crowdspark.engine.spark.blocks import BlockBuild
    from crowdspark.io.spark_reader import canonical_spark_frame, prepare_gold_spark, spark_input_errors

    timer = timer or Timer()
    cache = _cache_input(config, input_format) and not config.spark.partitions  # only the count reads twice
    selected, days, selection = filtered_frame(labels_raw, config.input.filter), None, []
    if config.input.filter:
        selection.append(f"input.filter {config.input.filter!r}")
    if window is not None:
        selected = window.filter_spark(selected, labels_source)
        days = window.day_counts_spark(selected, labels_source)
        selection.append(f"the window {window.describe()}")
    cfg = config.input
    labels = canonical_spark_frame(selected, {"item": cfg.item, "worker": cfg.worker, "label": cfg.label}, "labels",
                                   labels_source)
    gold = None
    if gold_raw is not None:
        gold = prepare_gold_spark(gold_raw, config.gold, None, gold_source or "<DataFrame>")
    if cache:
        labels = labels.persist(StorageLevel.MEMORY_AND_DISK)
    build = None
    try:
        with spark_input_errors("labels", labels_source):
            # local Parquet: its footers on the driver; a cached frame's count fills the cache
            n_rows = 0 if config.spark.partitions else _row_count(labels, selected, labels_raw, cache, input_format)
            n_partitions = config.spark.partitions or default_partitions(spark, n_rows)
            timer.lap("validate")
            log.info("reading, validating and grouping the labels at %s into blocks", labels_source)
            max_labels = config.engine.max_block_labels
            build = BlockBuild(spark, _labels_with_gold(labels, gold), n_partitions, max_labels,
                               config.gold.split(), config.spark.resident_blocks)
            merged = build.merged
        labels.unpersist()  # a no-op when it was not cached
        enc = _selected(labels_source, selection, lambda: _encoding(merged, config, labels_source))
        log.info("%d labels, %d workers, %d classes", merged.rows, enc.n_workers, enc.n_classes)
        counts = {"unused_classes": _unused_classes(enc.classes, set(merged.labels))}
        input_warnings: list[str] = []
        if gold is not None:
            gold_counts, input_warnings = _gold_counts(merged, gold, enc.classes, config)
            counts.update(gold_counts)
    except BaseException:
        labels.unpersist()
        if build is not None:
            build.discard()
        raise
    engine = build.engine(
        enc,
        checkpoint_interval=config.spark.checkpoint_interval,
        session_sweeps=config.spark.session_sweeps,
        tree_depth=config.spark.tree_depth,
        inject_task_failure=inject_task_failure,
        resident_blocks=config.spark.resident_blocks,
        sweep_mode=config.spark.sweep_mode,
    )
    timer.lap("blocks")
    inputs = {"labels": labels_source, "gold": gold_source, "label_rows": merged.rows}
    if days is not None:
        inputs["days"] = days
    report = {"partitions": n_partitions, "input_cached": cache}
    return Prepared(engine=engine, encoding=enc, counts=counts, warnings=input_warnings, inputs=inputs,
                    layout={"engine": "spark", "partitions": n_partitions, "max_block_labels": max_labels},
                    report=report, has_gold=gold is not None, timer=timer)
