"""The fitted model: its tables, its global parameters, and scoring labels with them (``transform``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
from pyspark.ml import Model
from pyspark.ml.util import (
    MLReadable,
    MLReader,
    MLWritable,
    MLWriter,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from crowdspark.block import build_blocks
from crowdspark.errors import ConfigError, InputError
from crowdspark.faces import ML, using_face
from crowdspark.io.pandas_reader import encode_rows
from crowdspark.io.rules import Encoding
from crowdspark.io.spark_reader import SparkLabels, prepare_labels_spark
from crowdspark.io.tables import item_frame, item_schema
from crowdspark.ml.params import SOURCE, UNKNOWN_WORKER_CHOICES, CrowdParams, check_spark_frame
from crowdspark.ml.persistence import ModelReader, ModelWriter
from crowdspark.pipeline.quality import relabel_queue
from crowdspark.models.base import Model as Kernel
from crowdspark.models.base import checked_worker_table, worker_confusion
from crowdspark.quality import ITEM_COLUMNS, average_confusion, with_item_quality
from crowdspark.validation import check_choice

__all__ = ["CrowdAggregatorModel", "score_labels"]

log = logging.getLogger(__name__)


class CrowdAggregatorModel(Model, CrowdParams, MLReadable, MLWritable):
    """A fitted aggregation: item and worker tables, summary, and the global parameters to score with.

    Built by :meth:`CrowdAggregator.fit` or :meth:`load`; see the module docstring for what
    :meth:`transform` does per model type and for the save format.

    Attributes
    ----------
    items : pyspark DataFrame
        The fitted item table (distributed; after a fit on the driver, created from the local engine's table).
    workers : pyspark DataFrame
        The worker table.
    summary : dict
        The run summary (``summary.json``'s content).
    kernel : crowdspark.models.base.Model
        The fitted numpy model (hyperparameters, K, C, seed).
    globalParams : dict
        Its global parameters (numpy arrays sized by workers, classes and levels).
    initStats : dict
        Summed statistics of the initialization pass.
    encoding : crowdspark.io.rules.Encoding
        Worker ids and classes in index order (``encoding.classes`` is the posterior order).
    """

    def __init__(
        self,
        kernel: Kernel | None = None,
        globalParams: dict[str, Any] | None = None,
        initStats: dict[str, Any] | None = None,
        encoding: Encoding | None = None,
        summary: dict[str, Any] | None = None,
        items: DataFrame | None = None,
        workers: DataFrame | None = None,
    ) -> None:
        super().__init__()
        self._kernel = kernel
        self._global_params = globalParams
        self._init_stats = initStats or {}
        self._encoding = encoding
        self._summary = summary
        self._items = items
        self._workers = workers
        self._closed = False

    def _fitted(self, value: Any, what: str) -> Any:
        if value is None:
            if what == "item table" and self._closed:
                raise ConfigError(
                    "this CrowdAggregatorModel has no item table: close() released it (the model still transforms "
                    "and saves); keep the items (e.g. items.cache() or items.write) before close(), or fit again"
                )
            raise ConfigError(f"this CrowdAggregatorModel has no {what}; fit a CrowdAggregator or load a model")
        return value

    @property
    def items(self) -> DataFrame:
        """The fitted item table (Spark DataFrame, one row per item)."""
        return self._fitted(self._items, "item table")

    @property
    def workers(self) -> DataFrame:
        """The worker table (Spark DataFrame, one row per worker)."""
        return self._fitted(self._workers, "worker table")

    def relabel(self, budget: int = 1000) -> DataFrame:
        """The relabel queue (docs/quality.md): the ``budget`` items (0: all) one more label would help most."""
        items = self.items
        if "relabel_gain" not in items.columns:
            raise ConfigError("this CrowdAggregatorModel's item table has no quality columns (it was fitted with "
                              "quality.enabled = false); fit it with the quality signals on for a relabel queue")
        return relabel_queue(items, budget)

    @property
    def summary(self) -> dict[str, Any]:
        """The run summary as a dict."""
        return self._fitted(self._summary, "summary")

    @property
    def kernel(self) -> Kernel:
        """The fitted numpy model."""
        return self._fitted(self._kernel, "kernel")

    @property
    def globalParams(self) -> dict[str, Any]:
        """The fitted global parameters (numpy arrays)."""
        return self._fitted(self._global_params, "global parameters")

    @property
    def initStats(self) -> dict[str, Any]:
        """Summed statistics of the initialization pass."""
        return self._init_stats

    @property
    def encoding(self) -> Encoding:
        """Worker ids and classes in the index order of :attr:`globalParams`."""
        return self._fitted(self._encoding, "encoding")

    def setHandleUnknownWorkers(self, value: str) -> "CrowdAggregatorModel":
        return self._set(handleUnknownWorkers=value)

    def setPartitions(self, value: int) -> "CrowdAggregatorModel":
        return self._set(partitions=value)

    def _transform(self, dataset: DataFrame) -> DataFrame:
        with using_face(ML):
            check_spark_frame(dataset, "transform")
            return score_labels(self, dataset)

    def write(self) -> MLWriter:
        """A writer of the format described in the module docstring."""
        return ModelWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        """A reader of the format described in the module docstring."""
        return ModelReader(cls)

    def close(self) -> None:
        """Free the executor storage of the fitted item table (the local checkpoint ``fit`` made).

        The model then has no ``items``; it still transforms, and saves without ``items/``.
        """
        if self._items is not None:
            _release_checkpoint(self._items)
            self._items = None
        self._closed = True


def _release_checkpoint(frame: DataFrame) -> None:
    """Unpersist the RDD behind a checkpointed DataFrame (``DataFrame.unpersist`` does not reach it)."""
    plan = frame._jdf.queryExecution().analyzed()
    if plan.getClass().getSimpleName() == "LogicalRDD":
        plan.rdd().unpersist(False)


def _probe_scoring(kernel: Kernel, params: dict[str, Any]) -> None:
    """Raise ConfigError if ``kernel`` cannot give per-item results from global parameters alone."""
    blocks = build_blocks(
        np.array(["probe"], dtype=object), np.zeros(1, np.int32), np.zeros(1, np.int32), None, max_labels=1
    )
    try:
        kernel.finish_block(blocks[0], None, params)
    except Exception as exc:
        raise ConfigError(
            f"algorithm {kernel.name!r} keeps per-item state and cannot score labels from its global "
            "parameters alone; use model.items (the fitted item table) instead of transform"
        ) from exc


def _saved_worker_table(model: CrowdAggregatorModel) -> dict[str, np.ndarray] | None:
    """The fitted worker table (``n_labels`` and ``confusion`` or ``accuracy``, in the encoding's worker order)
    read back from the model's ``workers`` table, for a model saved without its fit's statistics (an older
    saved model); ``None`` without one."""
    workers = model._workers
    if workers is None or "n_labels" not in workers.columns:
        return None
    columns = [c for c in ("confusion", "accuracy") if c in workers.columns][:1]
    if not columns:
        return None
    frame = workers.select("worker", "n_labels", *columns).toPandas().set_index("worker")
    frame = frame.reindex(list(model.encoding.workers))
    if frame["n_labels"].isna().any():
        return None
    values = frame[columns[0]].to_numpy()
    kept = np.stack([np.stack(v) for v in values]) if columns[0] == "confusion" else values.astype(np.float64)
    return {"n_labels": frame["n_labels"].to_numpy(dtype=np.int64), columns[0]: kept}


def _quality_confusion(model: CrowdAggregatorModel) -> np.ndarray | None:
    """The confusion (C, C) the relabel gain of scored items assumes (the label-weighted average of the fitted
    workers', as in the fitted item table); ``None`` when the model was fitted without the quality signals."""
    if "quality" not in (model._summary or {}):
        return None
    table = (_saved_worker_table(model) if not model.initStats
             else checked_worker_table(model.kernel, model.globalParams, model.initStats))
    if table is None:
        log.warning("the model was saved without its fit's statistics or worker table: transform adds no quality "
                    "columns; fit again, or use model.items")
        return None
    confusion = worker_confusion(table, model.kernel.n_classes)
    return average_confusion(confusion, table["n_labels"])


def _score_partition(
    frames: Iterator[pd.DataFrame], kernel: Kernel, params: dict[str, Any], encoding: Encoding, max_labels: int,
    confusion: np.ndarray | None = None,
) -> Iterator[pd.DataFrame]:
    """mapInPandas function: one partition's label rows (all labels of its items) -> item rows, with the
    per-item quality columns when ``confusion`` (:func:`_quality_confusion`) is given."""
    parts = list(frames)
    frame = pd.concat(parts, ignore_index=True) if parts else None
    if frame is None or frame.empty:
        return
    item, worker, label, _ = encode_rows(
        frame["item"].to_numpy(dtype=object),
        frame["worker"].to_numpy(dtype=object),
        frame["label"].to_numpy(dtype=object),
        None,
        encoding,
    )
    for block in build_blocks(item, worker, label, None, max_labels=max_labels):
        result = kernel.finish_block(block, None, params)
        if confusion is not None:
            result = with_item_quality(result, block, confusion)
        yield item_frame(block.item_ids, result, encoding.classes)


def _known_worker_labels(model: CrowdAggregatorModel, labels: SparkLabels) -> DataFrame:
    """The validated labels frame without unknown workers, or an InputError naming them."""
    known = set(model.encoding.workers)
    unknown = sorted(w for w in labels.encoding.workers if w not in known)
    if not unknown:
        return labels.frame
    if model.getHandleUnknownWorkers() == "error":
        raise InputError(
            f"labels at {labels.source!r}: {len(unknown)} worker(s) were not seen when the model was fitted, "
            f"e.g. {unknown[:5]}; set handleUnknownWorkers='skip' to ignore their labels, or refit."
        )
    spark = labels.frame.sparkSession
    workers = spark.createDataFrame([(w,) for w in model.encoding.workers], "worker string")
    return labels.frame.join(F.broadcast(workers), on="worker", how="left_semi")


def score_labels(model: CrowdAggregatorModel, labels_df: DataFrame) -> DataFrame:
    """One row per item of ``labels_df`` scored with ``model``'s global parameters (lazy, distributed).

    Parameters
    ----------
    model : CrowdAggregatorModel
    labels_df : pyspark DataFrame
        Labels with the model's ``itemCol``, ``workerCol``, ``labelCol``.

    Returns
    -------
    pyspark DataFrame
        ``item``, ``label``, ``confidence``, ``posterior``, the model's extras and, for a model fitted with the
        quality signals, the per-item quality columns (docs/quality.md) of the scored labels.

    Raises
    ------
    InputError
        Missing columns, nulls, labels outside the fitted classes, unknown workers (with ``"error"``).
    ConfigError
        A model that cannot score from global parameters alone.
    """
    check_choice("handleUnknownWorkers", model.getHandleUnknownWorkers(), UNKNOWN_WORKER_CHOICES)
    kernel, params, encoding = model.kernel, model.globalParams, model.encoding
    _probe_scoring(kernel, params)
    cfg = replace(model._input_config(), classes=encoding.classes)
    labels = prepare_labels_spark(labels_df, cfg, SOURCE, persist=False)
    frame = _known_worker_labels(model, labels)
    spark = labels_df.sparkSession
    n_partitions = model.getPartitions() or spark.sparkContext.defaultParallelism
    confusion = _quality_confusion(model)
    fn = partial(_score_partition, kernel=kernel, params=params, encoding=encoding,
                 max_labels=model.getMaxBlockLabels(), confusion=confusion)
    extras = {**kernel.item_extras, **(ITEM_COLUMNS if confusion is not None else {})}
    return frame.repartition(n_partitions, "item").mapInPandas(fn, item_schema(extras))
