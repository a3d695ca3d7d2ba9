"""Reading, validating and encoding labels and gold (the rules, and their pandas implementation).

Every id and label is a string, the same whichever reader ran: CSV and JSON lines are read as the text
written in the file (a CSV record is one line; quoting is RFC 4180), typed columns (Parquet, frames passed
in) by the rules of :mod:`crowdspark.cells` (``266`` and ``266.0`` in a Parquet column are the item
``"266"``, booleans are ``"true"``/``"false"``).  The rules below are shared with the Spark reader
(:mod:`crowdspark.spark_data`), which computes the same counts with Spark and raises the same messages.

What is an error (``InputError``, naming the column, value and fix): missing or repeated columns; an
unreadable or empty path; CSV files of one input with different headers, a CSV row with more or fewer
fields than its header, a quoted value spanning lines, broken quoting; a JSON line that is not an object;
an id or label without canonical text (a fractional float, a date ...); empty input; null
item/worker/label; a label outside the configured class set; fewer than two classes; more than
:data:`MAX_CLASSES` distinct labels; gold with missing columns, null values, an item given two different
truths, or a truth outside the class set.

What is accepted and counted in the run summary: duplicate (item, worker) pairs (every label is kept as an
independent label); gold rows repeated with the same truth (collapsed); gold items without any label (not
scored; a warning when no gold item has a label); classes of a configured class set that no label uses.
"""

from __future__ import annotations

import glob as _glob
import os
from operator import itemgetter, methodcaller
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from crowdspark.cells import canonical_values
from crowdspark.config import GoldConfig, InputConfig
from crowdspark.errors import InputError

__all__ = [
    "MAX_CLASSES",
    "Encoding",
    "order_classes",
    "resolve_local_paths",
    "infer_format",
    "read_frame",
    "read_csv_file",
    "read_json_file",
    "missing_columns_error",
    "duplicate_columns_error",
    "check_columns",
    "csv_row_error",
    "csv_quote_error",
    "csv_header_error",
    "json_line_error",
    "canonical_frame",
    "gold_unmatched_warning",
    "gold_unmatched",
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
    """Read a local file, folder or glob with the pandas reader.

    CSV and JSON lines are read as text (:func:`read_csv_file`, :func:`read_json_file`); Parquet keeps its
    column types (as ``pd.ArrowDtype`` columns) for :func:`canonical_frame`.  The files of one CSV input must
    share one header.

    Raises
    ------
    InputError
        For an unreadable path, a file that is not valid in its format, or CSV files with different headers.
    """
    files = resolve_local_paths(path, what)
    if fmt == "auto":
        fmt = infer_format(path, files, what)
    readers = {"csv": read_csv_file, "parquet": _read_parquet_file, "json": read_json_file}
    parts = [(name, readers[fmt](name, what, path)) for name in files]
    parts = [(name, part) for name, part in parts if part is not None]
    if fmt == "csv":
        _check_same_header(parts, what, path)
    if not parts:
        return pd.DataFrame()
    frames = [part for _, part in parts]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def _open_text(name: str):
    """A local file as text (UTF-8, a leading byte-order mark dropped, line ends untranslated); ``.gz`` and
    ``.bz2`` files are decompressed."""
    import bz2
    import gzip

    opener = gzip.open if name.endswith(".gz") else bz2.open if name.endswith(".bz2") else open
    return opener(name, "rt", encoding="utf-8-sig", newline="")


def read_csv_file(name: str, what: str, source: str) -> pd.DataFrame | None:
    """One CSV file as text, as Spark reads CSV (RFC 4180 quoting, one record per line).

    Every cell is the string between the commas, unquoted (``""`` inside quotes is one quote); an empty
    cell, quoted or not, is null.  ``None`` for an empty file.

    Raises
    ------
    InputError
        A row with more or fewer fields than the header, a quoted value that spans several lines, text
        after a closing quote, a quote that is never closed, a header naming a column twice, a file that is
        not UTF-8.
    """
    import csv

    try:
        with _open_text(name) as handle:
            reader = csv.reader(handle, strict=True)
            rows = list(reader)
    except csv.Error as exc:
        if "field larger than field limit" in str(exc):
            raise InputError(
                f"{what} at {source!r}: CSV file {name!r}, line {reader.line_num}: a field is longer than "
                f"{csv.field_size_limit()} characters; shorten it, or run on Spark (engine.small_input_bytes=0)."
            ) from None
        raise csv_quote_error(what, source, name, f"line {reader.line_num}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} at {source!r}: file {name!r} is not UTF-8 text ({exc}).") from None
    except OSError as exc:
        raise InputError(f"cannot read {what} at {source!r}: {exc}") from exc
    records = [row for row in rows if row]  # blank lines are skipped
    if not records:
        return None
    header, body = records[0], records[1:]
    _check_unique_header(header, what, source, name)
    # one physical line per row unless a quoted value spans lines
    if reader.line_num != len(rows) or set(map(len, body)) - {len(header)}:
        raise _csv_record_error(name, len(header), what, source)
    data = {}
    for index in range(len(header)):
        cells = np.fromiter(map(itemgetter(index), body), dtype=object, count=len(body))
        cells[cells == ""] = None
        data[index] = cells
    frame = pd.DataFrame(data, index=pd.RangeIndex(len(body)))
    frame.columns = header
    return frame


def _csv_record_error(name: str, n_fields: int, what: str, source: str) -> InputError:
    """The error of the first record of a CSV file that spans lines or has another number of fields than
    its header (``n_fields``), with its line number."""
    import csv

    with _open_text(name) as handle:
        reader = csv.reader(handle, strict=True)
        line, header_seen = 0, False
        for row in reader:
            if reader.line_num != line + 1:
                return csv_row_error(what, source, name, f"line {line + 1}: a quoted value spans several lines")
            line = reader.line_num
            if row and header_seen and len(row) != n_fields:
                return csv_row_error(what, source, name, f"line {line}: {len(row)} fields where the header has {n_fields}")
            header_seen = header_seen or bool(row)
    return csv_row_error(what, source, name, "a record does not fit the header")


def read_json_file(name: str, what: str, source: str) -> pd.DataFrame | None:
    """One JSON-lines file as text, as Spark reads it with ``primitivesAsString``.

    A string is its text; a number keeps the text written in the file (``266.0`` stays ``"266.0"``);
    ``true``/``false`` are booleans (whose canonical text is the same words); ``null`` and absent keys are
    null; objects and arrays stay Python objects (refused in id and label columns).  Blank lines are
    skipped.  ``None`` for a file without records.

    Raises
    ------
    InputError
        For a line that is not a JSON object.
    """
    import json

    decoder = json.JSONDecoder(parse_int=str, parse_float=str, parse_constant=str)
    records = []
    try:
        with _open_text(name) as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = decoder.decode(line)
                except ValueError as exc:
                    raise json_line_error(what, source, name, f"line {number}: {exc}") from None
                if not isinstance(record, dict):
                    raise json_line_error(what, source, name, f"line {number} holds a {type(record).__name__}")
                records.append(record)
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} at {source!r}: file {name!r} is not UTF-8 text ({exc}).") from None
    except OSError as exc:
        raise InputError(f"cannot read {what} at {source!r}: {exc}") from exc
    if not records:
        return None
    keys = dict.fromkeys(key for record in records for key in record)
    return pd.DataFrame({
        key: np.fromiter(map(methodcaller("get", key), records), dtype=object, count=len(records)) for key in keys
    })


def _read_parquet_file(name: str, what: str, source: str) -> pd.DataFrame:
    """One Parquet file with its Arrow types, every column a column (pandas index metadata ignored, as
    Spark does)."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(name)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {what} at {source!r}: file {name!r} is not readable as Parquet: {exc}") from exc
    return table.to_pandas(types_mapper=pd.ArrowDtype, ignore_metadata=True)


def _check_unique_header(header: list[str], what: str, source: str, name: str) -> None:
    seen: dict[str, int] = {}
    for column in header:
        seen[column.lower()] = seen.get(column.lower(), 0) + 1
    repeated = [c for c in dict.fromkeys(header) if seen[c.lower()] > 1]
    if repeated:
        raise duplicate_columns_error(what, source, repeated, f"CSV file {name!r}: its header")


def _check_same_header(parts: list[tuple[str, pd.DataFrame]], what: str, source: str) -> None:
    """Every CSV file of one input has the first file's header (names and order)."""
    if not parts:
        return
    first, reference = parts[0][0], list(parts[0][1].columns)
    for name, part in parts[1:]:
        if list(part.columns) != reference:
            raise csv_header_error(what, source, name, list(part.columns), f"file {first!r}", reference)


# --------------------------------------------------------------------------- shared rules

def missing_columns_error(
    what: str, source: str, missing: list[str], present: list[str], keys: list[str], hint: str = ""
) -> InputError:
    """The message for columns that are not there."""
    keys_hint = ", ".join(f"{k}=<column>" for k in keys)
    return InputError(
        f"{what} at {source!r} has no column(s) {missing}; present columns: {present}. {hint}"
        f"Name the right columns with --set {keys_hint} (crowd-kit data: --set input.item=task)."
    )


def duplicate_columns_error(what: str, source: str, repeated: list[str], where: str = "") -> InputError:
    """The message for a frame or a CSV header that names a column more than once."""
    return InputError(
        f"{what} at {source!r}: {where or 'the data'} has columns named {repeated} more than once; "
        "give every column its own name."
    )


def check_columns(present: list, columns: dict[str, str], what: str, source: str, prefix: str) -> None:
    """The configured ``columns`` (role -> name) are each present once in ``present``.

    Raises
    ------
    InputError
        Naming the missing columns and the present ones, or the repeated ones.
    """
    missing = [c for c in columns.values() if c not in present]
    if missing:
        raise missing_columns_error(
            what, source, missing, [str(c) for c in present], [f"{prefix}.{k}" for k in columns]
        )
    repeated = [c for c in dict.fromkeys(columns.values()) if list(present).count(c) > 1]
    if repeated:
        raise duplicate_columns_error(what, source, repeated)


_CSV_FIX = (
    "Every row must have as many fields as the header, a value with a comma or a quote must be quoted "
    "(\"a, \"\"b\"\"\" for a, \"b\"), and values must not hold line breaks: both readers read CSV one line "
    "per record."
)


def _file(kind: str, name: str | None) -> str:
    return f"{kind} file {name!r}" if name else f"a {kind} file"


def csv_row_error(what: str, source: str, name: str | None, detail: str) -> InputError:
    """The message for a CSV record that does not fit the header (field count or a line break)."""
    return InputError(f"{what} at {source!r}: {_file('CSV', name)}, {detail}. {_CSV_FIX}")


def csv_quote_error(what: str, source: str, name: str | None, detail: str) -> InputError:
    """The message for a CSV value whose quoting is broken (text after a closing quote, an unclosed quote)."""
    return InputError(
        f"{what} at {source!r}: {_file('CSV', name)} has a value with broken quoting ({detail}): text after a "
        f"closing quote, or a quote that is never closed. {_CSV_FIX}"
    )


def csv_header_error(
    what: str, source: str, name: str, header: list[str], reference: str, expected: list[str]
) -> InputError:
    """The message for a CSV file whose header is not that of the input's other files."""
    return InputError(
        f"{what} at {source!r}: CSV file {name!r} has the header {header} but {reference} has {expected}; "
        "the files of one input are read with one header, so they must all have the same column names in "
        "the same order. Rewrite the file with that header (or give it as a separate input)."
    )


def json_line_error(what: str, source: str, name: str | None, detail: str) -> InputError:
    """The message for a JSON-lines record that is not one JSON object."""
    return InputError(
        f"{what} at {source!r}: {_file('JSON', name)}, {detail}; every line must hold one JSON object "
        "(JSON lines, not a JSON array)."
    )


def canonical_frame(frame: pd.DataFrame, columns: dict[str, str], what: str, source: str) -> pd.DataFrame:
    """The canonical text of the configured columns (see :mod:`crowdspark.cells`).

    Parameters
    ----------
    frame : DataFrame
        As read; holds each of ``columns`` once (:func:`check_columns`).
    columns : dict
        Role (output column) -> column of ``frame``.

    Returns
    -------
    DataFrame
        One object column of ``str`` (``None`` where null) per role.
    """
    return pd.DataFrame({role: canonical_values(frame[column], what, source, column) for role, column in columns.items()})


def gold_unmatched_warning(
    source: str, n_gold: int, n_items: int, gold_example: str | None, label_example: str | None
) -> str:
    """The warning for gold that names none of the labelled items (no metrics can be computed)."""
    return (
        f"none of the {n_gold} gold items at {source!r} has a label among the {n_items} labelled items, so "
        f"no metrics are computed; ids are compared as text: e.g. gold item {gold_example!r}, labelled item "
        f"{label_example!r}. Write the ids the same way in both inputs (266.0 and 266 are different ids in "
        "a CSV or JSON file; a float Parquet column holding whole numbers is read as integers)."
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


def _check_frame(frame: object, what: str, source: str) -> None:
    if not isinstance(frame, pd.DataFrame):
        raise InputError(f"{what} at {source!r} must be a pandas DataFrame, but got a {type(frame).__name__}.")


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
    _check_frame(frame, "labels", source)
    check_columns(list(frame.columns), cols, "labels", source, "input")
    if len(frame) == 0:
        raise InputError(f"labels at {source!r} have no rows; there is nothing to aggregate.")
    out = canonical_frame(frame, cols, "labels", source)
    for role, column in cols.items():
        n_null = int(out[role].isna().sum())
        if n_null:
            raise null_error("labels", source, column, n_null)
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
    _check_frame(frame, "gold", source)
    check_columns(list(frame.columns), cols, "gold", source, "gold")
    out = canonical_frame(frame, cols, "gold", source)
    for role, column in cols.items():
        n_null = int(out[role].isna().sum())
        if n_null:
            raise InputError(f"gold at {source!r}: column {column!r} has {n_null} null value(s); remove these rows.")
    outside = sorted(set(out["truth"].unique()) - set(classes))
    if outside:
        raise gold_outside_error(source, cfg.truth, outside, list(classes))
    distinct = out.drop_duplicates()
    per_item = distinct.groupby("item")["truth"].nunique()
    conflicts = per_item[per_item > 1]
    if len(conflicts):
        raise gold_conflict_error(source, str(conflicts.index[0]), int(conflicts.iloc[0]))
    return Gold(frame=distinct.reset_index(drop=True), source=source, repeated_rows=len(out) - len(distinct))


def gold_unmatched(labels: Labels, gold: Gold) -> str | None:
    """The warning of :func:`gold_unmatched_warning` when no gold item has a label, else ``None``."""
    items = labels.frame["item"]
    if not len(gold.frame) or gold.frame["item"].isin(set(items)).any():
        return None
    return gold_unmatched_warning(gold.source, len(gold.frame), items.nunique(), min(gold.frame["item"]), min(items))


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
