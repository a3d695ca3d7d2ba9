"""Saving and loading a fitted model (``model.write().save(path)``, ``CrowdAggregatorModel.load(path)``)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from pyspark.ml.util import (
    DefaultParamsReader,
    DefaultParamsWriter,
    MLReader,
    MLWriter,
)
from pyspark.sql import Row

from crowdspark.io.files import files_for
from crowdspark.io.rules import Encoding
from crowdspark.io.saved_model import FORMAT, MODEL_FOLDER, SavedModel, load_saved_model, model_files
from crowdspark.io.tables import to_jsonable, worker_frame
from crowdspark.models.base import Model as Kernel
from crowdspark.models.registry import build_model, model_parameters

__all__ = ["ModelReader", "ModelWriter"]

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


def _saved(model: Any) -> SavedModel:
    """The :class:`~crowdspark.io.saved_model.SavedModel` of a :class:`~crowdspark.ml.model.CrowdAggregatorModel`."""
    return SavedModel(model.getAlgorithm(), model_parameters(model.kernel), model.encoding.classes,
                      model.encoding.workers, model.globalParams, init_stats=model.initStats)


class ModelWriter(MLWriter):
    """Writes a :class:`CrowdAggregatorModel` in the format of the module docstring."""

    def __init__(self, instance: Any) -> None:
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


class ModelReader(MLReader):
    """Reads what :class:`ModelWriter` wrote, a model saved in format 1, or a command-line run's output."""

    def __init__(self, cls: type) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> Any:
        """The model saved at ``path``, an instance of the class this reader was made for (``cls``)."""
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
