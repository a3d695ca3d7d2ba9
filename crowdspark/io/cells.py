"""The canonical text of a cell of an id or label column, identical on every reader.

Items, workers, labels and gold truths are strings inside crowdspark.  Text formats (CSV, JSON lines) are
read as the text written in the file (see :mod:`crowdspark.io.rules`); typed columns (Parquet, DataFrames passed
in) are turned into text by one rule per type:

=================  ==========================================================  ===========================
column type        canonical text                                              examples
=================  ==========================================================  ===========================
string             the string as it is                                         ``" a"`` -> ``" a"``
integer            decimal, no sign for zero                                   ``266`` -> ``"266"``
boolean            ``true`` / ``false``                                        ``True`` -> ``"true"``
float              a whole number below 2**53 in absolute value: the           ``266.0`` -> ``"266"``,
                   integer in decimal; anything else (fraction, NaN,           ``-0.0`` -> ``"0"``;
                   infinity, larger) is refused                                ``0.5`` refused
decimal            a whole number: the integer in decimal; else refused        ``266.00`` -> ``"266"``
null               null (a missing id or label is refused by the validation)
any other type     refused (date, timestamp, binary, list, struct, map ...)
=================  ==========================================================  ===========================

The rules are written twice, side by side in this module: over Arrow arrays (:func:`canonical_arrow`, used by
the pandas reader and the pandas API through :func:`canonical_values`) and as Spark SQL expressions
(:func:`canonical_spark`, used by the Spark reader and the pyspark.ml API).  ``tests/test_cells.py`` reads
the same files both ways and checks that they give the same strings and refuse the same values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from crowdspark.errors import InputError

__all__ = [
    "MAX_EXACT_INTEGER",
    "SPARK_ERROR_START",
    "SPARK_ERROR_END",
    "canonical_arrow",
    "canonical_values",
    "canonical_text",
    "canonical_spark",
    "non_integral_error",
    "unsupported_type_error",
]

#: floats are exact integers below this bound (2**53); larger or fractional floats are refused
MAX_EXACT_INTEGER = 2.0**53
#: around the message of a value the Spark expression refuses, so that the driver can find it in the
#: failed job's error (:func:`crowdspark.io.spark_reader.input_error_from_spark`)
SPARK_ERROR_START = "<crowdspark-input-error>"
SPARK_ERROR_END = "</crowdspark-input-error>"

_FIX = "Write the column as strings (or integers) before running."


def non_integral_error(what: str, source: str, column: str, value: str) -> InputError:
    """The message for a float or decimal id/label that is not a whole number below 2**53."""
    return InputError(
        f"{what} at {source!r}: column {column!r} has the value {value}, which is not a whole number below "
        f"2**53; a float or decimal id or label is read as the integer it holds (266.0 -> '266'). {_FIX}"
    )


def unsupported_type_error(what: str, source: str, column: str, type_name: str) -> InputError:
    """The message for an id/label column of a type that has no canonical text."""
    return InputError(
        f"{what} at {source!r}: column {column!r} has type {type_name}; ids and labels must be strings, "
        f"integers, booleans, or floats/decimals holding whole numbers. {_FIX}"
    )


# --------------------------------------------------------------------------- Arrow (pandas reader and API)


def canonical_arrow(values: pa.Array | pa.ChunkedArray, what: str, source: str, column: str) -> pa.Array:
    """The canonical text of every cell of an Arrow array.

    Parameters
    ----------
    values : pyarrow Array or ChunkedArray, shape (n,)
    what, source, column : str
        For messages: ``"labels"`` or ``"gold"``, where the data came from, the column's name.

    Returns
    -------
    pyarrow StringArray, shape (n,)
        Nulls stay null.

    Raises
    ------
    InputError
        For a type without canonical text, or a float/decimal value that is not a whole number.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    kind = values.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or str(kind) == "string_view":
        return values.cast(pa.string())
    if pa.types.is_null(kind):
        return pa.nulls(len(values), pa.string())
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        return pc.cast(values, pa.string())
    if pa.types.is_floating(kind):
        return _whole_floats(values, what, source, column)
    if pa.types.is_decimal(kind):
        return _whole_decimals(values, what, source, column)
    raise unsupported_type_error(what, source, column, str(kind))


def _whole_floats(values: pa.Array, what: str, source: str, column: str) -> pa.Array:
    x = pc.cast(values, pa.float64())
    whole = pc.and_(pc.less(pc.abs(x), MAX_EXACT_INTEGER), pc.equal(x, pc.floor(x)))  # NaN: false
    bad = pc.and_(pc.is_valid(x), pc.invert(whole))
    if pc.any(bad).as_py():
        raise non_integral_error(what, source, column, repr(x.filter(bad)[0].as_py()))
    return pc.cast(pc.cast(x, pa.int64()), pa.string())


def _whole_decimals(values: pa.Array, what: str, source: str, column: str) -> pa.Array:
    out = []
    for value in values.to_pylist():
        if value is not None and value != value.to_integral_value():
            raise non_integral_error(what, source, column, str(value))
        out.append(None if value is None else str(int(value)))
    return pa.array(out, type=pa.string())


def canonical_values(series: pd.Series, what: str, source: str, column: str) -> np.ndarray:
    """The canonical text of a pandas column: :func:`canonical_arrow` over its Arrow form.

    An object column that mixes Python types (e.g. the strings and booleans of a JSON column) is converted
    type by type.  Missing values (None, NaN, NA) are null.

    Returns
    -------
    ndarray of object, shape (n,)
        ``str``, or ``None`` for a missing value.
    """
    if series.dtype == object:
        if pd.api.types.infer_dtype(series, skipna=True) in ("string", "empty"):
            return np.where(series.isna().to_numpy(), None, series.to_numpy(dtype=object))
        return _mixed_values(series, what, source, column)
    text = canonical_arrow(pa.array(series, from_pandas=True), what, source, column)
    return text.to_numpy(zero_copy_only=False)


def canonical_text(series: pd.Series, what: str, source: str, column: str) -> pa.Array:
    """:func:`canonical_values` as an Arrow string array, without a Python object per cell for columns that
    are not object columns (Arrow-backed, numeric, boolean).

    Returns
    -------
    pyarrow StringArray, shape (n,)
        Nulls where a value is missing.
    """
    if isinstance(series.dtype, pd.CategoricalDtype):
        return _canonical_categorical(series.array, what, source, column)
    if series.dtype == object:
        return pa.array(canonical_values(series, what, source, column), type=pa.string(), from_pandas=True)
    return canonical_arrow(pa.array(series, from_pandas=True), what, source, column)


def _canonical_categorical(values: pd.Categorical, what: str, source: str, column: str) -> pa.DictionaryArray:
    """The canonical text of a categorical column, computed once per category that a row uses: a dictionary
    array of its codes (``-1``: null) into the categories' text."""
    codes = values.codes
    nulls = bool(len(codes)) and codes.min() < 0
    used = np.bincount(codes[codes >= 0] if nulls else codes, minlength=len(values.categories)) > 0
    if not used.all():  # an unused category is not a value of the column: its text is not asked for
        remap = np.cumsum(used) - 1
        codes = np.where(codes >= 0, remap[np.maximum(codes, 0)], -1)
    words = canonical_text(pd.Series(values.categories[used]), what, source, column)
    return pa.DictionaryArray.from_arrays(pa.array(codes, mask=codes < 0) if nulls else pa.array(codes), words)


def _mixed_values(series: pd.Series, what: str, source: str, column: str) -> np.ndarray:
    values = series.to_numpy(dtype=object)
    out = np.full(len(values), None, dtype=object)
    present = ~series.isna().to_numpy()
    kinds = np.array([type(v).__name__ for v in values], dtype=object)
    for kind in pd.unique(kinds[present]):
        index = np.flatnonzero(present & (kinds == kind))
        group = [values[i] for i in index]
        if kind == "int":  # Python integers have no width limit: the integer rule directly
            out[index] = [str(v) for v in group]
            continue
        try:
            array = pa.array(group, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            raise unsupported_type_error(what, source, column, f"object holding {kind}") from None
        out[index] = canonical_arrow(array, what, source, column).to_numpy(zero_copy_only=False)
    return out


# --------------------------------------------------------------------------- Spark SQL (Spark reader, pyspark.ml)


def canonical_spark(name: str, data_type: Any, what: str, source: str, column: str):
    """The canonical text of a Spark column as a Spark SQL expression (the rules of :func:`canonical_arrow`).

    A value that is refused makes the job fail with :func:`non_integral_error`'s message between
    :data:`SPARK_ERROR_START` and :data:`SPARK_ERROR_END` (``raise_error``); the driver turns that failure
    into the ``InputError``.

    Parameters
    ----------
    name : str
        The column's name in the frame.
    data_type : pyspark.sql.types.DataType
        Its type (from the frame's schema).
    what, source, column : str
        For messages.

    Returns
    -------
    pyspark.sql.Column
        Of type string.

    Raises
    ------
    InputError
        For a type without canonical text (from the schema, before any job runs).
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    col = F.col(f"`{name}`")
    if isinstance(data_type, (T.StringType, T.VarcharType, T.CharType)):
        return col
    if isinstance(data_type, T.NullType):
        return F.lit(None).cast("string")
    if isinstance(data_type, (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.BooleanType)):
        return col.cast("string")
    if isinstance(data_type, (T.FloatType, T.DoubleType)):
        x = col.cast("double")
        # Spark orders NaN above every number, so abs(NaN) < 2**53 is false, as in Arrow
        whole = (F.abs(x) < F.lit(MAX_EXACT_INTEGER)) & (x == F.rint(x))
        return _refusing(x, whole, x.cast("long").cast("string"), what, source, column)
    if isinstance(data_type, T.DecimalType):
        if data_type.scale <= 0:
            return col.cast("string")
        return _refusing(col, col == F.floor(col), F.floor(col).cast("string"), what, source, column)
    raise unsupported_type_error(what, source, column, data_type.simpleString())


def _refusing(value, whole, text, what: str, source: str, column: str):
    """``text`` where ``whole``, null where ``value`` is null, else a job failure naming the value."""
    from pyspark.sql import functions as F

    before, after = str(non_integral_error(what, source, column, "\0")).split("\0")
    message = F.concat(F.lit(SPARK_ERROR_START + before), value.cast("string"), F.lit(after + SPARK_ERROR_END))
    return F.when(value.isNull(), F.lit(None).cast("string")).when(whole, text).otherwise(F.raise_error(message))
