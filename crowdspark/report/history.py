"""The history of a run root: what each committed night says of the crowd, and the nights that drift.

Built from each night's ``summary.json`` and three columns of its ``workers/`` (``worker``, ``n_labels``,
``accuracy``), plus the row count of its ``relabel/``; no ``items/`` is read, so a history of many nights costs
about what reading their worker tables does (``docs/report.md``).

Drift: a night's value of a series (the error rate against gold, Krippendorff's alpha, a prolific worker's
estimated accuracy) is flagged when it lies more than ``max(DRIFT_K * s, floor)`` from the median of the same
series over the trailing :data:`DRIFT_WINDOW` nights.  ``s`` is the noise of those nights about their own trend:
``1.4826 * median(|r|)`` (the median absolute deviation, scaled to a normal's standard deviation) of their
residuals ``r`` about the Theil-Sen line (slope: the median of the slopes between every two nights; intercept:
``median(x) - slope * median(night)``), or the night's own sampling error when that is larger (a proportion
``p`` measured on ``n`` labels or gold items: ``sqrt(p (1 - p) / n)``; a worker's accuracy on its labels, the
error rate on the night's gold items; a few nights can look steadier than their sampling allows).  Measured about the trend, a steady drift (a worker who degrades a little
every night) does not widen the threshold, so it is flagged once it has left the trailing median by the floor;
a one-night jump is flagged too.  The floor (:data:`DRIFT_FLOORS`) is the smallest move worth a look.  A night
is judged once :data:`DRIFT_MIN_NIGHTS` trailing nights have the value.  The threshold comes from each series'
own noise and fixed floors, never from the gold: the same rule judges a series with gold and one without.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from crowdspark.io.files import LocalFiles
from crowdspark.io.marker import RESULT, read_marker
from crowdspark.report.tables import read_summary, table_format

__all__ = ["DRIFT_WINDOW", "DRIFT_MIN_NIGHTS", "DRIFT_K", "DRIFT_FLOORS", "PROLIFIC_WORKERS", "History",
           "drift_flags", "trend_noise", "collect_history"]

#: trailing nights a night is compared with
DRIFT_WINDOW = 7
#: trailing nights with a value needed before a night is judged
DRIFT_MIN_NIGHTS = 4
#: robust standard deviations from the trailing median beyond which a night is flagged: a normal tail of 6e-7, so
#: that ten series over a year of nights flag a steady series about once in a hundred years, with room for the
#: sampling error's understating an estimated accuracy's spread (the true classes are themselves estimated)
DRIFT_K = 5.0
#: the smallest move flagged, per kind of series (a steady series has a spread near 0)
DRIFT_FLOORS = {"error_rate": 0.01, "krippendorff_alpha": 0.03, "worker": 0.05}
#: workers whose estimated accuracy is followed: those with most labels in the latest night
PROLIFIC_WORKERS = 8

_RUN = re.compile(r"run_id=(?P<id>.+)")
_MAD_TO_SD = 1.4826


@dataclass
class History:
    """The nights of a run root, oldest first.

    Attributes
    ----------
    root : str
    nights : DataFrame
        Index ``run_id``; ``as_of``, ``algorithm``, ``items``, ``labels``, ``workers``, ``error_rate``,
        ``n_gold``, ``krippendorff_alpha``, ``spammers``, ``relabel`` (rows of the night's relabel queue).
    workers : DataFrame
        Index ``run_id``; one column per prolific worker: its estimated accuracy that night (NaN: absent).
    worker_labels : DataFrame
        Like ``workers``: the worker's labels that night.
    drift : DataFrame of bool
        Index ``run_id``; ``error_rate``, ``krippendorff_alpha`` and one column per prolific worker.
    skipped : list of str
        The runs that could not be read, and why.
    """

    root: str
    nights: pd.DataFrame
    workers: pd.DataFrame
    worker_labels: pd.DataFrame
    drift: pd.DataFrame
    skipped: list[str] = field(default_factory=list)


def drift_flags(values: pd.Series, floor: float, counts: pd.Series | None = None, window: int = DRIFT_WINDOW,
                min_nights: int = DRIFT_MIN_NIGHTS, k: float = DRIFT_K) -> pd.Series:
    """Which nights of ``values`` (oldest first; NaN: none that night) drift from their trailing nights (the
    module's rule); ``counts`` (labels or gold items behind each night's value, for a proportion) adds the
    sampling error.  A night without a value, or with fewer than ``min_nights`` trailing values, is not
    flagged."""
    x = values.to_numpy(dtype=float)
    n = counts.to_numpy(dtype=float) if counts is not None else np.full(len(x), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        sampling = np.nan_to_num(np.sqrt(np.clip(x * (1 - x), 0, None) / n), nan=0.0, posinf=0.0)
    flags = np.zeros(len(x), dtype=bool)
    for t in range(len(x)):
        nights = np.arange(max(0, t - window), t)
        nights = nights[np.isfinite(x[nights])]
        if not np.isfinite(x[t]) or len(nights) < min_nights:
            continue
        noise = max(trend_noise(nights, x[nights]), sampling[t])
        flags[t] = abs(x[t] - _median(x[nights])) > max(k * noise, floor)
    return pd.Series(flags, index=values.index)


def trend_noise(nights: np.ndarray, values: np.ndarray) -> float:
    """The robust standard deviation of ``values`` about their Theil-Sen line over ``nights`` (both shape (n,),
    n >= 2): ``1.4826 * median(|residual|)``."""
    i, j = _pairs(len(nights))
    slope = _median((values[j] - values[i]) / (nights[j] - nights[i]))
    intercept = _median(values) - slope * _median(nights)
    return _MAD_TO_SD * _median(np.abs(values - intercept - slope * nights))


@lru_cache(maxsize=64)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.triu_indices(n, k=1)``: every two of ``n`` positions."""
    return np.triu_indices(n, k=1)


def _median(values: np.ndarray) -> float:
    """``float(np.median(values))`` of a short array (n >= 1): the middle value, or the mean of the two middle
    values, of the sorted values (NaN when one is NaN), without :func:`numpy.median`'s overhead per call."""
    ordered = np.sort(np.asarray(values, dtype=float))
    if np.isnan(ordered[-1]):
        return float("nan")
    middle = len(ordered) // 2
    return float(ordered[middle]) if len(ordered) % 2 else float((ordered[middle - 1] + ordered[middle]) / 2)


def _night_dirs(root: str) -> list[tuple[str, str]]:
    """``(run_id, path)`` of the committed results in ``root`` (a marked result, or one of an earlier version
    without a marker, holding ``summary.json``)."""
    files = LocalFiles()
    out = []
    for name in sorted(os.listdir(root)):
        match = _RUN.fullmatch(name)
        path = os.path.join(root, name)
        if not match or not os.path.isfile(os.path.join(path, "summary.json")):
            continue
        marker = read_marker(files, path)
        if marker is None or marker.get("kind") == RESULT:
            out.append((match.group("id"), path))
    return out


def _workers_of(run_dir: str, fmt: str, chosen: list[str] | None = None) -> pd.DataFrame | None:
    """``worker``, ``n_labels`` and ``accuracy`` of the night's ``workers/`` (``worker`` as text), only the rows of
    the ``chosen`` workers when given; ``None`` when the night has no such table."""
    path = os.path.join(run_dir, "workers")
    columns = ["worker", "n_labels", "accuracy"]
    if not os.path.isdir(path):
        return None
    if fmt == "csv":
        frames = [pd.read_csv(os.path.join(path, f), usecols=columns, dtype={"worker": str})
                  for f in sorted(os.listdir(path)) if f.endswith(".csv")]
        table = pd.concat(frames, ignore_index=True) if frames else None
        return table if table is None or chosen is None else table[table["worker"].isin(chosen)]
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    files = _parquet_files(path)
    table = (pa.concat_tables([_read_parquet(f, columns) for f in files]) if files
             else ds.dataset(path, format="parquet").to_table(columns=columns))
    worker = pc.cast(table.column("worker"), pa.string())
    if chosen is not None:
        table = table.filter(pc.is_in(worker, value_set=pa.array(chosen, type=pa.string())))
        worker = pc.cast(table.column("worker"), pa.string())
    return table.set_column(0, "worker", worker).to_pandas()


def _parquet_files(path: str) -> list[str]:
    """The files of the Parquet table folder ``path`` that a dataset reads (names not starting with ``_`` or
    ``.``), in name order."""
    return [os.path.join(path, name) for name in sorted(os.listdir(path)) if not name.startswith(("_", "."))]


def _read_parquet(path: str, columns: list[str]) -> Any:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).read(columns=columns)


def _queue_rows(run_dir: str, fmt: str) -> float:
    path = os.path.join(run_dir, "relabel")
    if not os.path.isdir(path):
        return np.nan
    if fmt == "csv":
        rows = 0
        for name in (f for f in os.listdir(path) if f.endswith(".csv")):
            with open(os.path.join(path, name), "rb") as handle:
                rows += max(sum(1 for _ in handle) - 1, 0)
        return float(rows)
    import pyarrow.parquet as pq

    return float(sum(pq.ParquetFile(f).metadata.num_rows for f in _parquet_files(path)))


def _night_row(run_id: str, summary: dict[str, Any], relabel: float) -> dict[str, Any]:
    counts, metrics = summary.get("counts") or {}, summary.get("metrics") or {}
    quality = summary.get("quality") or {}
    return {"run_id": run_id, "as_of": (summary.get("inputs") or {}).get("as_of") or "",
            "algorithm": summary.get("algorithm"), "items": counts.get("items"), "labels": counts.get("labels"),
            "workers": counts.get("workers"), "error_rate": metrics.get("error_rate"),
            "n_gold": metrics.get("n_gold"), "krippendorff_alpha": quality.get("krippendorff_alpha"),
            "spammers": (quality.get("workers") or {}).get("spammers"), "relabel": relabel}


def collect_history(root: str, prolific: int = PROLIFIC_WORKERS) -> History:
    """Read the committed nights of the local run root ``root`` (oldest first: by as-of date, then run id)."""
    rows, formats, skipped = [], {}, []
    for run_id, path in _night_dirs(root):
        try:
            summary = read_summary(path)
            fmt = table_format(summary)
            rows.append(_night_row(run_id, summary, _queue_rows(path, fmt)))
            formats[run_id] = (path, fmt)
        except (OSError, ValueError, KeyError) as exc:
            skipped.append(f"run_id={run_id}: {exc}")
    columns = list(_night_row("", {}, np.nan))
    nights = pd.DataFrame(rows, columns=columns).sort_values(["as_of", "run_id"]).set_index("run_id")
    accuracies = _night_workers(nights.index, formats, prolific, skipped)
    for column in ("error_rate", "n_gold", "krippendorff_alpha", "spammers", "relabel", "items", "labels",
                   "workers"):
        nights[column] = pd.to_numeric(nights[column], errors="coerce")
    workers, labels = (_prolific(nights.index, accuracies, prolific, column) for column in ("accuracy", "n_labels"))
    drift = pd.DataFrame({"error_rate": drift_flags(nights["error_rate"], DRIFT_FLOORS["error_rate"], nights["n_gold"]),
                          "krippendorff_alpha": drift_flags(nights["krippendorff_alpha"],
                                                            DRIFT_FLOORS["krippendorff_alpha"])}, index=nights.index)
    for worker in workers.columns:
        drift[worker] = drift_flags(workers[worker], DRIFT_FLOORS["worker"], labels[worker])
    return History(root=root, nights=nights, workers=workers, worker_labels=labels, drift=drift, skipped=skipped)


def _night_workers(order: pd.Index, formats: dict[str, tuple[str, str]], prolific: int, skipped: list[str]
                   ) -> dict[str, pd.DataFrame | None]:
    """The rows of each night's ``workers/`` that :func:`_prolific` reads: the latest night with a worker table
    whole (to choose its ``prolific`` workers with most labels), the others only those workers' rows."""
    tables: dict[str, pd.DataFrame | None] = {}
    chosen = None
    for run_id in reversed(order):
        try:
            tables[run_id] = _workers_of(*formats[run_id], chosen)
        except (OSError, ValueError, KeyError) as exc:
            skipped.append(f"run_id={run_id}: {exc}")
            tables[run_id] = None
        if chosen is None and tables[run_id] is not None and len(tables[run_id]):
            chosen = tables[run_id].nlargest(prolific, "n_labels")["worker"].astype(str).tolist()
    return tables


def _prolific(order: pd.Index, tables: dict[str, pd.DataFrame | None], prolific: int, column: str) -> pd.DataFrame:
    """``column`` of ``workers/``, night by night, of the ``prolific`` workers with most labels in the latest night
    that has a worker table."""
    latest = next((tables[r] for r in reversed(order) if tables.get(r) is not None and len(tables[r])), None)
    if latest is None:
        return pd.DataFrame(index=order)
    chosen = latest.nlargest(prolific, "n_labels")["worker"].astype(str).tolist()
    names = pd.Index(chosen)
    values = np.full((len(order), len(chosen)), np.nan)
    for night, run_id in enumerate(order):
        table = tables.get(run_id)
        if table is None:
            continue
        at = names.get_indexer(table["worker"].astype(str).to_numpy(dtype=object))
        rows = np.flatnonzero(at >= 0)
        first = np.unique(at[rows], return_index=True)[1]  # a worker on two rows: its first
        values[night, at[rows[first]]] = table[column].to_numpy(dtype=float)[rows[first]]
    return pd.DataFrame(values, index=order, columns=chosen)
