"""One aggregation run: source -> prepare -> fit -> evaluate -> tables -> sink, the same for every engine.

* :mod:`~crowdspark.pipeline.source`: which reader and engine take the labels, decided once;
* :mod:`~crowdspark.pipeline.prepare`: validate, encode and build the blocks an engine holds;
* :mod:`~crowdspark.pipeline.fit`: the configured model, H chosen when asked, warm start, checkpoints, metrics;
* :mod:`~crowdspark.pipeline.write`: the result directory, staged and committed;
* :mod:`~crowdspark.pipeline.run`: the whole run (:func:`aggregate`) and the frames-in faces (:func:`fit_frames`).

Local, small-input and Spark runs differ only in their source, their engine and how their item table is
written; the engine hands back item results the same way (``Engine.items``).
"""

from crowdspark.pipeline.fit import Fitted, RunOptions
from crowdspark.pipeline.run import (
    RunResult,
    aggregate,
    aggregate_frames,
    fit_frames,
    preflight,
)
from crowdspark.pipeline.source import needs_spark

__all__ = ["Fitted", "RunOptions", "RunResult", "aggregate", "aggregate_frames", "fit_frames", "needs_spark", "preflight"]
