"""The one saved-model format: what a fitted model is, and its global parameters, as data only.

A saved model is a folder (``<run output>/_model/`` on the command line, ``<path>/_model/`` of a
``crowdspark.ml`` model saved with ``model.write().save(path)``; the ``_`` prefix makes Spark's and pandas'
readers skip it; the ``model/`` folder of results written by crowdspark 0.1 reads too):

* ``model.json``: ``format`` (:data:`FORMAT`), ``crowdspark`` (the version that wrote it), ``algorithm``,
  ``parameters`` (every hyperparameter of the model, including ``seed``), ``classes`` (the posterior
  order), ``workers`` (the worker id of each worker index);
* ``params.npz``: the model's :meth:`~crowdspark.models.base.Model.export_params` (everything a warm start
  reads and everything ``finish_block`` needs without per-item state; sizes depend on workers, classes and
  levels only), as a :mod:`crowdspark.io.datatree` archive, read with ``allow_pickle=False``;
* ``init_stats.npz`` (optional): the summed statistics of the initialization pass, the same way.

``--warm-start``, ``crowdspark.ml``'s ``CrowdAggregatorModel.load`` and checkpoints (which keep the fit's
full driver state in the same data-only archive, :mod:`crowdspark.engine.checkpoint`) read it.  Folders in
format 1 (``params.npz`` as plain ``numpy.savez`` arrays) are read too.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from crowdspark import __version__
from crowdspark.errors import InputError
from crowdspark.io.datatree import tree_from_bytes, tree_to_bytes
from crowdspark.io.files import Files, files_for

__all__ = [
    "FORMAT",
    "MODEL_FOLDER",
    "SavedModel",
    "model_files",
    "load_saved_model",
    "find_model_folder",
    "worker_index_map",
]

FORMAT = 2
#: formats this version reads
READABLE_FORMATS = (1, 2)
#: the saved model's folder inside a run's output or a crowdspark.ml save
MODEL_FOLDER = "_model"
#: the folder name in results written by crowdspark 0.1 (read, never written)
LEGACY_MODEL_FOLDER = "model"
MODEL_FILE = "model.json"
PARAMS_FILE = "params.npz"
INIT_STATS_FILE = "init_stats.npz"


@dataclass(frozen=True)
class SavedModel:
    """A fitted model as saved: what it is, its global parameters and its encoding.

    Attributes
    ----------
    algorithm : str
    parameters : dict
        Every hyperparameter, including ``seed``.
    classes : tuple of str, length C
    workers : tuple of str, length K
    params : dict
        The exported global parameters.
    source : str
        The folder it was read from.
    init_stats : dict, optional
        The summed initialization statistics, when saved.
    """

    algorithm: str
    parameters: dict[str, Any]
    classes: tuple[str, ...]
    workers: tuple[str, ...]
    params: dict[str, Any]
    source: str = ""
    init_stats: dict[str, Any] | None = field(default=None, repr=False)


def model_files(saved: SavedModel) -> dict[str, bytes]:
    """The files of a saved model (name inside the model folder -> bytes), for any writer."""
    document = {
        "format": FORMAT,
        "crowdspark": __version__,
        "algorithm": saved.algorithm,
        "parameters": saved.parameters,
        "classes": list(saved.classes),
        "workers": list(saved.workers),
    }
    out = {
        MODEL_FILE: (json.dumps(document, indent=2, default=_plain) + "\n").encode("utf-8"),
        PARAMS_FILE: tree_to_bytes(dict(saved.params)),
    }
    if saved.init_stats is not None:
        out[INIT_STATS_FILE] = tree_to_bytes(dict(saved.init_stats))
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, set)):
        return list(value)
    raise TypeError(f"a {type(value).__name__} is not a hyperparameter value")


def _join(folder: str, name: str) -> str:
    return f"{folder.rstrip('/')}/{name}"


def find_model_folder(path: str, files: Files) -> str | None:
    """The saved-model folder ``path`` names: ``path`` itself (it holds ``model.json``), or the ``_model/`` (in
    0.1 results ``model/``) of a run's output or a ``crowdspark.ml`` save; ``None`` when none holds one."""
    for folder in (path, _join(path, MODEL_FOLDER), _join(path, LEGACY_MODEL_FOLDER)):
        if files.exists(_join(folder, MODEL_FILE)):
            return folder
    return None


def _arrays(data: bytes) -> dict[str, Any]:
    """A params archive of either format: a datatree (format 2) or plain ``numpy.savez`` arrays (format 1)."""
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        if "__tree__" not in archive.files:
            return {key: archive[key] for key in archive.files}
    tree = tree_from_bytes(data)
    if not isinstance(tree, dict):
        raise ValueError("the archive does not hold a dict of parameters")
    return tree


def load_saved_model(path: str, spark: Any = None, what: str = "--warm-start") -> SavedModel:
    """Read the saved model at ``path`` (a model folder, a run's output or a ``crowdspark.ml`` save).

    Raises
    ------
    InputError
        If there is none, it cannot be read, or its format is not one this version reads.
    """
    files = files_for(path, spark, what)
    folder = find_model_folder(path, files)
    if folder is None:
        raise InputError(
            f"{what} {path!r}: no saved model there (no {MODEL_FILE} in it or in its {MODEL_FOLDER}/). Point it "
            "at the output directory of a previous successful run, a crowdspark.ml model saved with "
            "model.write().save(path), or a model folder."
        )
    try:
        document = json.loads(files.read_bytes(_join(folder, MODEL_FILE)).decode("utf-8"))
        version = document.get("format") if isinstance(document, dict) else None
        if version not in READABLE_FORMATS:
            raise InputError(
                f"{what} {path!r}: the model is saved in format {version!r}; this version of crowdspark "
                f"reads formats {list(READABLE_FORMATS)}. Refit the model (run once without {what})."
            )
        params = _arrays(files.read_bytes(_join(folder, PARAMS_FILE)))
        init_stats = None
        if files.exists(_join(folder, INIT_STATS_FILE)):
            init_stats = _arrays(files.read_bytes(_join(folder, INIT_STATS_FILE)))
        return SavedModel(
            algorithm=str(document["algorithm"]),
            parameters=dict(document["parameters"]),
            classes=tuple(str(c) for c in document["classes"]),
            workers=tuple(str(w) for w in document["workers"]),
            params=params,
            source=path,
            init_stats=init_stats,
        )
    except InputError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"{what} {path!r}: the saved model in {folder!r} cannot be read ({exc}). Point it at the output of a "
            "successful run, or refit."
        ) from exc


def worker_index_map(new_workers: tuple[str, ...], old_workers: tuple[str, ...]) -> np.ndarray:
    """For each worker of this run, its index in the previous run (``-1`` if unseen), shape (K,)."""
    import pandas as pd

    return pd.Index(old_workers).get_indexer(list(new_workers)).astype(np.int64)
