"""The Params every crowdspark.ml class shares, and how they become a run configuration."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.sql import DataFrame

from crowdspark.config import DEFAULT_ALGORITHM, EngineConfig, GoldConfig, InputConfig, RunConfig, SparkConfig
from crowdspark.errors import ConfigError, InputError
from crowdspark.faces import camel
from crowdspark.models.registry import ALGORITHMS, algorithm_names, hyperparameters
from crowdspark.validation import check_choice, check_int, parse_bytes

__all__ = ["UNKNOWN_WORKER_CHOICES", "SOURCE", "CrowdParams", "check_spark_frame", "field_keys"]


UNKNOWN_WORKER_CHOICES = ("error", "skip")


#: the source a DataFrame passed in is named by in messages and summaries
SOURCE = "<DataFrame>"


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


def _to_size(value: Any) -> str:
    """Param converter of ``maxMemory``: a size such as ``"4g"`` (checked), or ``""`` (the host's share)."""
    if value == "":
        return ""
    parse_bytes("maxMemory", value)
    return str(value)


def _to_int(name: str) -> Callable[[Any], int]:
    """Param converter: :func:`check_int` naming the Param (``5.0`` -> ``5``; ``2.5`` is a ConfigError)."""
    return partial(check_int, name)


class CrowdParams(Params):
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
        "the algorithm's parameters as a JSON object string (a dict is accepted), by their Param names or the "
        "keys of the configuration section, e.g. {\"maxIter\": 50}; unknown keys are an error listing the known ones",
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
    smallInputBytes: Param[int] = Param(
        Params._dummy(),
        "smallInputBytes",
        "engine.small_input_bytes: a labels DataFrame of at most smallInputBytes / 3 rows (about 2.8M at the "
        "default 8 MiB) whose fit's predicted peak fits the driver's memory budget is collected to the driver and "
        "fitted with the local engine, with the same answers; on a local master a larger frame is too when its "
        "predicted peak fits maxMemory; 0 = always fit on Spark",
        _to_int("smallInputBytes"),
    )
    maxMemory: Param[str] = Param(
        Params._dummy(),
        "maxMemory",
        "engine.max_memory: the memory a fit may use on the driver's host, e.g. \"4g\" or \"512m\" (k, m, g, t: "
        "powers of 1024); empty = engine.memory_share (0.8) of the host's cgroup limit or physical memory. On a "
        "local master a labels DataFrame whose local fit's predicted peak is within it is fitted on the driver",
        _to_size,
    )
    handleUnknownWorkers: Param[str] = Param(
        Params._dummy(),
        "handleUnknownWorkers",
        "transform: what to do with labels of workers not seen at fit time: 'error' or 'skip' (ignore them)",
        TypeConverters.toString,
    )

    def __init__(self) -> None:
        super().__init__()
        run, spark, engine, columns = RunConfig(), SparkConfig(), EngineConfig(), InputConfig()
        self._setDefault(
            itemCol=columns.item,
            workerCol=columns.worker,
            labelCol=columns.label,
            algorithm=DEFAULT_ALGORITHM,
            seed=run.seed,
            algorithmParams="{}",
            classes=[],
            partitions=spark.partitions,
            maxBlockLabels=engine.max_block_labels,
            checkpointInterval=spark.checkpoint_interval,
            smallInputBytes=engine.small_input_bytes,
            maxMemory=engine.max_memory,
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

    def getSmallInputBytes(self) -> int:
        """``engine.small_input_bytes`` (0: always fit on Spark)."""
        return self.getOrDefault(self.smallInputBytes)

    def getMaxMemory(self) -> str:
        """``engine.max_memory`` (empty: a share of the host's memory)."""
        return self.getOrDefault(self.maxMemory)

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
            engine=EngineConfig(name="spark", max_block_labels=self.getMaxBlockLabels(),
                                small_input_bytes=self.getSmallInputBytes(), max_memory=self.getMaxMemory()),
            spark=SparkConfig(partitions=self.getPartitions(), checkpoint_interval=self.getCheckpointInterval()),
            algorithms={self.getAlgorithm(): self._algorithm_params()},
        )

    def _algorithm_params(self) -> dict[str, Any]:
        """The algorithm's parameters this object sets (``algorithmParams``), by their field names."""
        return field_keys(self.getAlgorithm(), self.getAlgorithmParams())


def field_keys(algorithm: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with this face's camelCase names (``maxIter``) replaced by the field names (``max_iter``) of
    ``algorithm``'s parameters; other keys stay as given (the configuration's checks name them)."""
    if algorithm not in ALGORITHMS:
        return dict(params)
    fields = {camel(f): f for f in hyperparameters(algorithm)}
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for key, value in params.items():
        field = fields.get(key, key)
        if field in out:
            raise ConfigError(f"{camel(field)} is given twice in algorithmParams (as {given[field]} and as {key}); "
                              "give it once")
        out[field], given[field] = value, key
    return out


def check_spark_frame(frame: Any, method: str) -> None:
    """InputError unless ``frame`` is a Spark DataFrame; a pandas frame is pointed to :mod:`crowdspark.api`."""
    if isinstance(frame, DataFrame):
        return
    hint = (" For a pandas DataFrame use crowdspark.api (the same algorithms, crowd-kit style: "
            "from crowdspark.api import DawidSkene; DawidSkene().fit(frame)), or spark.createDataFrame(frame)."
            if type(frame).__module__.startswith("pandas") else "")
    raise InputError(f"{method}: pass a Spark DataFrame of labels, but got a {type(frame).__name__}.{hint}")
