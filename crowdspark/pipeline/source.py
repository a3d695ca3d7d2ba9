"""Where a run's labels come from, and which reader and engine take them: decided once, by :func:`choose_source`.

* ``engine.name = "local"``: pandas reads local files, the local engine fits.
* ``engine.name = "spark"`` and the input is small (:func:`local_small_input`: local files, no Hive-style
  partition folders but one level of ``input.date_column`` day folders (:mod:`crowdspark.io.day_folders`), no
  ``input.filter``, fewer bytes than ``engine.small_input_bytes``):
  pandas reads, the local engine fits on the driver, and no SparkSession is needed at all (:func:`needs_spark`).
* ``engine.name = "spark"``, the input is local files pandas can read, and the master is local: the memory
  rule of :mod:`crowdspark.engine.choice` (the local engine's predicted peak within the driver's budget) picks
  the local engine (pandas reads, no SparkSession) or the Spark engine (:func:`driver_choice`).
* An incremental night (:class:`crowdspark.pipeline.incremental.NightSource`) is decided by the same rule, with
  its previous run as the warm start; the estimate covers every file of the input, which bounds what any night
  reads (a full refit reads every day up to its as-of date, an incremental night fewer).
* Otherwise Spark reads; if the files it lists total fewer bytes than the threshold (remote inputs, or an
  ``input.filter``, which Spark applies before collecting), the labels are collected to the driver and fitted
  by the local engine; else the Spark engine fits them.

Every path gives the same answers (tested); the summary records which ran (``engine``, ``small_input``) and
why (``engine_choice``).

``--labels table:<db>.<name>`` (and ``--gold``) reads a catalog table with ``spark.table``
(:mod:`crowdspark.io.catalog`): always Spark, with the run's window applied to the table before anything is
read, so that a table partitioned by ``input.date_column`` lists only the window's partitions; a small table is
then collected like small files.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
from dataclasses import dataclass, replace
from typing import Any, Protocol

import pandas as pd

from crowdspark.config import RunConfig
from crowdspark.engine.choice import EngineChoice, choose_engine, driver_master, estimate_files, is_local_master
from crowdspark.errors import InputError
from crowdspark.io.catalog import read_table, table_name, table_provider
from crowdspark.io.column_types import check_input_types
from crowdspark.io.day_folders import is_day_partitioned, read_day_folders
from crowdspark.io.pandas_reader import read_frame
from crowdspark.io.paths import is_local, resolve_format, resolve_local_paths
from crowdspark.io.saved_model import SavedModel
from crowdspark.io.worker_table import WorkerTable
from crowdspark.pipeline.fit import Fitted, RunOptions
from crowdspark.pipeline.manifest import check_new_data, run_manifest
from crowdspark.pipeline.prepare import Prepared
from crowdspark.pipeline.window import Window

__all__ = ["Source", "Reading", "RunSource", "WindowSource", "choose_source", "needs_spark", "local_small_input",
           "driver_choice", "input_signature", "spark_files", "read_spark_input"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Source:
    """The decision of :func:`choose_source`, with what Spark has read for it.

    Attributes
    ----------
    engine : {"local", "spark"}
        The engine that fits.
    small_input : dict, optional
        ``{"input_bytes", "threshold", "reader"}`` when a Spark-engine run fits on the driver.
    labels_frame, gold_frame : pyspark DataFrame, optional
        What Spark read (``None`` when pandas reads).
    input_format : str, optional
        The format of the label files Spark read.
    filter_applied : bool
        ``labels_frame`` is already filtered by ``input.filter`` (a small input collected to the driver).
    choice : dict, optional
        Why this engine (:meth:`crowdspark.engine.choice.EngineChoice.to_dict`).
    """

    engine: str
    small_input: dict[str, Any] | None = None
    labels_frame: Any = None
    gold_frame: Any = None
    input_format: str | None = None
    filter_applied: bool = False
    choice: dict[str, Any] | None = None

    @property
    def reader(self) -> str:
        return "pandas" if self.labels_frame is None else "spark"


def _hive_partitioned(path: str, files: list[str]) -> bool:
    """Whether a file sits in a folder named ``column=value`` below ``path`` (a Hive-style partition)."""
    root = os.path.dirname(path) if os.path.isfile(path) else path.split("*", 1)[0]
    return any("=" in part for f in files for part in os.path.dirname(os.path.relpath(f, root)).split(os.sep))


def _pandas_files(config: RunConfig, labels_path: str, gold_path: str | None, output_dir: str | None,
                  warm_start: str | None) -> list[str] | None:
    """The label files of a Spark-engine run pandas may read instead of Spark (the conditions of
    :func:`local_small_input` but the size), else ``None``."""
    if config.engine.name != "spark" or not config.engine.small_input_bytes or config.input.filter:
        return None
    if config.output.table or table_name(labels_path) or table_name(gold_path):
        return None
    paths = [labels_path, gold_path, output_dir, warm_start, config.engine.checkpoint_dir]
    if not all(is_local(path) for path in paths if path):
        return None
    files = resolve_local_paths(labels_path, "labels")
    if _hive_partitioned(labels_path, files) and not is_day_partitioned(labels_path, config.input.date_column, files):
        return None
    if gold_path and _hive_partitioned(gold_path, resolve_local_paths(gold_path, "gold")):
        return None
    return files


def local_small_input(
    config: RunConfig,
    labels_path: str,
    gold_path: str | None = None,
    output_dir: str | None = None,
    warm_start: str | None = None,
) -> dict[str, Any] | None:
    """``{"input_bytes", "threshold", "reader": "pandas"}`` when a Spark-engine run needs no Spark at all.

    That is when ``engine.small_input_bytes`` is on, there is no ``input.filter``, every path of the run
    (labels, gold, output, warm start, checkpoints) is local, no label or gold file sits in a Hive-style
    partition folder (``date=...`` is a column only to Spark's reader), and the label files total fewer bytes
    than the threshold; ``None`` otherwise (always for ``engine.name = "local"``, catalog tables and
    ``output.table``: Spark reads and writes those).
    """
    threshold = config.engine.small_input_bytes
    files = _pandas_files(config, labels_path, gold_path, output_dir, warm_start)
    if files is None:
        return None
    size = sum(os.path.getsize(f) for f in files)
    if size >= threshold:
        return None
    return {"input_bytes": size, "threshold": threshold, "reader": "pandas"}


def driver_choice(config: RunConfig, labels_path: str, gold_path: str | None = None, output_dir: str | None = None,
                  warm_start: str | None = None, spark: Any = None,
                  master: str | None = None) -> tuple[EngineChoice, dict[str, Any] | None]:
    """The engine of a run (:func:`crowdspark.engine.choice.choose_engine`) before Spark reads anything, and
    :func:`local_small_input`'s record when the input is small.  A ``spark`` engine choice means Spark reads
    (it may still collect a small input, :func:`choose_source`).

    Parameters
    ----------
    spark : SparkSession, optional
        Its master is the run's; without it, ``master`` or :func:`crowdspark.engine.choice.driver_master`'s.
    """
    if config.engine.name == "local":
        return choose_engine(config, None), None
    small = local_small_input(config, labels_path, gold_path, output_dir, warm_start)
    master = driver_master(spark, master)
    if small is not None:
        return choose_engine(config, master, small=True), small
    files = _pandas_files(config, labels_path, gold_path, output_dir, warm_start)
    if files is None and config.engine.small_input_bytes:
        return EngineChoice("spark", "spark reads", "the input is remote, filtered (input.filter) or in Hive-style "
                            "partition folders: Spark reads it", master), None
    estimate = None
    if files and is_local_master(master):
        fmt = resolve_format(labels_path, config.input.format, "labels")
        columns = (config.input.item, config.input.worker, config.input.label)
        try:
            estimate = estimate_files(files, fmt, columns, len(config.input.classes))
        except (OSError, ValueError) as exc:  # the reader that runs says what is wrong with the files
            log.info("cannot estimate the size of %s before reading it (%s): Spark reads it", labels_path, exc)
    return choose_engine(config, master, estimate=estimate), None


def needs_spark(config: RunConfig, labels_path: str, gold_path: str | None = None, output_dir: str | None = None,
                warm_start: str | None = None, master: str | None = None) -> bool:
    """Whether the run needs a SparkSession (the command line starts one only then, with ``master``)."""
    return driver_choice(config, labels_path, gold_path, output_dir, warm_start, master=master)[0].engine == "spark"


def _spark_small_input(spark, config: RunConfig, frame) -> dict[str, Any] | None:
    """``{"input_bytes", "threshold", "reader": "spark"}`` when the files Spark lists for the labels total
    fewer bytes than the threshold, else ``None`` (an ``input.filter`` only selects from those files)."""
    from crowdspark.io.spark_reader import input_bytes

    threshold = config.engine.small_input_bytes
    if not threshold:
        return None
    size = input_bytes(spark, frame, threshold)
    if size is None or size >= threshold:
        return None
    return {"input_bytes": size, "threshold": threshold, "reader": "spark"}


def choose_source(
    config: RunConfig,
    labels_path: str,
    gold_path: str | None,
    output_dir: str | None,
    warm_start: str | None,
    spark: Any = None,
    window: Any = None,
    master: str | None = None,
) -> Source:
    """Decide which reader and engine run (see the module docstring); Spark reads here when it reads.

    ``window`` (a :class:`crowdspark.pipeline.window.Window`) filters a catalog table as it is read.

    Raises
    ------
    InputError
        For local Parquet files of one input that give a column different types
        (:func:`crowdspark.io.column_types.check_input_types`), whichever reader would read them.
    ValueError
        When the Spark engine is needed and ``spark`` is ``None``.
    """
    check_input_types(config.input, config.gold, *(None if table_name(p) else p for p in (labels_path, gold_path)))
    choice, small = driver_choice(config, labels_path, gold_path, output_dir, warm_start, spark, master)
    if config.engine.name == "local":
        return Source(engine="local", choice=choice.to_dict())
    if small is not None:
        log.info(
            "input is %d bytes of local files (< engine.small_input_bytes = %d): reading it with pandas and "
            "fitting with the local engine, without Spark (set engine.small_input_bytes=0 to distribute)",
            small["input_bytes"], small["threshold"],
        )
        return Source(engine="local", small_input=small, choice=choice.to_dict())
    log.info("%s engine: %s (set engine.small_input_bytes=0 to always distribute, engine.max_memory to set the "
             "budget)", choice.engine, choice.detail)
    if choice.engine == "local":
        return Source(engine="local", choice=choice.to_dict())
    if spark is None:
        raise ValueError("the spark engine needs a SparkSession")
    labels, input_format = read_spark_input(spark, labels_path, config.input.format, "labels")
    if window is not None and table_name(labels_path):
        labels = window.filter_spark(labels, labels_path)  # before any listing: Spark prunes the partitions
    gold = read_spark_input(spark, gold_path, config.gold.format, "gold")[0] if gold_path else None
    small = _spark_small_input(spark, config, labels)
    if small is not None:
        log.info(
            "input is %d bytes (< engine.small_input_bytes = %d): collecting it to the driver and fitting with "
            "the local engine (set engine.small_input_bytes=0 to distribute)", small["input_bytes"],
            small["threshold"],
        )
        choice = choose_engine(config, choice.master, small=True)
        if config.input.filter:
            from crowdspark.pipeline.prepare import filtered_frame

            return Source(engine="local", small_input=small, labels_frame=filtered_frame(labels, config.input.filter),
                          gold_frame=gold, input_format=input_format, filter_applied=True, choice=choice.to_dict())
    return Source(engine="local" if small else "spark", small_input=small, labels_frame=labels, gold_frame=gold,
                  input_format=input_format, choice=choice.to_dict())


def read_spark_input(spark: Any, path: str, fmt: str, what: str) -> tuple[Any, str]:
    """``(frame, format)``: a catalog table (its provider as the format) or the files at ``path``."""
    name = table_name(path)
    if name is not None:
        return read_table(spark, name, what), table_provider(spark, name)
    from crowdspark.io.spark_reader import read_spark_frame

    fmt = resolve_format(path, fmt, what)
    return read_spark_frame(spark, path, fmt, what), fmt


def read_pandas(source: Source, config: RunConfig, labels_path: str, gold_path: str | None,
                window: Any = None, labels: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The labels and gold as pandas frames: read with pandas (of a folder of ``input.date_column`` day folders,
    only those of ``window``), or collected from what Spark read (``labels``: labels pandas has already read,
    e.g. a night's days)."""
    if source.labels_frame is None:
        if labels is None:
            # workers and labels repeat across row groups and CSV blocks, items seldom: merging per-block
            # dictionaries of items costs more than encoding their strings once (BENCHMARKS.md, "The local
            # engine at 10M labels")
            dictionary = (config.input.worker, config.input.label)
            if config.input.date_column and is_day_partitioned(labels_path, config.input.date_column,
                                                               resolve_local_paths(labels_path, "labels")):
                labels = read_day_folders(labels_path, config.input.format, "labels", config.input.date_column,
                                          dictionary, window.holds_path if window is not None else None)
            else:
                labels = read_frame(labels_path, config.input.format, "labels", dictionary=dictionary)
        return labels, read_frame(gold_path, config.gold.format, "gold") if gold_path else None
    from crowdspark.io.spark_reader import to_pandas_strings

    columns = [config.input.item, config.input.worker, config.input.label]
    if config.input.date_column:
        columns.append(config.input.date_column)  # the window is applied to the collected rows
    labels = to_pandas_strings(source.labels_frame, columns, "labels", labels_path)
    if source.gold_frame is None:
        return labels, None
    return labels, to_pandas_strings(source.gold_frame, [config.gold.item, config.gold.truth], "gold", gold_path)


# ---- the sources of a run: what every run reads, and the hooks a night adds --------------------------------------
@dataclass(frozen=True)
class Reading:
    """What a run's source has read, for the one prepare step of every run
    (:func:`crowdspark.pipeline.run.prepare_reading`).

    Attributes
    ----------
    source : Source
        The engine that fits, and what Spark read (``labels_frame``, ``gold_frame``).
    config : RunConfig
        The configuration the labels are prepared with (a night's: the canonical columns of its day reads).
    labels : DataFrame, optional
        Labels pandas has already read (a night's days on the local engine); ``None``: the prepare step reads
        the input (or collects ``source.labels_frame``).
    window : Window, optional
        The days the prepare step keeps (``None``: every row read).
    """

    source: Source
    config: RunConfig
    labels: pd.DataFrame | None = None
    window: Window | None = None


class RunSource(Protocol):
    """Where a run's labels come from, and what a kind of run adds to the one path
    (:func:`crowdspark.pipeline.run.fit_source`: read -> prepare -> fit and evaluate -> finish -> write).

    A window run (:class:`WindowSource`) adds nothing; an incremental night
    (:class:`crowdspark.pipeline.incremental.NightSource`) adds its carried statistics to the fit and its item
    state, index and chain to what the run writes.
    """

    #: the options of the fit (test hooks, the warm start, the inputs that fingerprint a checkpoint)
    options: RunOptions

    def read(self) -> Reading | None:
        """Choose the reader and engine and read what Spark reads; ``None``: nothing to fit (a night without new
        labels, whose result is :meth:`without_fit`)."""

    def manifest(self, prepared: Prepared) -> dict[str, Any]:
        """``summary.json``'s ``inputs`` (with ``warnings``), after ``nightly.on_no_new_data``."""

    def fit_options(self, prepared: Prepared) -> RunOptions:
        """The fit's options for the ``prepared`` labels (a night: with its carried statistics)."""

    def finish(self, fitted: Fitted) -> Fitted:
        """The run's result from its fit (a night: with its state tables)."""

    def without_fit(self) -> Fitted:
        """The run's result when :meth:`read` found nothing to fit."""


class WindowSource:
    """The source of a run that is not an incremental night: the input's labels in the run's window
    (``input.window_days`` days of ``input.date_column``, or every label), read by the reader
    :func:`choose_source` picks.

    Parameters
    ----------
    config : RunConfig
    labels_path, gold_path, output_dir : str
    spark : SparkSession, optional
    run_id : str, optional
    as_of : date
    warm_path : str, optional
        The warm start's path (``saved``, its model), or the worker table's (``table``).
    previous_path : str, optional
        The run the manifest compares this one with.
    options : RunOptions
    """

    def __init__(self, config: RunConfig, labels_path: str, gold_path: str | None, output_dir: str | None,
                 spark: Any, run_id: str | None, as_of: _dt.date, warm_path: str | None, saved: SavedModel | None,
                 table: WorkerTable | None, previous_path: str | None, options: RunOptions) -> None:
        self.config, self.labels_path, self.gold_path, self.output_dir = config, labels_path, gold_path, output_dir
        self.spark, self.run_id, self.as_of, self.warm_path = spark, run_id, as_of, warm_path
        self.previous_path = previous_path
        self.start_path = warm_path or (table.source if table is not None else None)
        self.window = Window.of(config, as_of)
        self.options = replace(options, warm_start=saved, initial_workers=table)

    def read(self) -> Reading:
        source = choose_source(self.config, self.labels_path, self.gold_path, self.output_dir, self.start_path,
                               self.spark, self.window, master=self.options.master)
        # the run id is part of the inputs: a checkpoint left by another night's run is never resumed
        signature = _signature(source, self.labels_path, self.gold_path, self.window, self.spark)
        self.options = replace(self.options, inputs={**signature, "run_id": self.run_id})
        return Reading(source, self.config, window=self.window)

    def manifest(self, prepared: Prepared) -> dict[str, Any]:
        manifest = run_manifest(prepared.inputs, self.options.inputs, self.run_id, self.as_of, self.window,
                                self.warm_path, self.previous_path, self.spark)
        check_new_data(manifest, self.config.nightly.on_no_new_data, None)
        return manifest

    def fit_options(self, prepared: Prepared) -> RunOptions:
        return self.options

    def finish(self, fitted: Fitted) -> Fitted:
        return fitted

    def without_fit(self) -> Fitted:
        raise AssertionError("a window run always has labels to fit (an empty window is an input error)")


def _signature(source: Source, labels_path: str, gold_path: str | None, window: Window | None,
               spark: Any) -> dict[str, Any]:
    """What the run reads: paths, files, bytes and times (for Spark reads, the files Spark lists, only the
    window's partition folders)."""
    signature = input_signature(labels_path, gold_path, window)
    frames = (("labels", source.labels_frame, window), ("gold", source.gold_frame, None))
    for what, frame, days in frames:
        listed = spark_files(spark, frame, days) if frame is not None else None
        if listed is not None:
            signature[what] = {"path": signature[what]["path"], **listed}
    for what, entry in signature.items():
        if "files" in entry:
            log.info("%s at %s: %d file(s), %s bytes%s", what, entry["path"], entry["files"],
                     f"{entry['bytes']:,}", f" in {window.describe()}" if what == "labels" and window else "")
    return signature


def spark_files(spark: Any, frame: Any, window: Any = None) -> dict[str, Any] | None:
    """The number of files, bytes and latest modification time of what Spark reads for ``frame`` (only the
    partition folders of ``window``, a :class:`crowdspark.pipeline.window.Window`, when it has one); ``None``
    when the listing is unavailable (see :func:`crowdspark.io.spark_reader.listed_files`)."""
    from crowdspark.io.spark_reader import listed_files

    files = listed_files(spark, frame)
    if files is None:
        return None
    if window is not None:
        files = [f for f in files if window.holds_path(f[0])]
    if not files:
        return {"files": 0, "bytes": 0}
    return {"files": len(files), "bytes": sum(f[1] for f in files), "modified": max(f[2] for f in files)}


def input_signature(labels_path: str | None, gold_path: str | None, window: Any = None) -> dict[str, Any]:
    """Paths, and for local inputs their number of files, bytes and latest modification time (only the inputs
    whose path is given; of the labels, only the files ``window`` may hold, as :func:`spark_files` lists them)."""
    out: dict[str, Any] = {}
    for what, path in (("labels", labels_path), ("gold", gold_path)):
        if path is None:
            continue
        entry: dict[str, Any] = {"path": path}
        if is_local(path):
            try:
                files = resolve_local_paths(path, what)
                files = [f for f in files if window is None or what != "labels" or window.holds_path(f)]
                entry.update(files=len(files), bytes=sum(os.path.getsize(f) for f in files))
                if files:
                    entry["modified"] = max(os.path.getmtime(f) for f in files)
            except InputError:
                pass  # reported by the reader with its own message
        out[what] = entry
    return out
