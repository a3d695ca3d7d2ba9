"""A whole run: check the output, choose the source, prepare, fit, write.  What the command line, the
spark-submit job and the end-to-end tests call; the Python faces call :func:`fit_frames`."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from crowdspark.config import RunConfig
from crowdspark.errors import InputError
from crowdspark.io.rules import Encoding
from crowdspark.io.saved_model import load_saved_model
from crowdspark.io.sink import check_output, make_run_root, run_directory, write_latest
from crowdspark.models.base import Model
from crowdspark.pipeline.fit import Fitted, RunOptions, fit_prepared
from crowdspark.pipeline.prepare import Prepared, prepare_frames, prepare_spark
from crowdspark.pipeline.source import Source, choose_source, input_signature, read_pandas
from crowdspark.pipeline.summary import Timer
from crowdspark.pipeline.write import write_result

__all__ = ["RunResult", "aggregate", "aggregate_frames", "fit_frames"]

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What :func:`aggregate` and :func:`aggregate_frames` return: the summary (``summary.json``) and, when the
    local engine fitted, the item and worker tables (``None`` on Spark, where the items stay distributed)."""

    summary: dict[str, Any]
    items: pd.DataFrame | None = None
    workers: pd.DataFrame | None = None
    model: Model | None = None
    params: Any = None
    encoding: Encoding | None = None


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
        return RunResult(summary=fitted.summary, items=fitted.items(), workers=fitted.workers(), model=fitted.model,
                         params=fitted.params, encoding=fitted.encoding)
    finally:
        fitted.close()


def _prepare(source: Source, config: RunConfig, labels_path: str, gold_path: str | None, timer: Timer,
             spark: Any, options: RunOptions) -> Prepared:
    gold_source = gold_path or "<none>"
    if source.engine == "spark":
        timer.lap("read")
        return prepare_spark(spark, config, source.labels_frame, source.gold_frame, labels_path, gold_path, timer,
                             source.input_format, options.inject_task_failure)
    labels, gold = read_pandas(source, config, labels_path, gold_path)
    timer.lap("read")
    return prepare_frames(config, labels, gold, labels_path, gold_source, timer)


def aggregate(
    config: RunConfig,
    labels_path: str,
    output_dir: str | None,
    gold_path: str | None = None,
    spark: Any = None,
    *,
    warm_start: str | None = None,
    run_id: str | None = None,
    options: RunOptions | None = None,
) -> RunResult:
    """Run the configured algorithm and write the results.

    Parameters
    ----------
    config : RunConfig
    labels_path : str
        File, folder or glob of labels.
    output_dir : str or None
        Destination directory (replaced atomically); ``None`` writes nothing (tests, API).  Refused before
        anything is read (:func:`crowdspark.io.sink.check_output`) when it is a file, a directory that is
        neither empty nor a crowdspark result (with ``run_id``: a crowdspark run root), or when it is,
        is inside or contains the labels, the gold or ``engine.checkpoint_dir``.
    gold_path : str, optional
        Gold labels for evaluation.
    spark : SparkSession, optional
        Needed when the run reads with Spark (:func:`crowdspark.pipeline.source.needs_spark`).
    warm_start : str, optional
        A previous run's output (or any saved model, :mod:`crowdspark.io.saved_model`) to start from.
    run_id : str, optional
        Write into ``output_dir/run_id=<run_id>/`` and, once complete, point ``output_dir/_LATEST.json``
        at it; older runs stay where they are.
    options : RunOptions, optional
        Its test hooks apply (the warm start and the inputs come from the arguments).
    """
    if output_dir is not None:
        inputs = {"labels": labels_path, "gold": gold_path, "engine.checkpoint_dir": config.engine.checkpoint_dir}
        check_output(output_dir, run_id=run_id, inputs=inputs, spark=spark)
    timer = Timer()
    source = choose_source(config, labels_path, gold_path, output_dir, warm_start, spark)
    saved = load_saved_model(warm_start, spark) if warm_start else None
    # the run id is part of the inputs: a checkpoint left by another night's run is never resumed
    options = replace(options or RunOptions(), warm_start=saved,
                      inputs={**input_signature(labels_path, gold_path), "run_id": run_id})
    destination = output_dir
    if output_dir is not None and run_id is not None:
        destination = run_directory(output_dir, run_id)
        make_run_root(output_dir, spark)
    fitted = fit_prepared(config, _prepare(source, config, labels_path, gold_path, timer, spark, options), options)
    if source.small_input is not None:
        fitted.summary["small_input"] = source.small_input
    try:
        items, workers = fitted.items(), fitted.workers()
        if destination is not None:
            write_result(fitted, items, workers, destination, config, spark)
        local = isinstance(items, pd.DataFrame)
        result = RunResult(summary=fitted.summary, items=items if local else None, workers=workers if local else None,
                           model=fitted.model, params=fitted.params, encoding=fitted.encoding)
    finally:
        fitted.close()
    if destination is not None and run_id is not None:
        write_latest(output_dir, run_id, destination, spark)
    return result
