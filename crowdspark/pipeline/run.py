"""A whole run: check the output, choose the source, prepare, fit, write.  What the command line, the
spark-submit job and the end-to-end tests call; the Python faces call :func:`fit_frames`."""

from __future__ import annotations

import datetime as _dt
import logging
import os
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import pandas as pd

from crowdspark.config import RunConfig
from crowdspark.errors import ConfigError, InputError
from crowdspark.io.catalog import check_table_run
from crowdspark.io.chain import check_outside_chain, check_replaceable, prune_runs
from crowdspark.io.files import files_for
from crowdspark.io.killpoint import kill_point
from crowdspark.io.lock import OutputLock
from crowdspark.io.paths import check_local_folder_writable, is_local, strip_file_scheme
from crowdspark.io.rules import Encoding
from crowdspark.io.runs import (
    default_as_of,
    latest_run_before,
    run_directory,
    write_latest,
)
from crowdspark.io.saved_model import SavedModel, load_saved_model
from crowdspark.io.sink import check_output, make_run_root, recover
from crowdspark.models.base import Model
from crowdspark.io.worker_table import WorkerTable, read_worker_table
from crowdspark.pipeline.fit import (
    Fitted,
    RunOptions,
    check_algorithm,
    check_fit_gold,
    check_table_start,
    fit_prepared,
)
from crowdspark.pipeline.incremental import NightPlan, NightSource, check_incremental_config, plan_night
from crowdspark.pipeline.manifest import check_checkpoint_dir, record_inputs, resolve_warm_start
from crowdspark.pipeline.prepare import Prepared, prepare_frames, prepare_spark
from crowdspark.pipeline.source import Reading, RunSource, WindowSource, read_pandas
from crowdspark.pipeline.progress import progress
from crowdspark.pipeline.publish import publish_run
from crowdspark.pipeline.summary import Timer
from crowdspark.pipeline.write import write_result

__all__ = ["RunResult", "aggregate", "aggregate_frames", "fit_frames", "fit_source", "prepare_reading", "preflight"]

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What :func:`aggregate` and :func:`aggregate_frames` return: the summary (``summary.json``) and, when the
    local engine fitted, the item and worker tables (``None`` on Spark, where the items stay distributed).  The
    item table is what the run wrote to ``items/``: on an incremental night, the items it fitted
    (``summary["items_scope"]``; :func:`crowdspark.io.chain.read_items` reads the whole answer)."""

    summary: dict[str, Any]
    item_table: Any = None  # the local item table as Arrow; :attr:`items` is its pandas form
    workers: pd.DataFrame | None = None
    model: Model | None = None
    params: Any = None
    encoding: Encoding | None = None

    @cached_property
    def items(self) -> pd.DataFrame | None:
        """The item table as pandas, converted on first use (the command line never uses it)."""
        return None if self.item_table is None else _pandas_items(self.item_table)


def _pandas_items(items: Any) -> Any:
    """A local item table (a pyarrow table from the local engine or an incremental night) as pandas; a Spark
    table as it is."""
    return items if _is_spark_frame(items) or isinstance(items, pd.DataFrame) else items.to_pandas()


def _is_spark_frame(frame: Any) -> bool:
    return frame is not None and not isinstance(frame, pd.DataFrame) and hasattr(frame, "sparkSession")


def fit_frames(
    config: RunConfig,
    labels: Any,
    gold: Any = None,
    *,
    labels_source: str = "<DataFrame>",
    gold_source: str = "<DataFrame>",
    options: RunOptions | None = None,
    timer: Timer | None = None,
    input_format: str | None = None,
) -> Fitted:
    """Validate and fit frames: pandas frames on the local engine, Spark DataFrames on the Spark engine.

    Nothing is written; close the result when done with its tables.

    Raises
    ------
    InputError
        When the labels are neither a pandas nor a Spark DataFrame, or the gold is not the same kind.
    """
    timer = timer or Timer()
    if _is_spark_frame(labels):
        if gold is not None and not _is_spark_frame(gold):
            raise InputError("the gold must be a Spark DataFrame when the labels are one")
        prepared = prepare_spark(labels.sparkSession, config, labels, gold, labels_source,
                                 gold_source if gold is not None else None, timer, input_format)
    else:
        prepared = prepare_frames(config, labels, gold, labels_source, gold_source, timer)
    return fit_prepared(config, prepared, options)


def aggregate_frames(
    config: RunConfig,
    labels: pd.DataFrame,
    gold: pd.DataFrame | None = None,
    labels_source: str = "<DataFrame>",
    gold_source: str = "<DataFrame>",
    options: RunOptions | None = None,
) -> RunResult:
    """Fit pandas frames with the local engine and return the tables (nothing is written)."""
    fitted = fit_frames(config, labels, gold, labels_source=labels_source, gold_source=gold_source,
                        options=options)
    try:
        return RunResult(summary=fitted.summary, item_table=fitted.items(), workers=fitted.workers(),
                         model=fitted.model, params=fitted.params, encoding=fitted.encoding)
    finally:
        fitted.close()


def prepare_reading(reading: Reading, labels_path: str, gold_path: str | None, timer: Timer, spark: Any,
                    options: RunOptions) -> Prepared:
    """The one prepare step of every run: validate and encode what a source read, and hold its blocks in the
    engine the source chose (Spark's frames in a Spark engine, else pandas frames in a local engine)."""
    source, config = reading.source, reading.config
    if source.engine == "spark":
        timer.lap("read")
        return prepare_spark(spark, config, source.labels_frame, source.gold_frame, labels_path, gold_path, timer,
                             source.input_format, options.inject_task_failure, reading.window)
    labels, gold = read_pandas(source, config, labels_path, gold_path, reading.window, labels=reading.labels)
    timer.lap("read")
    return prepare_frames(config, labels, gold, labels_path, gold_path or "<none>", timer, reading.window,
                          source.filter_applied)


def fit_source(source: RunSource, config: RunConfig, labels_path: str, gold_path: str | None, spark: Any,
               timer: Timer) -> Fitted:
    """The one path of every run, a window or an incremental night: read (:meth:`RunSource.read`) -> prepare
    (:func:`prepare_reading`) -> fit and evaluate (:func:`crowdspark.pipeline.fit.fit_prepared`, with the
    source's :meth:`~RunSource.fit_options`) -> the run's result (:meth:`~RunSource.finish`).  The result is
    written by :func:`crowdspark.pipeline.write.write_result`; the engine stays open (close the result)."""
    with progress("read", f"reading the labels at {labels_path}"):
        reading = source.read()
    if reading is None:
        return source.without_fit()
    with progress("prepare", f"preparing the labels at {labels_path} ({reading.source.engine} engine)"):
        prepared = prepare_reading(reading, labels_path, gold_path, timer, spark, source.options)
    try:
        manifest = source.manifest(prepared)
        options = source.fit_options(prepared)
    except BaseException:
        prepared.engine.close()
        raise
    fitted = fit_prepared(config, prepared, options)
    try:
        record_inputs(fitted.summary, manifest, reading.source)
        return source.finish(fitted)
    except BaseException:
        fitted.close()
        raise


@dataclass(frozen=True)
class _Plan:
    """What a run checked and decided before reading any label."""

    destination: str | None
    as_of: _dt.date
    warm_path: str | None
    warm_cold_reason: str | None
    saved: SavedModel | None
    previous_path: str | None
    night: NightPlan | None = None
    table: WorkerTable | None = None
    recovered: str | None = None


def _plan(config: RunConfig, labels_path: str, output_dir: str | None, gold_path: str | None, spark: Any,
          warm_start: str | None, run_id: str | None, as_of: _dt.date | None, full_refit: bool = False,
          initial_workers: str | None = None) -> _Plan:
    """Every check that needs no label: the output, the checkpoint folder, the warm start or worker table, the
    kind of night.  What a killed run left in the output is recovered first, under the output's lock
    (:func:`crowdspark.io.sink.check_output`), so no check refuses a commit cut short."""
    check_incremental_config(config)
    check_table_run(config, labels_path, gold_path, run_id, spark)
    recovered = None
    if output_dir is not None:
        inputs = {"labels": labels_path, "gold": gold_path, "engine.checkpoint_dir": config.engine.checkpoint_dir}
        recovered = check_output(output_dir, run_id=run_id, inputs=inputs, spark=spark,
                                 stale_after=config.nightly.lock_stale_hours * 3600)
    check_checkpoint_dir(config.engine.checkpoint_dir)
    check_fit_gold(config, gold_path is not None)
    check_table_start(config, warm_start, initial_workers)
    as_of = as_of or default_as_of(run_id)
    destination = output_dir
    if output_dir is not None and run_id is not None:
        destination = run_directory(output_dir, run_id)
        check_replaceable(output_dir, run_id, spark)
    if destination is not None and is_local(destination):
        # the lock and the staging directory are created beside the destination
        check_local_folder_writable(os.path.dirname(strip_file_scheme(destination).rstrip("/")) or ".",
                                    f"--output {output_dir!r} (written through its folder)")
    warm_path, cold_reason = None, None
    if warm_start:
        root = output_dir if run_id is not None else None
        warm_path, cold_reason = resolve_warm_start(warm_start, as_of, spark, run_root=root)
    saved = load_saved_model(warm_path, spark) if warm_path else None
    if saved is not None and config.nightly.on_incompatible == "fail":
        check_algorithm(saved, config)  # the run would stop at its fit: stop before it reads
    previous = warm_path
    if previous is None and output_dir is not None and run_id is not None and files_for(output_dir, spark).exists(
            output_dir):
        previous = latest_run_before(output_dir, as_of, spark)
    night = plan_night(config, previous, as_of, full_refit, spark)
    if night is not None and not night.full and destination is not None:
        check_outside_chain(destination, night.previous, spark)
    if initial_workers and night is not None and not night.full:
        raise ConfigError(f"--initial-workers starts a fit's workers, and this night continues the previous run "
                          f"{night.previous!r} incrementally; give it with --full-refit, or drop it")
    table = read_worker_table(initial_workers, spark) if initial_workers else None
    return _Plan(destination, as_of, warm_path, cold_reason, saved, previous, night, table, recovered)


def preflight(config: RunConfig, labels_path: str, output_dir: str | None, gold_path: str | None,
              warm_start: str | None, run_id: str | None, as_of: _dt.date | None, full_refit: bool = False,
              initial_workers: str | None = None) -> None:
    """The checks of :func:`aggregate` that need no label, run before a SparkSession starts when every path
    they look at is local (the command line calls it; :func:`aggregate` checks again).  Like :func:`aggregate`,
    it first recovers what a killed run left in the output, under the output's lock."""
    paths = [output_dir, warm_start, initial_workers, config.engine.checkpoint_dir]
    if all(is_local(path) for path in paths if path):
        plan = _plan(config, labels_path, output_dir, gold_path, None, warm_start, run_id, as_of, full_refit,
                     initial_workers)
        for lock in _locks(plan.destination, config, None):
            lock.check_free()


def aggregate(
    config: RunConfig,
    labels_path: str,
    output_dir: str | None,
    gold_path: str | None = None,
    spark: Any = None,
    *,
    warm_start: str | None = None,
    run_id: str | None = None,
    as_of: _dt.date | None = None,
    options: RunOptions | None = None,
    full_refit: bool = False,
    initial_workers: str | None = None,
) -> RunResult:
    """Run the configured algorithm and write the results.

    Everything that needs no label is checked first (the output, the checkpoint folder, the lock, the warm
    start), so such problems stop the run before it reads anything; problems only the data can show (a new
    class, a truncated file, an empty window) stop it before the fit.

    Parameters
    ----------
    config : RunConfig
    labels_path : str
        File, folder or glob of labels.
    output_dir : str or None
        Destination directory (replaced atomically); ``None`` writes nothing (tests, API).  Refused before
        anything is read (:func:`crowdspark.io.sink.check_output`) when it is a file, a directory that is
        neither empty nor a crowdspark result (with ``run_id``: a crowdspark run root), or when it is,
        is inside or contains the labels, the gold or ``engine.checkpoint_dir``.  One run at a time writes it
        (:class:`crowdspark.io.lock.OutputLock`); a commit a killed run left half done is completed or rolled
        back first (:func:`crowdspark.io.sink.recover`).
    gold_path : str, optional
        Gold labels for evaluation.
    spark : SparkSession, optional
        Needed when the run reads with Spark (:func:`crowdspark.pipeline.source.needs_spark`).
    warm_start : str, optional
        A previous run's output, a run root (its newest run older than this one), or any saved model
        (:mod:`crowdspark.io.saved_model`) to start from.
    run_id : str, optional
        Write into ``output_dir/run_id=<run_id>/`` and, once complete, point ``output_dir/_LATEST.json``
        at it unless it names a newer night; older runs stay where they are (``nightly.keep_runs``).
    as_of : date, optional
        The day the run's data ends (the window of ``input.window_days``); default: the run id when it is a
        date, else today (UTC).
    options : RunOptions, optional
        Its test hooks apply (the warm start and the inputs come from the arguments).
    full_refit : bool
        With ``incremental.mode = "on"``: fit every day up to the as-of date instead of continuing the previous
        run incrementally (:mod:`crowdspark.pipeline.incremental`).
    initial_workers : str, optional
        A worker table (a previous run's output or its ``workers/``, or a table of ``worker`` and
        ``confusion`` or ``accuracy``, :mod:`crowdspark.io.worker_table`) whose workers start from its
        matrices; not with ``warm_start``.
    """
    plan = _plan(config, labels_path, output_dir, gold_path, spark, warm_start, run_id, as_of, full_refit,
                 initial_workers)
    with ExitStack() as held:
        for lock in _locks(plan.destination, config, spark):
            held.enter_context(lock)
        recovered = recover(plan.destination, spark) if plan.destination else None
        recovered = "; ".join(r for r in (plan.recovered, recovered) if r) or None
        if output_dir is not None and run_id is not None:
            make_run_root(output_dir, spark)
        result = _run(config, labels_path, output_dir, gold_path, spark, run_id, plan, options, recovered)
    return result


def _locks(destination: str | None, config: RunConfig, spark: Any) -> list[OutputLock]:
    """One writer per output and per ``engine.checkpoint_dir``: the locks the run holds until it is done."""
    stale = config.nightly.lock_stale_hours * 3600
    locks = [OutputLock(files_for(destination, spark), destination, stale)] if destination else []
    checkpoints = config.engine.checkpoint_dir
    if checkpoints and is_local(checkpoints):
        folder = strip_file_scheme(checkpoints)
        locks.append(OutputLock(files_for(folder, None), folder, stale))
    return locks


def _run(config: RunConfig, labels_path: str, output_dir: str | None, gold_path: str | None, spark: Any,
         run_id: str | None, plan: _Plan, options: RunOptions | None, recovered: str | None) -> RunResult:
    timer = Timer()
    options = options or RunOptions()
    if plan.warm_cold_reason is not None:
        log.warning("%s", plan.warm_cold_reason)
    source: RunSource
    if plan.night is None:
        source = WindowSource(config, labels_path, gold_path, output_dir, spark, run_id, plan.as_of, plan.warm_path,
                              plan.saved, plan.table, plan.previous_path, options)
    else:  # incremental.mode = "on": the night's days, carried statistics and state tables
        # the paths only: the days read are the manifest's (listing every file of the lake grows with it)
        paths = {"labels": {"path": labels_path}, "gold": {"path": gold_path}}
        options = replace(options, warm_start=plan.saved, initial_workers=plan.table,
                          inputs={**paths, "run_id": run_id})
        source = NightSource(config, labels_path, gold_path, output_dir, spark, run_id, plan.as_of, plan.night,
                             warm_path=plan.warm_path, options=options, timer=timer)
    fitted = fit_source(source, config, labels_path, gold_path, spark, timer)
    if plan.warm_cold_reason is not None:
        fitted.summary["warm_start"] = {"source": None, "used": False, "reason": plan.warm_cold_reason}
    if recovered is not None:
        fitted.summary["recovered"] = recovered
    try:
        items, workers = fitted.items(), fitted.workers()
        if plan.destination is not None:
            write_result(fitted, items, workers, plan.destination, config, spark)
        local = not _is_spark_frame(items)
        result = RunResult(summary=fitted.summary, item_table=items if local else None,
                           workers=workers if local else None,
                           model=fitted.model, params=fitted.params, encoding=fitted.encoding)
    finally:
        fitted.close()
    if plan.destination is not None and run_id is not None:
        latest = write_latest(output_dir, run_id, plan.as_of, spark)
        kill_point("latest-written")
        publish_run(spark, config, output_dir, run_id, plan.as_of, result.summary, latest)
        prune_runs(output_dir, config.nightly.keep_runs, spark)
        kill_point("runs-pruned")
    return result
