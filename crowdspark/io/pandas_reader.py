"""The pandas reader: local files, and frames passed in, to validated string columns and their encoding.

It applies the rules of :mod:`crowdspark.io.rules`: CSV and JSON lines are read as text with Python's own
parsers (strict RFC 4180 quoting, one record per line), Parquet with its Arrow types made canonical by
:mod:`crowdspark.io.cells`.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import partial
from operator import itemgetter, methodcaller

import numpy as np
import pandas as pd
import pyarrow as pa

from crowdspark.config import GoldConfig, InputConfig
from crowdspark.errors import InputError
from crowdspark.io.cells import canonical_text, canonical_values
from crowdspark.io.paths import infer_format, resolve_local_paths
from crowdspark.io.rules import (
    Encoding,
    check_columns,
    compressed_file_error,
    csv_header_error,
    csv_quote_error,
    csv_row_error,
    decide_classes,
    duplicate_columns_error,
    empty_labels_error,
    gold_conflict_error,
    gold_empty_warning,
    gold_outside_error,
    gold_unmatched_warning,
    json_line_error,
    null_error,
    sorted_codes,
)

__all__ = [
    "read_frame",
    "read_csv_file",
    "read_json_file",
    "canonical_frame",
    "Labels",
    "prepare_labels",
    "Gold",
    "prepare_gold",
    "gold_unmatched",
    "encode_rows",
    "check_encoded",
]


def read_frame(path: str, fmt: str, what: str, dictionary: tuple[str, ...] = ()) -> pd.DataFrame:
    """Read a local file, folder or glob with the pandas reader.

    CSV and JSON lines are read as text (:func:`read_csv_file`, :func:`read_json_file`); Parquet keeps its
    column types (as ``pd.ArrowDtype`` columns) for :func:`canonical_frame`.  The files of one CSV input must
    share one header.

    Parameters
    ----------
    dictionary : tuple of str
        Columns read as categoricals where the reader can (no string per cell; :func:`prepare_labels` encodes
        them as they are): Parquet string columns from the files' dictionaries, the columns of CSV files that
        pyarrow reads.

    Raises
    ------
    InputError
        For an unreadable path, a file that is not valid in its format, or CSV files with different headers.
    """
    files = resolve_local_paths(path, what)
    if fmt == "auto":
        fmt = infer_format(path, files, what)
    if fmt == "parquet" and dictionary:
        return _read_parquet_files(files, what, path, dictionary)
    readers = {"csv": partial(read_csv_file, dictionary=dictionary), "parquet": _read_parquet_file,
               "json": read_json_file}
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


def _unreadable(exc: BaseException, name: str, what: str, source: str) -> InputError:
    """The error of a file that fails while it is read: a compressed file that cannot be decompressed to its
    end (:func:`crowdspark.io.rules.compressed_file_error`), else the system's reason."""
    compressed = name.endswith((".gz", ".bz2"))
    if compressed and (not isinstance(exc, OSError) or exc.errno is None):
        return compressed_file_error(what, source, name)
    return InputError(f"cannot read {what} at {source!r}: {exc}")


def read_csv_file(name: str, what: str, source: str, dictionary: tuple[str, ...] = ()) -> pd.DataFrame | None:
    """One CSV file as text, as Spark reads CSV (RFC 4180 quoting, one record per line).

    Every cell is the string between the commas, unquoted (``""`` inside quotes is one quote); an empty
    cell, quoted or not, is null.  ``None`` for an empty file.  The columns named in ``dictionary`` are
    categoricals when pyarrow reads the file (:func:`_read_csv_arrow`).

    Raises
    ------
    InputError
        A row with more or fewer fields than the header, a quoted value that spans several lines, text
        after a closing quote, a quote that is never closed, a header naming a column twice, a file that is
        not UTF-8.
    """
    import csv

    table = _read_csv_arrow(name, dictionary)
    if table is not None:
        _check_unique_header(table.column_names, what, source, name)
        return table.to_pandas(types_mapper=_arrow_or_categorical)
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
    except (OSError, EOFError, zlib.error) as exc:
        raise _unreadable(exc, name, what, source) from exc
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


_BOM = b"\xef\xbb\xbf"


def _csv_header(head: bytes) -> list[str] | None:
    """The header of a CSV file without quotes from its first bytes: the first line that is not blank, split
    at the commas (``None`` when there is none, or it is not UTF-8)."""
    import re

    line = re.match(rb"[\r\n]*([^\r\n]*)", head.removeprefix(_BOM))
    try:
        text = line.group(1).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text.split(",") if text else None


def _read_csv_arrow(name: str, dictionary: tuple[str, ...] = ()):
    """A CSV file without any quote character, read by pyarrow's CSV reader with every column as text
    (the rules of :func:`read_csv_file`: without quotes, a cell is the text between the commas).

    ``None`` when this path does not apply: a compressed file, a file that holds a quote (quoting rules are
    checked by Python's strict reader), or a file pyarrow refuses (a row with another number of fields, a
    file that is not UTF-8, no record): :func:`read_csv_file` then reads it with Python's reader, which
    accepts the same files and says what is wrong with the others.

    Returns
    -------
    pyarrow.Table or None
        String columns named by the header (dictionary arrays for those in ``dictionary``); empty cells are
        null.
    """
    import mmap

    import pyarrow as pa
    import pyarrow.csv as pacsv

    if name.endswith((".gz", ".bz2")):
        return None
    try:
        with open(name, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            header = None if data.find(b'"') >= 0 else _csv_header(data[: 1 << 20])
        if header is None or len(set(header)) != len(header):
            return None
        coded = pa.dictionary(pa.int32(), pa.string())
        types = {column: coded if column in dictionary else pa.string() for column in header}
        convert = pacsv.ConvertOptions(column_types=types,
                                       strings_can_be_null=True, null_values=[""])
        return pacsv.read_csv(name, convert_options=convert)
    except (OSError, ValueError, pa.ArrowInvalid):  # an empty file cannot be mapped; Python's reader decides
        return None


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
    except (OSError, EOFError, zlib.error) as exc:
        raise _unreadable(exc, name, what, source) from exc
    if not records:
        return None
    keys = dict.fromkeys(key for record in records for key in record)
    return pd.DataFrame({
        key: np.fromiter(map(methodcaller("get", key), records), dtype=object, count=len(records)) for key in keys
    })


def _read_parquet_file(name: str, what: str, source: str) -> pd.DataFrame:
    """One Parquet file with its Arrow types, every column a column (pandas index metadata ignored, as
    Spark does)."""
    return _parquet_table(name, what, source).to_pandas(types_mapper=pd.ArrowDtype, ignore_metadata=True)


def _parquet_table(name: str, what: str, source: str, dictionary: tuple[str, ...] = ()) -> pa.Table:
    """One Parquet file as an Arrow table; its string columns among ``dictionary`` as dictionary arrays."""
    import pyarrow.parquet as pq

    try:
        if dictionary:
            schema = pq.read_schema(name)
            dictionary = tuple(c for c in dictionary if c in schema.names and pa.types.is_string(schema.field(c).type))
        return pq.read_table(name, read_dictionary=list(dictionary) or None)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {what} at {source!r}: file {name!r} is not readable as Parquet: {exc}") from exc


def _arrow_or_categorical(kind: pa.DataType):
    """The pandas type of an Arrow column: a categorical for a dictionary, else ``pd.ArrowDtype``."""
    return None if pa.types.is_dictionary(kind) else pd.ArrowDtype(kind)


def _read_parquet_files(files: list[str], what: str, source: str, dictionary: tuple[str, ...]) -> pd.DataFrame:
    """Parquet files as one frame whose string columns among ``dictionary`` are categoricals (one set of
    categories over all the files); files whose schemas Arrow cannot unify are read one by one and
    concatenated by pandas, as :func:`read_frame` does without ``dictionary``."""
    tables = [_parquet_table(name, what, source, dictionary) for name in files]
    try:
        table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        frames = [t.to_pandas(types_mapper=_arrow_or_categorical, ignore_metadata=True) for t in tables]
        return pd.concat(frames, ignore_index=True)
    del tables
    return table.to_pandas(types_mapper=_arrow_or_categorical, ignore_metadata=True)


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


def canonical_frame(frame: pd.DataFrame, columns: dict[str, str], what: str, source: str) -> pd.DataFrame:
    """The canonical text of the configured columns (see :mod:`crowdspark.io.cells`).

    Parameters
    ----------
    frame : DataFrame
        As read; holds each of ``columns`` once (:func:`check_columns`).
    columns : dict
        Role (output column) -> column of ``frame``.

    Returns
    -------
    DataFrame
        One object column of ``str`` (``None`` where null) per role (``dtype=object`` given: pandas 3 would
        infer ``str``, with NaN where null).
    """
    return pd.DataFrame({role: pd.Series(canonical_values(frame[column], what, source, column), dtype=object)
                         for role, column in columns.items()})


def _check_frame(frame: object, what: str, source: str) -> None:
    if not isinstance(frame, pd.DataFrame):
        raise InputError(f"{what} at {source!r} must be a pandas DataFrame, but got a {type(frame).__name__}.")


@dataclass(frozen=True)
class Labels:
    """Validated labels (pandas): columns ``item``, ``worker``, ``label`` and the encoding.

    Each column is categorical (int32 codes into its distinct strings, sorted), so ten million labels hold
    no Python object per cell.
    """

    frame: pd.DataFrame
    encoding: Encoding
    source: str

    @property
    def items(self) -> pd.Index:
        """The distinct item ids, sorted, shape (n,)."""
        return self.frame["item"].cat.categories


def _sorted_categorical(text: pa.Array) -> pd.Categorical:
    """The strings of ``text`` (no null) as a categorical whose categories are sorted (code point order, as
    Python compares strings) and whose codes are int32."""
    dictionary, codes = sorted_codes(text)
    categories = pd.Index(dictionary.to_numpy(zero_copy_only=False), dtype=object)
    # sorted and distinct: pandas learns both from one pass of comparisons (it marks a strictly increasing index
    # unique), so the dtype's check of uniqueness builds no hash table of the categories (0.4 s of CPU at 1M items)
    categories.is_monotonic_increasing  # noqa: B018 (computed for its cached answer)
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(categories), validate=False)


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
        raise empty_labels_error(source)
    texts = {role: canonical_text(frame[column], "labels", source, column) for role, column in cols.items()}
    for role, column in cols.items():
        if texts[role].null_count:
            raise null_error("labels", source, column, texts[role].null_count)
    out = pd.DataFrame({role: _sorted_categorical(texts.pop(role)) for role in cols})
    classes = decide_classes(list(out["label"].cat.categories), cfg.classes, source, cfg.label)
    workers = tuple(out["worker"].cat.categories)
    return Labels(frame=out, encoding=Encoding(workers=workers, classes=tuple(classes)), source=source)


@dataclass(frozen=True)
class Gold:
    """Validated gold (pandas): string columns ``item``, ``truth``, one row per item."""

    frame: pd.DataFrame
    source: str
    repeated_rows: int


def prepare_gold(frame: pd.DataFrame, cfg: GoldConfig, classes: list[str], source: str,
                 label_items: pd.Index | pd.Series | None = None) -> Gold:
    """Validate a gold frame against the class set.

    Only the gold of items with labels (``label_items``, the labelled item ids, when given) must name a class
    of the run: the others
    are never scored (``gold_items_without_labels``), as when one gold file serves a window of dated labels.
    """
    cols = {"item": cfg.item, "truth": cfg.truth}
    _check_frame(frame, "gold", source)
    check_columns(list(frame.columns), cols, "gold", source, "gold")
    out = canonical_frame(frame, cols, "gold", source)
    for role, column in cols.items():
        n_null = int(out[role].isna().sum())
        if n_null:
            raise InputError(f"gold at {source!r}: column {column!r} has {n_null} null value(s); remove these rows.")
    scored = out if label_items is None else out[out["item"].isin(set(label_items))]
    outside = sorted(set(scored["truth"].unique()) - set(classes))
    if outside:
        raise gold_outside_error(source, cfg.truth, outside, list(classes))
    distinct = out.drop_duplicates()
    if distinct["item"].duplicated().any():  # an item left on two rows has two truths
        per_item = distinct.groupby("item")["truth"].nunique()
        conflicts = per_item[per_item > 1]
        raise gold_conflict_error(source, str(conflicts.index[0]), int(conflicts.iloc[0]))
    return Gold(frame=distinct.reset_index(drop=True), source=source, repeated_rows=len(out) - len(distinct))


def gold_unmatched(labels: Labels, gold: Gold) -> str | None:
    """The warning of :func:`gold_empty_warning` for gold without rows, of :func:`gold_unmatched_warning` when no
    gold item has a label, else ``None``."""
    items = labels.items
    if not len(gold.frame):
        return gold_empty_warning(gold.source)
    if gold.frame["item"].isin(items).any():
        return None
    return gold_unmatched_warning(gold.source, len(gold.frame), len(items), min(gold.frame["item"]), items[0])


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
    check_encoded(worker, worker_code, label, label_code)
    truth_code = None if truth is None else encoding.class_codes(truth)
    return np.asarray(item, dtype=object), worker_code, label_code, truth_code


def check_encoded(worker, worker_code: np.ndarray, label, label_code: np.ndarray) -> None:
    """Every worker and label (arrays of shape (m,)) has a code in the run's encoding (``-1``: none).

    Raises
    ------
    InputError
        Naming the first worker and label without a code.
    """
    if (worker_code < 0).any() or (label_code < 0).any():
        bad = np.asarray(worker)[worker_code < 0][:1].tolist() + np.asarray(label)[label_code < 0][:1].tolist()
        raise InputError(f"internal encoding error: value(s) {bad} are not in the run's encoding")
