"""The paper's claims (section 5.3), each checked against a run's aggregates with a stated criterion.

A verdict is "holds" (every comparison passes), "does not hold" (none does), "partly (hits/total)" or "not
tested" (the run has nothing to compare).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from jobs.reproduce.aggregates import aggregate_records, has_levels
from jobs.reproduce.datasets import MIN_WORKER_LABELS
from jobs.reproduce.methods import CURVE_ALGORITHMS, PAPER_LEVEL_MODELS, PRESET_SEP, RANDOM_INIT, variant_of
from jobs.reproduce.paper import PAPER_DATASET_OF, PAPER_TABLE2
from jobs.reproduce.runs import Results

__all__ = ["Claim", "check_claims"]


@dataclass(frozen=True)
class Claim:
    """One claim of the paper with the run's evidence and verdict (holds / partly / does not hold / not tested)."""

    claim: str
    criterion: str
    evidence: str
    verdict: str


def _err(agg: Mapping[str, Any], method: str) -> float | None:
    value = agg.get(method, {}).get("error_mean")
    return None if value is None or value == "inf" else float(value)


def _verdict(hits: int, total: int) -> str:
    if total == 0:
        return "not tested"
    return "holds" if hits == total else "does not hold" if hits == 0 else f"partly ({hits}/{total})"


def _methods_of(agg: Mapping[str, Any], algorithms: Iterable[str],
                variants: Iterable[str] = ("", "paper")) -> list[str]:
    wanted = set(algorithms)
    keys = []
    for key, row in agg.items():
        if row.get("algorithm") in wanted and variant_of(key) in variants:
            keys.append(key)
    return sorted(keys)


def _claim_idbla_best(aggs: Mapping[str, Any]) -> Claim:
    hits, total, parts = 0, 0, []
    for ds, agg in aggs.items():
        base = {k: _err(agg, k) for k in _methods_of(agg, ("mv", "ds", "bcc"))}
        base = {k: v for k, v in base.items() if v is not None}
        for m in _methods_of(agg, ("idbla",)):
            e = _err(agg, m)
            if e is None or not base:
                continue
            best = min(base, key=base.__getitem__)
            total += 1
            hits += e < base[best]
            parts.append(f"{ds}: {m} {e:.2f} vs best baseline {best} {base[best]:.2f}")
    return Claim("IDBLA outperforms majority vote, DS-EM and BCC on every dataset (Table 2)",
                 "mean error of each IDBLA variant below the best MV/DS/BCC variant", "; ".join(parts),
                 _verdict(hits, total))


def _claim_beat_mv(aggs: Mapping[str, Any]) -> Claim:
    hits, total, parts = 0, 0, []
    for ds, agg in aggs.items():
        mv = _err(agg, "mv")
        if mv is None:
            continue
        worse = []
        for m in _methods_of(agg, ("ds", "bcc", "idbla", "fixed-idbla")):
            e = _err(agg, m)
            if e is None:
                continue
            total += 1
            hits += e < mv
            if e >= mv:
                worse.append(f"{m} {e:.2f}")
        parts.append(f"{ds}: mv {mv:.2f}" + (f", not better: {', '.join(worse)}" if worse else ", all better"))
    return Claim("DS-EM, BCC, IDBLA and Fixed-IDBLA are substantially better than majority vote",
                 "mean error below majority vote's, per method and dataset", "; ".join(parts), _verdict(hits, total))


def _claim_paper_numbers(aggs: Mapping[str, Any]) -> Claim:
    hits, total, parts = 0, 0, []
    for ds, agg in aggs.items():
        paper_ds = PAPER_DATASET_OF.get(ds)
        if paper_ds is None:
            continue
        for key in _methods_of(agg, PAPER_TABLE2):
            e, ref = _err(agg, key), PAPER_TABLE2[agg[key]["algorithm"]][paper_ds]
            if e is None:
                continue
            total += 1
            hits += abs(e - ref) <= 1.0
            parts.append(f"{ds} {key} {e:.2f} (paper {ref:.2f})")
    return Claim("Our error rates match the paper's Table 2",
                 "within 1 percentage point (defaults and paper presets)", "; ".join(parts), _verdict(hits, total))


def _claim_single_workers(results: Results, aggs: Mapping[str, Any]) -> Claim:
    hits, total, parts = 0, 0, []
    for ds, agg in aggs.items():
        best_worker = results.datasets.get(ds, {}).get("best_accuracy_min_labels")
        errors = {k: _err(agg, k) for k in agg}
        errors = {k: v for k, v in errors.items() if v is not None}
        if best_worker is None or not errors:
            continue
        best = min(errors, key=errors.__getitem__)
        total += 1
        hits += errors[best] < 100 * (1 - best_worker)
        parts.append(f"{ds}: {best} {errors[best]:.2f} vs best worker {100 * (1 - best_worker):.2f}")
    return Claim("Aggregation is better than single workers (Figure 1)",
                 f"best method's error below the error of the best worker with >= {MIN_WORKER_LABELS} gold labels",
                 "; ".join(parts), _verdict(hits, total))


def _claim_cvb(aggs: Mapping[str, Any]) -> list[Claim]:
    few, similar = [0, 0, []], [0, 0, []]
    for ds, agg in aggs.items():
        gibbs = _err(agg, "idbla")
        for m in _methods_of(agg, CURVE_ALGORITHMS, ("",)):
            row = agg[m]
            if row.get("iterations_mean") is None:
                continue
            few[1] += 1
            ok = row["iterations_mean"] <= 20 and row["converged_runs"] == row["runs"]
            few[0] += ok
            few[2].append(f"{ds} {m}: {row['iterations_mean']:.1f} iterations, "
                          f"converged {row['converged_runs']}/{row['runs']}")
            e = _err(agg, m)
            if e is not None and gibbs is not None:
                similar[1] += 1
                similar[0] += abs(e - gibbs) <= 1.0
                similar[2].append(f"{ds}: {m} {e:.2f} vs Gibbs {gibbs:.2f}")
    return [
        Claim("Collapsed VI converges after only a few iterations (Figure 2)",
              "every run converged, mean iterations <= 20", "; ".join(few[2]) or "no CVB model registered",
              _verdict(few[0], few[1])),
        Claim("Collapsed VI attains results similar to Gibbs sampling", "|error(CVB) - error(idbla)| <= 1 point",
              "; ".join(similar[2]) or "no CVB model registered", _verdict(similar[0], similar[1])),
    ]


def _claim_init(aggs: Mapping[str, Any]) -> Claim:
    hits, total, parts = 0, 0, []
    for ds, agg in aggs.items():
        for key in agg:
            alg, _, variant = key.partition(PRESET_SEP)
            if variant != RANDOM_INIT:
                continue
            e_rand, e_init = _err(agg, key), _err(agg, alg)
            if e_rand is None or e_init is None:
                continue
            total += 1
            hits += e_rand - e_init >= 2.0
            parts.append(f"{ds} {alg}: {e_init:.2f} -> {e_rand:.2f}")
    return Claim("Without the initialization of section 4.4 the error rises sharply (Table 3: 16% -> 41%)",
                 "random init at least 2 points worse than the paper's init", "; ".join(parts), _verdict(hits, total))


def _claim_levels(aggs: Mapping[str, Any]) -> Claim:
    hits, total, parts = 0, 0, []
    for ds, agg in aggs.items():
        for key, row in sorted(agg.items()):
            lv = row.get("levels")
            if (not has_levels(lv) or variant_of(key) == RANDOM_INIT
                    or row["algorithm"] not in PAPER_LEVEL_MODELS):
                continue
            total += 1
            if lv["runs_with_two_levels"] == 0:
                parts.append(f"{ds} {key}: one populated level only")
                continue
            ok = lv["ordered_runs"] == lv["runs_with_two_levels"] == lv["runs"]
            hits += ok
            parts.append(f"{ds} {key}: {lv['easiest']:.3f} vs {lv['hardest']:.3f} "
                         f"({lv['ordered_runs']}/{lv['runs']} runs ordered)")
    return Claim("Predicted easy levels have lower average labeling error than hard levels (5.3.4)",
                 "in every run at least two levels hold gold items and the easiest has the lower error",
                 "; ".join(parts), _verdict(hits, total))


def _claim_nll(aggs: Mapping[str, Any]) -> Claim:
    hits, total, parts = 0, 0, []
    for ds, agg in aggs.items():
        vals = {}
        for k in _methods_of(agg, ("ds", "bcc", "idbla", "fixed-idbla"), ("",)):
            v = agg[k].get("paper_nll_mean")
            if isinstance(v, (int, float)) and math.isfinite(v):
                vals[k] = float(v)
        if len(vals) < 2:
            continue
        spread = (max(vals.values()) - min(vals.values())) / float(np.mean(list(vals.values())))
        total += 1
        hits += spread <= 0.10
        parts.append(f"{ds}: " + ", ".join(f"{k} {v:.3f}" for k, v in vals.items()) + f" (spread {100 * spread:.0f}%)")
    return Claim("The NLLs of DS-EM, BCC, IDBLA and Fixed-IDBLA are close (Figure 3)",
                 "per-label -log p(L | pi, T, Q): (max - min) / mean <= 10%", "; ".join(parts), _verdict(hits, total))


def check_claims(results: Results) -> list[Claim]:
    """The paper's claims (section 5.3) checked against the measured aggregates."""
    aggs = aggregate_records(results.records)
    return [
        _claim_paper_numbers(aggs),
        _claim_idbla_best(aggs),
        _claim_beat_mv(aggs),
        _claim_single_workers(results, aggs),
        *_claim_cvb(aggs),
        _claim_init(aggs),
        _claim_levels(aggs),
        _claim_nll(aggs),
    ]
