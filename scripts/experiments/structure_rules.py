"""Rules that choose among one accuracy per worker, shrunk matrices and full matrices, on the synthetic regimes.

    .venv/bin/python scripts/experiments/structure_rules.py [--seeds 5] [--regimes ...] [--folds 5] [--sweeps 5]
        [--real] [--json out.json]

The regimes are ``structure_regimes.py``'s (truth planted; no real crowd's gold is read).  Per regime and
data seed, on one block of all labels, with the product's kernels (``ds_e_step``, the M-steps of
``one-coin``, ``ads.shrinkage = "empirical-bayes"`` and ``ds``, :func:`crowdspark.models.holdout.fold_stats`):

- each structure fitted by EM from majority vote (smoothing 0.5, at most 100 sweeps, stopped when the log
  evidence per label changes by less than 1e-6): ``one-coin``, ``shrunk`` (the worker's own one-coin row as
  the prior's centre, strength per class by empirical Bayes), ``full`` (Dawid-Skene);
- each structure's held-out label log-likelihood, as ``ads.criterion = "heldout"`` computes it (F folds of
  labels keyed by (seed 1, item, worker), every fold's fit started from the all-labels fit, scored at the E-step
  of the last of ``--sweeps`` sweeps), for three candidates instead of two;
- the rules: ``hll-max``, the structure of largest held-out likelihood; ``hll-1se``, the simplest (one-coin,
  shrunk, full) within one standard error of the best (:func:`~crowdspark.models.holdout.one_se_choice`);
  ``early-N``, one-coin to convergence and then N sweeps of full matrices from its posteriors (stopping early
  as the only prior); ``shrunk-by-full``, shrunk matrices whose strength is learned once, by the same empirical
  Bayes, from the full structure's converged expected counts instead of every sweep from their own (which
  pull the strength up: counts under shrunk posteriors look one-coin); ``patterned-by-full``, the same with
  the prior centred on the worker's accuracy and the crowd's own pattern of errors (pooled from the full
  structure's counts, each worker weighing about one share) instead of errors spread uniformly.

Prints the mean error (%) per regime, the better of ``ds``'s and ``one-coin``'s means (the issue's per-regime
bar; ``full`` here is ``ds``) and each rule's excess over it, ``!`` where it is beyond max(0.5 points, 2 items).
With ``--real``, the same on the 12 bundled datasets (one draw each, their gold scoring the items it covers).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "experiments"))

from adaptive_table import DATASETS, real  # noqa: E402
from structure_regimes import REGIMES  # noqa: E402

from crowdspark.block import Block  # noqa: E402
from crowdspark.io.rules import Encoding, order_classes  # noqa: E402
from crowdspark.models.common import (  # noqa: E402
    argmax_random_ties,
    confusion_counts,
    normalize_rows,
    one_coin_confusion,
    tie_uniforms,
    vote_counts,
)
from crowdspark.models.dawid_skene import ds_e_step, ds_m_step  # noqa: E402
from crowdspark.models.holdout import fold_stats, one_se_choice  # noqa: E402
from crowdspark.models.one_coin import one_coin_accuracy, one_coin_m_step  # noqa: E402
from crowdspark.models.shrinkage import empirical_strength, shrunk_m_step  # noqa: E402
from crowdspark.pipeline.prepare import local_blocks  # noqa: E402

MStep = Callable[[np.ndarray, np.ndarray, float], dict[str, np.ndarray]]
#: the candidates, simplest first
STRUCTURES: dict[str, MStep] = {"one-coin": one_coin_m_step, "shrunk": shrunk_m_step, "full": ds_m_step}
SMOOTHING = 0.5
SEED = 1
EARLY = (1, 2, 3)


def fixed_strength_m_step(strength: np.ndarray, errors: np.ndarray | None) -> MStep:
    """The shrunk M-step with the strength ``A`` (C,) given instead of learned every sweep, centred on each
    worker's one-coin row or (``errors`` (C, C)) its accuracy with the crowd's errors."""

    def m_step(confusion: np.ndarray, classes: np.ndarray, smoothing: float) -> dict[str, np.ndarray]:
        centre = patterned_centre(confusion, errors)
        return {"log_pi": np.log(normalize_rows(confusion + strength[None, :, None] * centre, smoothing)),
                "log_alpha": np.log(normalize_rows(classes, smoothing))}

    return m_step


def crowd_errors(counts: np.ndarray) -> np.ndarray:
    """Where the crowd's errors go, (C, C), rows on the simplex over the other classes (zero diagonal): the
    workers' off-diagonal counts pooled with weights ``1 / (n[k, t] + median_k n[k, t])``, so that no worker's
    row weighs more than about one worker's share however many labels it holds.

    Parameters
    ----------
    counts : ndarray, shape (K, C, C)
    """
    n = counts.sum(axis=2)
    weights = 1.0 / (n + np.maximum(np.median(n, axis=0), 1.0))
    pooled = (weights[:, :, None] * counts).sum(axis=0)
    np.fill_diagonal(pooled, 0.0)
    return pooled / np.maximum(pooled.sum(axis=1, keepdims=True), 1e-300)


def patterned_centre(counts: np.ndarray, errors: np.ndarray | None) -> np.ndarray:
    """Each worker's one-coin accuracy on the diagonal, its errors spread uniformly (``errors`` None) or as
    the crowd's ``errors`` (C, C); (K, C, C), rows with no zero."""
    c = counts.shape[1]
    accuracy = one_coin_accuracy(counts, SMOOTHING)
    if errors is None:
        return one_coin_confusion(accuracy, c)
    centre = (1.0 - accuracy)[:, None, None] * errors[None]
    centre[:, np.arange(c), np.arange(c)] = accuracy[:, None]
    return normalize_rows(np.maximum(centre, 1e-6))


def full_strength(block: Block, k: int, c: int, full: np.ndarray,
                  patterned: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """``A`` (C,) learned once by empirical Bayes from the full structure's converged expected counts, and
    with ``patterned`` the crowd's error pattern (C, C) from the same counts."""
    counts = confusion_counts(block, full, k, c)
    errors = crowd_errors(counts) if patterned else None
    return empirical_strength(counts, patterned_centre(counts, errors)), errors


def one_block(labels: pd.DataFrame, truth: pd.DataFrame) -> tuple[Block, int, int]:
    """All labels in one block (``local_blocks``: ``Block.truth`` is the planted class, -1 where none), K, C."""
    encoding = Encoding(workers=tuple(sorted(labels["worker"].unique())),
                        classes=tuple(order_classes(list(labels["label"].unique()))))
    block = local_blocks(labels, truth, encoding, max_labels=len(labels) + 1)[0]
    return block, len(encoding.workers), len(encoding.classes)


def error(block: Block, posterior: np.ndarray, truth: np.ndarray) -> float:
    """Error (%) on the items with a true class (``truth >= 0``), ties broken by the seed as the product does."""
    scored = truth >= 0
    label = argmax_random_ties(posterior, tie_uniforms(block, SEED))
    return 100.0 * float(np.mean(label[scored] != truth[scored]))


def em(block: Block, k: int, c: int, m_step: MStep, posterior: np.ndarray, sweeps: int = 100,
       tol: float = 1e-6) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """EM from ``posterior`` (n, C): the posterior and parameters after convergence or ``sweeps`` sweeps."""
    previous = None
    for _ in range(sweeps):
        params = m_step(confusion_counts(block, posterior, k, c), posterior.sum(axis=0), SMOOTHING)
        posterior, log_evidence = ds_e_step(block, params["log_pi"], params["log_alpha"])
        objective = float(log_evidence.sum()) / block.n_labels
        if previous is not None and abs(objective - previous) < tol:
            break
        previous = objective
    return posterior, params


def heldout(block: Block, fits: list[dict[str, np.ndarray]], folds: int,
            sweeps: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Every candidate's held-out log-likelihood (S,), the cross sums (S, S) and the number of items."""
    log_pi = np.repeat(np.stack([f["log_pi"] for f in fits], axis=1)[:, None], folds, axis=1)
    log_alpha = np.repeat(np.stack([f["log_alpha"] for f in fits])[None], folds, axis=0)
    for sweep in range(sweeps):
        stats = fold_stats(block, log_pi, log_alpha, SEED)
        if sweep == sweeps - 1:
            break
        for f in range(folds):
            for s, m_step in enumerate(STRUCTURES.values()):
                new = m_step(stats["fold_confusion"][:, f, s], stats["fold_classes"][f, s], SMOOTHING)
                log_pi[:, f, s], log_alpha[f, s] = new["log_pi"], new["log_alpha"]
    return stats["heldout"].sum(axis=0), stats["heldout_cross"], float(stats["heldout_items"])


def run(labels: pd.DataFrame, truth: pd.DataFrame, folds: int, sweeps: int) -> dict[str, float]:
    """Every structure's and rule's error (%) on one crowd, the items, and what each rule chose."""
    block, k, c = one_block(labels, truth)
    planted = block.truth
    votes = vote_counts(block, c)
    start = votes / votes.sum(axis=1, keepdims=True)
    out: dict[str, float] = {"items": float((planted >= 0).sum())}
    fits, posteriors = [], {}
    for name, m_step in STRUCTURES.items():
        posteriors[name], params = em(block, k, c, m_step, start)
        fits.append(params)
        out[name] = error(block, posteriors[name], planted)
    hll, cross, n_items = heldout(block, fits, folds, sweeps)
    names = list(STRUCTURES)
    best = int(np.argmax(hll))
    simplest, _ = one_se_choice(hll, cross, n_items, np.arange(len(names)))
    out["hll-max"], out["hll-max_pick"] = out[names[best]], float(best)
    out["hll-1se"], out["hll-1se_pick"] = out[names[simplest]], float(simplest)
    for n in EARLY:
        out[f"early-{n}"] = error(block, em(block, k, c, ds_m_step, posteriors["one-coin"], sweeps=n)[0], planted)
    for rule, patterned in (("shrunk-by-full", False), ("patterned-by-full", True)):
        strength, errors = full_strength(block, k, c, posteriors["full"], patterned)
        out[rule] = error(block, em(block, k, c, fixed_strength_m_step(strength, errors), start)[0], planted)
    return out


def _bar(draws: list[dict[str, float]]) -> float:
    return min(float(np.mean([d["full"] for d in draws])), float(np.mean([d["one-coin"] for d in draws])))


def report(results: dict[str, list[dict[str, float]]]) -> None:
    columns = [*STRUCTURES, "hll-max", "hll-1se", *(f"early-{n}" for n in EARLY), "shrunk-by-full",
               "patterned-by-full"]
    print("| regime | " + " | ".join(columns) + " | better of ds / one-coin | picks (hll-max / hll-1se) |")
    print("|---|" + "---|" * (len(columns) + 2))
    means: dict[str, list[float]] = {c: [] for c in [*columns, "bar"]}
    for name, draws in results.items():
        bar = _bar(draws)
        tolerance = max(0.5, 200.0 / float(np.mean([d["items"] for d in draws])))
        cells = []
        for column in columns:
            value = float(np.mean([d[column] for d in draws]))
            means[column].append(value)
            flag = "!" if value - bar > tolerance else ""
            cells.append(f"{value:.2f} ({value - bar:+.2f}{flag})")
        means["bar"].append(bar)
        picks = " / ".join("".join("osf"[int(d[f"{rule}_pick"])] for d in draws) for rule in ("hll-max", "hll-1se"))
        print(f"| {name} | " + " | ".join(cells) + f" | {bar:.2f} | {picks} |")
    print("| mean | " + " | ".join(f"**{np.mean(means[c]):.2f}**" for c in columns)
          + f" | **{np.mean(means['bar']):.2f}** | |")
    print("\npicks: o one-coin, s shrunk, f full, one letter per draw")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="data seeds per regime")
    parser.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--sweeps", type=int, default=5, help="sweeps of the folds' fits")
    parser.add_argument("--real", action="store_true", help="the 12 bundled datasets instead (a report: nothing "
                        "here was chosen by their gold)")
    parser.add_argument("--json", help="write every figure to this file")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    crowds = ({name: [lambda _seed, n=name: real(n)] for name in DATASETS} if args.real else
              {name: [lambda seed, n=name: REGIMES[n][1](seed)] * args.seeds for name in args.regimes})
    results = {}
    for name, draws in crowds.items():
        results[name] = [run(*draw(seed), args.folds, args.sweeps) for seed, draw in enumerate(draws)]
        print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    report(results)
    print(f"\n{time.perf_counter() - start:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
