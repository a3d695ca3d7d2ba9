"""The small-input rule for labels already in a Spark DataFrame: when to collect them and fit on the driver.

A DataFrame has no byte count, so the command line's rule (:mod:`crowdspark.pipeline.source`: label files
below ``engine.small_input_bytes``) becomes a row count and the memory predictor
(:mod:`crowdspark.engine.memory`):

* ``engine.small_input_bytes`` is on (``0`` always distributes), the configuration has no ``input.filter``
  and no ``input.date_column`` (those are applied by the Spark reader);
* the frame has at most :func:`max_frame_rows` rows (one ``count``; free for a cached frame):
  ``engine.small_input_bytes`` divided by :data:`FRAME_LABEL_BYTES`, the bytes per label of the densest input
  the command line collects to the driver at the same threshold (Parquet; 8 MiB is about 2.8M labels); or, on
  a local master, more rows whose local fit's predicted peak (from the row count and the first
  :data:`~crowdspark.engine.choice.SAMPLE_ROWS` rows, :func:`crowdspark.engine.choice.estimate_rows`) is within
  the driver's budget (``engine.max_memory``, the ``maxMemory`` Param) and whose Arrow bytes are within
  ``spark.driver.maxResultSize``: the rule of :func:`crowdspark.engine.choice.choose_engine`, as on the command
  line;
* and, once the rows are collected (Arrow) and prepared, the predicted peak of the local engine's fit
  (:func:`crowdspark.engine.memory.predict_configured`, with the exact items, workers, classes and labels)
  is within the budget of the driver's host (:func:`crowdspark.engine.memory.configured_budget`).

Then the local engine fits the collected rows; it gives the Spark engine's answers (tests).  Otherwise
:func:`fit_small_frame` returns ``None`` and the caller fits the frame on Spark.  The summary of a fit on the
driver says ``"engine": "local"`` and records ``small_input`` (the rows, the rule's threshold, the prediction
and the budget); every fit records ``engine_choice`` (:meth:`crowdspark.engine.choice.EngineChoice.to_dict`).
"""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from crowdspark.config import RunConfig
from crowdspark.engine.choice import SAMPLE_ROWS, EngineChoice, choose_engine, estimate_rows, is_local_master
from crowdspark.io.spark_reader import canonical_spark_frame, spark_input_errors
from crowdspark.engine.memory import (
    Budget,
    Prediction,
    configured_budget,
    format_bytes,
    predict_configured,
)
from crowdspark.pipeline.fit import Fitted, fit_prepared, fit_shape
from crowdspark.validation import parse_bytes
from crowdspark.pipeline.prepare import Prepared, prepare_frames
from crowdspark.pipeline.summary import Timer

__all__ = ["FRAME_LABEL_BYTES", "max_frame_rows", "driver_prediction", "fit_small_frame"]

log = logging.getLogger(__name__)

#: bytes per label of the densest input format (the benchmarks' Parquet files: 2.4-3.4 bytes per label;
#: docs/decisions/0105-small-inputs.md): a frame of ``engine.small_input_bytes / FRAME_LABEL_BYTES`` rows is the
#: most labels the command line collects to the driver at the same threshold
FRAME_LABEL_BYTES = 3

#: the rule, in words, for ``summary["small_input"]["rule"]``
RULE = ("rows <= engine.small_input_bytes / {bytes} bytes per label, and the local fit's predicted peak within "
        "the driver's memory budget")


def max_frame_rows(config: RunConfig) -> int:
    """The most rows a labels DataFrame may have to be fitted on the driver (0: never)."""
    return config.engine.small_input_bytes // FRAME_LABEL_BYTES


def driver_prediction(config: RunConfig, prepared: Prepared) -> tuple[Prediction | None, Budget]:
    """The predicted peak of fitting ``prepared`` (held by a local engine) on the driver, and the budget of the
    driver's host; the prediction is ``None`` when the algorithm cannot run on this input (its model then
    refuses it with its own message)."""
    return predict_configured(config, fit_shape(prepared), "local"), configured_budget(config)


def _run_job(job: Any, what: str, source: str) -> Any:
    """``job()`` with the errors Spark raises on the data as the Spark reader's InputErrors."""
    with spark_input_errors(what, source):
        return job()


def _collected(selected: Any, columns: dict[str, str], what: str, source: str) -> pd.DataFrame:
    """``selected`` (canonical text, :func:`~crowdspark.io.spark_reader.canonical_spark_frame`) on the driver, under the frame's column names."""
    return _run_job(selected.toPandas, what, source).rename(columns=columns)


def _result_limit(spark: Any) -> int:
    """``spark.driver.maxResultSize`` in bytes (0: no limit)."""
    return parse_bytes("spark.driver.maxResultSize", spark.conf.get("spark.driver.maxResultSize", "1g"))


def _frame_choice(config: RunConfig, selected: Any, rows: int, max_rows: int, source: str) -> EngineChoice:
    """The engine of a frame of ``rows`` rows (``selected``: its canonical columns item, worker, label)."""
    master = selected.sparkSession.sparkContext.master
    if rows <= max_rows:
        return choose_engine(config, master, small=True)
    if not is_local_master(master):
        return choose_engine(config, master)
    import pyarrow as pa

    sample = _run_job(selected.limit(SAMPLE_ROWS).toPandas, "labels", source)
    estimate = estimate_rows(rows, sample, ("item", "worker", "label"), len(config.input.classes))
    choice = choose_engine(config, master, estimate=estimate)
    limit = _result_limit(selected.sparkSession)
    arrow_bytes = pa.Table.from_pandas(sample, preserve_index=False).nbytes * rows // max(1, len(sample))
    if choice.engine == "local" and limit and arrow_bytes > limit:
        detail = (f"collecting the frame's {rows:,} rows (about {format_bytes(arrow_bytes)}) would exceed "
                  f"spark.driver.maxResultSize = {format_bytes(limit)}")
        return EngineChoice("spark", "memory", detail, master, estimate, choice.prediction, choice.budget)
    return choice


def fit_small_frame(
    config: RunConfig,
    labels: Any,
    gold: Any = None,
    labels_source: str = "<DataFrame>",
    gold_source: str = "<DataFrame>",
    timer: Timer | None = None,
    choice_out: dict[str, Any] | None = None,
) -> Fitted | None:
    """Fit Spark DataFrames of labels (and gold) on the driver with the local engine when the rule of the
    module docstring holds; ``None`` when they should be fitted on Spark (nothing is left open then).

    Parameters
    ----------
    config : RunConfig
    labels, gold : pyspark DataFrame
        Labels with the columns of ``config.input``; gold with those of ``config.gold``.
    labels_source, gold_source : str
        How messages and the summary name them.
    timer : Timer, optional
        Gets the phases ``count``, ``read`` (the collect), ``validate``, ``blocks``, ``fit`` and ``evaluate``.
    choice_out : dict, optional
        Filled with the engine choice (``summary["engine_choice"]``), also when the frame goes to Spark.

    Raises
    ------
    InputError
        As the Spark reader and the pandas validation raise them (missing columns, nulls, classes ...).
    """
    timer = timer or Timer()
    choice_out = {} if choice_out is None else choice_out
    max_rows = max_frame_rows(config)
    if not max_rows or config.input.filter or config.input.date_column:
        why = "smallInputBytes = 0" if not max_rows else "input.filter and input.date_column are applied by Spark"
        choice_out.update(EngineChoice("spark", "forced distributed", why).to_dict())
        return None
    inp, gold_cfg = config.input, config.gold
    labels_columns = {"item": inp.item, "worker": inp.worker, "label": inp.label}
    gold_columns = {"item": gold_cfg.item, "truth": gold_cfg.truth}
    # lazy selections: a missing column is an InputError naming its setting before any job
    labels_sel = canonical_spark_frame(labels, labels_columns, "labels", labels_source)
    gold_sel = None if gold is None else canonical_spark_frame(gold, gold_columns, "gold", gold_source)
    rows = _run_job(labels_sel.count, "labels", labels_source)
    choice = _frame_choice(config, labels_sel, rows, max_rows, labels_source)
    choice_out.update(choice.to_dict())
    timer.lap("count")
    if choice.engine == "spark":
        log.info("the labels DataFrame has %d rows (> %d, engine.small_input_bytes / %d bytes per label) and %s: "
                 "fitting it on Spark", rows, max_rows, FRAME_LABEL_BYTES, choice.detail)
        return None
    labels_pd = _collected(labels_sel, labels_columns, "labels", labels_source)
    gold_pd = None if gold_sel is None else _collected(gold_sel, gold_columns, "gold", gold_source)
    timer.lap("read")
    prepared = prepare_frames(config, labels_pd, gold_pd, labels_source, gold_source, timer)
    prediction, budget = driver_prediction(config, prepared)
    if prediction is not None and prediction.peak_bytes > budget.bytes:
        prepared.engine.close()
        detail = (f"fitting the {rows:,} collected rows on the driver would need about "
                  f"{format_bytes(prediction.peak_bytes)}, more than the budget of {format_bytes(budget.bytes)} "
                  f"({budget.source})")
        log.info("%s: fitting them on Spark", detail)
        choice_out.update(engine="spark", reason="memory", detail=detail, predicted_peak_bytes=prediction.peak_bytes,
                          budget_bytes=budget.bytes, budget_source=budget.kind, budget_detail=budget.source)
        return None
    log.info("the labels DataFrame has %d rows (%s): collected to the driver and fitted with the local engine "
             "(set engine.small_input_bytes=0 to distribute)", rows, choice.detail)
    fitted = fit_prepared(config, prepared)
    fitted.summary["engine_choice"] = dict(choice_out)
    if choice.reason != "small input":
        return fitted
    fitted.summary["small_input"] = {
        "rows": rows, "max_rows": max_rows, "threshold": config.engine.small_input_bytes, "reader": "spark",
        "rule": RULE.format(bytes=FRAME_LABEL_BYTES),
        **(prediction.to_dict() if prediction is not None else {}), **budget.to_dict(),
    }
    return fitted
