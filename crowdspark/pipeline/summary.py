"""What a run reports: the phase timings and ``summary.json``."""

from __future__ import annotations

import resource
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from crowdspark.version import __version__
from crowdspark.models.registry import model_parameters
from crowdspark.config import RunConfig
from crowdspark.engine.loop import FitResult
from crowdspark.io.rules import Encoding
from crowdspark.models.base import Model

__all__ = ["Timer", "peak_rss_mib", "run_summary", "gold_split_report"]


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
        "gold_items": result.counts["n_gold_items"] + result.counts.get("n_fixed_items", 0),
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


def gold_split_report(config: RunConfig, counts: dict[str, int], has_gold: bool,
                      needs_fit_gold: bool = False) -> tuple[dict[str, Any] | None, list[str]]:
    """``summary.json``'s ``gold_split`` (``None`` without gold) and the warnings it calls for.

    ``gold_split`` records ``fit_fraction`` and ``seed`` (``gold.fit_fraction``, ``gold.split_seed``), and how
    many labelled gold items the fit held fixed (``fit_items``) and how many it was scored on
    (``held_out_items``, the ``metrics``' ``n_gold``).  ``needs_fit_gold``: the model learns from the gold in
    the fit only (:attr:`crowdspark.models.base.Model.needs_fit_gold`), so a fit without any is a warning.
    """
    fraction = config.gold.fit_fraction
    if not has_gold:
        if fraction > 0:
            return None, [f"gold.fit_fraction = {fraction:g} but the run has no gold: no item is held fixed; give "
                          "the gold file (--gold) to use it in the fit"]
        return None, []
    fit_items, held_out = counts.get("n_fixed_items", 0), counts["n_gold_items"]
    report = {"fit_fraction": fraction, "seed": config.gold.split_seed, "fit_items": fit_items,
              "held_out_items": held_out}
    warnings = []
    if needs_fit_gold and not fit_items:
        warnings.append(f"{config.algorithm} had no labelled gold item in the fit (gold.fit_fraction = {fraction:g}): "
                        "every worker weighs the same; raise gold.fit_fraction or check the gold's item ids")
    if fit_items and not held_out and fraction < 1.0:
        warnings.append(f"every labelled gold item ({fit_items}) is in the fit (gold.fit_fraction = {fraction:g}): "
                        "no gold is left to score the run, so its metrics are null; lower gold.fit_fraction to "
                        "hold some out")
    return report, warnings
