"""One aggregation run: read -> validate -> blocks -> fit -> evaluate -> write, on either engine.

This is the function the command line, the spark-submit job and the end-to-end tests call.  It does no
maths: models come from :mod:`crowdspark.algorithms`, the loop from :mod:`crowdspark.engine.loop`.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pandas as pd

from crowdspark import __version__
from crowdspark.algorithms import build_model, model_class, model_parameters
from crowdspark.block import Block, build_blocks
from crowdspark.config import RunConfig
from crowdspark.engine.base import Engine
from crowdspark.engine.checkpoint import Checkpointer
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.loop import FitResult, WarmStart, finish_fn, fit
from crowdspark.engine.select import choose_levels, level_plan
from crowdspark.errors import ConfigError, InputError
from crowdspark.io.pandas_reader import encode_rows, gold_unmatched, prepare_gold, prepare_labels, read_frame
from crowdspark.io.paths import is_local
from crowdspark.io.saved_model import MODEL_FOLDER, SavedModel, load_saved_model, model_files, worker_index_map
from crowdspark.io.sink import StagedOutput, check_output, make_run_root, run_directory, write_latest
from crowdspark.io.tables import item_batch, item_frame, worker_frame, write_frame_local
from crowdspark.metrics import gold_stats, level_error_stats, metrics_from_stats
from crowdspark.models.base import Model, State
from crowdspark.stats import Stats

__all__ = ["RunResult", "SparkFit", "aggregate", "aggregate_frames", "fit_spark_frames", "evaluate", "local_blocks"]

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What :func:`aggregate` returns: the summary written to ``summary.json`` and, for the local engine,
    the item and worker tables (``None`` on Spark, where they stay distributed)."""

    summary: dict[str, Any]
    items: pd.DataFrame | None = None
    workers: pd.DataFrame | None = None
    model: Model | None = None
    params: Any = None
    encoding: Any = None


@dataclass
class Timer:
    """Seconds per phase of a run (``lap`` closes the current phase)."""

    timings: dict[str, float] = field(default_factory=dict)
    _start: float = field(default_factory=time.perf_counter)

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = round(now - self._start, 4)
        self._start = now


def _evaluate_block(model: Model, block: Block, state: State, params: Any) -> tuple[State, Stats]:
    result = model.finish_block(block, state, params)
    stats = gold_stats(block, result.posterior, result.label)
    n_levels = getattr(model, "n_levels", None)
    if n_levels is not None and "level" in result.extra:
        stats.update(level_error_stats(block, result.extra["level"], n_levels))
    return state, stats


def evaluate(model: Model, engine: Engine, params: Any) -> dict[str, Any]:
    """Metrics against the gold labels carried in the blocks (any engine)."""
    stats = engine.map_reduce(partial(_evaluate_block, model), params, stateful=False)
    return metrics_from_stats(stats)



@dataclass(frozen=True)
class RunOptions:
    """Operational options of a run (the nightly job's): a warm start, and what identifies the run's inputs
    for its checkpoints.

    Attributes
    ----------
    warm_start : SavedModel, optional
        A previous run's model (``--warm-start``).
    inputs : dict
        Description of the inputs (paths, sizes) that goes into the checkpoint fingerprint.
    """

    warm_start: SavedModel | None = None
    inputs: dict[str, Any] = field(default_factory=dict)


def _warm(saved: SavedModel | None, config: RunConfig, enc) -> WarmStart | None:
    if saved is None:
        return None
    if saved.algorithm != config.algorithm:
        raise ConfigError(
            f"the warm-start model at {saved.source!r} was fitted with {saved.algorithm!r}, this run uses "
            f"{config.algorithm!r}; warm start from a run of the same algorithm, or run cold"
        )
    if tuple(saved.classes) != tuple(enc.classes):
        raise InputError(
            f"the class set changed since the warm-start run ({list(saved.classes)} -> {list(enc.classes)}); "
            "a warm start needs the same classes: run cold (without --warm-start)"
        )
    return WarmStart(saved.params, worker_index_map(enc.workers, saved.workers), saved.source, saved.parameters)


def _checkpointer(config: RunConfig, options: RunOptions, layout: dict[str, Any]) -> Checkpointer | None:
    if not config.engine.checkpoint_every:
        return None
    fingerprint = {
        "algorithm": config.algorithm,
        "parameters": config.algorithm_params(),
        "seed": config.seed,
        "input": config.to_dict()["input"],
        "inputs": options.inputs,
        "layout": layout,
        "warm_start": None if options.warm_start is None else options.warm_start.source,
        "version": __version__,
    }
    return Checkpointer(config.engine.checkpoint_dir, config.engine.checkpoint_every, fingerprint)


def fit_configured(
    config: RunConfig,
    n_workers: int,
    n_classes: int,
    engine: Engine,
    warm_start: WarmStart | None = None,
    checkpoint: Checkpointer | None = None,
) -> tuple[Model, FitResult, dict | None]:
    """Build the configured model and fit it, first choosing H when the configuration asks for it.

    Whether and among which H the run chooses is :func:`crowdspark.engine.select.level_plan`'s decision;
    the choice is :func:`crowdspark.engine.select.choose_levels`'s.

    Returns
    -------
    model, result, selection
        ``selection`` is ``{"criterion", "chosen", "table"}`` or ``None``.
    """
    name = config.algorithm
    plan = level_plan(model_class(name), config.algorithm_params(),
                      warm_start.parameters if warm_start is not None else None)
    params = plan.params
    selection = None
    if plan.candidates is not None:

        def make(h: int) -> Model:
            return build_model(name, {**params, "n_levels": h}, n_workers, n_classes, config.seed)

        choice = choose_levels(make, engine, plan.candidates, plan.criterion)
        params["n_levels"] = choice.chosen
        selection = {"criterion": choice.criterion, "chosen": choice.chosen, "table": choice.table}
        log.info("%s: chose H = %d by %s", name, choice.chosen, choice.criterion)
    model = build_model(name, params, n_workers, n_classes, config.seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fit(model, engine, warm_start=warm_start, checkpoint=checkpoint)
    result.warnings = [str(w.message) for w in caught]
    for w in caught:  # hand them on to the caller's filters (the CLI shows them)
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if checkpoint is not None:
        checkpoint.clear()
    return model, result, selection


def _peak_rss_mib() -> float:
    """Peak resident memory of this (driver) Python process."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def _summary(
    config: RunConfig,
    model: Model,
    engine_name: str,
    classes: tuple[str, ...],
    n_workers: int,
    result: FitResult,
    extra_counts: dict[str, int],
    inputs: dict[str, Any],
) -> dict[str, Any]:
    counts = {
        "items": result.counts["n_items"],
        "workers": n_workers,
        "labels": result.counts["n_labels"],
        "classes": len(classes),
        "duplicate_pairs": result.counts["duplicate_pairs"],
        "gold_items": result.counts["n_gold_items"],
    }
    counts.update(extra_counts)
    return {
        "algorithm": config.algorithm,
        "engine": engine_name,
        "seed": config.seed,
        "version": __version__,
        "parameters": model_parameters(model),
        "classes": list(classes),
        "counts": counts,
        "iterations": result.n_iter,
        "converged": result.converged,
        "stop_reason": result.stop_reason,
        "history": result.history,
        "model": model.summary(result.params),
        "warnings": result.warnings,
        "resumed_from_iteration": result.resumed_from,
        "memory": {"driver_python_peak_mib": round(_peak_rss_mib(), 1)},
        "inputs": inputs,
        "config": config.to_dict(),
    }


def aggregate(
    config: RunConfig,
    labels_path: str,
    output_dir: str | None,
    gold_path: str | None = None,
    spark: Any = None,
    *,
    warm_start: str | None = None,
    run_id: str | None = None,
) -> RunResult:
    """Run the configured algorithm on the configured engine and write the results.

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
        Required for the Spark engine.
    warm_start : str, optional
        Output directory of a previous run of the same algorithm to start from.
    run_id : str, optional
        Write into ``output_dir/run_id=<run_id>/`` and, once complete, point ``output_dir/_LATEST.json``
        at it; older runs stay where they are.
    """
    if output_dir is not None:
        inputs = {"labels": labels_path, "gold": gold_path, "engine.checkpoint_dir": config.engine.checkpoint_dir}
        check_output(output_dir, run_id=run_id, inputs=inputs, spark=spark)
    small = small_local_input(config, labels_path, gold_path, output_dir, warm_start)
    if config.engine.name == "spark" and spark is None and small is None:
        raise ValueError("the spark engine needs a SparkSession")
    saved = load_saved_model(warm_start, spark) if warm_start else None
    # the run id is part of the inputs: a checkpoint left by another night's run is never resumed
    options = RunOptions(warm_start=saved, inputs={**input_signature(labels_path, gold_path), "run_id": run_id})
    destination = output_dir
    if output_dir is not None and run_id is not None:
        destination = run_directory(output_dir, run_id)
        make_run_root(output_dir, spark)
    if small is not None:
        log.info(
            "input is %d bytes of local files (< engine.small_input_bytes = %d): reading it with pandas and "
            "fitting with the local engine, without Spark (set engine.small_input_bytes=0 to distribute)",
            small["input_bytes"], small["threshold"],
        )
        run = _aggregate_local(config, labels_path, destination, gold_path, options, {"small_input": small})
    elif config.engine.name == "spark":
        run = _aggregate_spark(spark, config, labels_path, destination, gold_path, options)
    else:
        run = _aggregate_local(config, labels_path, destination, gold_path, options)
    if destination is not None and run_id is not None:
        write_latest(output_dir, run_id, destination, spark)
    return run


def small_local_input(
    config: RunConfig,
    labels_path: str,
    gold_path: str | None = None,
    output_dir: str | None = None,
    warm_start: str | None = None,
) -> dict[str, Any] | None:
    """``{"input_bytes", "threshold", "reader": "pandas"}`` when a Spark-engine run needs no Spark at all.

    That is when ``engine.small_input_bytes`` is on, there is no ``input.filter``, every path of the run
    (labels, gold, output, warm start, checkpoints) is local, and the label files total fewer bytes than
    the threshold.  Such a run reads with pandas and fits with the local engine on the driver (the answers
    are the Spark engine's, tested); ``None`` otherwise (and always for ``engine.name = "local"``).
    """
    from crowdspark.io.paths import is_local, resolve_local_paths

    threshold = config.engine.small_input_bytes
    if config.engine.name != "spark" or not threshold or config.input.filter:
        return None
    paths = [labels_path, gold_path, output_dir, warm_start, config.engine.checkpoint_dir]
    if not all(is_local(path) for path in paths if path):
        return None
    files = resolve_local_paths(labels_path, "labels")
    # folder names such as date=... are columns only to Spark's reader
    if _hive_partitioned(labels_path, files):
        return None
    if gold_path and _hive_partitioned(gold_path, resolve_local_paths(gold_path, "gold")):
        return None
    size = sum(os.path.getsize(f) for f in files)
    if size >= threshold:
        return None
    return {"input_bytes": size, "threshold": threshold, "reader": "pandas"}


def _hive_partitioned(path: str, files: list[str]) -> bool:
    """Whether a file sits in a folder named ``column=value`` below ``path`` (a Hive-style partition)."""
    root = os.path.dirname(path) if os.path.isfile(path) else path.split("*", 1)[0]
    return any("=" in part for f in files for part in os.path.dirname(os.path.relpath(f, root)).split(os.sep))


def input_signature(labels_path: str, gold_path: str | None) -> dict[str, Any]:
    """Paths, and for local inputs their number of files, bytes and latest modification time."""
    from crowdspark.io.paths import is_local, resolve_local_paths

    out: dict[str, Any] = {}
    for what, path in (("labels", labels_path), ("gold", gold_path)):
        if path is None:
            continue
        entry: dict[str, Any] = {"path": path}
        if is_local(path):
            try:
                files = resolve_local_paths(path, what)
                entry.update(
                    files=len(files),
                    bytes=sum(os.path.getsize(f) for f in files),
                    modified=max(os.path.getmtime(f) for f in files),
                )
            except InputError:
                pass  # reported by the reader with its own message
        out[what] = entry
    return out


# --------------------------------------------------------------------------- local engine


def _logged(messages: list[str | None]) -> list[str]:
    """The warnings about the input among ``messages`` (``None``: no warning), each logged once."""
    out = [m for m in messages if m]
    for message in out:
        log.warning("%s", message)
    return out


def _unused_classes(classes: tuple[str, ...], used: set[str]) -> int:
    return len([c for c in classes if c not in used])


def local_blocks(labels_frame: pd.DataFrame, gold_frame: pd.DataFrame | None, encoding, max_labels: int) -> list[Block]:
    """Blocks of validated pandas labels (``item``/``worker``/``label``) with optional gold."""
    truth = None
    if gold_frame is not None:
        truth = labels_frame["item"].map(dict(zip(gold_frame["item"], gold_frame["truth"]))).to_numpy(dtype=object)
    encoded = encode_rows(
        labels_frame["item"].to_numpy(dtype=object),
        labels_frame["worker"].to_numpy(dtype=object),
        labels_frame["label"].to_numpy(dtype=object),
        truth,
        encoding,
    )
    return build_blocks(*encoded, max_labels=max_labels)


def aggregate_frames(
    config: RunConfig,
    labels_raw: pd.DataFrame,
    gold_raw: pd.DataFrame | None = None,
    labels_source: str = "<DataFrame>",
    gold_source: str = "<DataFrame>",
    options: RunOptions | None = None,
) -> RunResult:
    """Validate, fit and evaluate on pandas frames with the local engine (nothing is written).

    Parameters
    ----------
    config : RunConfig
    labels_raw : DataFrame
        Labels with the columns named by ``config.input``.
    gold_raw : DataFrame, optional
        Gold with the columns named by ``config.gold``.
    labels_source, gold_source : str
        Where the frames came from, for messages and the summary.

    Returns
    -------
    RunResult
        With ``items`` and ``workers`` tables; ``summary`` has no ``timings``.
    """
    timer = Timer()
    options = options or RunOptions()
    if config.input.filter:
        raise ConfigError(
            f"input.filter ({config.input.filter!r}) needs the spark engine; filter the data first or use --engine spark"
        )
    labels = prepare_labels(labels_raw, config.input, labels_source)
    enc = labels.encoding
    gold = None
    if gold_raw is not None:
        gold = prepare_gold(gold_raw, config.gold, list(enc.classes), gold_source)
    extra = {"unused_classes": _unused_classes(enc.classes, set(labels.frame["label"].unique()))}
    input_warnings = []
    if gold is not None:
        extra["gold_items_without_labels"] = int((~gold.frame["item"].isin(set(labels.frame["item"]))).sum())
        extra["gold_repeated_rows"] = gold.repeated_rows
        input_warnings = _logged([gold_unmatched(labels, gold)])
    timer.lap("validate")
    blocks = local_blocks(labels.frame, None if gold is None else gold.frame, enc, config.engine.max_block_labels)
    engine = LocalEngine(blocks)
    timer.lap("blocks")
    layout = {"engine": "local", "max_block_labels": config.engine.max_block_labels}
    model, result, selection = fit_configured(
        config, enc.n_workers, enc.n_classes, engine, _warm(options.warm_start, config, enc),
        _checkpointer(config, options, layout),
    )
    timer.lap("fit")
    metrics = evaluate(model, engine, result.params) if gold is not None else None
    timer.lap("evaluate")
    items = pd.concat(
        [item_frame(b.item_ids, r, enc.classes) for b, r in engine.map_items(partial(finish_fn, model), result.params)],
        ignore_index=True,
    )
    workers = worker_frame(enc.workers, model.worker_table(result.params, result.init_stats))
    inputs = {"labels": labels_source, "gold": gold_source if gold_raw is not None else None,
              "label_rows": int(len(labels_raw))}
    summary = _summary(config, model, "local", enc.classes, enc.n_workers, result, extra, inputs)
    summary["warnings"] = input_warnings + summary["warnings"]
    if selection is not None:
        summary["level_selection"] = selection
    if metrics is not None:
        summary["metrics"] = metrics
    timer.lap("tables")
    summary["timings"] = timer.timings
    return RunResult(summary=summary, items=items, workers=workers, model=model, params=result.params, encoding=enc)


def _aggregate_local(
    config: RunConfig,
    labels_path: str,
    output_dir: str | None,
    gold_path: str | None,
    options: RunOptions,
    extra_summary: dict[str, Any] | None = None,
) -> RunResult:
    def read() -> tuple[pd.DataFrame, pd.DataFrame | None]:
        labels = read_frame(labels_path, config.input.format, "labels")
        return labels, read_frame(gold_path, config.gold.format, "gold") if gold_path else None

    return _aggregate_on_driver(config, read, labels_path, gold_path, output_dir, options,
                                extra_summary=extra_summary)


def _aggregate_on_driver(
    config: RunConfig,
    read: Callable[[], tuple[pd.DataFrame, pd.DataFrame | None]],
    labels_path: str,
    gold_path: str | None,
    output_dir: str | None,
    options: RunOptions,
    spark: Any = None,
    extra_summary: dict[str, Any] | None = None,
) -> RunResult:
    """Read pandas frames with ``read``, fit them with the local engine, write the run to ``output_dir``.

    Tables go to a local ``output_dir`` with pandas, to any other filesystem with ``spark``.
    """
    start = time.perf_counter()
    labels, gold = read()
    read_seconds = round(time.perf_counter() - start, 4)
    run = aggregate_frames(config, labels, gold, labels_path, gold_path or "<none>", options)
    run.summary["timings"] = {"read": read_seconds, **run.summary["timings"]}
    run.summary.update(extra_summary or {})
    if output_dir is None:
        return run
    start = time.perf_counter()
    with StagedOutput(output_dir, spark) as out:
        if spark is None or is_local(output_dir):
            write_frame_local(run.items, out.path("items"), config.output.format)
            write_frame_local(run.workers, out.path("workers"), config.output.format)
        else:
            _write_spark_frames(spark, spark.createDataFrame(run.items, item_schema(run.model)), run.workers,
                                config.output.format, out)
        _write_model(out, config, run.model, run.params, run.encoding)
        run.summary["timings"]["write"] = round(time.perf_counter() - start, 4)
        out.write_json("summary.json", run.summary)
        out.commit()
    return run


# --------------------------------------------------------------------------- spark engine


def item_schema(model: Model) -> str:
    extras = getattr(model, "item_extras", {}) or {}
    columns = ["item string", "label string", "confidence double", "posterior array<double>"]
    columns += [f"{name} {ddl}" for name, ddl in extras.items()]
    return ", ".join(columns)


def _decode_items(batches, classes: tuple[str, ...], extras: dict[str, str]):
    """mapInArrow function: pickled ``(block, ItemResult)`` values -> the blocks' item batches."""
    import pickle

    for batch in batches:
        for blob in batch.column(0).to_pylist():
            block, result = pickle.loads(blob)
            yield item_batch(block.item_ids, result, classes, extras)


#: labels per partition above which the default partition count grows (block building converts a whole
#: partition to pandas: about 200 bytes per label)
LABELS_PER_PARTITION = 4_000_000


def default_partitions(spark, n_labels: int) -> int:
    """The cluster's default parallelism, or more partitions when each would hold over
    :data:`LABELS_PER_PARTITION` labels (so block building stays within executor memory), rounded up to
    a multiple of the parallelism.

    The rounding keeps the cores' shares equal: a sweep session deals the blocks over one task per core
    (``docs/decisions.md``, "Partitions").
    """
    slots = max(1, spark.sparkContext.defaultParallelism)
    needed = max(slots, -(-n_labels // LABELS_PER_PARTITION))
    return -(-needed // slots) * slots


@dataclass
class SparkFit:
    """A fit on the Spark engine whose blocks are still cached (call :meth:`close` when done).

    Attributes
    ----------
    model : Model
    engine : SparkEngine
    result : FitResult
    summary : dict
        The run summary (without ``timings``, which the caller adds).
    workers : DataFrame (pandas)
        The worker table (size K: it lives on the driver).
    encoding : Encoding
    """

    model: Model
    engine: Any
    result: FitResult
    summary: dict[str, Any]
    workers: pd.DataFrame
    encoding: Any

    def items(self, spark):
        """The per-item results as a (lazy, distributed) Spark DataFrame; valid until :meth:`close`."""
        blobs = self.engine.item_blobs(partial(finish_fn, self.model), self.result.params)
        blob_frame = spark.createDataFrame(blobs, "blob binary")
        decode = partial(_decode_items, classes=self.encoding.classes, extras=dict(self.model.item_extras))
        return blob_frame.mapInArrow(decode, item_schema(self.model))

    def close(self) -> None:
        self.engine.close()


def fit_spark_frames(
    spark,
    config: RunConfig,
    labels_raw,
    gold_raw=None,
    labels_source: str = "<DataFrame>",
    gold_source: str | None = None,
    timer: Timer | None = None,
    options: RunOptions | None = None,
    input_format: str | None = None,
) -> SparkFit:
    """Validate, fit and evaluate Spark DataFrames on the Spark engine (nothing is written).

    Parameters
    ----------
    spark : SparkSession
    config : RunConfig
    labels_raw : pyspark DataFrame
        Labels with the columns named by ``config.input``.
    gold_raw : pyspark DataFrame, optional
        Gold with the columns named by ``config.gold``.
    labels_source, gold_source : str
        Where the frames came from, for messages and the summary.
    timer : optional
        Collects the phase timings.
    input_format : str, optional
        The format of the files ``labels_raw`` was read from (``None``: a DataFrame passed in); decides
        ``engine.cache_input = "auto"``.
    """
    from crowdspark.engine.spark import SparkEngine
    from crowdspark.io.spark_reader import (
        block_rdd,
        gold_items_without_labels,
        gold_unmatched_spark,
        prepare_gold_spark,
        prepare_labels_spark,
    )

    timer = timer or Timer()
    options = options or RunOptions()
    if config.input.filter:
        try:
            labels_raw = labels_raw.filter(config.input.filter)
        except Exception as exc:  # AnalysisException or ParseException: the user's condition is wrong
            raise ConfigError(f"input.filter {config.input.filter!r} is not a valid Spark SQL condition on the labels: {exc}") from exc
    cache = _cache_input(config, input_format)
    labels = prepare_labels_spark(labels_raw, config.input, labels_source, persist=cache)
    enc = labels.encoding
    gold = None
    if gold_raw is not None:
        gold = prepare_gold_spark(gold_raw, config.gold, list(enc.classes), gold_source or "<DataFrame>")
    extra = {"unused_classes": _unused_classes(enc.classes, set(labels.observed_classes))}
    input_warnings = []
    if gold is not None:
        extra["gold_items_without_labels"] = gold_items_without_labels(labels, gold)
        extra["gold_repeated_rows"] = gold.repeated_rows
        input_warnings = _logged([gold_unmatched_spark(labels, gold, extra["gold_items_without_labels"])])
    timer.lap("validate")
    n_partitions = config.engine.partitions or default_partitions(spark, labels.n_rows)
    engine = SparkEngine(
        block_rdd(labels, gold, n_partitions, config.engine.max_block_labels),
        checkpoint_interval=config.engine.checkpoint_interval,
        session_sweeps=config.engine.session_sweeps,
        tree_depth=config.engine.tree_depth,
        inject_task_failure=config.engine.inject_task_failure,
        resident_blocks=config.engine.resident_blocks,
        sweep_mode=config.engine.sweep_mode,
    )
    try:
        engine.materialize()
        labels.frame.unpersist()  # a no-op when it was not cached
        timer.lap("blocks")
        layout = {"engine": "spark", "partitions": n_partitions, "max_block_labels": config.engine.max_block_labels}
        model, result, selection = fit_configured(
            config, enc.n_workers, enc.n_classes, engine, _warm(options.warm_start, config, enc),
            _checkpointer(config, options, layout),
        )
        timer.lap("fit")
        metrics = evaluate(model, engine, result.params) if gold is not None else None
        timer.lap("evaluate")
        workers = worker_frame(enc.workers, model.worker_table(result.params, result.init_stats))
        inputs = {"labels": labels_source, "gold": gold_source, "label_rows": labels.n_rows}
        summary = _summary(config, model, "spark", enc.classes, enc.n_workers, result, extra, inputs)
        summary["warnings"] = input_warnings + summary["warnings"]
        summary["partitions"] = n_partitions
        summary["input_cached"] = cache
        summary["sweep_sessions"] = engine.session_report()
        if selection is not None:
            summary["level_selection"] = selection
        if metrics is not None:
            summary["metrics"] = metrics
    except BaseException:
        engine.close()
        raise
    return SparkFit(model=model, engine=engine, result=result, summary=summary, workers=workers, encoding=enc)


def _aggregate_spark(
    spark, config: RunConfig, labels_path: str, output_dir: str | None, gold_path: str | None, options: RunOptions
) -> RunResult:
    from crowdspark.io.paths import resolve_format
    from crowdspark.io.spark_reader import read_spark_frame

    timer = Timer()
    input_format = resolve_format(labels_path, config.input.format, "labels")
    raw = read_spark_frame(spark, labels_path, input_format, "labels")
    gold_raw = read_spark_frame(spark, gold_path, config.gold.format, "gold") if gold_path else None
    small = _small_input(spark, config, raw)
    if small is not None:
        return _aggregate_small(spark, config, raw, gold_raw, labels_path, gold_path, output_dir, options, small)
    timer.lap("read")
    run = fit_spark_frames(spark, config, raw, gold_raw, labels_path, gold_path, timer, options, input_format)
    summary = run.summary
    try:
        if output_dir is not None:
            with StagedOutput(output_dir, spark) as out:
                _write_spark_tables(spark, run, config.output.format, out)
                _write_model(out, config, run.model, run.result.params, run.encoding)
                timer.lap("write")
                summary["timings"] = timer.timings
                out.write_json("summary.json", summary)
                out.commit()
        else:
            timer.lap("write")
            summary["timings"] = timer.timings
    finally:
        run.close()
    return RunResult(summary=summary)


def _cache_input(config: RunConfig, input_format: str | None) -> bool:
    """Whether Spark caches the label columns for validation and block building (``engine.cache_input``)."""
    from crowdspark.io.spark_reader import COLUMNAR_FORMATS

    if config.engine.cache_input != "auto":
        return config.engine.cache_input == "on"
    return input_format not in COLUMNAR_FORMATS


def _small_input(spark, config: RunConfig, raw) -> dict[str, Any] | None:
    """``{"input_bytes", "threshold", "reader": "spark"}`` when the labels are small enough for the driver
    (remote or filtered inputs: Spark reads them), else ``None``."""
    from crowdspark.io.spark_reader import input_bytes

    threshold = config.engine.small_input_bytes
    if not threshold or config.input.filter:
        return None
    size = input_bytes(spark, raw, threshold)
    if size is None or size >= threshold:
        return None
    return {"input_bytes": size, "threshold": threshold, "reader": "spark"}


def _aggregate_small(
    spark, config: RunConfig, raw, gold_raw, labels_path: str, gold_path: str | None, output_dir: str | None,
    options: RunOptions, small: dict[str, int],
) -> RunResult:
    """A Spark run on small input: collect the labels (one job) and run the local engine on the driver."""
    from crowdspark.io.spark_reader import to_pandas_strings

    log.info(
        "input is %d bytes (< engine.small_input_bytes = %d): collecting it to the driver and fitting with the "
        "local engine (set engine.small_input_bytes=0 to distribute)", small["input_bytes"], small["threshold"],
    )

    def read() -> tuple[pd.DataFrame, pd.DataFrame | None]:
        labels = to_pandas_strings(raw, [config.input.item, config.input.worker, config.input.label], "labels",
                                   labels_path)
        if gold_raw is None:
            return labels, None
        return labels, to_pandas_strings(gold_raw, [config.gold.item, config.gold.truth], "gold", gold_path)

    return _aggregate_on_driver(config, read, labels_path, gold_path, output_dir, options, spark,
                                {"small_input": small})


def _write_model(out: StagedOutput, config: RunConfig, model: Model, params: Any, encoding) -> None:
    """``model/``: the saved model (:mod:`crowdspark.io.saved_model`), what a later run warm starts from."""
    saved = SavedModel(config.algorithm, model_parameters(model), encoding.classes, encoding.workers,
                       model.export_params(params))
    for name, data in model_files(saved).items():
        out.write_bytes(f"{MODEL_FOLDER}/{name}", data)


def _write_spark_tables(spark, run: SparkFit, fmt: str, out: StagedOutput) -> None:
    _write_spark_frames(spark, run.items(spark), run.workers, fmt, out)


def _write_spark_frames(spark, items, workers: pd.DataFrame, fmt: str, out: StagedOutput) -> None:
    """``items`` (a Spark DataFrame) with Spark; ``workers`` (pandas, on the driver) with pandas when the
    output is local (a Spark DataFrame of it would ship the whole table inside one task: 39 MB at 100k
    workers), else with Spark."""
    _write_spark_table(items, fmt, out.path("items"))
    if is_local(out.path("workers")):
        write_frame_local(workers, out.path("workers"), fmt)
    else:
        _write_spark_table(spark.createDataFrame(workers).coalesce(1), fmt, out.path("workers"))


def _write_spark_table(frame, fmt: str, path: str) -> None:
    """Write a Spark DataFrame as Parquet, or as CSV with array columns as JSON strings."""
    if fmt == "csv":
        _arrays_to_json(frame).write.mode("overwrite").option("header", "true").csv(path)
    else:
        frame.write.mode("overwrite").parquet(path)


def _arrays_to_json(frame):
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType

    return frame.select(
        *[
            F.to_json(F.col(f.name)).alias(f.name) if isinstance(f.dataType, ArrayType) else F.col(f.name)
            for f in frame.schema.fields
        ]
    )
