"""The pyspark.ml face: an Estimator/Model pair for every registered algorithm, and plain functions.

For users who hold their labels in a Spark DataFrame (notebooks, existing pipelines).  Everything runs on
the Spark engine through the same shared runner as the command line
(:func:`crowdspark.pipeline.fit_frames`), so validation, errors and answers are the command line's.

>>> from crowdspark.ml import DawidSkeneAggregator
>>> labels = spark.createDataFrame(
...     [("a", "w1", "x"), ("a", "w2", "x"), ("a", "w3", "y"),
...      ("b", "w1", "y"), ("b", "w2", "y"), ("b", "w3", "y")],
...     "item string, worker string, label string")
>>> model = DawidSkeneAggregator(seed=0, algorithmParams={"tol": 1e-4}).fit(labels)
>>> model.transform(labels).select("item", "label").orderBy("item").collect()
[Row(item='a', label='x'), Row(item='b', label='y')]
>>> model.summary["counts"]["items"], model.summary["classes"]
(2, ['x', 'y'])
>>> sorted(model.workers.columns)
['accuracy', 'confusion', 'n_labels', 'worker']

What ``fit`` and ``transform`` do
---------------------------------
``CrowdAggregator.fit(labels_df)`` validates the labels, runs the configured algorithm on the Spark
engine and returns a :class:`CrowdAggregatorModel` holding

* ``items``: the fitted item table (one row per item: ``item``, ``label``, ``confidence``, ``posterior``
  and model extras such as ``level``, ``level_posterior``, ``epsilon``), exactly what the command line
  writes to ``items/``.  It is materialized at fit time (a reliable checkpoint when the SparkContext has a
  checkpoint directory, else a local checkpoint), so the engine's cached blocks and broadcasts are released
  before ``fit`` returns.  It stays distributed.
* ``workers``: the worker table (a Spark DataFrame, as in ``workers/``); ``summary``: the run summary
  (a dict, as in ``summary.json``);
* ``kernel``, ``globalParams``, ``encoding``: the fitted numpy model, its global parameters (arrays sized
  by workers, classes and levels) and the worker/class encoding; what a warm start reads.

``model.transform(labels_df)`` *scores* a labels DataFrame with the fitted global parameters: each item's
result is ``kernel.finish_block(block, None, globalParams)``, computed on the executors (nothing
item-level reaches the driver).  For ``mv`` and ``ds`` this is exactly how the fit computes its item
table, so ``transform`` of the training labels equals ``model.items``.  For the samplers (``bcc``,
``idbla``, ``fixed-idbla``) the fit's item table averages per-item posteriors over the kept sweeps, while
``transform`` gives each item's posterior under the posterior-mean parameters (one exact E-step; ``epsilon``
is NaN): close, not identical; use ``model.items`` for the fit's own answers.  Models whose per-item
results need per-item state (collapsed VI) refuse ``transform`` with a ``ConfigError``.  Labels outside
the fitted classes are an error; workers not seen at fit time are an error unless
``handleUnknownWorkers="skip"`` (their labels are then ignored).

Save format (``model.write().save(path)``, ``CrowdAggregatorModel.load(path)``)
------------------------------------------------------------------------------
``path/metadata/``
    pyspark.ml's metadata (one JSON line: ``class``, ``uid``, ``paramMap``, ``defaultParamMap``,
    ``sparkVersion``) plus ``crowdspark``: ``format`` (:data:`crowdspark.io.saved_model.FORMAT`), ``summary`` and
    ``has_items``.
``path/model/``
    The saved model in crowdspark's one format (:mod:`crowdspark.io.saved_model`): what the command line writes to
    a run's ``model/``, so ``--warm-start path`` starts from it, and ``CrowdAggregatorModel.load`` also
    loads a command-line run's output (its Params then come from the saved model).  Models saved in format 1
    (a Parquet table of arrays) still load.
``path/workers/``, ``path/items/``
    Parquet: the worker table and the fitted item table (no ``items/`` after :meth:`~CrowdAggregatorModel.close`).

A :class:`pyspark.ml.PipelineModel` holding a crowdspark model saves and loads it this way too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.util import (
    DefaultParamsReadable,
    DefaultParamsReader,
    DefaultParamsWritable,
    DefaultParamsWriter,
    MLReadable,
    MLReader,
    MLWritable,
    MLWriter,
)
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from crowdspark.algorithms import algorithm_names, build_model, model_parameters
from crowdspark.block import DEFAULT_MAX_BLOCK_LABELS, build_blocks
from crowdspark.config import EngineConfig, GoldConfig, InputConfig, RunConfig
from crowdspark.errors import ConfigError, InputError
from crowdspark.io.files import files_for
from crowdspark.io.pandas_reader import encode_rows
from crowdspark.io.rules import Encoding
from crowdspark.io.saved_model import FORMAT, MODEL_FOLDER, SavedModel, load_saved_model, model_files
from crowdspark.io.spark_reader import SparkLabels, prepare_labels_spark
from crowdspark.io.tables import item_frame, item_schema, to_jsonable, worker_frame
from crowdspark.models.base import Model as Kernel
from crowdspark.pipeline import fit_frames
from crowdspark.pipeline.summary import Timer
from crowdspark.validation import check_choice, check_int

__all__ = [
    "CrowdAggregator",
    "CrowdAggregatorModel",
    "MajorityVoteAggregator",
    "DawidSkeneAggregator",
    "BccAggregator",
    "IdblaAggregator",
    "FixedIdblaAggregator",
    "aggregate_df",
    "score_labels",
]

log = logging.getLogger(__name__)

UNKNOWN_WORKER_CHOICES = ("error", "skip")
_SOURCE = "<DataFrame>"


# --------------------------------------------------------------------------- params


def _to_json_object(value: Any) -> str:
    """Param converter: a dict, or a JSON object string, to a canonical JSON object string."""
    parsed = value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = None
    if not isinstance(parsed, dict):
        raise ConfigError(f"algorithmParams must be a dict or a JSON object such as '{{\"max_iter\": 50}}', "
                          f"but got {value!r}")
    return json.dumps(parsed, sort_keys=True)


def _to_int(name: str) -> Callable[[Any], int]:
    """Param converter: :func:`check_int` naming the Param (``5.0`` -> ``5``; ``2.5`` is a ConfigError)."""
    return partial(check_int, name)


class _CrowdParams(Params):
    """The Params shared by :class:`CrowdAggregator` and :class:`CrowdAggregatorModel`."""

    itemCol: Param[str] = Param(
        Params._dummy(), "itemCol", "column of the item ids (read as strings)", TypeConverters.toString
    )
    workerCol: Param[str] = Param(
        Params._dummy(), "workerCol", "column of the worker ids (read as strings)", TypeConverters.toString
    )
    labelCol: Param[str] = Param(
        Params._dummy(), "labelCol", "column of the given labels (read as strings)", TypeConverters.toString
    )
    algorithm: Param[str] = Param(
        Params._dummy(),
        "algorithm",
        f"algorithm name, one of {algorithm_names()} (`crowdspark algorithms` lists them with parameters)",
        TypeConverters.toString,
    )
    seed: Param[int] = Param(
        Params._dummy(), "seed", "seed of every random choice (same seed => same answer)", _to_int("seed")
    )
    algorithmParams: Param[str] = Param(
        Params._dummy(),
        "algorithmParams",
        "the algorithm's parameters as a JSON object string (a dict is accepted), the keys of its "
        "configuration section, e.g. {\"max_iter\": 50}; unknown keys are an error listing the known ones",
        _to_json_object,
    )
    classes: Param[list[str]] = Param(
        Params._dummy(),
        "classes",
        "the class set in posterior order; empty = inferred from the labels (numeric order when every "
        "label is a number); a label outside a given class set is an error",
        TypeConverters.toListString,
    )
    partitions: Param[int] = Param(
        Params._dummy(),
        "partitions",
        "Spark partitions of the item blocks (0 = the context's default parallelism)",
        _to_int("partitions"),
    )
    maxBlockLabels: Param[int] = Param(
        Params._dummy(), "maxBlockLabels", "largest number of labels in one block", _to_int("maxBlockLabels")
    )
    checkpointInterval: Param[int] = Param(
        Params._dummy(),
        "checkpointInterval",
        "stateful models (samplers) truncate the lineage every this many sweeps",
        _to_int("checkpointInterval"),
    )
    handleUnknownWorkers: Param[str] = Param(
        Params._dummy(),
        "handleUnknownWorkers",
        "transform: what to do with labels of workers not seen at fit time: 'error' or 'skip' (ignore them)",
        TypeConverters.toString,
    )

    def __init__(self) -> None:
        super().__init__()
        defaults = EngineConfig()
        self._setDefault(
            itemCol="item",
            workerCol="worker",
            labelCol="label",
            algorithm="ds",
            seed=0,
            algorithmParams="{}",
            classes=[],
            partitions=defaults.partitions,
            maxBlockLabels=DEFAULT_MAX_BLOCK_LABELS,
            checkpointInterval=defaults.checkpoint_interval,
            handleUnknownWorkers="error",
        )

    def getItemCol(self) -> str:
        """The item column."""
        return self.getOrDefault(self.itemCol)

    def getWorkerCol(self) -> str:
        """The worker column."""
        return self.getOrDefault(self.workerCol)

    def getLabelCol(self) -> str:
        """The label column."""
        return self.getOrDefault(self.labelCol)

    def getAlgorithm(self) -> str:
        """The algorithm name."""
        return self.getOrDefault(self.algorithm)

    def getSeed(self) -> int:
        """The seed."""
        return self.getOrDefault(self.seed)

    def getAlgorithmParams(self) -> dict[str, Any]:
        """The algorithm's parameters as a dict."""
        return json.loads(self.getOrDefault(self.algorithmParams))

    def getClasses(self) -> list[str]:
        """The configured class set (empty: inferred)."""
        return list(self.getOrDefault(self.classes))

    def getPartitions(self) -> int:
        """Spark partitions of the item blocks (0: default parallelism)."""
        return self.getOrDefault(self.partitions)

    def getMaxBlockLabels(self) -> int:
        """Largest number of labels in one block."""
        return self.getOrDefault(self.maxBlockLabels)

    def getCheckpointInterval(self) -> int:
        """Sweeps between lineage truncations."""
        return self.getOrDefault(self.checkpointInterval)

    def getHandleUnknownWorkers(self) -> str:
        """``"error"`` or ``"skip"``."""
        return self.getOrDefault(self.handleUnknownWorkers)

    def _input_config(self) -> InputConfig:
        return InputConfig(
            item=self.getItemCol(),
            worker=self.getWorkerCol(),
            label=self.getLabelCol(),
            classes=tuple(str(c) for c in self.getClasses()),
        )

    def _run_config(self, truth: str = "truth") -> RunConfig:
        """The :class:`RunConfig` the command line would build from these Params (validated)."""
        check_choice("handleUnknownWorkers", self.getHandleUnknownWorkers(), UNKNOWN_WORKER_CHOICES)
        return RunConfig(
            algorithm=self.getAlgorithm(),
            seed=self.getSeed(),
            input=self._input_config(),
            gold=GoldConfig(item=self.getItemCol(), truth=truth),
            engine=EngineConfig(
                name="spark",
                partitions=self.getPartitions(),
                max_block_labels=self.getMaxBlockLabels(),
                checkpoint_interval=self.getCheckpointInterval(),
            ),
            algorithms={self.getAlgorithm(): self.getAlgorithmParams()},
        )


# --------------------------------------------------------------------------- estimator


class CrowdAggregator(Estimator, _CrowdParams, DefaultParamsReadable, DefaultParamsWritable):
    """Any registered algorithm as a pyspark.ml Estimator.

    Parameters
    ----------
    algorithm : str
        A name from ``crowdspark algorithms`` (default ``"ds"``).
    itemCol, workerCol, labelCol : str
        Columns of the labels DataFrame (defaults ``item``, ``worker``, ``label``).
    seed : int
        Seed of every random choice (default 0, as on the command line).
    algorithmParams : dict or str
        The algorithm's parameters (a dict or a JSON object string), e.g. ``{"max_iter": 50}``.
    classes : list of str
        The class set in posterior order (default: inferred).
    partitions, maxBlockLabels, checkpointInterval : int
        Engine settings (``engine.*`` on the command line).
    handleUnknownWorkers : {"error", "skip"}
        What the fitted model's ``transform`` does with workers it has not seen.

    Examples
    --------
    >>> agg = CrowdAggregator(algorithm="mv", itemCol="task")
    >>> agg.getAlgorithm(), agg.getItemCol(), agg.getSeed()
    ('mv', 'task', 0)
    >>> CrowdAggregator(algorithmParams={"tol": 1e-8}).getAlgorithmParams()
    {'tol': 1e-08}
    """

    _default_algorithm = "ds"

    @keyword_only
    def __init__(
        self,
        *,
        algorithm: str | None = None,
        itemCol: str = "item",
        workerCol: str = "worker",
        labelCol: str = "label",
        seed: int = 0,
        algorithmParams: dict[str, Any] | str | None = None,
        classes: list[str] | None = None,
        partitions: int = 0,
        maxBlockLabels: int = DEFAULT_MAX_BLOCK_LABELS,
        checkpointInterval: int = 10,
        handleUnknownWorkers: str = "error",
    ) -> None:
        super().__init__()
        self._setDefault(algorithm=self._default_algorithm)
        self._set(**{k: v for k, v in self._input_kwargs.items() if v is not None})

    @keyword_only
    def setParams(
        self,
        *,
        algorithm: str | None = None,
        itemCol: str | None = None,
        workerCol: str | None = None,
        labelCol: str | None = None,
        seed: int | None = None,
        algorithmParams: dict[str, Any] | str | None = None,
        classes: list[str] | None = None,
        partitions: int | None = None,
        maxBlockLabels: int | None = None,
        checkpointInterval: int | None = None,
        handleUnknownWorkers: str | None = None,
    ) -> "CrowdAggregator":
        """Set any of the Params by keyword (``None`` leaves a Param unchanged)."""
        return self._set(**{k: v for k, v in self._input_kwargs.items() if v is not None})

    def setAlgorithm(self, value: str) -> "CrowdAggregator":
        return self._set(algorithm=value)

    def setItemCol(self, value: str) -> "CrowdAggregator":
        return self._set(itemCol=value)

    def setWorkerCol(self, value: str) -> "CrowdAggregator":
        return self._set(workerCol=value)

    def setLabelCol(self, value: str) -> "CrowdAggregator":
        return self._set(labelCol=value)

    def setSeed(self, value: int) -> "CrowdAggregator":
        return self._set(seed=value)

    def setAlgorithmParams(self, value: dict[str, Any] | str) -> "CrowdAggregator":
        return self._set(algorithmParams=value)

    def setClasses(self, value: list[str]) -> "CrowdAggregator":
        return self._set(classes=value)

    def setPartitions(self, value: int) -> "CrowdAggregator":
        return self._set(partitions=value)

    def setMaxBlockLabels(self, value: int) -> "CrowdAggregator":
        return self._set(maxBlockLabels=value)

    def setCheckpointInterval(self, value: int) -> "CrowdAggregator":
        return self._set(checkpointInterval=value)

    def setHandleUnknownWorkers(self, value: str) -> "CrowdAggregator":
        return self._set(handleUnknownWorkers=value)

    def _fit(self, dataset: DataFrame) -> "CrowdAggregatorModel":
        return _fit_model(self, dataset)


class MajorityVoteAggregator(CrowdAggregator):
    """:class:`CrowdAggregator` with ``algorithm="mv"`` (majority vote; no algorithm parameters)."""

    _default_algorithm = "mv"


class DawidSkeneAggregator(CrowdAggregator):
    """:class:`CrowdAggregator` with ``algorithm="ds"`` (parameters ``max_iter``, ``tol``, ``smoothing``)."""

    _default_algorithm = "ds"


class BccAggregator(CrowdAggregator):
    """:class:`CrowdAggregator` with ``algorithm="bcc"`` (Gibbs sampler; ``burn_in``, ``n_samples`` ...)."""

    _default_algorithm = "bcc"


class IdblaAggregator(CrowdAggregator):
    """:class:`CrowdAggregator` with ``algorithm="idbla"`` (Gibbs sampler; ``n_levels``, ``burn_in`` ...)."""

    _default_algorithm = "idbla"


class FixedIdblaAggregator(CrowdAggregator):
    """:class:`CrowdAggregator` with ``algorithm="fixed-idbla"`` (``nu``, ``delta``, ``n_levels`` ...)."""

    _default_algorithm = "fixed-idbla"


def _materialize(frame: DataFrame) -> DataFrame:
    """``frame`` computed now and cut from its lineage (reliable checkpoint if a directory is set)."""
    if frame.sparkSession.sparkContext.getCheckpointDir():
        return frame.checkpoint(eager=True)
    return frame.localCheckpoint(eager=True)


def _fit_model(
    params: _CrowdParams, labels_df: DataFrame, gold_df: DataFrame | None = None, truth: str = "truth"
) -> "CrowdAggregatorModel":
    """Fit on the Spark engine through the shared runner and keep what the model needs."""
    spark = labels_df.sparkSession
    config = params._run_config(truth)
    timer = Timer()
    run = fit_frames(config, labels_df, gold_df, labels_source=_SOURCE, gold_source=_SOURCE, timer=timer)
    try:
        items = _materialize(run.items())
        workers = spark.createDataFrame(run.workers())
        timer.lap("items")
    finally:
        run.close()
    summary = dict(run.summary, timings=timer.timings)
    log.info("%s: fitted %d items, %d workers in %d iterations", config.algorithm, summary["counts"]["items"],
             summary["counts"]["workers"], summary["iterations"])
    model = CrowdAggregatorModel(
        kernel=run.model,
        globalParams=run.model.export_params(run.params),
        initStats=run.result.init_stats,
        encoding=run.encoding,
        summary=summary,
        items=items,
        workers=workers,
    )
    params._copyValues(model)
    return model


# --------------------------------------------------------------------------- model


class CrowdAggregatorModel(Model, _CrowdParams, MLReadable, MLWritable):
    """A fitted aggregation: item and worker tables, summary, and the global parameters to score with.

    Built by :meth:`CrowdAggregator.fit` or :meth:`load`; see the module docstring for what
    :meth:`transform` does per model type and for the save format.

    Attributes
    ----------
    items : pyspark DataFrame
        The fitted item table (distributed).
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

    def _fitted(self, value: Any, what: str) -> Any:
        if value is None:
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
        return score_labels(self, dataset)

    def write(self) -> MLWriter:
        """A writer of the format described in the module docstring."""
        return _ModelWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        """A reader of the format described in the module docstring."""
        return _ModelReader(cls)

    def close(self) -> None:
        """Free the executor storage of the fitted item table (the local checkpoint ``fit`` made).

        The model then has no ``items``; it still transforms, and saves without ``items/``.
        """
        if self._items is not None:
            _release_checkpoint(self._items)
            self._items = None


def _release_checkpoint(frame: DataFrame) -> None:
    """Unpersist the RDD behind a checkpointed DataFrame (``DataFrame.unpersist`` does not reach it)."""
    plan = frame._jdf.queryExecution().analyzed()
    if plan.getClass().getSimpleName() == "LogicalRDD":
        plan.rdd().unpersist(False)


# --------------------------------------------------------------------------- scoring


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


def _score_partition(
    frames: Iterator[pd.DataFrame], kernel: Kernel, params: dict[str, Any], encoding: Encoding, max_labels: int
) -> Iterator[pd.DataFrame]:
    """mapInPandas function: one partition's label rows (all labels of its items) -> item rows."""
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
        yield item_frame(block.item_ids, kernel.finish_block(block, None, params), encoding.classes)


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
        ``item``, ``label``, ``confidence``, ``posterior`` and the model's extras.

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
    labels = prepare_labels_spark(labels_df, cfg, _SOURCE, persist=False)
    frame = _known_worker_labels(model, labels)
    spark = labels_df.sparkSession
    n_partitions = model.getPartitions() or spark.sparkContext.defaultParallelism
    fn = partial(_score_partition, kernel=kernel, params=params, encoding=encoding,
                 max_labels=model.getMaxBlockLabels())
    return frame.repartition(n_partitions, "item").mapInPandas(fn, item_schema(dict(kernel.item_extras)))


# --------------------------------------------------------------------------- save and load

#: the Parquet table of arrays of format 1 (read only)
_LEGACY_FORMAT = 1


def _array_from_row(row: Row) -> Any:
    """One array of the format-1 ``params/`` table."""
    array = np.frombuffer(bytes(row["data"]), dtype=np.dtype(row["dtype"])).reshape(row["shape"]).copy()
    if row["kind"] == "python":
        return array.item()
    if row["kind"] == "numpy":
        return array[()]
    return array


def _saved(model: CrowdAggregatorModel) -> SavedModel:
    return SavedModel(model.getAlgorithm(), model_parameters(model.kernel), model.encoding.classes,
                      model.encoding.workers, model.globalParams, init_stats=model.initStats)


class _ModelWriter(MLWriter):
    """Writes a :class:`CrowdAggregatorModel` in the format of the module docstring."""

    def __init__(self, instance: CrowdAggregatorModel) -> None:
        super().__init__()
        self.instance = instance

    def saveImpl(self, path: str) -> None:
        spark, model = self.sparkSession, self.instance
        base = path.rstrip("/")
        extra = {"format": FORMAT, "summary": to_jsonable(model.summary), "has_items": model._items is not None}
        DefaultParamsWriter.saveMetadata(model, base, spark, extraMetadata={"crowdspark": extra})
        files = files_for(base, spark, "the model path")
        for name, data in model_files(_saved(model)).items():
            files.write_bytes(f"{base}/{MODEL_FOLDER}/{name}", data)
        model.workers.coalesce(1).write.parquet(f"{base}/workers")
        if model._items is not None:
            model.items.write.parquet(f"{base}/items")


class _ModelReader(MLReader):
    """Reads what :class:`_ModelWriter` wrote, a model saved in format 1, or a command-line run's output."""

    def __init__(self, cls: type) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> CrowdAggregatorModel:
        spark = self.sparkSession
        base = path.rstrip("/")
        files = files_for(base, spark, "the model path")
        metadata = DefaultParamsReader.loadMetadata(base, spark) if files.exists(f"{base}/metadata") else None
        extra = (metadata or {}).get("crowdspark", {})
        if metadata is not None and extra.get("format") == _LEGACY_FORMAT:
            saved, summary = _legacy_model(spark, base, extra), extra["summary"]
        else:
            saved = load_saved_model(base, spark, what="CrowdAggregatorModel.load")
            summary = extra.get("summary") if metadata is not None else _run_summary(files, base)
        kernel = _kernel(saved)
        has_items = extra.get("has_items", True) and _is_parquet(files, f"{base}/items")
        workers = (spark.read.parquet(f"{base}/workers") if _is_parquet(files, f"{base}/workers")
                   else spark.createDataFrame(worker_frame(saved.workers, kernel.worker_table(saved.params,
                                                                                             saved.init_stats or {}))))
        model = self.cls(
            kernel=kernel,
            globalParams=saved.params,
            initStats=saved.init_stats or {},
            encoding=Encoding(workers=saved.workers, classes=saved.classes),
            summary=summary,
            items=spark.read.parquet(f"{base}/items") if has_items else None,
            workers=workers,
        )
        if metadata is not None:
            model._resetUid(metadata["uid"])
            DefaultParamsReader.getAndSetParams(model, metadata)
        else:
            parameters = {k: v for k, v in saved.parameters.items() if k != "seed"}
            model._set(algorithm=saved.algorithm, seed=saved.parameters["seed"], algorithmParams=parameters,
                       classes=list(saved.classes))
        return model


def _kernel(saved: SavedModel) -> Kernel:
    hyper = dict(saved.parameters)
    seed = hyper.pop("seed")
    return build_model(saved.algorithm, hyper, len(saved.workers), len(saved.classes), seed)


def _is_parquet(files: Any, folder: str) -> bool:
    """Whether ``folder`` is a Parquet table (a command-line run may have written CSV)."""
    return files.is_dir(folder) and any(name.endswith(".parquet") for name in files.list(folder))


def _run_summary(files: Any, base: str) -> dict[str, Any]:
    """``summary.json`` of a command-line run's output."""
    if not files.exists(f"{base}/summary.json"):
        return {}
    return json.loads(files.read_bytes(f"{base}/summary.json").decode("utf-8"))


def _legacy_model(spark: Any, base: str, extra: dict[str, Any]) -> SavedModel:
    """A model saved in format 1 (arrays in a Parquet table, the encoding in another)."""
    arrays: dict[str, dict[str, Any]] = {"params": {}, "init_stats": {}}
    for row in spark.read.parquet(f"{base}/params").collect():
        arrays[row["section"]][row["name"]] = _array_from_row(row)
    workers = [r["worker"] for r in spark.read.parquet(f"{base}/encoding").orderBy("index").collect()]
    return SavedModel(extra["algorithm"], dict(extra["hyperparameters"]), tuple(extra["classes"]), tuple(workers),
                      arrays["params"], base, arrays["init_stats"])


# --------------------------------------------------------------------------- plain functions


def aggregate_df(
    labels_df: DataFrame,
    algorithm: str = "ds",
    *,
    gold_df: DataFrame | None = None,
    seed: int = 0,
    item: str = "item",
    worker: str = "worker",
    label: str = "label",
    truth: str = "truth",
    classes: list[str] | None = None,
    partitions: int = 0,
    **params: Any,
) -> tuple[DataFrame, DataFrame, dict[str, Any]]:
    """Aggregate a labels DataFrame without the ml classes.

    Parameters
    ----------
    labels_df : pyspark DataFrame
    algorithm : str
        A name from ``crowdspark algorithms``.
    gold_df : pyspark DataFrame, optional
        Gold labels (columns ``item`` and ``truth``, named as given); adds ``summary["metrics"]``.
    seed : int
    item, worker, label, truth : str
        Column names.
    classes : list of str, optional
        The class set in posterior order (default: inferred).
    partitions : int
        Spark partitions of the item blocks (0: default parallelism).
    **params
        The algorithm's parameters, e.g. ``max_iter=50``.

    Returns
    -------
    items : pyspark DataFrame
        The fitted item table (distributed, materialized).
    workers : pyspark DataFrame
    summary : dict

    Examples
    --------
    >>> labels = spark.createDataFrame([("a", "w1", "x"), ("a", "w2", "y"), ("a", "w3", "y")],
    ...                                ["task", "worker", "label"])
    >>> items, workers, summary = aggregate_df(labels, "mv", item="task", partitions=1)
    >>> items.select("item", "label", "confidence").collect()
    [Row(item='a', label='y', confidence=0.666...)]
    >>> summary["algorithm"], workers.count()
    ('mv', 3)
    """
    estimator = CrowdAggregator(
        algorithm=algorithm, seed=seed, itemCol=item, workerCol=worker, labelCol=label,
        algorithmParams=params, classes=list(classes or []), partitions=partitions,
    )
    model = _fit_model(estimator, labels_df, gold_df, truth)
    return model.items, model.workers, model.summary
