"""Writing results so that a failed run never leaves a directory that looks complete.

Everything is first written into a staging directory beside the destination
(``<dir>.crowdspark-staging-<id>``); ``summary.json`` is written last, and only then is the staging
directory renamed to the destination (an existing destination is moved aside first and deleted after).
A failed run removes its staging directory; a killed one leaves only a directory whose name says it is
staging, without being mistaken for a result.  Local paths use ``os.rename``; other filesystems (HDFS,
S3A ...) use Hadoop's ``FileSystem.rename`` through the SparkContext.

Tables written under the output directory:

* ``items/``: ``item`` (string), ``label`` (string), ``confidence`` (double, the posterior of ``label``),
  ``posterior`` (array<double> in the order of ``summary.json``'s ``classes``) and model extras
  (``level``, ``level_posterior`` ...).
* ``workers/``: ``worker`` (string), ``n_labels`` (long), ``accuracy`` (double), ``confusion``
  (array<array<double>>, row = true class, column = given label) and model extras.
* ``model/``: the fitted global parameters and the encoding, for warm starts (:mod:`crowdspark.persist`).

With a run id, results go to ``<output>/run_id=<id>/`` and ``<output>/_LATEST.json`` is moved to the new
run only after it is complete.

Parquet by default; with ``output.format = "csv"`` array columns are written as JSON strings.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from typing import Any

import numpy as np
import pandas as pd

from crowdspark.data import is_local
from crowdspark.models.base import ItemResult

__all__ = ["StagedOutput", "item_batch", "item_frame", "worker_frame", "write_frame_local", "to_jsonable"]

log = logging.getLogger(__name__)


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
    values; measured 20x faster than going through pandas columns of Python lists.  ``extras`` (the
    model's ``item_extras``, name -> Spark type) fixes the type of scalar extras.
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
    """Write a pandas table as a one-file dataset directory (``part-00000.<fmt>``)."""
    os.makedirs(directory, exist_ok=True)
    if fmt == "csv":
        _csv_ready(frame).to_csv(os.path.join(directory, "part-00000.csv"), index=False)
    else:
        frame = frame.copy()
        for column in frame.columns:
            if len(frame) and isinstance(frame[column].iloc[0], np.ndarray):
                frame[column] = [v.tolist() for v in frame[column]]
        frame.to_parquet(os.path.join(directory, "part-00000.parquet"), index=False)


def _strip(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


class StagedOutput:
    """A staging directory that becomes ``destination`` on :meth:`commit`.

    Parameters
    ----------
    destination : str
        The output directory (local path or any Hadoop filesystem URI).
    spark : SparkSession, optional
        Needed for non-local destinations.
    """

    def __init__(self, destination: str, spark: Any = None) -> None:
        self.destination = destination.rstrip("/")
        self.local = is_local(self.destination)
        self.staging = f"{self.destination}.crowdspark-staging-{uuid.uuid4().hex[:12]}"
        self._spark = spark
        if self.local:
            os.makedirs(_strip(self.staging), exist_ok=False)

    def path(self, name: str) -> str:
        """Path of ``name`` inside the staging directory."""
        return f"{self.staging}/{name}"

    def write_json(self, name: str, payload: dict[str, Any]) -> None:
        """Write ``payload`` as JSON to ``name`` (a path relative to the output directory)."""
        text = json.dumps(to_jsonable(payload), indent=2, sort_keys=False) + "\n"
        self.write_bytes(name, text.encode("utf-8"))

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write ``data`` to ``name`` (a path relative to the output directory), creating folders."""
        _write_file(self.path(name), data, self._spark, self.local)

    def commit(self) -> None:
        """Make the staged result the destination (moving an older result aside, then deleting it)."""
        if self.local:
            dest, staging = _strip(self.destination), _strip(self.staging)
            old = None
            if os.path.exists(dest):
                old = f"{dest}.crowdspark-old-{uuid.uuid4().hex[:12]}"
                os.rename(dest, old)
            os.rename(staging, dest)
            if old:
                shutil.rmtree(old, ignore_errors=True)
        else:
            fs, dest = self._hadoop(self.destination)
            _, staging = self._hadoop(self.staging)
            old = None
            if fs.exists(dest):
                _, old = self._hadoop(f"{self.destination}.crowdspark-old-{uuid.uuid4().hex[:12]}")
                fs.rename(dest, old)
            if not fs.rename(staging, dest):
                raise OSError(f"could not rename {self.staging} to {self.destination}")
            if old is not None:
                fs.delete(old, True)
        log.info("results written to %s", self.destination)

    def abort(self) -> None:
        """Remove the staging directory (best effort)."""
        try:
            if self.local:
                shutil.rmtree(_strip(self.staging), ignore_errors=True)
            else:
                fs, staging = self._hadoop(self.staging)
                fs.delete(staging, True)
        except Exception:  # pragma: no cover - best effort on a failing run
            log.warning("could not remove staging directory %s", self.staging)

    def _hadoop(self, path: str):
        sc = self._spark.sparkContext
        jvm = sc._jvm
        jpath = jvm.org.apache.hadoop.fs.Path(path)
        return jpath.getFileSystem(sc._jsc.hadoopConfiguration()), jpath

    def __enter__(self) -> "StagedOutput":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()


def _write_file(path: str, data: bytes, spark: Any, local: bool) -> None:
    if local:
        target = _strip(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as handle:
            handle.write(data)
        return
    sc = spark.sparkContext
    jpath = sc._jvm.org.apache.hadoop.fs.Path(path)
    stream = jpath.getFileSystem(sc._jsc.hadoopConfiguration()).create(jpath, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()


def run_directory(output_dir: str, run_id: str) -> str:
    """Where run ``run_id`` writes: ``<output_dir>/run_id=<run_id>``."""
    if not run_id or any(ch in run_id for ch in "/\\=") or run_id.startswith((".", "_")):
        from crowdspark.errors import ConfigError

        raise ConfigError(f"--run-id must be a plain name such as 2026-11-25 (no '/', '=', leading '.' or '_'), but got {run_id!r}")
    return f"{output_dir.rstrip('/')}/run_id={run_id}"


def write_latest(output_dir: str, run_id: str, run_path: str, spark: Any = None) -> None:
    """Point ``<output_dir>/_LATEST.json`` at a completed run (written aside, then renamed over the old one)."""
    from datetime import datetime, timezone

    payload = json.dumps(
        {"run_id": run_id, "path": run_path, "completed_at": datetime.now(timezone.utc).isoformat()}, indent=2
    ).encode("utf-8")
    final = f"{output_dir.rstrip('/')}/_LATEST.json"
    tmp = f"{final}.tmp-{uuid.uuid4().hex[:8]}"
    local = is_local(output_dir)
    _write_file(tmp, payload, spark, local)
    if local:
        os.replace(_strip(tmp), _strip(final))
    else:
        sc = spark.sparkContext
        jvm = sc._jvm
        fs = jvm.org.apache.hadoop.fs.Path(final).getFileSystem(sc._jsc.hadoopConfiguration())
        fs.delete(jvm.org.apache.hadoop.fs.Path(final), False)
        fs.rename(jvm.org.apache.hadoop.fs.Path(tmp), jvm.org.apache.hadoop.fs.Path(final))
    log.info("%s now points at run %s", final, run_id)
