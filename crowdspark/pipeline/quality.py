"""A run's quality signals (docs/quality.md): the statistics pass over the blocks, the worker columns, the
``quality`` section of ``summary.json`` and the relabel queue, the same for every engine and face.

The maths is :mod:`crowdspark.quality`'s; this module decides which worker matrices it reads and how the
results are laid out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crowdspark.config import RunConfig
from crowdspark.quality import (
    alpha_from_stats,
    calibration_from_stats,
    class_agreement_from_stats,
    spammer_probability,
    spammer_score,
)
from crowdspark.stats import Stats

__all__ = [
    "RELABEL_COLUMNS",
    "RELABEL_SCHEMA",
    "RELABEL_ORDER",
    "quality_on",
    "worker_quality",
    "quality_summary",
    "relabel_queue",
    "relabel_head",
    "relabel_fold",
    "GOLD_WORKERS",
    "GOLD_WORKERS_SCHEMA",
    "gold_worker_table",
]

#: the columns of ``relabel/``, in order
RELABEL_COLUMNS = ("rank", "item", "label", "confidence", "n_labels", "margin", "relabel_gain")
#: the Spark schema (DDL) of ``relabel/``
RELABEL_SCHEMA = ("rank long, item string, label string, confidence double, n_labels long, margin double, "
                  "relabel_gain double")
#: the result's table of each worker's labels on the held-out gold (:func:`gold_worker_table`)
GOLD_WORKERS = "gold_workers"
#: the Spark schema (DDL) of ``gold_workers/``
GOLD_WORKERS_SCHEMA = "worker string, gold_labels long, gold_right long"
#: the relabel queue's order: (column, ascending), the last a unique key
RELABEL_ORDER = (("margin", True), ("confidence", True), ("item", True))


def quality_on(config: RunConfig) -> bool:
    """Whether the run computes its quality signals (``quality.enabled``).  An incremental night computes them
    over the items it fitted (docs/decisions/0264-night-quality-fitted-items.md)."""
    return config.quality.enabled


def worker_quality(stats: Stats, threshold: float) -> dict[str, np.ndarray]:
    """The ``workers/`` quality columns, each of length K.

    Returns
    -------
    dict
        ``agreement`` (share of the worker's labels equal to its item's inferred class), ``spammer_score``
        (:func:`crowdspark.quality.spammer_score`, NaN without enough labels), ``spammer_probability``
        (:func:`crowdspark.quality.spammer_probability`, NaN when agreement tells nothing) and ``spammer``
        (probability above ``threshold``).
    """
    counts = np.asarray(stats["worker_confusion"])
    with np.errstate(invalid="ignore", divide="ignore"):
        agreement = np.trace(counts, axis1=1, axis2=2) / counts.sum(axis=(1, 2))
    probability = spammer_probability(counts)
    return {"agreement": agreement, "spammer_score": spammer_score(counts), "spammer_probability": probability,
            "spammer": np.nan_to_num(probability, nan=0.0) > threshold}


def _mean(values: np.ndarray, weights: np.ndarray) -> float | None:
    total = float(weights.sum())
    return float((values * weights).sum() / total) if total else None


def quality_summary(stats: Stats, workers: dict[str, np.ndarray], classes: tuple[str, ...], config: RunConfig,
                    has_gold: bool) -> dict[str, Any]:
    """``summary.json``'s ``quality`` section (docs/quality.md, "summary.json")."""
    agreement = class_agreement_from_stats(stats)
    labels = np.asarray(stats["worker_confusion"], dtype=np.float64).sum(axis=(1, 2))
    scored = np.isfinite(workers["spammer_probability"])
    flagged = np.asarray(workers["spammer"], dtype=bool)
    out: dict[str, Any] = {
        "krippendorff_alpha": alpha_from_stats(stats),
        "class_agreement": {c: (float(a) if np.isfinite(a) else None) for c, a in zip(classes, agreement)},
        "paired_labels": int(np.asarray(stats["alpha_class_labels"]).sum()),
        "workers": {
            "spammer_threshold": config.quality.spammer_threshold,
            "scored": int(scored.sum()),
            "spammers": int(flagged.sum()),
            "spammer_labels": int(labels[flagged].sum()),
            "mean_agreement": _mean(np.nan_to_num(workers["agreement"]), labels),
            "mean_spammer_score": _mean(np.nan_to_num(workers["spammer_score"]),
                                        np.where(np.isfinite(workers["spammer_score"]), labels, 0)),
        },
        "relabel": {"budget": config.relabel.budget,
                    "order": [f"{c} {'asc' if up else 'desc'}" for c, up in RELABEL_ORDER]},
    }
    if has_gold:
        out["calibration"] = calibration_from_stats(stats)
        out["calibration"]["confusion"] = np.asarray(stats["gold_confusion"], dtype=np.int64).tolist()
    return out


def gold_worker_table(stats: Stats, workers: tuple[str, ...]) -> Any:
    """``gold_workers/``: the workers with labels on the held-out gold items, in the order of ``workers/``, with
    ``gold_labels`` (their labels on those items) and ``gold_right`` (those equal to the gold), from the summed
    :func:`crowdspark.quality.gold_worker_stats` (docs/decisions/0315-gold-workers-table.md)."""
    from crowdspark.io.tables import worker_frame

    counted = np.asarray(stats["gold_worker_labels"], dtype=np.int64)
    on = counted > 0
    return worker_frame(tuple(np.asarray(workers, dtype=object)[on]),
                        {"gold_labels": counted[on],
                         "gold_right": np.asarray(stats["gold_worker_right"], dtype=np.int64)[on]})


def relabel_queue(items: Any, budget: int) -> Any:
    """The relabel queue of an item table (pandas, pyarrow or Spark): the ``budget`` items (0: all) with the
    smallest ``margin``, ties by lowest ``confidence`` then item id (:data:`RELABEL_ORDER`), numbered from 1 in
    ``rank`` (:data:`RELABEL_COLUMNS`)."""
    columns = list(RELABEL_COLUMNS[1:])
    if hasattr(items, "sparkSession"):
        return _spark_queue(items.select(*columns), budget)
    if isinstance(items, pa.Table):
        queue = relabel_head(items, budget).to_pandas()
    else:
        queue = items[columns].sort_values([c for c, _ in RELABEL_ORDER], ascending=[up for _, up in RELABEL_ORDER],
                                           kind="mergesort")
    if budget:
        queue = queue.head(budget)
    queue = queue.reset_index(drop=True)
    queue.insert(0, "rank", np.arange(1, len(queue) + 1, dtype=np.int64))
    return queue


def relabel_head(items: pa.Table, budget: int) -> pa.Table:
    """The first ``budget`` rows (0: all) of an Arrow item table in the queue's order (:data:`RELABEL_ORDER`),
    with the queue's columns but ``rank`` (``RELABEL_COLUMNS[1:]``).  Arrow sorts the ids in C++, with NaN last
    as pandas and Spark do.

    Parameters
    ----------
    items : pyarrow.Table
        n rows with at least the columns ``RELABEL_COLUMNS[1:]``.
    budget : int

    Returns
    -------
    pyarrow.Table
        min(n, budget) rows (n when ``budget`` is 0).
    """
    items = items.select(list(RELABEL_COLUMNS[1:]))
    if budget:
        items = _candidates(items, budget)
    keys = [(c, "ascending" if up else "descending") for c, up in RELABEL_ORDER]
    order = pc.sort_indices(items, sort_keys=keys)
    return items.take(order[:budget] if budget else order)


def _candidates(items: pa.Table, budget: int) -> pa.Table:
    """The rows of ``items`` that can be among its first ``budget`` in the queue's order: those whose first key
    (ascending) is at most the ``budget``-th smallest, found without sorting (``numpy.partition``); every row
    when that value is NaN or null, or the first key is descending."""
    column, ascending = RELABEL_ORDER[0]
    if items.num_rows <= budget or not ascending:
        return items
    values = items.column(column).to_numpy()  # float64, nulls as NaN: both sort after every number
    kth = np.partition(values, budget - 1)[budget - 1]
    return items if np.isnan(kth) else items.filter(pa.array(values <= kth))


def relabel_fold(budget: int, kept: pa.Table | None, batch: pa.RecordBatch) -> pa.Table:
    """The first ``budget`` rows of ``kept`` and ``batch`` together (:func:`relabel_head`).

    Folded over a partition's item batches, it leaves that partition's first ``budget`` rows; the queue's
    first ``budget`` rows (a total order: the item id is its last key) are among the union of every
    partition's, so :func:`relabel_queue` of that union is the queue of the whole table.

    Parameters
    ----------
    budget : int
        Greater than 0.
    kept : pyarrow.Table or None
        At most ``budget`` rows of the columns ``RELABEL_COLUMNS[1:]`` (what the fold kept so far).
    batch : pyarrow.RecordBatch
        A block's item rows (:func:`crowdspark.io.tables.item_batch` with the quality columns).

    Returns
    -------
    pyarrow.Table
        At most ``budget`` rows of the columns ``RELABEL_COLUMNS[1:]``.
    """
    table = relabel_head(pa.Table.from_batches([batch]), budget)
    return table if kept is None else relabel_head(pa.concat_tables([kept, table]), budget)


def _spark_queue(items: Any, budget: int) -> Any:
    from pyspark.sql import functions as F

    order = [F.col(c).asc() if up else F.col(c).desc() for c, up in RELABEL_ORDER]
    ranked = items.orderBy(*order)
    if not budget:
        return _numbered(ranked).select("rank", *RELABEL_COLUMNS[1:])
    # a sort followed by a limit is one sorted partition of at most ``budget`` rows: number them in place
    rank = F.monotonically_increasing_id() + 1
    ranked = ranked.limit(budget).coalesce(1)
    return ranked.withColumn("rank", rank.cast("long")).select("rank", *RELABEL_COLUMNS[1:])


def _numbered(ranked: Any) -> Any:
    """A globally sorted Spark DataFrame with ``rank`` (1, 2, ...) in its order, numbered where its partitions
    are (``RDD.zipWithIndex``: one job counts each partition's rows, then each row's rank is its partition's
    offset plus its place in it).  Both jobs read the one RDD, so they share the sort's shuffle output and see
    the same partitions (a DataFrame evaluated twice would sample its range boundaries twice)."""
    from pyspark.sql.types import LongType, StructField, StructType

    schema = StructType([StructField("rank", LongType(), False), *ranked.schema.fields])
    rows = ranked.rdd.zipWithIndex().map(lambda pair: (pair[1] + 1, *pair[0]))
    return ranked.sparkSession.createDataFrame(rows, schema)
