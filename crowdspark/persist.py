"""Saving and loading a fitted model's global parameters (``<output>/model/``), for warm starts.

Layout of ``<run output>/model/``:

* ``model.json``: ``algorithm``, ``parameters`` (the model's hyperparameters), ``classes`` (posterior
  order), ``workers`` (worker id of each worker index), ``format`` (this layout's version);
* ``params.npz``: every array of the final global parameters (sizes depend on workers, classes and
  levels only).

Both files are small next to the item table: they hold nothing per item.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from crowdspark.data import is_local
from crowdspark.errors import ConfigError, InputError

__all__ = ["SavedModel", "params_to_bytes", "params_from_bytes", "load_saved_model", "worker_index_map"]

FORMAT = 1


@dataclass(frozen=True)
class SavedModel:
    """A previous run's fitted global parameters and its encoding."""

    algorithm: str
    parameters: dict[str, Any]
    classes: tuple[str, ...]
    workers: tuple[str, ...]
    params: dict[str, np.ndarray]
    source: str


def params_to_bytes(params: dict[str, Any]) -> bytes:
    """The array-valued entries of ``params`` as an ``.npz`` archive."""
    arrays = {k: np.asarray(v) for k, v in params.items() if isinstance(v, (np.ndarray, float, int, np.number))}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def params_from_bytes(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data)) as archive:
        return {k: archive[k] for k in archive.files}


def model_document(algorithm: str, parameters: dict[str, Any], classes, workers) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "algorithm": algorithm,
        "parameters": parameters,
        "classes": list(classes),
        "workers": list(workers),
    }


def _read(path: str, spark: Any) -> bytes:
    if is_local(path):
        local = path[len("file://") :] if path.startswith("file://") else path
        with open(local, "rb") as handle:
            return handle.read()
    if spark is None:
        raise ConfigError(f"reading {path!r} needs the spark engine (it is not a local path)")
    rows = spark.read.format("binaryFile").load(path).select("content").collect()
    if not rows:
        raise FileNotFoundError(path)
    return bytes(rows[0][0])


def load_saved_model(run_dir: str, spark: Any = None) -> SavedModel:
    """Read ``run_dir/model/`` written by a previous run.

    Raises
    ------
    InputError
        If it is missing or not a crowdspark model.
    """
    base = run_dir.rstrip("/") + "/model"
    try:
        document = json.loads(_read(base + "/model.json", spark).decode("utf-8"))
        params = params_from_bytes(_read(base + "/params.npz", spark))
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(
            f"cannot warm start from {run_dir!r}: no readable model/ (model.json, params.npz) there ({exc}). "
            "Point --warm-start at the output directory of a previous successful run."
        ) from exc
    if document.get("format") != FORMAT:
        raise InputError(f"cannot warm start from {run_dir!r}: model format {document.get('format')!r} is not {FORMAT}")
    return SavedModel(
        algorithm=document["algorithm"],
        parameters=document["parameters"],
        classes=tuple(document["classes"]),
        workers=tuple(document["workers"]),
        params=params,
        source=run_dir,
    )


def worker_index_map(new_workers: tuple[str, ...], old_workers: tuple[str, ...]) -> np.ndarray:
    """For each worker of this run, its index in the previous run (``-1`` if unseen), shape (K,)."""
    import pandas as pd

    return pd.Index(old_workers).get_indexer(list(new_workers)).astype(np.int64)
