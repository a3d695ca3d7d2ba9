"""One aggregation run: read -> validate -> blocks -> fit -> evaluate -> write, on either engine.

This is the function the command line, the spark-submit job and the end-to-end tests call.  It does no
maths: models come from :mod:`crowdspark.algorithms`, the loop from :mod:`crowdspark.engine.loop`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field, fields
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from crowdspark import __version__
from crowdspark.algorithms import build_model, hyperparameters
from crowdspark.block import Block, build_blocks
from crowdspark.config import RunConfig
from crowdspark.errors import ConfigError
from crowdspark.data import encode_rows, prepare_gold, prepare_labels, read_frame
from crowdspark.engine.base import Engine
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.loop import FitResult, finish_fn, fit
from crowdspark.metrics import gold_stats, level_error_stats, metrics_from_stats
from crowdspark.models.base import Model, State
from crowdspark.output import StagedOutput, item_frame, worker_frame, write_frame_local
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


@dataclass
class _Timer:
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


#: configuration keys of level models handled here, not by the model: candidates and criterion for H
SELECTION_KEYS = ("select_levels", "level_criterion")
#: the paper's protocol (section 5.2): try several H, keep the largest log p(L | pi, T, Q)
PAPER_LEVELS = {"idbla": [1, 2, 3, 4], "fixed-idbla": [2, 3, 4]}


def fit_configured(config: RunConfig, n_workers: int, n_classes: int, engine: Engine) -> tuple[Model, FitResult, dict | None]:
    """Build the configured model and fit it, first choosing H when the configuration asks for it.

    ``<algorithm>.select_levels = [1, 2, 3]`` fits each H and keeps the best by ``level_criterion``
    (default ``"aic"``; see :mod:`crowdspark.model_selection`); ``preset = "paper"`` implies the paper's
    protocol (its criterion over :data:`PAPER_LEVELS`) unless ``select_levels`` is given.

    Returns
    -------
    model, result, selection
        ``selection`` is ``{"criterion", "chosen", "table"}`` or ``None``.
    """
    name = config.algorithm
    params = config.algorithm_params()
    candidates = params.pop("select_levels", None)
    criterion = params.pop("level_criterion", None)
    if candidates is None and params.get("preset") == "paper" and name in PAPER_LEVELS:
        candidates, criterion = PAPER_LEVELS[name], criterion or "paper"
    selection = None
    if candidates is not None or criterion is not None:
        from crowdspark.model_selection import choose_levels

        if "n_levels" not in hyperparameters(name):
            raise ConfigError(f"{name}.select_levels applies only to models with difficulty levels; remove it")
        if not isinstance(candidates, list) or not candidates or not all(
            isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in candidates
        ):
            raise ConfigError(f"{name}.select_levels must be a list of integers >= 1, but got {candidates!r}")

        def make(h: int) -> Model:
            return build_model(name, {**params, "n_levels": h}, n_workers, n_classes, config.seed)

        choice = choose_levels(make, engine, candidates, criterion or "aic")
        params["n_levels"] = choice.chosen
        selection = {"criterion": choice.criterion, "chosen": choice.chosen, "table": choice.table}
        log.info("%s: chose H = %d by %s", name, choice.chosen, choice.criterion)
    model = build_model(name, params, n_workers, n_classes, config.seed)
    return model, fit(model, engine), selection


def _model_parameters(model: Model) -> dict[str, Any]:
    return {f.name: getattr(model, f.name) for f in fields(model) if f.name not in ("n_workers", "n_classes")}


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
        "parameters": _model_parameters(model),
        "classes": list(classes),
        "counts": counts,
        "iterations": result.n_iter,
        "converged": result.converged,
        "stop_reason": result.stop_reason,
        "history": result.history,
        "model": model.summary(result.params),
        "inputs": inputs,
        "config": config.to_dict(),
    }


def aggregate(
    config: RunConfig,
    labels_path: str,
    output_dir: str | None,
    gold_path: str | None = None,
    spark: Any = None,
) -> RunResult:
    """Run the configured algorithm on the configured engine and write the results.

    Parameters
    ----------
    config : RunConfig
    labels_path : str
        File, folder or glob of labels.
    output_dir : str or None
        Destination directory (replaced atomically); ``None`` writes nothing (tests, API).
    gold_path : str, optional
        Gold labels for evaluation.
    spark : SparkSession, optional
        Required for the Spark engine.
    """
    if config.engine.name == "spark":
        if spark is None:
            raise ValueError("the spark engine needs a SparkSession")
        return _aggregate_spark(spark, config, labels_path, output_dir, gold_path)
    return _aggregate_local(config, labels_path, output_dir, gold_path)


# --------------------------------------------------------------------------- local engine


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
    timer = _Timer()
    labels = prepare_labels(labels_raw, config.input, labels_source)
    enc = labels.encoding
    gold = None
    if gold_raw is not None:
        gold = prepare_gold(gold_raw, config.gold, list(enc.classes), gold_source)
    extra = {"unused_classes": _unused_classes(enc.classes, set(labels.frame["label"].unique()))}
    if gold is not None:
        extra["gold_items_without_labels"] = int((~gold.frame["item"].isin(set(labels.frame["item"]))).sum())
        extra["gold_repeated_rows"] = gold.repeated_rows
    timer.lap("validate")
    blocks = local_blocks(labels.frame, None if gold is None else gold.frame, enc, config.engine.max_block_labels)
    engine = LocalEngine(blocks)
    timer.lap("blocks")
    model, result, selection = fit_configured(config, enc.n_workers, enc.n_classes, engine)
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
    if selection is not None:
        summary["level_selection"] = selection
    if metrics is not None:
        summary["metrics"] = metrics
    timer.lap("tables")
    summary["timings"] = timer.timings
    return RunResult(summary=summary, items=items, workers=workers)


def _aggregate_local(config: RunConfig, labels_path: str, output_dir: str | None, gold_path: str | None) -> RunResult:
    start = time.perf_counter()
    raw = read_frame(labels_path, config.input.format, "labels")
    gold_raw = read_frame(gold_path, config.gold.format, "gold") if gold_path else None
    read_seconds = round(time.perf_counter() - start, 4)
    run = aggregate_frames(config, raw, gold_raw, labels_path, gold_path or "<none>")
    run.summary["timings"] = {"read": read_seconds, **run.summary["timings"]}
    if output_dir is not None:
        start = time.perf_counter()
        with StagedOutput(output_dir) as out:
            write_frame_local(run.items, out.path("items"), config.output.format)
            write_frame_local(run.workers, out.path("workers"), config.output.format)
            run.summary["timings"]["write"] = round(time.perf_counter() - start, 4)
            out.write_json("summary.json", run.summary)
            out.commit()
    return run


# --------------------------------------------------------------------------- spark engine


def _item_schema(model: Model) -> str:
    extras = getattr(model, "item_extras", {}) or {}
    columns = ["item string", "label string", "confidence double", "posterior array<double>"]
    columns += [f"{name} {ddl}" for name, ddl in extras.items()]
    return ", ".join(columns)


def _decode_items(frames, classes: tuple[str, ...]):
    import pickle

    for frame in frames:
        for blob in frame["blob"]:
            block, result = pickle.loads(blob)
            yield item_frame(block.item_ids, result, classes)


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
        decode = partial(_decode_items, classes=self.encoding.classes)
        return blob_frame.mapInPandas(decode, _item_schema(self.model))

    def close(self) -> None:
        self.engine.close()


def fit_spark_frames(
    spark,
    config: RunConfig,
    labels_raw,
    gold_raw=None,
    labels_source: str = "<DataFrame>",
    gold_source: str | None = None,
    timer: _Timer | None = None,
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
    """
    from crowdspark.engine.spark import SparkEngine
    from crowdspark.spark_data import block_rdd, gold_items_without_labels, prepare_gold_spark, prepare_labels_spark

    timer = timer or _Timer()
    labels = prepare_labels_spark(labels_raw, config.input, labels_source)
    enc = labels.encoding
    gold = None
    if gold_raw is not None:
        gold = prepare_gold_spark(gold_raw, config.gold, list(enc.classes), gold_source or "<DataFrame>")
    extra = {"unused_classes": _unused_classes(enc.classes, set(labels.observed_classes))}
    if gold is not None:
        extra["gold_items_without_labels"] = gold_items_without_labels(labels, gold)
        extra["gold_repeated_rows"] = gold.repeated_rows
    timer.lap("validate")
    n_partitions = config.engine.partitions or spark.sparkContext.defaultParallelism
    engine = SparkEngine(
        block_rdd(labels, gold, n_partitions, config.engine.max_block_labels),
        checkpoint_interval=config.engine.checkpoint_interval,
        tree_depth=config.engine.tree_depth,
    )
    try:
        timer.lap("blocks")
        model, result, selection = fit_configured(config, enc.n_workers, enc.n_classes, engine)
        timer.lap("fit")
        metrics = evaluate(model, engine, result.params) if gold is not None else None
        timer.lap("evaluate")
        workers = worker_frame(enc.workers, model.worker_table(result.params, result.init_stats))
        inputs = {"labels": labels_source, "gold": gold_source, "label_rows": labels.n_rows}
        summary = _summary(config, model, "spark", enc.classes, enc.n_workers, result, extra, inputs)
        summary["partitions"] = n_partitions
        if selection is not None:
            summary["level_selection"] = selection
        if metrics is not None:
            summary["metrics"] = metrics
    except BaseException:
        engine.close()
        raise
    return SparkFit(model=model, engine=engine, result=result, summary=summary, workers=workers, encoding=enc)


def _aggregate_spark(spark, config: RunConfig, labels_path: str, output_dir: str | None, gold_path: str | None) -> RunResult:
    from crowdspark.spark_data import read_spark_frame

    timer = _Timer()
    raw = read_spark_frame(spark, labels_path, config.input.format, "labels")
    gold_raw = read_spark_frame(spark, gold_path, config.gold.format, "gold") if gold_path else None
    timer.lap("read")
    run = fit_spark_frames(spark, config, raw, gold_raw, labels_path, gold_path, timer)
    summary = run.summary
    try:
        if output_dir is not None:
            with StagedOutput(output_dir, spark) as out:
                _write_spark_tables(spark, run, config.output.format, out)
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


def _write_spark_tables(spark, run: SparkFit, fmt: str, out: StagedOutput) -> None:
    items = run.items(spark)
    workers = spark.createDataFrame(run.workers)
    if fmt == "csv":
        _arrays_to_json(items).write.mode("overwrite").option("header", "true").csv(out.path("items"))
        _arrays_to_json(workers).coalesce(1).write.mode("overwrite").option("header", "true").csv(out.path("workers"))
    else:
        items.write.mode("overwrite").parquet(out.path("items"))
        workers.coalesce(1).write.mode("overwrite").parquet(out.path("workers"))


def _arrays_to_json(frame):
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType

    return frame.select(
        *[
            F.to_json(F.col(f.name)).alias(f.name) if isinstance(f.dataType, ArrayType) else F.col(f.name)
            for f in frame.schema.fields
        ]
    )
