"""The days a run reads: ``input.window_days`` days of ``input.date_column`` ending at the run's as-of date.

The window follows the run, not the clock: a backfill of an older night reads that night's days, never the
future.  Rows whose date is not a date are refused (not dropped); the run summary records how many labels each
day of the window brought (:meth:`Window.day_counts`), which shows a missing day.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

import pandas as pd

from crowdspark.config import RunConfig
from crowdspark.errors import InputError
from crowdspark.faces import display_key

__all__ = ["Window", "spark_date"]


def spark_date(column: str) -> Any:
    """The date of each row of ``column`` as Spark reads it (its text as a date), null where the text is not a
    date: never a failed job under ANSI mode, so that such rows are refused by :meth:`Window.day_counts_spark`
    with the message the pandas reader gives."""
    from pyspark.sql import functions as F

    return F.col(f"`{column}`").cast("string").try_cast("date")


@dataclass(frozen=True)
class Window:
    """The days ``[start, end]`` of ``column`` (``start`` ``None``: every day up to ``end``).

    Attributes
    ----------
    column : str
    start : date or None
    end : date
    """

    column: str
    start: _dt.date | None
    end: _dt.date

    @classmethod
    def of(cls, config: RunConfig, as_of: _dt.date) -> Window | None:
        """The window of a run as of ``as_of`` (``None`` without ``input.date_column``)."""
        column, days = config.input.date_column, config.input.window_days
        if not column:
            return None
        start = as_of - _dt.timedelta(days=days - 1) if days else None
        return cls(column, start, as_of)

    def describe(self) -> str:
        since = f"from {self.start} " if self.start else "up "
        return f"{self.column} {since}to {self.end} ({display_key('input.date_column')}, " \
               f"{display_key('input.window_days')}, the run's as-of date)"

    def holds_path(self, path: str) -> bool:
        """Whether a file at ``path`` may hold rows of the window: ``False`` only when it sits in a partition
        folder ``<column>=<date>/`` outside the window."""
        prefix = f"{self.column}="
        for part in path.split("/"):
            if part.startswith(prefix):
                try:
                    day = _dt.date.fromisoformat(part[len(prefix):])
                except ValueError:
                    return True  # the reader refuses it with its own message
                return (self.start is None or day >= self.start) and day <= self.end
        return True

    def days(self) -> list[str]:
        """Every day of the window (empty when it is open-ended)."""
        if self.start is None:
            return []
        return [(self.start + _dt.timedelta(days=d)).isoformat() for d in range((self.end - self.start).days + 1)]

    def _missing_column(self, columns: list[str], source: str) -> InputError:
        return InputError(
            f"labels at {source!r} have no column {self.column!r} ({display_key('input.date_column')}); present "
            f"columns: {columns}. Hive-style folders (date=2026-11-25/) are columns only when Spark reads them: "
            "run on the spark engine, or write the dates into a column"
        )

    def filter_spark(self, frame: Any, source: str) -> Any:
        """Spark rows in the window, plus rows whose date is not a date (refused by :meth:`day_counts`)."""
        from pyspark.sql import functions as F

        if self.column not in frame.columns:
            raise self._missing_column(list(frame.columns), source)
        day = spark_date(self.column)
        inside = day <= F.lit(self.end.isoformat()).cast("date")
        if self.start is not None:
            inside = inside & (day >= F.lit(self.start.isoformat()).cast("date"))
        return frame.filter(inside | day.isNull())

    def day_counts_spark(self, frame: Any, source: str) -> dict[str, int]:
        """Labels per day of a Spark frame from :meth:`filter_spark` (one small job)."""
        from pyspark.sql import functions as F

        day = F.date_format(spark_date(self.column), "yyyy-MM-dd").alias("day")
        counts = {row["day"]: int(row["n"]) for row in frame.groupBy(day).agg(F.count(F.lit(1)).alias("n")).collect()}
        example = None
        if None in counts:  # one more one-row job, only to name a value as the pandas reader does
            column = F.col(f"`{self.column}`")
            example = frame.filter(spark_date(self.column).isNull()).select(column).limit(1).collect()[0][0]
        return self._checked(counts, source, example)

    def filter_pandas(self, frame: pd.DataFrame, source: str) -> tuple[pd.DataFrame, dict[str, int]]:
        """The pandas rows in the window, and the labels per day."""
        if self.column not in frame.columns:
            raise self._missing_column([str(c) for c in frame.columns], source)
        parsed = pd.to_datetime(frame[self.column].astype("string"), format="%Y-%m-%d", errors="coerce").dt.date
        bad = int(parsed.isna().sum())
        if bad:
            example = frame.loc[parsed.isna(), self.column].iloc[0]
            self._checked({None: bad}, source, example)
        inside = parsed <= self.end
        if self.start is not None:
            inside &= parsed >= self.start
        days = parsed[inside].map(_dt.date.isoformat).value_counts()
        return frame.loc[inside.to_numpy()].reset_index(drop=True), {str(k): int(v) for k, v in days.items()}

    def _checked(self, counts: dict[Any, int], source: str, example: Any = None) -> dict[str, int]:
        if None in counts:
            shown = f" such as {example!r}" if example is not None else ""
            raise InputError(
                f"labels at {source!r}: {counts[None]} value(s) of {self.column!r} ({display_key('input.date_column')})"
                f" are not dates written YYYY-MM-DD{shown}; fix them, or name another column"
            )
        return dict(sorted(counts.items()))
