"""Reading a run directory for its report: ``summary.json``, ``workers/`` whole, ``items/`` in column batches.

The report runs on the driver and reads local directories only; ``items/`` is never held whole: it is read a
few columns at a time, one record batch after another (:func:`item_batches`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pandas as pd

from crowdspark.errors import ConfigError, InputError
from crowdspark.io.paths import is_local, strip_file_scheme
from crowdspark.io.runs import read_latest

__all__ = ["GOLD_WORKERS", "resolve_run_dir", "read_summary", "table_format", "read_table", "read_workers", "item_columns", "item_batches",
           "item_record_batches", "read_queue", "read_label_columns", "dictionary_positions"]

#: the result's table of each worker's labels on the held-out gold (``crowdspark.pipeline.quality.GOLD_WORKERS``,
#: named here so that the report does not import the run's modules)
GOLD_WORKERS = "gold_workers"

_BATCH_ROWS = 1 << 20
_ID_COLUMNS = ("item", "worker", "label")


def resolve_run_dir(path: str) -> str:
    """The local result directory ``path`` names: itself, or the run a run root's ``_LATEST.json`` points at.

    Raises
    ------
    ConfigError
        For a path the driver cannot read as a local folder.
    InputError
        When ``path`` holds no ``summary.json`` (neither a result nor a run root with a latest run), or its
        ``_LATEST.json`` is not a pointer to a run of its own (:func:`crowdspark.io.runs.read_latest`).
    """
    if not is_local(path):
        raise ConfigError(f"the report reads a local run directory, but got {path!r}; copy the result to local disk "
                          "(e.g. hdfs dfs -get, aws s3 cp --recursive) and give that folder")
    local = strip_file_scheme(path).rstrip("/") or "/"
    if not os.path.exists(os.path.join(local, "summary.json")):
        latest = read_latest(local)  # refuses a pointer out of the folder of runs
        local = latest["path"] if latest is not None else local
    if not os.path.exists(os.path.join(local, "summary.json")):
        raise InputError(f"{path!r} holds no summary.json: give the --output folder of a crowdspark aggregate run "
                         "(or the folder of --run-id runs, whose latest run is then reported)")
    return local


def read_summary(run_dir: str) -> dict[str, Any]:
    """The run's ``summary.json``."""
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as handle:
        return json.load(handle)


def table_format(summary: dict[str, Any]) -> str:
    """``parquet`` or ``csv``: how the run wrote its tables (``output.format``)."""
    return str(summary.get("config", {}).get("output", {}).get("format", "parquet"))


def _csv_arrays(frame: pd.DataFrame) -> pd.DataFrame:
    """CSV tables hold array columns as JSON strings; parse those back to lists."""
    for column in frame.columns:
        if column in _ID_COLUMNS:
            continue
        values = frame[column]
        text = values.dtype == object or pd.api.types.is_string_dtype(values.dtype)  # pandas 3 reads str
        if text and len(values) and str(values.iloc[0]).startswith("["):
            frame[column] = values.map(json.loads)
    return frame


def read_table(run_dir: str, name: str, fmt: str) -> pd.DataFrame | None:
    """The table folder ``name`` of the result as one frame, or ``None`` when the run has no such table."""
    path = os.path.join(run_dir, name)
    if not os.path.isdir(path):
        return None
    if fmt == "csv":
        files = sorted(f for f in os.listdir(path) if f.endswith(".csv"))
        frames = [pd.read_csv(os.path.join(path, f), dtype={"worker": str}) for f in files]
        return _csv_arrays(pd.concat(frames, ignore_index=True)) if frames else None
    return pd.read_parquet(path)


def read_workers(run_dir: str, fmt: str) -> pd.DataFrame | None:
    """``workers/`` as one frame (one row per worker), or ``None`` when the run has no such table."""
    return read_table(run_dir, "workers", fmt)


def _parquet_dataset(path: str):
    import pyarrow.dataset as ds

    return ds.dataset(path, format="parquet")


def item_columns(run_dir: str, fmt: str) -> tuple[list[str], list[str]]:
    """The columns of ``items/``: all of them, and those holding one number (or boolean) per item.

    Both lists are empty when the run has no ``items/``.
    """
    path = os.path.join(run_dir, "items")
    if not os.path.isdir(path):
        return [], []
    if fmt == "csv":
        files = sorted(f for f in os.listdir(path) if f.endswith(".csv"))
        if not files:
            return [], []
        head = pd.read_csv(os.path.join(path, files[0]), nrows=1000, dtype={"item": str, "label": str})
        numeric = [c for c in head.columns if pd.api.types.is_numeric_dtype(head[c])]
        return list(head.columns), numeric
    import pyarrow as pa

    schema = _parquet_dataset(path).schema
    numeric = [f.name for f in schema
               if pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_boolean(f.type)]
    return list(schema.names), numeric


def _csv_chunks(path: str, columns: Sequence[str]) -> Iterator[pd.DataFrame]:
    dtypes = {c: str for c in ("item", "label") if c in columns}
    for name in sorted(f for f in os.listdir(path) if f.endswith(".csv")):
        yield from pd.read_csv(os.path.join(path, name), usecols=list(columns), dtype=dtypes, chunksize=_BATCH_ROWS)


def item_batches(run_dir: str, fmt: str, columns: Sequence[str]) -> Iterator[pd.DataFrame]:
    """``items/``'s ``columns``, one batch of rows at a time (``item`` and ``label`` as strings)."""
    path = os.path.join(run_dir, "items")
    if fmt == "csv":
        yield from _csv_chunks(path, columns)
        return
    for batch in _parquet_dataset(path).to_batches(columns=list(columns), batch_size=_BATCH_ROWS):
        yield batch.to_pandas()


def item_record_batches(run_dir: str, fmt: str, columns: Sequence[str]) -> Iterator[Any]:
    """``items/``'s ``columns``, one ``pyarrow.RecordBatch`` at a time, in the order of ``columns`` (``item`` and
    ``label`` as strings): what :func:`item_batches` reads, without making pandas objects of the strings."""
    import pyarrow as pa

    path = os.path.join(run_dir, "items")
    if fmt == "csv":
        for chunk in _csv_chunks(path, columns):
            yield pa.RecordBatch.from_pandas(chunk[list(columns)], preserve_index=False)
        return
    for batch in _parquet_dataset(path).to_batches(columns=list(columns), batch_size=_BATCH_ROWS):
        if batch.num_rows:
            yield batch.cast(pa.schema([(f.name, pa.string()) if f.name in ("item", "label") else f
                                        for f in batch.schema]))


def read_queue(path: str, fmt: str, rows: int) -> pd.DataFrame | None:
    """The first ``rows`` of the ranked table folder ``path`` (by its ``rank`` column when it has one, else as
    written), or ``None`` when there is no such folder."""
    if not os.path.isdir(path):
        return None
    if fmt == "csv":
        files = sorted(f for f in os.listdir(path) if f.endswith(".csv"))
        frames = [pd.read_csv(os.path.join(path, f), dtype={"item": str}) for f in files]
        frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    else:
        import pyarrow.dataset as ds

        dataset = _parquet_dataset(path)
        if "rank" not in dataset.schema.names:
            return dataset.head(rows).to_pandas()
        frame = dataset.to_table(filter=ds.field("rank") <= rows).to_pandas()
    return frame.sort_values("rank").head(rows) if "rank" in frame else frame.head(rows)


def read_label_columns(path: str, fmt: str, columns: dict[str, str]) -> list[Any]:
    """The canonical text of the labels file's ``columns`` (role -> column name), as the run reads it, as Arrow
    record batches whose columns are the roles, each a dictionary array of strings (Parquet's dictionaries, read
    without a string per cell).

    Raises
    ------
    InputError
        For a path that cannot be read as labels (:func:`crowdspark.io.pandas_reader.read_frame`'s messages).
    """
    import pyarrow as pa

    from crowdspark.io.cells import canonical_arrow, canonical_text
    from crowdspark.io.pandas_reader import read_frame
    from crowdspark.io.paths import infer_format, resolve_local_paths

    def text(values: Any, column: str) -> Any:
        values = values if pa.types.is_dictionary(values.type) else values.dictionary_encode()
        if pa.types.is_string(values.type.value_type):
            return values
        return canonical_arrow(values.dictionary_decode(), "labels", path, column).dictionary_encode()

    files = resolve_local_paths(path, "labels")
    if fmt == "auto":
        fmt = infer_format(path, files, "labels")
    if fmt != "parquet":
        frame = read_frame(path, fmt, "labels", dictionary=tuple(columns.values()))
        arrays = [text(canonical_text(frame[column], "labels", path, column), column) for column in columns.values()]
        return [pa.RecordBatch.from_arrays(arrays, names=list(columns))]
    import pyarrow.parquet as pq

    table = pq.ParquetDataset(files, read_dictionary=list(columns.values())).read(columns=list(columns.values()))
    return [pa.RecordBatch.from_arrays([text(batch.column(column), column) for column in columns.values()],
                                       names=list(columns)) for batch in table.to_batches()]


def dictionary_positions(chunks: list[Any], values: Any) -> Callable[[Any], Any]:
    """A function that gives, for one of ``chunks`` (Arrow dictionary arrays of strings), the position of each
    row's text in ``values`` (an Arrow string array of distinct values), -1 where it is not there (ndarray of
    int64, shape (n,)).

    The distinct dictionaries of the chunks (the chunks of one Parquet row group share theirs) are looked up in
    one call, so the hash table of ``values`` is built once."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    def key(chunk: Any) -> tuple[int, ...]:
        dictionary = chunk.dictionary
        return (*(b.address if b is not None else 0 for b in dictionary.buffers()), dictionary.offset, len(dictionary))

    distinct: dict[tuple[int, ...], Any] = {}
    for chunk in chunks:
        distinct.setdefault(key(chunk), chunk.dictionary)
    found = pc.index_in(pa.chunked_array(list(distinct.values()), type=pa.string()), value_set=values) \
        if distinct else pa.array([], type=pa.int32())
    found = np.asarray(found.fill_null(-1).to_numpy(), dtype=np.int64)
    looked_up, start = {}, 0
    for k, dictionary in distinct.items():
        looked_up[k] = found[start:start + len(dictionary)]
        start += len(dictionary)

    def at(chunk: Any) -> Any:
        index = np.asarray(chunk.indices.fill_null(-1).to_numpy(), dtype=np.int64)
        local = looked_up[key(chunk)]
        return np.where(index >= 0, local[np.maximum(index, 0)], -1) if len(local) else np.full(len(index), -1)

    return at
