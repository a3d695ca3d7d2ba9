"""What a run reports: the phase timings and ``summary.json``."""

from __future__ import annotations

import resource
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from crowdspark import __version__
from crowdspark.models.registry import model_parameters
from crowdspark.config import RunConfig
from crowdspark.engine.loop import FitResult
from crowdspark.io.rules import Encoding
from crowdspark.models.base import Model

__all__ = ["Timer", "peak_rss_mib", "run_summary"]


@dataclass
class Timer:
    """Seconds per phase of a run (``lap`` closes the current phase)."""

    timings: dict[str, float] = field(default_factory=dict)
    _start: float = field(default_factory=time.perf_counter)

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = round(now - self._start, 4)
        self._start = now


def peak_rss_mib() -> float:
    """Peak resident memory of this (driver) Python process."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def run_summary(
    config: RunConfig,
    model: Model,
    engine_name: str,
    encoding: Encoding,
    result: FitResult,
    extra_counts: dict[str, int],
    inputs: dict[str, Any],
    input_warnings: list[str],
) -> dict[str, Any]:
    """``summary.json`` of a fit, without the parts the caller adds (metrics, timings, the engine's report).

    Parameters
    ----------
    extra_counts : dict
        Counts of what the input held beyond the labels (``unused_classes``, ``gold_items_without_labels``
        ...).
    inputs : dict
        What was read (sources, rows).
    input_warnings : list of str
        Warnings about the input; they come first in ``warnings``.
    """
    counts = {
        "items": result.counts["n_items"],
        "workers": encoding.n_workers,
        "labels": result.counts["n_labels"],
        "classes": encoding.n_classes,
        "duplicate_pairs": result.counts["duplicate_pairs"],
        "gold_items": result.counts["n_gold_items"],
        **extra_counts,
    }
    return {
        "algorithm": config.algorithm,
        "engine": engine_name,
        "seed": config.seed,
        "version": __version__,
        "parameters": model_parameters(model),
        "classes": list(encoding.classes),
        "counts": counts,
        "iterations": result.n_iter,
        "converged": result.converged,
        "stop_reason": result.stop_reason,
        "history": result.history,
        "model": model.summary(result.params),
        "warnings": list(input_warnings) + list(result.warnings),
        "resumed_from_iteration": result.resumed_from,
        "memory": {"driver_python_peak_mib": round(peak_rss_mib(), 1)},
        "inputs": inputs,
        "config": config.to_dict(),
    }
