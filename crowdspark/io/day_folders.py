"""Local folders of Hive-style day partitions (``<root>/<date_column>=YYYY-MM-DD/``), read with pandas.

Spark reads such a folder with the folder's day as a column; :func:`read_day_folders` gives pandas the same
frame (the day as text ``YYYY-MM-DD``, which the window reads as Spark's date), so that a lake of a few
kilobytes is read without starting Spark, and only the folders of the days asked for are opened.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pandas as pd

from crowdspark.errors import InputError
from crowdspark.io.pandas_reader import read_frame

__all__ = ["day_folders", "is_day_partitioned", "read_day_folders"]


def day_folders(path: str, column: str) -> dict[str, str] | None:
    """``day text -> folder`` of a local folder of ``<column>=<day>`` folders, ``None`` for any other input."""
    if not column or not os.path.isdir(path):
        return None
    prefix = f"{column}="
    folders = {name[len(prefix):]: os.path.join(path, name) for name in os.listdir(path)
               if name.startswith(prefix) and os.path.isdir(os.path.join(path, name))}
    return folders or None


def is_day_partitioned(path: str, column: str, files: list[str]) -> bool:
    """Whether every file of ``files`` (the data files of ``path``) sits directly in a ``<column>=<day>`` folder
    of ``path``: the one layout :func:`read_day_folders` reads as Spark would."""
    if not files or day_folders(path, column) is None:
        return False
    prefix = f"{column}="
    for name in files:
        parts = os.path.relpath(name, path).split(os.sep)
        if len(parts) != 2 or not parts[0].startswith(prefix):
            return False
    return True


def read_day_folders(path: str, fmt: str, what: str, column: str, dictionary: tuple[str, ...] = (),
                     wanted: Callable[[str], bool] | None = None) -> pd.DataFrame:
    """The rows of the day folders of ``path`` (those whose folder path ``wanted`` accepts; all without it), in
    the order of their days, with the column ``column`` holding each folder's day as text.

    Parameters
    ----------
    path : str
        A local folder for which :func:`day_folders` is not ``None``.
    fmt, what, dictionary
        As :func:`crowdspark.io.pandas_reader.read_frame` takes them, for each folder.
    wanted : callable, optional
        ``folder path -> bool``, e.g. :meth:`crowdspark.pipeline.window.Window.holds_path`.

    Raises
    ------
    InputError
        For a file that also holds ``column`` (the day would be in two places), and as ``read_frame`` raises.
    """
    folders = day_folders(path, column) or {}
    parts = []
    for day, folder in sorted(folders.items()):
        if wanted is not None and not wanted(folder):
            continue
        frame = read_frame(folder, fmt, what, dictionary=dictionary)
        if column in frame.columns:
            raise InputError(f"{what} at {folder!r} hold a column {column!r} and sit in a folder named after it; keep "
                             "the date in one place (the folder, as Spark reads it)")
        if len(frame.columns):
            parts.append(frame.assign(**{column: day}))
    if not parts:
        return pd.DataFrame()
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    for name in dictionary:  # one set of categories over the days, as one read of every file gives
        if name in frame.columns and all(isinstance(p[name].dtype, pd.CategoricalDtype) for p in parts if name in p):
            frame[name] = pd.api.types.union_categoricals([p[name] for p in parts])
    return frame
