"""One aggregation run: source -> prepare -> fit -> evaluate -> tables -> sink, the same for every engine.

* :mod:`~crowdspark.pipeline.source`: which reader and engine take the labels, decided once;
* :mod:`~crowdspark.pipeline.prepare`: validate, encode and build the blocks an engine holds;
* :mod:`~crowdspark.pipeline.fit`: the configured model, H chosen when asked, warm start, checkpoints, metrics;
* :mod:`~crowdspark.pipeline.write`: the result directory, staged and committed;
* :mod:`~crowdspark.pipeline.run`: the whole run (:func:`aggregate`) and the frames-in faces (:func:`fit_frames`).

Local, small-input and Spark runs differ only in their source, their engine and how their item table is
written; the engine hands back item results the same way (``Engine.items``).
"""

from __future__ import annotations

import importlib
from typing import Any

#: where each public name lives; imported on first use, so that a Spark task unpickling one of this package's
#: block functions (:mod:`crowdspark.pipeline.tasks`) does not import the whole run (pandas, every model)
_HOMES = {
    "Fitted": "fit", "RunOptions": "fit", "RunResult": "run", "aggregate": "run", "aggregate_frames": "run",
    "fit_frames": "run", "preflight": "run", "needs_spark": "source",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
