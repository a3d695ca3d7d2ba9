"""The estimators: :class:`CrowdAggregator` for any algorithm, and one class per registered algorithm."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pyspark import keyword_only
from pyspark.ml import Estimator
from pyspark.ml.param import Param, Params
from pyspark.ml.util import (
    DefaultParamsReadable,
    DefaultParamsWritable,
)
from pyspark.sql import DataFrame, SparkSession

from crowdspark.config import DEFAULT_ALGORITHM, EngineConfig, GoldConfig, InputConfig, RunConfig, SparkConfig
from crowdspark.docstrings import field_docs
from crowdspark.errors import ConfigError
from crowdspark.faces import ML, camel, using_face
from crowdspark.ml.model import CrowdAggregatorModel
from crowdspark.ml.params import SOURCE, CrowdParams, check_spark_frame, field_keys
from crowdspark.models.registry import MODELS, check_params, hyperparameters
from crowdspark.io.tables import item_schema
from crowdspark.pipeline.fit import Fitted
from crowdspark.pipeline.run import fit_frames
from crowdspark.pipeline.small_frame import fit_small_frame
from crowdspark.pipeline.summary import Timer

__all__ = ["CrowdAggregator", "ESTIMATORS", "fit_model", "aggregate_df"]

log = logging.getLogger(__name__)

#: ``engine.small_input_bytes``'s default: the labels DataFrames this face fits on the driver
DEFAULT_SMALL_INPUT_BYTES = EngineConfig().small_input_bytes
#: the configuration's defaults, which :func:`aggregate_df`'s keywords repeat (the estimators' are their Params')
_RUN, _COLUMNS, _GOLD, _SPARK = RunConfig(), InputConfig(), GoldConfig(), SparkConfig()


class CrowdAggregator(Estimator, CrowdParams, DefaultParamsReadable, DefaultParamsWritable):
    """Any registered algorithm as a pyspark.ml Estimator.

    Parameters
    ----------
    algorithm : str
        A name from ``crowdspark algorithms`` (default :data:`crowdspark.config.DEFAULT_ALGORITHM`, ``"ads"``, as
        on the command line).
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
    smallInputBytes : int
        ``engine.small_input_bytes`` (default 8 MiB): a DataFrame of at most ``smallInputBytes / 3`` rows whose
        fit's predicted peak fits the driver's memory budget is collected to the driver and fitted with the
        local engine, with the same answers (:mod:`crowdspark.pipeline.small_frame`); 0 always fits on Spark.
    maxMemory : str
        ``engine.max_memory`` (default empty: 0.8 of the host's cgroup limit or physical memory), e.g. ``"4g"``:
        on a local master a larger DataFrame is fitted on the driver when its local fit's predicted peak is
        within it (docs/engines.md).
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

    _default_algorithm = DEFAULT_ALGORITHM

    @keyword_only
    def __init__(
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
        smallInputBytes: int | None = None,
        maxMemory: str | None = None,
        handleUnknownWorkers: str | None = None,
    ) -> None:
        super().__init__()
        self._setDefault(algorithm=self._default_algorithm)
        self._set(**{k: v for k, v in self._input_kwargs.items() if v is not None})
        if type(self) is CrowdAggregator:
            self._check()

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
        smallInputBytes: int | None = None,
        maxMemory: str | None = None,
        handleUnknownWorkers: str | None = None,
    ) -> "CrowdAggregator":
        """Set any of the Params by keyword (``None`` leaves a Param unchanged)."""
        return self._set(**{k: v for k, v in self._input_kwargs.items() if v is not None})._check()

    def _check(self) -> "CrowdAggregator":
        """``self``, once the run configuration of its Params is valid (ConfigError naming them as this face
        does, when the estimator is built or its algorithm or parameters are set)."""
        with using_face(ML):
            self._run_config()
        return self

    def setAlgorithm(self, value: str) -> "CrowdAggregator":
        return self._set(algorithm=value)._check()

    def setItemCol(self, value: str) -> "CrowdAggregator":
        return self._set(itemCol=value)

    def setWorkerCol(self, value: str) -> "CrowdAggregator":
        return self._set(workerCol=value)

    def setLabelCol(self, value: str) -> "CrowdAggregator":
        return self._set(labelCol=value)

    def setSeed(self, value: int) -> "CrowdAggregator":
        return self._set(seed=value)

    def setAlgorithmParams(self, value: dict[str, Any] | str) -> "CrowdAggregator":
        return self._set(algorithmParams=value)._check()

    def setClasses(self, value: list[str]) -> "CrowdAggregator":
        return self._set(classes=value)

    def setPartitions(self, value: int) -> "CrowdAggregator":
        return self._set(partitions=value)

    def setMaxBlockLabels(self, value: int) -> "CrowdAggregator":
        return self._set(maxBlockLabels=value)

    def setCheckpointInterval(self, value: int) -> "CrowdAggregator":
        return self._set(checkpointInterval=value)

    def setSmallInputBytes(self, value: int) -> "CrowdAggregator":
        return self._set(smallInputBytes=value)._check()

    def setMaxMemory(self, value: str) -> "CrowdAggregator":
        return self._set(maxMemory=value)._check()

    def setHandleUnknownWorkers(self, value: str) -> "CrowdAggregator":
        return self._set(handleUnknownWorkers=value)

    def _fit(self, dataset: DataFrame) -> CrowdAggregatorModel:
        with using_face(ML):
            return fit_model(self, dataset)


def _field_converter(algorithm: str, field: str) -> Callable[[Any], Any]:
    """Param converter: the value the configuration would hold (typed and checked as ``--set`` values are),
    or a ConfigError naming the Param."""

    def convert(value: Any) -> Any:
        with using_face(ML):
            return check_params(algorithm, {field: value})[field]

    return convert


def _accessors(param: str) -> dict[str, Callable]:
    title = param[:1].upper() + param[1:]

    def get(self: CrowdAggregator) -> Any:
        return self.getOrDefault(param) if self.isDefined(param) else None

    def set_(self: CrowdAggregator, value: Any) -> CrowdAggregator:
        return self._set(**{param: value})

    get.__doc__ = f"The value of ``{param}`` (``None``: chosen when the model is fitted)."
    set_.__doc__ = f"Set ``{param}``."
    return {f"get{title}": get, f"set{title}": set_}


def _estimator_class(model: type) -> type[CrowdAggregator]:
    """The estimator of one registered model: :class:`CrowdAggregator` with the algorithm fixed and a camelCase
    Param per model field (its field name is accepted by the constructor too)."""
    name = model.name
    defaults = hyperparameters(name)
    docs = field_docs(model)
    params = {camel(field): field for field in defaults}
    # a field the model chooses from the data unless it is set (a level model's H) has no default Param value
    chosen = {"n_levels"} if getattr(model, "auto_levels", ()) else set()
    attrs: dict[str, Any] = {"_default_algorithm": name, "_fields": params, "__module__": "crowdspark.ml"}
    for param, field in params.items():
        default = "chosen from the data unless set" if field in chosen else f"default {defaults[field]!r}"
        attrs[param] = Param(Params._dummy(), param, f"{docs.get(field, field)} ({default})",
                             _field_converter(name, field))
        attrs.update(_accessors(param))

    def __init__(self: CrowdAggregator, **kwargs: Any) -> None:
        if "algorithm" in kwargs:
            raise ConfigError(f"{type(self).__name__} always runs {name!r}; for another algorithm use "
                              f"CrowdAggregator(algorithm={kwargs['algorithm']!r}) or its own class")
        common, own, unknown = {}, {}, []
        for key, value in kwargs.items():
            param = key if key in params else camel(key) if key in defaults else None
            if param is not None:
                if param in own:
                    raise ConfigError(f"{param} is given twice (as {param} and as {params[param]}); give it once")
                own[param] = value
            elif key in _COMMON:
                common[key] = value
            else:
                unknown.append(key)
        if unknown:
            raise ConfigError(
                f"unknown parameter(s) {sorted(unknown)} for {type(self).__name__}; its Params: "
                f"{', '.join(sorted(_COMMON - {'algorithm'}))} and {', '.join(sorted(params)) or '(no others)'}"
            )
        CrowdAggregator.__init__(self, **common)
        self._setDefault(**{param: defaults[field] for param, field in params.items() if field not in chosen})
        self._set(**own)
        self._check()

    def _algorithm_params(self: CrowdAggregator) -> dict[str, Any]:
        if self.getAlgorithm() != name:
            raise ConfigError(f"{type(self).__name__} always runs {name!r}, but its algorithm Param was set to "
                              f"{self.getAlgorithm()!r}; use CrowdAggregator for another algorithm")
        given = field_keys(name, self.getAlgorithmParams())
        for param, field in params.items():
            if self.isSet(param):
                if field in given:
                    raise ConfigError(f"{param} is set twice on {type(self).__name__} (as a Param and in "
                                      "algorithmParams); set it once")
                given[field] = self.getOrDefault(param)
        return given

    fields_doc = "\n".join(f"{param} : default {defaults[field]!r}\n    {docs.get(field, '')}"
                            for param, field in params.items())
    attrs["__doc__"] = (f":class:`CrowdAggregator` running {model.title} (``{name}``): {model.description}.\n\n"
                        f"Parameters\n----------\n{fields_doc}\nitemCol, workerCol, labelCol, seed, "
                        f"algorithmParams, classes, partitions, maxBlockLabels, checkpointInterval, "
                        f"smallInputBytes, maxMemory, handleUnknownWorkers\n    As :class:`CrowdAggregator`; the model's Params may also be "
                        f"given by their field names (``max_iter=5``).\n")
    attrs["__init__"] = __init__
    attrs["_algorithm_params"] = _algorithm_params
    return type(f"{model.api_name}Aggregator", (CrowdAggregator,), attrs)


def _materialize(frame: DataFrame) -> DataFrame:
    """``frame`` computed now and cut from its lineage (reliable checkpoint if a directory is set)."""
    if frame.sparkSession.sparkContext.getCheckpointDir():
        return frame.checkpoint(eager=True)
    return frame.localCheckpoint(eager=True)


def _item_frame(spark: SparkSession, run: Fitted) -> DataFrame:
    """The fitted item table as a Spark DataFrame: the Spark engine's materialized (:func:`_materialize`), the
    local engine's (a pyarrow Table on the driver) created with the Spark engine's schema."""
    items = run.items()
    if isinstance(items, DataFrame):
        return _materialize(items)
    return spark.createDataFrame(items.to_pandas(), schema=item_schema(run.item_extras))


def fit_model(
    params: CrowdParams, labels_df: DataFrame, gold_df: DataFrame | None = None, truth: str = "truth"
) -> "CrowdAggregatorModel":
    """Fit through the shared runner and keep what the model needs: on the driver with the local engine when
    the labels are small (:func:`crowdspark.pipeline.small_frame.fit_small_frame`), else on Spark."""
    check_spark_frame(labels_df, "fit")
    spark = labels_df.sparkSession
    config = params._run_config(truth)
    timer = Timer()
    choice: dict[str, Any] = {}
    run = fit_small_frame(config, labels_df, gold_df, SOURCE, SOURCE, timer, choice)
    if run is None:
        run = fit_frames(config, labels_df, gold_df, labels_source=SOURCE, gold_source=SOURCE, timer=timer)
        run.summary["engine_choice"] = choice
    try:
        items = _item_frame(spark, run)
        workers = spark.createDataFrame(run.workers())
        timer.lap("items")
    finally:
        run.close()
    summary = dict(run.summary, timings=timer.timings)
    log.info("%s: fitted %d items, %d workers in %d iterations on the %s engine", config.algorithm,
             summary["counts"]["items"], summary["counts"]["workers"], summary["iterations"], summary["engine"])
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
    model._set(algorithm=config.algorithm, algorithmParams=config.algorithm_params())
    return model


def aggregate_df(
    labels_df: DataFrame,
    algorithm: str = DEFAULT_ALGORITHM,
    *,
    gold_df: DataFrame | None = None,
    seed: int = _RUN.seed,
    item: str = _COLUMNS.item,
    worker: str = _COLUMNS.worker,
    label: str = _COLUMNS.label,
    truth: str = _GOLD.truth,
    classes: list[str] | None = None,
    partitions: int = _SPARK.partitions,
    small_input_bytes: int = DEFAULT_SMALL_INPUT_BYTES,
    max_memory: str = "",
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
    small_input_bytes : int
        ``engine.small_input_bytes``: labels of at most ``small_input_bytes / 3`` rows whose fit fits the
        driver's memory budget are fitted there with the local engine (:mod:`crowdspark.pipeline.small_frame`;
        ``summary["small_input"]`` says so); 0 always fits on Spark.
    max_memory : str
        ``engine.max_memory`` (the ``maxMemory`` Param).
    **params
        The algorithm's parameters, e.g. ``max_iter=50``.

    Returns
    -------
    items : pyspark DataFrame
        The fitted item table (materialized).
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
        smallInputBytes=small_input_bytes, maxMemory=max_memory,
    )
    model = fit_model(estimator, labels_df, gold_df, truth)
    return model.items, model.workers, model.summary


#: the names the generic estimator takes beside a model's Params
_COMMON = frozenset(["algorithm", "itemCol", "workerCol", "labelCol", "seed", "algorithmParams", "classes",
                     "partitions", "maxBlockLabels", "checkpointInterval", "smallInputBytes",
                     "maxMemory", "handleUnknownWorkers"])

#: the estimator of every registered algorithm, by class name
ESTIMATORS: dict[str, type[CrowdAggregator]] = {f"{m.api_name}Aggregator": _estimator_class(m) for m in MODELS}
