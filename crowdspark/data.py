"""Reading, validating and encoding labels and gold (the rules, and their pandas implementation).

Every id and label is read as a string (CSV without type inference; other formats cast with ``str``), so
``266`` in a CSV and ``266`` in a Parquet integer column are the same item, and the run does not depend on
a reader's type guesses.  The rules below are shared with the Spark reader (:mod:`crowdspark.spark_data`),
which computes the same counts with Spark and raises the same messages.

What is an error (``InputError``, naming the column, value and fix): missing columns; an unreadable or
empty path; empty input; null item/worker/label; a label outside the configured class set; fewer than two
classes; more than :data:`MAX_CLASSES` distinct labels; gold with missing columns, null values, an item
given two different truths, or a truth outside the class set.

What is accepted and counted in the run summary: duplicate (item, worker) pairs (every label is kept as an
independent label); gold rows repeated with the same truth (collapsed); gold items without any label (not
scored); classes of a configured class set that no label uses.
"""

from __future__ import annotations

import glob as _glob
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from crowdspark.config import GoldConfig, InputConfig
from crowdspark.errors import InputError

__all__ = [
    "MAX_CLASSES",
    "Encoding",
    "order_classes",
    "resolve_local_paths",
    "infer_format",
    "read_frame",
    "missing_columns_error",
    "decide_classes",
    "prepare_labels",
    "prepare_gold",
    "encode_rows",
]

MAX_CLASSES = 1000
_EXTENSIONS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "json"}


@dataclass(frozen=True)
class Encoding:
    """Dense integer codes of workers and classes.

    Attributes
    ----------
    workers : tuple of str, length K
        Worker id of each worker index (sorted).
    classes : tuple of str, length C
        Class of each class index; the order of every posterior column.
    """

    workers: tuple[str, ...]
    classes: tuple[str, ...]

    @property
    def n_workers(self) -> int:
        return len(self.workers)

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    @cached_property
    def _worker_index(self) -> pd.Index:
        return pd.Index(self.workers)

    @cached_property
    def _class_index(self) -> pd.Index:
        return pd.Index(self.classes)

    def worker_codes(self, values: np.ndarray) -> np.ndarray:
        """Worker index of each id (``-1`` for an unknown id), shape (m,)."""
        return self._worker_index.get_indexer(values).astype(np.int32)

    def class_codes(self, values: np.ndarray) -> np.ndarray:
        """Class index of each label (``-1`` for an unknown or missing label), shape (m,)."""
        return self._class_index.get_indexer(values).astype(np.int32)

    def __getstate__(self) -> dict:
        # ship ids only; the pandas indexes are rebuilt where they are used
        return {"workers": self.workers, "classes": self.classes}

    def __setstate__(self, state: dict) -> None:
        object.__setattr__(self, "workers", state["workers"])
        object.__setattr__(self, "classes", state["classes"])


def order_classes(values: list[str]) -> list[str]:
    """Numeric order when every value is a number, else string order."""
    try:
        return sorted(values, key=lambda v: (float(v), v))
    except ValueError:
        return sorted(values)


# --------------------------------------------------------------------------- paths and formats

_SCHEME_PREFIXES = ("file:",)


def is_local(path: str) -> bool:
    """Whether ``path`` is on the local filesystem (no URI scheme, or ``file:``)."""
    return "://" not in path or path.startswith(_SCHEME_PREFIXES)


def _strip_file_scheme(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def resolve_local_paths(path: str, what: str) -> list[str]:
    """Data files behind a local file, folder or glob (hidden and ``_``-prefixed files skipped).

    Raises
    ------
    InputError
        If nothing readable is there.
    """
    local = _strip_file_scheme(path)
    if any(ch in local for ch in "*?["):
        files = sorted(p for p in _glob.glob(local, recursive=True) if os.path.isfile(p))
    elif os.path.isdir(local):
        files = sorted(
            str(p)
            for p in Path(local).rglob("*")
            if p.is_file() and not any(part.startswith(("_", ".")) for part in p.relative_to(local).parts)
        )
    elif os.path.isfile(local):
        files = [local]
    else:
        raise InputError(f"cannot read {what}: path {path!r} does not exist. Check the path (--{what} PATH).")
    files = [f for f in files if not os.path.basename(f).startswith(("_", "."))]
    if not files:
        raise InputError(f"cannot read {what}: {path!r} matches no data file. Check the path (--{what} PATH).")
    unreadable = [f for f in files if not os.access(f, os.R_OK)]
    if unreadable:
        raise InputError(f"cannot read {what}: {unreadable[0]!r} is not readable (check its permissions).")
    return files


def infer_format(path: str, files: list[str] | None, what: str) -> str:
    """The format of ``path`` from its files' extensions (or its own name when files are unknown)."""
    names = files if files else [path]
    formats = set()
    for name in names:
        base = name[:-3] if name.endswith((".gz", ".bz2")) else name
        fmt = _EXTENSIONS.get(os.path.splitext(base)[1].lower())
        formats.add(fmt)
    if len(formats) == 1 and None not in formats:
        return formats.pop()
    found = sorted(str(f) for f in formats)
    raise InputError(
        f"cannot infer the format of {what} at {path!r} (found {', '.join(found)}); "
        f"set it with --set {'input' if what == 'labels' else 'gold'}.format=csv|parquet|json"
    )


def read_frame(path: str, fmt: str, what: str) -> pd.DataFrame:
    """Read a local file, folder or glob with pandas; every column kept as read (CSV: all strings)."""
    files = resolve_local_paths(path, what)
    if fmt == "auto":
        fmt = infer_format(path, files, what)
    try:
        if fmt == "csv":
            parts = [pd.read_csv(f, dtype=str, keep_default_na=False, na_values=[""]) for f in files]
        elif fmt == "parquet":
            parts = [pd.read_parquet(f) for f in files]
        else:
            parts = [pd.read_json(f, lines=True, dtype=False) for f in files]
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {what} at {path!r} as {fmt}: {exc}") from exc
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    return frame


# --------------------------------------------------------------------------- shared rules

def missing_columns_error(what: str, source: str, missing: list[str], present: list[str], keys: list[str]) -> InputError:
    """The message for columns that are not there."""
    hint = ", ".join(f"{k}=<column>" for k in keys)
    return InputError(
        f"{what} at {source!r} has no column(s) {missing}; present columns: {present}. "
        f"Name the right columns with --set {hint} (crowd-kit data: --set input.item=task)."
    )


def null_error(what: str, source: str, column: str, count: int) -> InputError:
    return InputError(
        f"{what} at {source!r}: column {column!r} has {count} null value(s); every row needs an item, "
        f"a worker and a label. Remove or fill these rows before running."
    )


def decide_classes(observed: list[str], configured: tuple[str, ...], source: str, label_column: str) -> list[str]:
    """The class set of a run from the distinct labels and the configuration.

    Raises
    ------
    InputError
        For labels outside a configured class set, too many distinct labels, or fewer than two classes.
    """
    if configured:
        outside = sorted(set(observed) - set(configured))
        if outside:
            raise InputError(
                f"labels at {source!r}: column {label_column!r} has value(s) {outside[:10]} outside the "
                f"configured classes {list(configured)}. Add them to input.classes or fix the data."
            )
        classes = list(configured)
    else:
        if len(observed) > MAX_CLASSES:
            raise InputError(
                f"labels at {source!r}: column {label_column!r} has {len(observed)} distinct values "
                f"(more than {MAX_CLASSES}); is it the label column? Set --set input.label=<column>."
            )
        classes = order_classes(list(observed))
    if len(classes) < 2:
        raise InputError(
            f"labels at {source!r} have a single class {classes}; aggregation needs at least two classes. "
            "If the task has other classes, list them all with --set input.classes='[\"a\", \"b\"]'."
        )
    return classes


def gold_outside_error(source: str, column: str, values: list[str], classes: list[str]) -> InputError:
    return InputError(
        f"gold at {source!r}: column {column!r} has value(s) {values[:10]} outside the class set {classes}. "
        "Fix the gold file or add the classes to input.classes."
    )


def gold_conflict_error(source: str, item: str, n: int) -> InputError:
    return InputError(
        f"gold at {source!r}: item {item!r} has {n} different truth values; keep one row per item."
    )


def _as_str(series: pd.Series) -> pd.Series:
    return series if series.dtype == object and series.map(type).eq(str).all() else series.astype(str)


@dataclass(frozen=True)
class Labels:
    """Validated labels (pandas): string columns ``item``, ``worker``, ``label`` and the encoding."""

    frame: pd.DataFrame
    encoding: Encoding
    source: str


def prepare_labels(frame: pd.DataFrame, cfg: InputConfig, source: str) -> Labels:
    """Validate a labels frame and build its encoding.

    Parameters
    ----------
    frame : DataFrame
        As read; must hold the columns named by ``cfg``.
    cfg : InputConfig
    source : str
        Where it came from, for messages.
    """
    cols = {"item": cfg.item, "worker": cfg.worker, "label": cfg.label}
    missing = [c for c in cols.values() if c not in frame.columns]
    if missing:
        raise missing_columns_error(
            "labels", source, missing, [str(c) for c in frame.columns], [f"input.{k}" for k in cols]
        )
    if len(frame) == 0:
        raise InputError(f"labels at {source!r} have no rows; there is nothing to aggregate.")
    for role, column in cols.items():
        n_null = int(frame[column].isna().sum())
        if n_null:
            raise null_error("labels", source, column, n_null)
    out = pd.DataFrame({role: _as_str(frame[column]).to_numpy(dtype=object) for role, column in cols.items()})
    classes = decide_classes(sorted(out["label"].unique()), cfg.classes, source, cfg.label)
    workers = tuple(sorted(out["worker"].unique()))
    return Labels(frame=out, encoding=Encoding(workers=workers, classes=tuple(classes)), source=source)


@dataclass(frozen=True)
class Gold:
    """Validated gold (pandas): string columns ``item``, ``truth``, one row per item."""

    frame: pd.DataFrame
    source: str
    repeated_rows: int


def prepare_gold(frame: pd.DataFrame, cfg: GoldConfig, classes: list[str], source: str) -> Gold:
    """Validate a gold frame against the class set."""
    cols = {"item": cfg.item, "truth": cfg.truth}
    missing = [c for c in cols.values() if c not in frame.columns]
    if missing:
        raise missing_columns_error(
            "gold", source, missing, [str(c) for c in frame.columns], [f"gold.{k}" for k in cols]
        )
    for column in cols.values():
        n_null = int(frame[column].isna().sum())
        if n_null:
            raise InputError(
                f"gold at {source!r}: column {column!r} has {n_null} null value(s); remove these rows."
            )
    out = pd.DataFrame({role: _as_str(frame[column]).to_numpy(dtype=object) for role, column in cols.items()})
    outside = sorted(set(out["truth"].unique()) - set(classes))
    if outside:
        raise gold_outside_error(source, cfg.truth, outside, list(classes))
    distinct = out.drop_duplicates()
    per_item = distinct.groupby("item")["truth"].nunique()
    conflicts = per_item[per_item > 1]
    if len(conflicts):
        raise gold_conflict_error(source, str(conflicts.index[0]), int(conflicts.iloc[0]))
    return Gold(frame=distinct.reset_index(drop=True), source=source, repeated_rows=len(out) - len(distinct))


def encode_rows(
    item: np.ndarray, worker: np.ndarray, label: np.ndarray, truth: np.ndarray | None, encoding: Encoding
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Encode label rows for :func:`crowdspark.block.build_blocks`.

    Parameters
    ----------
    item, worker, label : ndarray of str, shape (m,)
    truth : ndarray of str or None, shape (m,)
        The row's item's gold label (``None``/NaN where there is none).

    Returns
    -------
    item : ndarray of object, shape (m,)
    worker_code, label_code : ndarray of int32, shape (m,)
    truth_code : ndarray of int32 (``-1`` = no gold), shape (m,), or None
    """
    worker_code = encoding.worker_codes(worker)
    label_code = encoding.class_codes(label)
    if (worker_code < 0).any() or (label_code < 0).any():
        bad = worker[worker_code < 0][:1].tolist() + label[label_code < 0][:1].tolist()
        raise InputError(f"internal encoding error: value(s) {bad} are not in the run's encoding")
    truth_code = None if truth is None else encoding.class_codes(truth)
    return np.asarray(item, dtype=object), worker_code, label_code, truth_code
