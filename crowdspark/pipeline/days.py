"""The labels of chosen days, as the runs of ``incremental.mode = "on"`` read them: a range of days (the days
after the previous run) or a set of days (the earlier days of the items those days touch).

Each read gives the canonical text of the configured columns (:mod:`crowdspark.io.cells`, the same on every
reader) as ``item``, ``worker``, ``label``, plus ``day`` (``YYYY-MM-DD``) from ``input.date_column``:

* without a SparkSession (the night's engine choice, :func:`crowdspark.pipeline.source.driver_choice`, picked
  the local engine), pandas reads local files; a folder of Hive-style day partitions
  (``<date_column>=YYYY-MM-DD/``) is read one day folder at a time, so only the chosen days are read, and the
  folder's day is the column (as Spark reads it);
* with one, Spark reads, and prunes the partitions of the other days.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable
from typing import Any

import pandas as pd

from crowdspark.config import RunConfig
from crowdspark.errors import ConfigError, InputError
from crowdspark.faces import display_key
from crowdspark.io.column_types import check_column_types
from crowdspark.io.day_folders import day_folders as _day_folders
from crowdspark.io.pandas_reader import canonical_frame, read_frame
from crowdspark.io.paths import resolve_format, strip_file_scheme
from crowdspark.io.rules import check_columns
from crowdspark.pipeline.window import Window, spark_date

__all__ = ["DayReader"]

#: a predicate on days
DayTest = Callable[[_dt.date], bool]


class DayReader:
    """Reads the canonical labels of chosen days of one input.

    Parameters
    ----------
    config : RunConfig
        ``input`` says the columns, the format, the date column and the filter.
    labels_path : str
    spark : SparkSession, optional
        The reader: Spark, or pandas when ``None``.

    Raises
    ------
    ConfigError
        For ``input.filter`` with the pandas reader.
    InputError
        For local Parquet day files that give an id or label column different types (every file of the input
        is checked, whichever days a night reads: :func:`crowdspark.io.column_types.check_column_types`).
    """

    def __init__(self, config: RunConfig, labels_path: str, spark: Any = None) -> None:
        self.cfg = config.input
        self.path = labels_path
        self.column = config.input.date_column
        self.spark = spark
        self._raw: Any = None
        self._folders: dict[str, str] | None = None
        self._whole: pd.DataFrame | None = None
        if self.spark is None and self.cfg.filter:
            raise ConfigError(f"input.filter ({self.cfg.filter!r}) needs the spark engine; filter the data first or "
                              "use --engine spark")
        if self.spark is None:
            self._folders = _day_folders(strip_file_scheme(labels_path), self.column)
        check_column_types(labels_path, self.cfg.format, (self.cfg.item, self.cfg.worker, self.cfg.label), "labels")

    @property
    def distributed(self) -> bool:
        """Whether the frames are Spark DataFrames."""
        return self.spark is not None

    # ---- the two kinds of reads ---------------------------------------------------------------------
    def range(self, start: _dt.date | None, end: _dt.date) -> tuple[Any, dict[str, int]]:
        """The labels of the days ``[start, end]`` (``start`` ``None``: every day up to ``end``) and the labels
        of each day; rows whose date is not a date are refused (as :class:`Window` does)."""
        window = Window(self.column, start, end)
        if self.spark is not None:
            raw = window.filter_spark(self._spark_raw(), self.path)
            counts = window.day_counts_spark(raw, self.path)
            return self._canonical_spark(raw), counts
        frame = self._pandas_days(lambda day: (start is None or day >= start) and day <= end)
        return frame, {str(k): int(v) for k, v in sorted(frame["day"].value_counts().items())}

    def days(self, days: list[str]) -> Any:
        """The labels of the days ``days`` (``YYYY-MM-DD``)."""
        if self.spark is not None:
            return self._canonical_spark(self._spark_raw().filter(_spark_day(self.column).isin(list(days))))
        wanted = set(days)
        return self._pandas_days(lambda day: day.isoformat() in wanted)

    def bytes_of(self, days: list[str]) -> int | None:
        """Bytes of the files Spark lists in the partition folders of ``days`` (``None`` when the listing is
        unavailable or the input is not partitioned by day)."""
        from crowdspark.io.spark_reader import listed_files

        listed = listed_files(self.spark, self._spark_raw())
        if listed is None:
            return None
        folders = {f"{self.column}={day}" for day in days}
        if not any(f"{self.column}=" in path for path, _, _ in listed):
            return None
        return sum(size for path, size, _ in listed if folders & set(path.split("/")))

    def partitions(self, end: _dt.date) -> dict[str, dict[str, int]]:
        """The fingerprint of every day up to ``end`` the input holds (``YYYY-MM-DD`` -> fingerprint), taken
        from the listing the reads use, without reading a label.

        A day partition folder (``<date_column>=<day>/``) is fingerprinted by its data files (names not starting
        with ``_`` or ``.``, as Spark lists them): ``files`` and ``bytes``.  An input that is not partitioned by
        day is fingerprinted by its ``labels`` per day (the pandas reader counts the frame it holds; Spark runs
        one job over the date column).
        """
        if self.spark is None and self._folders is not None:
            return {day: _folder_fingerprint(folder) for day, folder in sorted(self._folders.items())
                    if _folder_date(day, folder, self.column) <= end}
        if self.spark is None:
            days = self._whole_pandas()["day"]
            counts = days[days <= end.isoformat()].value_counts()
            return {str(day): {"labels": int(n)} for day, n in sorted(counts.items())}
        listed = self._spark_partitions(end)
        if listed is not None:
            return listed
        window = Window(self.column, None, end)
        counts = window.day_counts_spark(window.filter_spark(self._spark_raw(), self.path), self.path)
        return {day: {"labels": n} for day, n in counts.items()}

    # ---- Spark --------------------------------------------------------------------------------------
    def _spark_partitions(self, end: _dt.date) -> dict[str, dict[str, int]] | None:
        """Files and bytes per day partition folder up to ``end`` from Spark's listing (``None`` when the
        listing is unavailable or the input is not partitioned by day)."""
        from crowdspark.io.spark_reader import listed_files

        listed = listed_files(self.spark, self._spark_raw())
        if listed is None:
            return None
        prefix = f"{self.column}="
        out: dict[str, dict[str, int]] = {}
        for path, size, _ in listed:
            parts = [part[len(prefix):] for part in path.split("/") if part.startswith(prefix)]
            if not parts:
                return None
            if _folder_date(parts[-1], path, self.column) <= end:
                entry = out.setdefault(parts[-1], {"files": 0, "bytes": 0})
                entry["files"] += 1
                entry["bytes"] += int(size)
        return dict(sorted(out.items()))

    def _spark_raw(self):
        from crowdspark.io.spark_reader import read_spark_frame
        from crowdspark.pipeline.prepare import filtered_frame  # input.filter, applied as the window's reads apply it

        if self._raw is None:
            fmt = resolve_format(self.path, self.cfg.format, "labels")
            self._raw = filtered_frame(read_spark_frame(self.spark, self.path, fmt, "labels"), self.cfg.filter)
        return self._raw

    def _canonical_spark(self, raw):
        from crowdspark.io.spark_reader import canonical_spark_frame

        if self.column not in raw.columns:
            raise _missing_date_column(self.column, list(raw.columns), self.path)
        day = "__crowdspark_day"
        columns = {"item": self.cfg.item, "worker": self.cfg.worker, "label": self.cfg.label, "day": day}
        return canonical_spark_frame(raw.withColumn(day, _spark_day(self.column)), columns, "labels", self.path)

    # ---- pandas -------------------------------------------------------------------------------------
    def _pandas_days(self, wanted: DayTest) -> pd.DataFrame:
        if self._folders is not None:
            parts = [self._day_folder(day, folder) for day, folder in sorted(self._folders.items())
                     if wanted(_folder_date(day, folder, self.column))]
            parts = [part for part in parts if len(part)]
            if not parts:
                return pd.DataFrame({c: pd.Series(dtype=object) for c in ("item", "worker", "label", "day")})
            return pd.concat(parts, ignore_index=True)
        whole = self._whole_pandas()
        inside = whole["day"].map(lambda text: wanted(_dt.date.fromisoformat(text))).astype(bool)
        return whole.loc[inside.to_numpy()].reset_index(drop=True)

    def _day_folder(self, day: str, folder: str) -> pd.DataFrame:
        frame = read_frame(folder, self.cfg.format, "labels")
        if not len(frame):
            return frame
        if self.column in frame.columns:
            raise InputError(f"labels at {folder!r} hold a column {self.column!r} and sit in a folder named after it; "
                             "keep the date in one place (the folder, as Spark reads it)")
        out = self._canonical(frame, folder)
        out["day"] = day
        return out

    def _whole_pandas(self) -> pd.DataFrame:
        """Every label of an input that is not partitioned by day, with its ``day`` (read once)."""
        if self._whole is None:
            frame = read_frame(self.path, self.cfg.format, "labels")
            window = Window(self.column, None, _dt.date.max)
            frame, _ = window.filter_pandas(frame, self.path)  # refuses dates that are not dates
            out = self._canonical(frame, self.path)
            out["day"] = pd.to_datetime(frame[self.column].astype("string"), format="%Y-%m-%d").dt.strftime(
                "%Y-%m-%d").to_numpy(dtype=object)
            self._whole = out
        return self._whole

    def _canonical(self, frame: pd.DataFrame, source: str) -> pd.DataFrame:
        columns = {"item": self.cfg.item, "worker": self.cfg.worker, "label": self.cfg.label}
        check_columns(list(frame.columns), columns, "labels", source, "input")
        return canonical_frame(frame, columns, "labels", source)


def _spark_day(column: str):
    from pyspark.sql import functions as F

    return F.date_format(spark_date(column), "yyyy-MM-dd")


def _folder_fingerprint(folder: str) -> dict[str, int]:
    """``files`` and ``bytes`` of the data files under a local day folder (names not starting with ``_`` or
    ``.``, at any depth, as Spark lists a partition)."""
    files = size = 0
    for directory, subfolders, names in os.walk(folder):
        subfolders[:] = [name for name in subfolders if not name.startswith(("_", "."))]
        for name in names:
            if not name.startswith(("_", ".")):
                files += 1
                size += os.path.getsize(os.path.join(directory, name))
    return {"files": files, "bytes": size}


def _folder_date(day: str, folder: str, column: str) -> _dt.date:
    try:
        if len(day) != 10:
            raise ValueError(day)
        return _dt.date.fromisoformat(day)
    except ValueError:
        raise InputError(f"labels at {folder!r}: the folder's {column!r} ({display_key('input.date_column')}) is "
                         f"{day!r}, not a date written YYYY-MM-DD; rename the folder, or name another column") from None


def _missing_date_column(column: str, present: list[str], source: str) -> InputError:
    return InputError(f"labels at {source!r} have no column {column!r} ({display_key('input.date_column')}); present "
                      f"columns: {present}")
