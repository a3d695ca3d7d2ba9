"""The output tables: per-item results as Arrow batches, the worker table, and writing tables as Parquet or CSV.

* ``items/``: ``item`` (string), ``label`` (string), ``confidence`` (double, the posterior of ``label``),
  ``posterior`` (array<double> in the order of ``summary.json``'s ``classes``) and model extras
  (``level``, ``level_posterior`` ...).
* ``workers/``: ``worker`` (string), ``n_labels`` (long), ``accuracy`` (double), ``confusion``
  (array<array<double>>, row = true class, column = given label) and model extras.

Parquet by default; with ``output.format = "csv"`` array columns are written as JSON strings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from crowdspark.errors import naming_disk_full
from crowdspark.io.paths import is_local, strip_file_scheme
from crowdspark.models.base import ItemResult

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "to_jsonable",
    "item_batch",
    "item_frame",
    "worker_frame",
    "write_frame_local",
    "write_parquet_part",
    "remove_unfinished_parts",
]


def to_jsonable(value: Any) -> Any:
    """numpy scalars/arrays and NaN -> plain JSON values (NaN and inf become None)."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if np.isfinite(value) else None
    return value


def _list_array(values: np.ndarray):
    """An array (n, ...) as an Arrow list array of n rows, each row flattened (no Python object per row)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype=np.float64)
    n = values.shape[0]
    width = int(np.prod(values.shape[1:]))
    offsets = pa.array(np.arange(0, n * width + 1, width, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(values.reshape(-1)))


# numpy dtype of the scalar extras' Spark types (``Model.item_extras``), so that batches match the schema
_SCALAR_DTYPES = {"int": np.int32, "long": np.int64, "double": np.float64}


def item_batch(
    item_ids: np.ndarray,
    result: ItemResult,
    classes: list[str] | tuple[str, ...],
    extras: dict[str, str] | None = None,
):
    """One block's per-item results as an Arrow record batch (the ``items/`` table's columns).

    Array columns (``posterior`` (n, C), 2-D extras) become Arrow lists built from the flat numpy
    values, with no Python object per row (several times faster than a pandas column of per-row arrays;
    BENCHMARKS.md, "Kernel and data-path choices").  ``extras`` (the model's ``item_extras``, name -> Spark
    type) fixes the type of scalar extras.
    """
    import pyarrow as pa

    n = len(item_ids)
    label = np.asarray(result.label, dtype=np.int64)
    columns = {
        "item": pa.array(np.asarray(item_ids, dtype=object), type=pa.string()),
        "label": pa.array(np.asarray(classes, dtype=object)[label], type=pa.string()),
        "confidence": pa.array(result.posterior[np.arange(n), label], type=pa.float64()),
        "posterior": _list_array(result.posterior),
    }
    for name, values in result.extra.items():
        values = np.asarray(values)
        if values.ndim > 1:
            columns[name] = _list_array(values)
        else:
            dtype = _SCALAR_DTYPES.get((extras or {}).get(name, ""))
            columns[name] = pa.array(values if dtype is None else values.astype(dtype))
    return pa.RecordBatch.from_pydict(columns)


def item_frame(item_ids: np.ndarray, result: ItemResult, classes: list[str] | tuple[str, ...]) -> pd.DataFrame:
    """:func:`item_batch` as a pandas DataFrame (array columns hold numpy arrays)."""
    return item_batch(item_ids, result, classes).to_pandas()


def worker_frame(workers: tuple[str, ...], table: dict[str, np.ndarray]) -> pd.DataFrame:
    """The worker table (columns of length K) as a DataFrame; nested arrays become nested lists."""
    import pandas as pd

    data: dict[str, Any] = {"worker": np.asarray(workers, dtype=object)}
    for name, values in table.items():
        values = np.asarray(values)
        data[name] = values.tolist() if values.ndim > 1 else values
    return pd.DataFrame(data)


def _csv_ready(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    for column in out.columns:
        if len(out) and isinstance(out[column].iloc[0], (list, np.ndarray)):
            out[column] = [json.dumps(to_jsonable(v)) for v in out[column]]
    return out


def write_frame_local(frame: pd.DataFrame, directory: str, fmt: str) -> None:
    """Write a pandas table as a one-file dataset directory (``part-00000.<fmt>``; ``file:`` allowed)."""
    directory = strip_file_scheme(directory)
    os.makedirs(directory, exist_ok=True)
    if fmt == "csv":
        _csv_ready(frame).to_csv(os.path.join(directory, "part-00000.csv"), index=False)
    else:
        frame = frame.copy()
        for column in frame.columns:
            if len(frame) and isinstance(frame[column].iloc[0], np.ndarray):
                frame[column] = [v.tolist() for v in frame[column]]
        frame.to_parquet(os.path.join(directory, "part-00000.parquet"), index=False)


#: how a Parquet file written by :func:`write_parquet_part` is named while it is being written (readers skip ``_``)
_UNFINISHED = "_unfinished-"


def write_parquet_part(batches: Iterable[Any], directory: str, part: int, schema: Any, attempt: str,
                       dictionary: tuple[str, ...] = ()) -> int:
    """Write ``batches`` as the one Parquet file ``part-<part>.parquet`` of the local folder ``directory``.

    The file is written under a temporary name of ``attempt`` (``_unfinished-...``, which readers skip) and
    renamed into place, so another attempt at the same part replaces it rather than adding a second copy.
    Every batch is cast to ``schema`` (one row group per batch); a part with no batch is a file of no rows.

    Parameters
    ----------
    batches : iterable of pyarrow.RecordBatch
        The part's rows.
    directory : str
        A local folder (``file://`` allowed), created if missing.
    part : int
        The part's number (a Spark partition index).
    schema : pyarrow.Schema
        The table's columns and types.
    attempt : str
        What identifies this attempt at the part (a Spark task attempt id).
    dictionary : tuple of str
        The columns to dictionary-encode: those with few distinct values (a class name).  Trying it on the
        others (ids, doubles) costs more time than it saves space.

    Returns
    -------
    int
        Rows written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory = strip_file_scheme(directory)
    os.makedirs(directory, exist_ok=True)
    final = os.path.join(directory, f"part-{part:05d}.parquet")
    unfinished = os.path.join(directory, f"{_UNFINISHED}{part:05d}-{attempt}.parquet")
    rows = 0
    try:
        with pq.ParquetWriter(unfinished, schema, use_dictionary=list(dictionary)) as writer:
            for batch in batches:
                writer.write_table(pa.Table.from_batches([batch]).cast(schema))
                rows += batch.num_rows
        os.replace(unfinished, final)
    except BaseException:
        if os.path.exists(unfinished):
            os.remove(unfinished)
        raise
    return rows


def remove_unfinished_parts(directory: str) -> list[str]:
    """Delete the temporary files :func:`write_parquet_part` left in ``directory`` (an attempt killed while
    writing); returns their names."""
    directory = strip_file_scheme(directory)
    names = sorted(n for n in os.listdir(directory) if n.startswith(_UNFINISHED)) if os.path.isdir(directory) else []
    for name in names:
        try:
            os.remove(os.path.join(directory, name))
        except FileNotFoundError:  # its attempt was still finishing: it renamed or removed the file itself
            pass
    return names


def item_schema(extras: dict[str, str]) -> str:
    """The Spark schema (DDL) of the item table of a model whose ``item_extras`` are ``extras``."""
    columns = ["item string", "label string", "confidence double", "posterior array<double>"]
    columns += [f"{name} {ddl}" for name, ddl in extras.items()]
    return ", ".join(columns)


def _arrays_to_json(frame):
    """A Spark DataFrame with its array columns as JSON strings (for CSV)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType

    return frame.select(*[
        F.to_json(F.col(f.name)).alias(f.name) if isinstance(f.dataType, ArrayType) else F.col(f.name)
        for f in frame.schema.fields
    ])


def write_spark_table(frame, directory: str, fmt: str) -> None:
    """Write a Spark DataFrame as Parquet, or as CSV with array columns as JSON strings."""
    if fmt == "csv":
        _arrays_to_json(frame).write.mode("overwrite").option("header", "true").csv(directory)
    else:
        frame.write.mode("overwrite").parquet(directory)


def write_table(table, directory: str, fmt: str, spark: Any = None, extras: dict[str, str] | None = None,
                schema: str | None = None) -> None:
    """Write a pandas, pyarrow or Spark table to ``directory``.

    A pandas table goes to a local directory with pandas (one file), to any other filesystem through
    ``spark`` (one partition; ``extras`` gives an item table's schema, ``schema`` (Spark DDL) any other's); a
    pyarrow table (Parquet only) to a local directory with pyarrow (one file); a Spark table is written by
    Spark.
    """
    with naming_disk_full(directory):
        _write_table(table, directory, fmt, spark, extras, schema)


def _write_table(table, directory: str, fmt: str, spark: Any, extras: dict[str, str] | None,
                 schema: str | None) -> None:
    import pandas as pd
    import pyarrow as pa

    if isinstance(table, pa.Table) and fmt == "parquet" and is_local(directory):
        import pyarrow.parquet as pq

        directory = strip_file_scheme(directory)
        os.makedirs(directory, exist_ok=True)
        pq.write_table(table, os.path.join(directory, "part-00000.parquet"))
        return
    if isinstance(table, pa.Table):
        table = table.to_pandas()
    if not isinstance(table, pd.DataFrame):
        write_spark_table(table, directory, fmt)
    elif is_local(directory):
        write_frame_local(table, directory, fmt)
    else:
        if schema is None and extras is not None:
            schema = item_schema(extras)
        write_spark_table(spark.createDataFrame(table, schema).coalesce(1), directory, fmt)
