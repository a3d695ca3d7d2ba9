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
* ``init_stats.npz`` (optional): the summed statistics of the initialization pass, the same way;
* ``carried.npz`` (optional, runs with ``incremental.mode = "on"``): the statistics the next incremental run
  carries (:class:`crowdspark.engine.carry.Carried`, sized by workers and classes), the same way.

``--warm-start``, ``crowdspark.ml``'s ``CrowdAggregatorModel.load`` and checkpoints (which keep the fit's
full driver state in the same data-only archive, :mod:`crowdspark.engine.checkpoint`) read it.  Folders in
format 1 (``params.npz`` as plain ``numpy.savez`` arrays) are read too.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from crowdspark.version import __version__
from crowdspark.errors import InputError
from crowdspark.io.datatree import DOCUMENT, tree_from_arrays, tree_to_bytes
from crowdspark.io.files import Files, files_for

__all__ = [
    "FORMAT",
    "MODEL_FOLDER",
    "SavedModel",
    "model_files",
    "load_saved_model",
    "find_model_folder",
    "worker_index_map",
    "array_budget",
    "check_saved_values",
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
CARRIED_FILE = "carried.npz"
#: the largest ``model.json`` read, in bytes (it lists every worker id once)
MAX_DESCRIPTION_BYTES = 256 * 2**20
#: the most entries one archive of a saved model may hold
MAX_ENTRIES = 4096
#: the most difficulty levels a description may claim when sizing its archives
MAX_LEVELS = 64
#: how many times its file size an archive's arrays may inflate to (crowdspark writes them uncompressed)
MAX_INFLATION = 64
#: the dtype kinds of a saved model's arrays: booleans, integers, floats
NUMERIC_KINDS = "biuf"
#: how far from 1 a saved distribution may sum
SUM_TOLERANCE = 1e-6


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
    carried : dict, optional
        What an incremental run carries to the next (:meth:`crowdspark.engine.carry.Carried.to_tree`), when
        saved.
    """

    algorithm: str
    parameters: dict[str, Any]
    classes: tuple[str, ...]
    workers: tuple[str, ...]
    params: dict[str, Any]
    source: str = ""
    init_stats: dict[str, Any] | None = field(default=None, repr=False)
    carried: dict[str, Any] | None = field(default=None, repr=False)


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
    if saved.carried is not None:
        out[CARRIED_FILE] = tree_to_bytes(dict(saved.carried))
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


def _read_bounded(files: Files, path: str, limit: int, why: str) -> bytes:
    """The bytes of ``path``, refused unread when the file is larger than ``limit`` (``why`` says whence)."""
    size = files.size(path)
    if size > limit:
        raise ValueError(f"{path} holds {size:,} bytes, more than the {limit:,} {why}")
    data = files.read_bytes(path)
    if len(data) > limit:  # it grew between the two looks
        raise ValueError(f"{path} holds {len(data):,} bytes, more than the {limit:,} {why}")
    return data


def _description(data: bytes, path: str, what: str) -> dict[str, Any]:
    """``model.json``, checked: a JSON object of a readable format whose encoding and parameters have the
    documented types (``format`` an integer, ``algorithm`` a string, ``parameters`` an object of JSON values
    with an integer ``seed``, ``classes`` and ``workers`` lists of distinct strings or integers).

    Raises
    ------
    InputError
        For a format this version does not read.
    ValueError
        For anything else.
    """
    try:
        document = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError(f"{MODEL_FILE} nests its values deeper than a saved model does") from None
    if not isinstance(document, dict):
        raise ValueError(f"{MODEL_FILE} is not a JSON object but a {type(document).__name__}")
    version = document.get("format")
    if isinstance(version, bool) or version not in READABLE_FORMATS:
        raise InputError(
            f"{what} {path!r}: the model is saved in format {str(version)[:40]!r}; this version of crowdspark "
            f"reads formats {list(READABLE_FORMATS)}. Refit the model (run once without {what})."
        )
    missing = [key for key in ("algorithm", "parameters", "classes", "workers") if key not in document]
    if missing:
        raise ValueError(f"{MODEL_FILE} has no {', '.join(missing)}")
    if not isinstance(document["algorithm"], str):
        raise ValueError(f"the algorithm in {MODEL_FILE} must be a string, but got {str(document['algorithm'])[:80]}")
    parameters = document["parameters"]
    if not isinstance(parameters, dict) or not all(_is_parameter(v) for v in parameters.values()):
        raise ValueError(f"the parameters in {MODEL_FILE} must be an object of numbers, strings, booleans and "
                         f"lists of them, but got {str(parameters)[:120]}")
    seed = parameters.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"the parameters in {MODEL_FILE} must hold an integer seed, but got {str(seed)[:40]!r}")
    document["classes"] = _names(document["classes"], "classes")
    document["workers"] = _names(document["workers"], "workers")
    if not document["classes"]:
        raise ValueError(f"{MODEL_FILE} lists no classes")
    return document


def _is_parameter(value: Any, nested: bool = False) -> bool:
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return not nested and isinstance(value, list) and all(_is_parameter(v, True) for v in value)


def _names(values: Any, what: str) -> tuple[str, ...]:
    """The ``classes`` or ``workers`` of a description as strings; each once."""
    if not isinstance(values, list) or not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in values):
        raise ValueError(f"the {what} in {MODEL_FILE} must be a list of strings, but got {str(values)[:120]}")
    names = tuple(str(v) for v in values)
    if len(set(names)) != len(names):
        seen: set[str] = set()
        repeated = next(n for n in names if n in seen or seen.add(n))
        raise ValueError(f"the {what} in {MODEL_FILE} list {repeated!r} more than once")
    return names


def array_budget(n_workers: int, n_classes: int, n_levels: int) -> int:
    """The most bytes of arrays one archive of a saved model with these sizes holds (what a reader allocates at
    most): 64 arrays of ``(K+1) (H+1)^2 (C+1)^3`` float64 values, two of ``(K+1)^2`` (mmsr's worker-by-worker
    tables) and 1 MiB (the archive's document and small values)."""
    k, h, c = n_workers + 1, n_levels + 1, n_classes + 1
    return 8 * (64 * k * h * h * c ** 3 + 2 * k * k) + 2 ** 20


def _budget(document: dict[str, Any]) -> int:
    levels = document["parameters"].get("n_levels", 1)
    levels = levels if isinstance(levels, int) and 1 <= levels <= MAX_LEVELS else 1
    return array_budget(len(document["workers"]), len(document["classes"]), levels)


def _npz_entries(data: bytes, name: str, budget: int) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` archive, each entry's size checked (from the zip directory, then its ``.npy``
    header) before it is inflated, and read without pickle.  All of them together are at most ``budget``
    bytes and :data:`MAX_INFLATION` times the archive's own size (plus 1 MiB).

    Raises
    ------
    ValueError
        Not an archive of plain numeric arrays, more than ``budget`` bytes of them, or a size in the zip
        directory that disagrees with the header.
    """
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise ValueError(f"{name} is not an .npz archive ({exc})") from None
    entries = archive.infolist()
    if len(entries) > MAX_ENTRIES:
        raise ValueError(f"{name} holds {len(entries):,} entries, more than the {MAX_ENTRIES} a saved model has")
    declared = sum(entry.file_size for entry in entries)
    if declared > budget:
        raise ValueError(f"{name} declares {declared:,} bytes of arrays, more than the {budget:,} its model's "
                         "workers, classes and levels can need")
    if declared > MAX_INFLATION * len(data) + 2**20:
        raise ValueError(f"{name} declares {declared:,} bytes of arrays in {len(data):,} bytes; a saved model's "
                         f"arrays are stored, not compressed more than {MAX_INFLATION}-fold")
    arrays: dict[str, np.ndarray] = {}
    for entry in entries:
        key = entry.filename[:-4] if entry.filename.endswith(".npy") else None
        if not key or key in arrays:
            raise ValueError(f"{name} holds the entry {entry.filename[:80]!r}; an .npz holds one <name>.npy per array")
        with archive.open(entry) as member:
            arrays[key] = _npy(member, entry.file_size, f"{name}:{entry.filename[:80]}")
    return arrays


def _npy(member: IO[bytes], size: int, where: str) -> np.ndarray:
    """One ``.npy`` entry of ``size`` bytes (from the zip directory): its header, checked, then its data."""
    version = np.lib.format.read_magic(member)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(member)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(member)
    else:
        raise ValueError(f"{where} is in .npy format {version}; saved models use 1.0 or 2.0")
    if dtype.kind not in NUMERIC_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise ValueError(f"{where} is an array of dtype {dtype}; a saved model holds plain numbers (an object "
                         "array would need pickle, which is never read)")
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if nbytes != size - member.tell():
        raise ValueError(f"{where}: its header says shape {shape[:8]} of {dtype} ({nbytes:,} bytes), the archive "
                         f"says {size - member.tell():,} bytes")
    raw = member.read(nbytes)
    if len(raw) != nbytes or member.read(1):
        raise ValueError(f"{where} does not hold the {nbytes:,} bytes its header says")
    return np.frombuffer(raw, dtype=dtype).reshape(shape, order="F" if fortran else "C").copy()


def _arrays(data: bytes, name: str, budget: int) -> dict[str, Any]:
    """A params archive of either format: a datatree (format 2) or plain ``numpy.savez`` arrays (format 1)."""
    entries = _npz_entries(data, name, budget)
    if DOCUMENT not in entries:
        return entries
    try:
        tree = tree_from_arrays(entries)
    except RecursionError:
        raise ValueError(f"{name}: its document nests deeper than a saved model does") from None
    if not isinstance(tree, dict):
        raise ValueError(f"{name} does not hold a dict of parameters")
    return tree


def load_saved_model(path: str, spark: Any = None, what: str = "--warm-start") -> SavedModel:
    """Read the saved model at ``path`` (a model folder, a run's output or a ``crowdspark.ml`` save).

    Nothing is trusted before it is checked: ``model.json`` is read only up to :data:`MAX_DESCRIPTION_BYTES`
    and checked (:func:`_description`); each archive's arrays are sized from its zip directory and ``.npy``
    headers against :func:`array_budget` of the description before anything is inflated, and read without
    pickle; then the values are checked against the model (:func:`check_saved_values`).

    Raises
    ------
    InputError
        If there is none, it cannot be read, its format is not one this version reads, or it holds what no
        fitted model holds.
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
        description = _read_bounded(files, _join(folder, MODEL_FILE), MAX_DESCRIPTION_BYTES,
                                    "a saved model's description may hold")
        document = _description(description, path, what)
        budget = _budget(document)
        why = "its model's workers, classes and levels can need"

        def archive(name: str) -> dict[str, Any]:
            return _arrays(_read_bounded(files, _join(folder, name), budget, why), name, budget)

        params = archive(PARAMS_FILE)
        init_stats = archive(INIT_STATS_FILE) if files.exists(_join(folder, INIT_STATS_FILE)) else None
        carried = archive(CARRIED_FILE) if files.exists(_join(folder, CARRIED_FILE)) else None
        saved = SavedModel(
            algorithm=document["algorithm"],
            parameters=dict(document["parameters"]),
            classes=document["classes"],
            workers=document["workers"],
            params=params,
            source=path,
            init_stats=init_stats,
            carried=carried,
        )
        check_saved_values(saved)
        return saved
    except InputError:
        raise
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, zlib.error,
            NotImplementedError) as exc:
        raise InputError(
            f"{what} {path!r}: the saved model in {folder!r} cannot be read ({str(exc)[:400]}). Point it at the "
            "output of a successful run, or refit."
        ) from exc


def check_saved_values(saved: SavedModel) -> None:
    """Refuse values no fitted model holds: an algorithm this version lacks or parameters it refuses; a
    non-numeric or non-finite value; and for the keys the model declares (:attr:`Model.param_domains`), a
    missing or unknown key, a shape that disagrees with the workers and classes, or a value outside its
    domain (a probability outside [0, 1], a distribution that does not sum to 1).

    Raises
    ------
    ValueError
    """
    from crowdspark.errors import ConfigError
    from crowdspark.models.registry import algorithm_names, build_model

    if saved.algorithm not in algorithm_names():
        raise ValueError(f"the algorithm {saved.algorithm[:80]!r} is not one of crowdspark's {algorithm_names()}")
    hyper = dict(saved.parameters)
    seed = hyper.pop("seed")
    try:
        model = build_model(saved.algorithm, hyper, len(saved.workers), len(saved.classes), seed)
    except (ConfigError, TypeError) as exc:
        raise ValueError(f"its parameters are not ones {saved.algorithm} accepts ({exc})") from None
    for section, values in (("params", saved.params), ("init_stats", saved.init_stats),
                            ("carried", saved.carried)):
        if values is not None:
            _check_leaves(values, section, set(model.param_domains) if section == "params" else frozenset())
    domains = model.param_domains
    if not domains:
        return
    unknown = sorted(set(saved.params) - set(domains))
    missing = sorted(set(domains) - set(saved.params))
    if unknown or missing:
        raise ValueError(f"params.npz of a {saved.algorithm} model holds {sorted(domains)}, this one "
                         f"{'lacks ' + str(missing) if missing else ''}{' and ' if unknown and missing else ''}"
                         f"{'has ' + str(unknown[:5]) if unknown else ''}")
    sizes = {"K": len(saved.workers), "C": len(saved.classes)}
    for key, (domain, axes) in domains.items():
        _check_domain(key, np.asarray(saved.params[key]), domain, axes, sizes)


def _check_leaves(value: Any, where: str, domains: set[str] | frozenset[str] = frozenset()) -> None:
    """Every leaf a string, ``None`` or a number, and a number finite unless it is an entry in ``domains`` (checked by its domain)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in domains:
                _check_numeric(item, f"{where}.{key}")
            else:
                _check_leaves(item, f"{where}.{key}")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_leaves(item, f"{where}[{i}]")
        return
    if value is None or isinstance(value, (bool, str)):
        return
    array = _check_numeric(value, where)
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise ValueError(f"{where} holds {_bad(array, ~np.isfinite(array))}; a fitted model's values are finite")


def _check_numeric(value: Any, where: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in NUMERIC_KINDS:
        raise ValueError(f"{where} is a {type(value).__name__} of dtype {array.dtype}, not a number")
    return array


def _bad(array: np.ndarray, wrong: np.ndarray) -> str:
    first = np.unravel_index(int(np.flatnonzero(wrong)[0]), array.shape) if array.ndim else ()
    return f"{array[first]!r} at {tuple(int(i) for i in first)}"


def _check_domain(key: str, array: np.ndarray, domain: str, axes: str, sizes: dict[str, int]) -> None:
    """``array`` (the exported ``key``) has the declared axes and lies in ``domain``."""
    shape = array.shape
    want = tuple(sizes.get(axis) for axis in axes)
    if len(shape) != len(axes) or any(n is not None and n != m for n, m in zip(want, shape)):
        expected = "(" + ", ".join(str(n) if n is not None else "*" for n in want) + ")"
        raise ValueError(f"params.npz's {key!r} has shape {shape[:8]}, its model's workers and classes make it "
                         f"{expected} (K = workers, C = classes)")
    if domain == "index":
        if array.dtype.kind not in "iu" or (array < 0).any():
            raise ValueError(f"params.npz's {key!r} must hold non-negative integers, but got {array.ravel()[:5]}")
        return
    values = array.astype(np.float64)
    finite = np.isfinite(values)
    allowed = finite | (np.isneginf(values) if domain == "log_simplex" else False)
    if not allowed.all():
        raise ValueError(f"params.npz's {key!r} holds {_bad(array, ~allowed)}; a fitted model's values are finite")
    low, high = _RANGES[domain]
    outside = (values < low) | (values > high)
    if outside.any():
        raise ValueError(f"params.npz's {key!r} must be {_MEANING[domain]}, but holds {_bad(array, outside)}")
    if domain in ("simplex", "log_simplex") and values.size:
        sums = np.exp(values).sum(axis=-1) if domain == "log_simplex" else values.sum(axis=-1)
        off = np.abs(sums - 1.0) > SUM_TOLERANCE
        if off.any():
            where = tuple(int(i) for i in np.unravel_index(int(np.flatnonzero(off)[0]), sums.shape))
            raise ValueError(f"params.npz's {key!r} must be {_MEANING[domain]}, but its row {where} sums to "
                             f"{float(sums[where]):.6g}")


_RANGES = {"real": (-np.inf, np.inf), "positive": (np.finfo(float).tiny, np.inf), "nonnegative": (0.0, np.inf),
           "probability": (0.0, 1.0), "simplex": (0.0, 1.0), "log_simplex": (-np.inf, 0.0)}
_MEANING = {"real": "finite", "positive": "positive", "nonnegative": "non-negative",
            "probability": "a probability (in [0, 1])", "simplex": "probabilities summing to 1 over its last axis",
            "log_simplex": "log-probabilities whose exponentials sum to 1 over its last axis"}


def worker_index_map(new_workers: tuple[str, ...], old_workers: tuple[str, ...]) -> np.ndarray:
    """For each worker of this run, its index in the previous run (``-1`` if unseen), shape (K,)."""
    import pandas as pd

    return pd.Index(old_workers).get_indexer(list(new_workers)).astype(np.int64)
