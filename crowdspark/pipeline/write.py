"""The last step of a run: its result directory (``items/``, ``workers/``, ``relabel/``, ``gold_workers/``,
``_model/``, ``summary.json``), staged and committed atomically (:class:`crowdspark.io.sink.StagedOutput`), whichever engine produced the tables."""

from __future__ import annotations

import time
from typing import Any

import pandas as pd

from crowdspark.config import RunConfig
from crowdspark.engine.base import WrittenItems
from crowdspark.io.saved_model import MODEL_FOLDER, model_files
from crowdspark.io.sink import StagedOutput
from crowdspark.io.tables import write_table
from crowdspark.pipeline.fit import Fitted
from crowdspark.pipeline.progress import progress
from crowdspark.pipeline.quality import (
    GOLD_WORKERS,
    GOLD_WORKERS_SCHEMA,
    RELABEL_SCHEMA,
    gold_worker_table,
    relabel_queue,
)

__all__ = ["write_result"]


def _written_items(items: Any, written: WrittenItems | None, directory: str, fmt: str) -> Any:
    """The item table ``relabel/`` is cut from: the rows the tasks that wrote ``items/`` kept (each partition's
    first ``relabel.budget`` rows of the queue: a small pyarrow table on the driver), else a Spark table's
    written Parquet files (reading five columns costs less than computing every item again; read with the
    table's schema, which spares Spark a job to infer it from the files), else ``items`` itself."""
    if written is not None and written.kept is not None:
        return written.kept
    if fmt == "parquet" and hasattr(items, "sparkSession"):
        return items.sparkSession.read.schema(items.schema).parquet(directory)
    return items


def write_result(fitted: Fitted, items: Any, workers: pd.DataFrame, destination: str, config: RunConfig,
                 spark: Any = None) -> None:
    """Write the run (its ``items`` and ``workers`` tables, :meth:`Fitted.items` and :meth:`Fitted.workers`) to
    ``destination`` and add the ``write`` phase to ``fitted.summary["timings"]``.

    The item table is written by the engine that holds it: as Parquet from the tasks that hold the blocks
    where the engine can (:meth:`Fitted.write_items`: the Spark engine on a local master, to a local
    output), else ``items`` (pandas from the local engine, Spark from the Spark engine); the worker table
    (size K) from the driver, with pandas when the output is local (a Spark DataFrame of it would ship the
    whole table inside one task; docs/decisions/0107-worker-table-from-driver.md), else with Spark;
    ``relabel/`` from
    the rows the item-writing tasks kept, when they kept any (a pandas table, written like the worker table),
    else from the item table (:func:`_written_items`); with gold, ``gold_workers/``
    (:func:`crowdspark.pipeline.quality.gold_worker_table`, written like the worker table).
    :meth:`Fitted.write_extra` writes what the kind of run adds before ``summary.json`` (an incremental night's
    item state).
    """
    start = time.perf_counter()
    fmt = config.output.format
    with progress("write", f"writing the results to {destination}"), StagedOutput(destination, spark) as out:
        written = fitted.write_items(out.path("items"), config.relabel.budget) if fmt == "parquet" else None
        if written is None:
            write_table(items, out.path("items"), fmt, spark, fitted.item_extras)
        write_table(workers, out.path("workers"), fmt, spark)
        if fitted.quality is not None:
            queue = relabel_queue(_written_items(items, written, out.path("items"), fmt), config.relabel.budget)
            write_table(queue, out.path("relabel"), fmt, spark, schema=RELABEL_SCHEMA)
            if fitted.prepared.has_gold:
                write_table(gold_worker_table(fitted.quality, fitted.encoding.workers), out.path(GOLD_WORKERS),
                            fmt, spark, schema=GOLD_WORKERS_SCHEMA)
        for name, data in model_files(fitted.saved_model(config.algorithm)).items():
            out.write_bytes(f"{MODEL_FOLDER}/{name}", data)
        fitted.write_extra(out)
        fitted.summary["timings"]["write"] = round(time.perf_counter() - start, 4)
        out.write_json("summary.json", fitted.summary)
        out.commit()
