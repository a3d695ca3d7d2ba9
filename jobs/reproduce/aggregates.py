"""Per (dataset, method) summaries of the run records: error mean and spread, NLLs, time, difficulty levels."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jobs.reproduce.runs import RunRecord, jsonable

__all__ = ["aggregate_records", "has_levels"]


def _mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (ddof = 1; 0 for one value); ``None`` for no values."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    if arr.size == 0:
        return None, None
    if not np.isfinite(arr).all():
        return math.inf, None
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def _level_extremes(rec: RunRecord) -> tuple[float, float, int, int] | None:
    """(easiest, hardest) non-empty level's labeling error and gold items; ``None`` if < 2 such levels."""
    if not rec.level_labeling_error or not rec.level_gold_items:
        return None
    filled = [h for h, (e, n) in enumerate(zip(rec.level_labeling_error, rec.level_gold_items)) if n and e is not None]
    if len(filled) < 2:
        return None
    lo, hi = filled[0], filled[-1]
    return (rec.level_labeling_error[lo], rec.level_labeling_error[hi], rec.level_gold_items[lo],
            rec.level_gold_items[hi])


def _levels_summary(recs: Sequence[RunRecord]) -> dict[str, Any] | None:
    with_levels = [r for r in recs if r.level_labeling_error is not None]
    if not with_levels:
        return None
    ext = [e for e in (_level_extremes(r) for r in with_levels) if e is not None]
    out: dict[str, Any] = {
        "runs": len(with_levels),
        "runs_with_two_levels": len(ext),
        "n_levels": sorted({r.n_levels for r in with_levels if r.n_levels is not None}),
    }
    if ext:
        arr = np.asarray(ext, dtype=float)
        out.update(easiest=float(arr[:, 0].mean()), hardest=float(arr[:, 1].mean()),
                   easiest_items=float(arr[:, 2].mean()), hardest_items=float(arr[:, 3].mean()),
                   ordered_runs=int((arr[:, 0] < arr[:, 1]).sum()))
    seed0 = min(with_levels, key=lambda r: r.seed)
    out["seed0"] = {"level_labeling_error": seed0.level_labeling_error, "level_gold_items": seed0.level_gold_items}
    return out


def _summary(recs: Sequence[RunRecord]) -> dict[str, Any]:
    """The aggregate of one (dataset, method)'s runs; failed runs are counted, not averaged."""
    ok = [r for r in recs if r.error is None]
    errors = [100 * r.error_rate for r in ok if r.error_rate is not None]
    err_mean, err_std = _mean_std(errors)
    nll_mean, nll_std = _mean_std([r.paper_nll for r in ok])
    return {
        "algorithm": recs[0].algorithm,
        "runs": len(ok),
        "failed": len(recs) - len(ok),
        "failures": sorted({r.error for r in recs if r.error}),
        "error_mean": err_mean,
        "error_std": err_std,
        "error_min": min(errors, default=None),
        "error_max": max(errors, default=None),
        "paper_nll_mean": nll_mean,
        "paper_nll_std": nll_std,
        "gold_nll_mean": _mean_std([r.gold_nll for r in ok])[0],
        "seconds_mean": _mean_std([r.seconds for r in ok])[0],
        "iterations_mean": _mean_std([r.iterations for r in ok])[0],
        "converged_runs": sum(1 for r in ok if r.converged),
        "levels": _levels_summary(ok),
    }


def aggregate_records(records: Sequence[RunRecord]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per dataset and method: error mean/std (%), NLLs, seconds, iterations, level errors, failures."""
    groups: dict[tuple[str, str], list[RunRecord]] = {}
    for rec in records:
        groups.setdefault((rec.dataset, rec.method), []).append(rec)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (ds, method), recs in groups.items():
        out.setdefault(ds, {})[method] = _summary(recs)
    return jsonable(out)


def has_levels(levels: Mapping[str, Any] | None) -> bool:
    """Whether a method's level summary is about more than one difficulty level."""
    return bool(levels) and any(h > 1 for h in levels["n_levels"])
