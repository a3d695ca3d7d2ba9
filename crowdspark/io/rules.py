"""The rules every reader applies to labels and gold, and their messages; the encoding of workers and classes.

Every id and label is a string, the same whichever reader ran (:mod:`crowdspark.io.pandas_reader`,
:mod:`crowdspark.io.spark_reader`): CSV and JSON lines are read as the text written in the file (a CSV record
is one line; quoting is RFC 4180), typed columns (Parquet, frames passed in) by the rules of
:mod:`crowdspark.io.cells` (``266`` and ``266.0`` in a Parquet column are the item ``"266"``, booleans are
``"true"``/``"false"``).  Both readers raise the messages built here.

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

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from crowdspark.errors import InputError
from crowdspark.faces import display_key, setting
from crowdspark.io.short_text import NULL_KEY, packed_keys, unpacked_text

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "MAX_CLASSES",
    "EmptyInputError",
    "empty_labels_error",
    "Encoding",
    "order_classes",
    "missing_columns_error",
    "duplicate_columns_error",
    "check_columns",
    "csv_row_error",
    "csv_quote_error",
    "csv_header_error",
    "json_line_error",
    "compressed_file_error",
    "column_types_error",
    "gold_unmatched_warning",
    "gold_empty_warning",
    "null_error",
    "too_many_labels_error",
    "decide_classes",
    "gold_outside_error",
    "gold_conflict_error",
    "sorted_codes",
    "sorted_item_codes",
]


MAX_CLASSES = 1000


def sorted_codes(text) -> tuple[object, np.ndarray]:
    """Encode Arrow strings in one hash pass over the rows: their distinct values, sorted, and each row's code.

    Parameters
    ----------
    text : pyarrow Array or ChunkedArray, of string or of dictionary<string> (whose entries may share a text)

    Returns
    -------
    dictionary : pyarrow StringArray, shape (d,)
        The distinct non-null values, in byte order (code-point order, as Python compares strings).
    codes : ndarray of int32, shape (m,)
        Each row's index in ``dictionary``; -1 where the row is null.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = packed_keys(text)
    if keys is not None:
        return _sorted_key_codes(keys, text.type)
    if not pa.types.is_dictionary(text.type):
        text = pc.dictionary_encode(text)
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()  # one dictionary for all chunks
    words = pc.dictionary_encode(text.dictionary)  # the d entries' distinct texts
    order = pc.sort_indices(words.dictionary).to_numpy()
    rank = np.empty(len(order), dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    code_of_entry = np.append(rank[words.indices.to_numpy()], np.int32(-1))
    return words.dictionary.take(order), code_of_entry[pc.fill_null(text.indices, -1).to_numpy(zero_copy_only=False)]


def sorted_item_codes(column) -> tuple[np.ndarray, np.ndarray]:
    """Factorize an Arrow string column: per-row codes (int32 (m,)) into the sorted distinct ids (object
    array (n,))."""
    dictionary, codes = sorted_codes(column)
    return codes, dictionary.to_numpy(zero_copy_only=False).astype(object)


def _sorted_key_codes(keys: np.ndarray, arrow_type) -> tuple[object, np.ndarray]:
    """:func:`sorted_codes` of short strings from their keys (:func:`crowdspark.io.short_text.packed_keys`,
    uint64 (m,)): Arrow hashes the integers, and the distinct keys sort as their strings do."""
    import pyarrow as pa
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(pa.array(keys, type=pa.uint64()))
    distinct = encoded.dictionary.to_numpy()
    order = np.argsort(distinct)
    if len(order) and distinct[order[-1]] == NULL_KEY:
        order = order[:-1]
    rank = np.full(len(distinct), -1, dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    return unpacked_text(distinct[order], arrow_type), rank[encoded.indices.to_numpy()]


#: the class set a hint shows
CLASSES_EXAMPLE = ["a", "b"]


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
        import pandas as pd

        return pd.Index(self.workers)

    @cached_property
    def _class_index(self) -> pd.Index:
        import pandas as pd

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


class EmptyInputError(InputError):
    """The labels have no rows (raised by both readers with :func:`empty_labels_error`)."""


def empty_labels_error(source: str) -> EmptyInputError:
    return EmptyInputError(f"labels at {source!r} have no rows; there is nothing to aggregate.")


def missing_columns_error(
    what: str, source: str, missing: list[str], present: list[str], keys: list[str], hint: str = ""
) -> InputError:
    """The message for columns that are not there."""
    keys_hint = ", ".join(setting(k, "<column>") for k in keys)
    return InputError(
        f"{what} at {source!r} has no column(s) {missing}; present columns: {present}. {hint}"
        f"Name the right columns with {keys_hint} (crowd-kit data: {setting('input.item', 'task')})."
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
        For no column at all (an empty file), naming the missing columns and the present ones, or the repeated
        ones.
    """
    if not len(present):
        raise InputError(f"{what} at {source!r} is empty: no header and no rows (an empty file); there is nothing "
                         f"to read. Give the {what} with a header and rows.")
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


def compressed_file_error(what: str, source: str, name: str | None) -> InputError:
    """The message for a compressed file (``.gz``, ``.bz2``) that cannot be decompressed to its end."""
    shown = f"file {name!r}" if name else "a compressed file"
    return InputError(
        f"{what} at {source!r}: {shown} cannot be decompressed (it is truncated, or not in the format its name "
        "says); write it again, or remove it from the input."
    )


def column_types_error(what: str, source: str, column: str, name: str | None, kind: str, reference: str,
                       reference_kind: str) -> InputError:
    """The message for files of one input that give one column different types.

    Parameters
    ----------
    name, kind : str
        A file and its type of ``column`` (``name`` ``None`` when the reader does not say which file).
    reference, reference_kind : str
        Where the other type comes from (``"file '...'"``, ``"the input's schema"``) and that type.
    """
    shown = f"file {name!r}" if name else "a file"
    return InputError(
        f"{what} at {source!r}: column {column!r} is {kind} in {shown} but {reference_kind} in {reference}; the "
        "files (days) of one input must give each column one type: Spark reads them with one schema, so the "
        f"readers would disagree. Write every file with the same column types ({column!r} as {reference_kind} in "
        "every file, say), or read the files as separate inputs."
    )


def gold_empty_warning(source: str) -> str:
    """The warning for gold with a header and no rows: no metrics are computed."""
    return (f"gold at {source!r} has a header but no rows, so no metrics are computed; "
            "give the gold file with its rows, or run without --gold.")


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


def too_many_labels_error(source: str, column: str) -> InputError:
    """For a label column with more than :data:`MAX_CLASSES` distinct values (only that many + 1 are read)."""
    return InputError(
        f"labels at {source!r}: column {column!r} has at least {MAX_CLASSES + 1} distinct values "
        f"(more than {MAX_CLASSES}); is it the label column? Set {setting('input.label', '<column>')}."
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
                f"configured classes {list(configured)}. Add them to {display_key('input.classes')} or fix the data."
            )
        classes = list(configured)
    else:
        if len(observed) > MAX_CLASSES:
            raise InputError(
                f"labels at {source!r}: column {label_column!r} has {len(observed)} distinct values "
                f"(more than {MAX_CLASSES}); is it the label column? Set {setting('input.label', '<column>')}."
            )
        classes = order_classes(list(observed))
    if len(classes) < 2:
        raise InputError(
            f"labels at {source!r} have a single class {classes}; aggregation needs at least two classes. "
            f"If the task has other classes, list them all with {setting('input.classes', CLASSES_EXAMPLE)}."
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
