"""Reading a run directory for its report: ``summary.json``, ``workers/`` whole, ``items/`` in column batches.

The report runs on the driver and reads local directories only; ``items/`` is never held whole: it is read a
few columns at a time, one record batch after another (:func:`item_batches`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

import pandas as pd

from crowdspark.errors import ConfigError, InputError
from crowdspark.io.paths import is_local, strip_file_scheme
from crowdspark.io.runs import read_latest

__all__ = ["resolve_run_dir", "read_summary", "table_format", "read_workers", "item_columns", "item_batches", "read_queue"]

_BATCH_ROWS = 1 << 18
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


def read_workers(run_dir: str, fmt: str) -> pd.DataFrame | None:
    """``workers/`` as one frame (one row per worker), or ``None`` when the run has no such table."""
    path = os.path.join(run_dir, "workers")
    if not os.path.isdir(path):
        return None
    if fmt == "csv":
        files = sorted(f for f in os.listdir(path) if f.endswith(".csv"))
        frames = [pd.read_csv(os.path.join(path, f), dtype={"worker": str}) for f in files]
        return _csv_arrays(pd.concat(frames, ignore_index=True)) if frames else None
    return pd.read_parquet(path)


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


def item_batches(run_dir: str, fmt: str, columns: Sequence[str]) -> Iterator[pd.DataFrame]:
    """``items/``'s ``columns``, one batch of rows at a time (``item`` and ``label`` as strings)."""
    path = os.path.join(run_dir, "items")
    if fmt == "csv":
        dtypes = {c: str for c in ("item", "label") if c in columns}
        for name in sorted(f for f in os.listdir(path) if f.endswith(".csv")):
            yield from pd.read_csv(os.path.join(path, name), usecols=list(columns), dtype=dtypes,
                                   chunksize=_BATCH_ROWS)
        return
    for batch in _parquet_dataset(path).to_batches(columns=list(columns), batch_size=_BATCH_ROWS):
        yield batch.to_pandas()


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
