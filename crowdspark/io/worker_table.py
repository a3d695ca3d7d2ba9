"""Worker tables that start a fit: each listed worker's confusion matrix or accuracy.

A worker table is the ``workers/`` table of a previous run, or one a user writes (CSV, Parquet or JSON lines):
a ``worker`` column and a ``confusion`` column (C x C, row = true class, column = given label; counts or
probabilities, each row is normalized; a JSON string in CSV) and/or an ``accuracy`` column (the share of
right labels, in [0, 1]; the rest spread evenly over the other classes).  Other columns are ignored.
:func:`read_worker_table` reads it from a run's output folder (its ``summary.json`` gives the class order),
that folder's ``workers/``, or any file, folder or glob; :func:`worker_table_from_frame` checks a pandas frame
(the pandas API's ``initial_error``).  The fit starts the workers it lists from their matrices and the others
as usual, by the warm-start path (:class:`crowdspark.engine.loop.WarmStart` with ``workers_only``).
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from crowdspark.errors import IncompatibleModelError, InputError
from crowdspark.io.files import files_for
from crowdspark.io.paths import infer_format, is_local, resolve_local_paths
from crowdspark.models.common import one_coin_confusion

__all__ = ["WorkerTable", "read_worker_table", "worker_table_from_frame"]

#: the option of the command line that names a worker table
WHAT = "--initial-workers"
#: what a run whose table does not fit can do
_OR_COLD = (f"run without {WHAT}, or set nightly.on_incompatible = \"cold\" to start such runs as usual "
            "automatically")


@dataclass(frozen=True)
class WorkerTable:
    """Starting matrices of some workers.

    Attributes
    ----------
    workers : tuple of str, length K'
    confusion : ndarray of float64, shape (K', C, C), or None
        Row-normalized; NaN for a worker given by its accuracy only.
    accuracy : ndarray of float64, shape (K',), or None
        NaN where not given.
    classes : tuple of str, optional
        The class order of ``confusion`` when the table says it (a run's ``summary.json``, the labels of a
        crowd-kit error frame); a run of the same classes in another order reads the matrices in its own.
    source : str
    """

    workers: tuple[str, ...]
    confusion: np.ndarray | None
    accuracy: np.ndarray | None
    classes: tuple[str, ...] | None = None
    source: str = ""

    def matrices(self, classes: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Every listed worker's confusion (K', C, C) and accuracy (K',) in a run with ``classes``.

        A worker given by its accuracy only gets the one-coin matrix (:func:`crowdspark.models.common.one_coin_confusion`); a worker
        given by its confusion only gets the mean of its diagonal as accuracy.

        Raises
        ------
        IncompatibleModelError
            When the table's classes (or its matrices' size) are not the run's.
        """
        n_classes = len(classes)
        own = self.confusion
        if self.classes is not None:
            if sorted(self.classes) != sorted(classes):
                raise IncompatibleModelError(
                    f"{WHAT} {self.source!r} was written for the classes {list(self.classes)}, this run has "
                    f"{list(classes)}; start from a table of the same classes, {_OR_COLD}")
            if own is not None:  # the table's class order -> the run's
                order = [list(self.classes).index(c) for c in classes]
                own = own[:, order][:, :, order]
        if own is not None and own.shape[1] != n_classes:
            raise IncompatibleModelError(
                f"{WHAT} {self.source!r} holds {own.shape[1]} x {own.shape[1]} confusion matrices, this run has "
                f"{n_classes} classes {list(classes)}; {_OR_COLD}")
        k = len(self.workers)
        accuracy = self.accuracy if self.accuracy is not None else np.full(k, np.nan)
        confusion = own if own is not None else np.full((k, n_classes, n_classes), np.nan)
        missing = np.isnan(confusion).any(axis=(1, 2))
        confusion = confusion.copy()
        confusion[missing] = one_coin_confusion(accuracy[missing], n_classes)
        accuracy = np.where(np.isnan(accuracy), np.einsum("ktt->k", confusion) / n_classes, accuracy)
        return confusion, accuracy


def read_worker_table(path: str, spark: Any = None) -> WorkerTable:
    """The worker table at ``path``: a run's output folder (its ``workers/``, classes from its
    ``summary.json``), a ``workers/`` folder of a run, or any CSV, Parquet or JSON-lines file, folder or glob.

    Raises
    ------
    InputError
        When nothing is there, it cannot be read, or it is not a worker table.
    """
    files = files_for(path, spark, WHAT)
    table_path, summary = path, None
    if files.exists(_join(path, "summary.json")) and files.exists(_join(path, "workers")):
        table_path, summary = _join(path, "workers"), _join(path, "summary.json")
    elif posixpath.basename(path.rstrip("/")) == "workers":
        parent = posixpath.dirname(path.rstrip("/"))
        if files.exists(_join(parent, "summary.json")):
            summary = _join(parent, "summary.json")
    elif not files.exists(path) and is_local(path) and not any(ch in path for ch in "*?["):
        raise InputError(f"{WHAT} {path!r} does not exist; give a run's output folder, its workers/ folder, or a "
                         "CSV, Parquet or JSON-lines table with the columns worker and confusion or accuracy")
    classes = None
    if summary is not None:
        try:
            classes = tuple(str(c) for c in json.loads(files.read_bytes(summary).decode("utf-8"))["classes"])
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            raise InputError(f"{WHAT} {path!r}: cannot read the classes of its {summary!r} "
                             f"({type(exc).__name__}: {str(exc)[:200]})") from None
    frame = _read_local(table_path) if is_local(table_path) else _read_spark(spark, table_path)
    return worker_table_from_frame(frame, path, classes)


def _join(folder: str, name: str) -> str:
    return f"{folder.rstrip('/')}/{name}"


def _read_local(path: str) -> pd.DataFrame:
    names = resolve_local_paths(path, WHAT)
    fmt = infer_format(path, names, WHAT)
    parts = []
    for name in names:
        try:
            if fmt == "parquet":
                parts.append(pd.read_parquet(name))
            elif fmt == "csv":
                parts.append(pd.read_csv(name, dtype={"worker": str}, keep_default_na=False, na_values=[""]))
            else:
                parts.append(pd.read_json(name, lines=True, dtype={"worker": str}))
        except (OSError, ValueError) as exc:
            raise InputError(f"{WHAT} {path!r}: {os.path.basename(name)!r} is not a readable {fmt} file ({exc})") from exc
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def _read_spark(spark: Any, path: str) -> pd.DataFrame:
    fmt = infer_format(path, None, WHAT)
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true")
    try:
        return reader.load(path).toPandas()
    except Exception as exc:  # noqa: BLE001 - any read failure of a user's table is bad input
        raise InputError(f"{WHAT} {path!r}: cannot read it as {fmt} ({exc})") from exc


def worker_table_from_frame(frame: pd.DataFrame, source: str = "<DataFrame>",
                            classes: tuple[str, ...] | None = None) -> WorkerTable:
    """Check a worker table and bring its columns to arrays.

    Raises
    ------
    InputError
        A missing ``worker`` column, neither ``confusion`` nor ``accuracy``, a null or repeated worker, a row
        with neither value, a matrix that is not C x C of non-negative numbers with positive row sums, matrices
        of different sizes, or an accuracy outside [0, 1]; the message names the column, the worker and the
        value.
    """
    columns = list(frame.columns)
    if "worker" not in columns or not {"confusion", "accuracy"} & set(columns):
        raise InputError(f"{WHAT} {source!r} needs the columns worker and confusion or accuracy, but has "
                         f"{columns}; write a run's workers/ table, or a table with those columns")
    workers = frame["worker"]
    if workers.isna().any():
        raise InputError(f"{WHAT} {source!r}: {int(workers.isna().sum())} row(s) have no worker; give every row one")
    workers = workers.map(_worker_text)
    repeated = workers[workers.duplicated()]
    if len(repeated):
        raise InputError(f"{WHAT} {source!r}: worker {repeated.iloc[0]!r} is listed more than once; keep one row "
                         "per worker")
    confusion = _confusions(frame["confusion"], workers, source) if "confusion" in columns else None
    accuracy = _accuracies(frame["accuracy"], workers, source) if "accuracy" in columns else None
    given = np.zeros(len(frame), dtype=bool)
    if confusion is not None:
        given |= ~np.isnan(confusion).any(axis=(1, 2))
    if accuracy is not None:
        given |= ~np.isnan(accuracy)
    if not given.all():
        raise InputError(f"{WHAT} {source!r}: worker {workers[~given].iloc[0]!r} has neither a confusion matrix nor "
                         "an accuracy; give one, or leave the worker out (it then starts as usual)")
    return WorkerTable(tuple(workers), confusion, accuracy, classes, source)


def _worker_text(value: Any) -> str:
    """A worker id as the readers write it: text as it is, an integer in decimal."""
    if isinstance(value, (bool, np.bool_)) or isinstance(value, (float, np.floating)) and not float(value).is_integer():
        raise InputError(f"{WHAT}: worker id {value!r} is not text or an integer; write the worker column as text")
    if isinstance(value, (int, np.integer, float, np.floating)):
        return str(int(value))
    return str(value)


def _confusions(column: pd.Series, workers: pd.Series, source: str) -> np.ndarray | None:
    """(K', C, C) row-normalized matrices, NaN for rows without one; ``None`` when no row has one."""
    matrices, size = [], None
    for worker, value in zip(workers, column):
        if value is None or isinstance(value, float) and np.isnan(value):
            matrices.append(None)
            continue
        try:
            matrix = np.array(json.loads(value) if isinstance(value, str) else [list(row) for row in value],
                              dtype=np.float64)
        except (TypeError, ValueError):
            matrix = None
        bad = matrix is None or matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] < 1
        if not bad:
            bad = not np.isfinite(matrix).all() or (matrix < 0).any() or (matrix.sum(axis=1) <= 0).any()
        if bad:
            raise InputError(f"{WHAT} {source!r}: the confusion of worker {worker!r} must be a C x C matrix of "
                             f"non-negative numbers whose rows have positive sums (row = true class), but got "
                             f"{str(value)[:200]}")
        if size is not None and matrix.shape[0] != size:
            raise InputError(f"{WHAT} {source!r}: the confusion of worker {worker!r} is {matrix.shape[0]} x "
                             f"{matrix.shape[0]}, other workers' are {size} x {size}; give every worker the run's C x C")
        size = matrix.shape[0]
        matrices.append(matrix / matrix.sum(axis=1, keepdims=True))
    if size is None:
        return None
    return np.stack([m if m is not None else np.full((size, size), np.nan) for m in matrices])


def _accuracies(column: pd.Series, workers: pd.Series, source: str) -> np.ndarray:
    values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
    bad = (~np.isnan(values) & ((values < 0) | (values > 1))) | (np.isnan(values) & column.notna().to_numpy())
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise InputError(f"{WHAT} {source!r}: the accuracy of worker {workers.iloc[j]!r} must be a number in [0, 1], "
                         f"but got {column.iloc[j]!r}")
    return values
