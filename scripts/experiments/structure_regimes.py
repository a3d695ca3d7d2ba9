"""``ads``'s structure choice on synthetic crowd regimes the 12 bundled datasets do not cover, and on the 12.

    .venv/bin/python scripts/experiments/structure_regimes.py [--seeds 5] [--rules shrunk aic ...] [--real]
        [--regimes ...] [--check RULE] [--json out.json]

Every run is the command line's on the local engine with ``--seed 1`` (``aggregate_frames``, as
``adaptive_table.py``).  Per regime and data seed ``0 .. seeds - 1`` it runs the rules of ``RULES`` (by default
all): ``ads`` with ``ads.shrinkage=empirical-bayes``, ``ads`` with ``ads.criterion=heldout``, ``ads`` with its
default (AIC), ``ds``, ``one-coin``, ``mv``, ``ebcc`` and ``bwa``.  Prints the mean error (%) per regime;
``oracle``, the better of ``ds`` and ``one-coin`` on each draw (in hindsight, scored with the planted truth);
the better of their means over the draws (the issue's per-regime bar); how often each ``ads`` rule picked
one-coin; and the checked rule's excess over that bar with the issue's per-regime check (within max(0.5
points, 2 items)).  With ``--real``, the same on the 12 bundled datasets (a report: nothing here was chosen by
their gold).
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

from adaptive_table import DATASETS, real, score  # noqa: E402

from crowdspark.synthetic import dawid_skene_data, mixed_crowd_data  # noqa: E402

Frames = tuple[pd.DataFrame, pd.DataFrame]

#: the regimes: name -> (what it is, data seed -> (labels, truth))
REGIMES: dict[str, tuple[str, Callable[[int], Frames]]] = {
    "issue": (
        "the issue's shape: 2 classes 78/22, 2,000 items, 3 workers label 97% of the items with per-class "
        "accuracies in [0.65, 0.85], one-coin workers (accuracy in [0.55, 0.95]) with 15 labels each, 2-8 per "
        "item (5-11 labels per item)",
        lambda seed: mixed_crowd_data(2000, (0.78, 0.22), seed)[:2]),
    "issue-noisy": (
        "as issue, prolific per-class accuracies in [0.5, 0.9], sparse accuracies in [0.45, 0.8], every sparse "
        "worker 0.05 better on the majority class and 0.1 worse on the minority one",
        lambda seed: mixed_crowd_data(2000, (0.78, 0.22), seed, prolific_accuracy=(0.5, 0.9),
                                      sparse_accuracy=(0.45, 0.8), sparse_class_shift=(0.05, -0.1))[:2]),
    "issue-minority": (
        "as issue-noisy, prolific per-class accuracies in [0.3, 0.95], the sparse workers 0.15 worse on the "
        "minority class (full Dawid-Skene worse than majority vote)",
        lambda seed: mixed_crowd_data(2000, (0.78, 0.22), seed, prolific_accuracy=(0.3, 0.95),
                                      sparse_accuracy=(0.45, 0.8), sparse_class_shift=(0.05, -0.15))[:2]),
    "issue-asymmetric": (
        "as issue, sparse accuracies in [0.5, 0.85], every sparse worker 0.1 better on the majority class and "
        "0.3 worse on the minority one (a shared asymmetry only full matrices can say)",
        lambda seed: mixed_crowd_data(2000, (0.78, 0.22), seed, sparse_accuracy=(0.5, 0.85),
                                      sparse_class_shift=(0.1, -0.3))[:2]),
    "prolific-biased": (
        "3 classes, 1,000 items, 8 Dawid-Skene workers (diagonals in [0.4, 0.95], errors Dirichlet(0.3)), "
        "5 of them per item, equal activity",
        lambda seed: dawid_skene_data(1000, 8, 3, 5, seed, accuracy=(0.4, 0.95), activity_sigma=0.0,
                                      off_diagonal_concentration=0.3)[:2]),
    "prolific-binary": (
        "2 classes 70/30, 1,500 items, 12 Dawid-Skene workers (diagonals in [0.5, 0.95]), 5 per item, "
        "log-normal activity (sigma 0.5)",
        lambda seed: dawid_skene_data(1500, 12, 2, 5, seed, accuracy=(0.5, 0.95), activity_sigma=0.5,
                                      class_proportions=(0.7, 0.3))[:2]),
    "sparse-multiclass": (
        "5 classes, 2,000 items, no prolific worker, one-coin workers (accuracy in [0.35, 0.9]) with 10 labels "
        "each, 4-6 per item",
        lambda seed: mixed_crowd_data(2000, (0.2,) * 5, seed, n_prolific=0, sparse_labels_per_item=(4, 6),
                                      labels_per_sparse_worker=10, sparse_accuracy=(0.35, 0.9))[:2]),
    "spammers-adversaries": (
        "2 classes 60/40, 2,000 items, no prolific worker, one-coin workers with accuracy in [0.2, 0.95] (about "
        "a third below 0.5: adversaries and spammers) with 40 labels each, 5-7 per item",
        lambda seed: mixed_crowd_data(2000, (0.6, 0.4), seed, n_prolific=0, sparse_labels_per_item=(5, 7),
                                      labels_per_sparse_worker=40, sparse_accuracy=(0.2, 0.95))[:2]),
    "few-labels": (
        "3 classes 50/30/20, 3,000 items, no prolific worker, one-coin workers (accuracy in [0.5, 0.9]) with 30 "
        "labels each, only 2-3 per item",
        lambda seed: mixed_crowd_data(3000, (0.5, 0.3, 0.2), seed, n_prolific=0, sparse_labels_per_item=(2, 3),
                                      labels_per_sparse_worker=30, sparse_accuracy=(0.5, 0.9))[:2]),
    "many-classes": (
        "10 classes, 1,500 items, 40 Dawid-Skene workers (diagonals in [0.4, 0.9], errors Dirichlet(1)), 5 per "
        "item, log-normal activity (sigma 1)",
        lambda seed: dawid_skene_data(1500, 40, 10, 5, seed, accuracy=(0.4, 0.9), activity_sigma=1.0)[:2]),
    "class-biased": (
        "as issue, every sparse worker biased towards classes of its own (per-class deviations Normal(0, 0.15), "
        "centred)",
        lambda seed: mixed_crowd_data(2000, (0.78, 0.22), seed, sparse_class_bias=0.15)[:2]),
    "class-biased-wide": (
        "as class-biased, deviations Normal(0, 0.25), sparse accuracies in [0.5, 0.9]",
        lambda seed: mixed_crowd_data(2000, (0.78, 0.22), seed, sparse_class_bias=0.25,
                                      sparse_accuracy=(0.5, 0.9))[:2]),
    "long-tail": (
        "as issue, the sparse workers' label counts log-normal (median 15, sigma 1.5: a few with hundreds)",
        lambda seed: mixed_crowd_data(2000, (0.78, 0.22), seed, activity_sigma=1.5)[:2]),
    "long-tail-biased": (
        "as long-tail, sparse accuracies in [0.5, 0.9], class-biased as class-biased",
        lambda seed: mixed_crowd_data(2000, (0.78, 0.22), seed, activity_sigma=1.5, sparse_class_bias=0.15,
                                      sparse_accuracy=(0.5, 0.9))[:2]),
    "hard-items": (
        "as issue, 20% of the items hard: every worker 0.3 less often right there, errors to the other class",
        lambda seed: mixed_crowd_data(2000, (0.78, 0.22), seed, hard_share=0.2, hard_drop=0.3)[:2]),
    "hard-rare-items": (
        "as issue, 20% of the items hard: every worker 0.4 less often right there, and a hard item of the rare "
        "class looks common (its errors go to the frequent class)",
        lambda seed: mixed_crowd_data(2000, (0.78, 0.22), seed, hard_share=0.2, hard_drop=0.4,
                                      hard_errors="majority")[:2]),
    "long-tail-hard": (
        "as long-tail, prolific per-class accuracies in [0.5, 0.9], 25% of the items hard as in hard-rare-items",
        lambda seed: mixed_crowd_data(2000, (0.78, 0.22), seed, activity_sigma=1.5, prolific_accuracy=(0.5, 0.9),
                                      hard_share=0.25, hard_drop=0.4, hard_errors="majority")[:2]),
    "ordinal": (
        "5 ordered grades 10/20/40/20/10, 2,000 items, 3 prolific and sparse one-coin workers as issue, every "
        "worker's errors going to grade c from grade t in proportion to exp(-1.5 |c - t|) (a shared pattern)",
        lambda seed: mixed_crowd_data(2000, (0.1, 0.2, 0.4, 0.2, 0.1), seed, ordinal_errors=1.5)[:2]),
    "ordinal-sparse": (
        "as ordinal, no prolific worker, sparse workers with 30 labels each, 4-6 per item, accuracy in [0.4, 0.85]",
        lambda seed: mixed_crowd_data(2000, (0.1, 0.2, 0.4, 0.2, 0.1), seed, n_prolific=0,
                                      sparse_labels_per_item=(4, 6), labels_per_sparse_worker=30,
                                      sparse_accuracy=(0.4, 0.85), ordinal_errors=1.5)[:2]),
    "hard-multiclass": (
        "4 classes 40/30/20/10, 2,000 items, 3 prolific and sparse one-coin workers as issue, 25% of the items hard "
        "as in hard-rare-items",
        lambda seed: mixed_crowd_data(2000, (0.4, 0.3, 0.2, 0.1), seed, hard_share=0.25, hard_drop=0.4,
                                      hard_errors="majority")[:2]),
}

#: the rules compared: column -> (algorithm, overrides)
RULES = {"shrunk": ("ads", ["ads.shrinkage=empirical-bayes"]), "heldout": ("ads", ["ads.criterion=heldout"]),
         "aic": ("ads", []), "ds": ("ds", []), "one-coin": ("one-coin", []), "mv": ("mv", []),
         "ebcc": ("ebcc", []), "bwa": ("bwa", [])}
#: the ``ads`` rules whose choice of structure is counted
CHOOSERS = ("shrunk", "heldout", "aic")


def run_all(labels: pd.DataFrame, truth: pd.DataFrame, rules: list[str]) -> dict[str, float]:
    """Error (%) of each rule and the oracle's, the number of scored items, 1.0/0.0 whether each ``ads`` rule
    chose one-coin, and the held-out likelihood gain of full matrices when ``heldout`` runs."""
    out: dict[str, float] = {}
    for column in rules:
        algorithm, overrides = RULES[column]
        error, n_items, model = score(labels, truth, algorithm, overrides)
        out[column] = error
        out["items"] = float(n_items)
        if column in CHOOSERS:
            out[f"{column}_one_coin"] = float(model["structure"] == "one-coin")
        if column == "heldout":
            held = model["structure_selection"]["heldout"]
            out["hll_gain"] = held["log_likelihood"]["full"] - held["log_likelihood"]["one-coin"]
            out["hll_se"] = max(held["standard_error"].values())
    out["oracle"] = min(out["ds"], out["one-coin"])
    return out


def _picked(draws: list[dict[str, float]], choosers: list[str]) -> str:
    """How many draws each ``ads`` rule kept one-coin on, ``"a of n / b of n"``."""
    return " / ".join(f"{int(sum(d[f'{r}_one_coin'] for d in draws))} of {len(draws)}" for r in choosers)


def _regime_best(draws: list[dict[str, float]]) -> float:
    """The better of ``ds``'s and ``one-coin``'s mean errors over the draws (the issue's per-regime bar)."""
    return min(float(np.mean([d["ds"] for d in draws])), float(np.mean([d["one-coin"] for d in draws])))


def _excess(draws: list[dict[str, float]], rule: str) -> str:
    """The rule's mean error over the better of ``ds`` and ``one-coin`` (means over the draws), in points, and
    whether it is within the issue's tolerance, max(0.5 points, 2 items) (the items of one draw)."""
    excess = float(np.mean([d[rule] for d in draws])) - _regime_best(draws)
    tolerance = max(0.5, 200.0 / float(np.mean([d["items"] for d in draws])))
    return f"{excess:+.2f} {'ok' if excess <= tolerance else 'FAIL'}"


def table(rows: dict[str, list[dict[str, float]]], title: str, rules: list[str], checked: str,
          mean_row: bool = False) -> None:
    columns = [*rules, "oracle"]
    choosers = [r for r in rules if r in CHOOSERS]
    print(f"\n{title}\n")
    head = " | ".join(columns) + " | better of ds / one-coin"
    head += f" | one-coin picked ({' / '.join(choosers)})" if choosers else ""
    print(f"| | {head} | {checked} - better (points) |")
    print("|---|" + "---|" * (len(columns) + 2 + bool(choosers)))
    for name, draws in rows.items():
        cells = [f"{np.mean([d[c] for d in draws]):.2f}" for c in columns] + [f"{_regime_best(draws):.2f}"]
        picked = f" | {_picked(draws, choosers)}" if choosers else ""
        print(f"| {name} | " + " | ".join(cells) + picked + f" | {_excess(draws, checked)} |")
    if mean_row:
        means = [np.mean([np.mean([d[c] for d in draws]) for draws in rows.values()]) for c in columns]
        means.append(np.mean([_regime_best(draws) for draws in rows.values()]))
        picked = f" | {_picked([d for ds in rows.values() for d in ds], choosers)}" if choosers else ""
        print("| mean | " + " | ".join(f"**{m:.2f}**" for m in means) + picked + " | |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="data seeds per regime")
    parser.add_argument("--regimes", nargs="+", default=list(REGIMES))
    parser.add_argument("--real", action="store_true", help="also the 12 bundled datasets (report only)")
    parser.add_argument("--rules", nargs="+", default=list(RULES), choices=list(RULES),
                        help="the rules to run (ds and one-coin always run: the oracle needs them)")
    parser.add_argument("--check", help="the rule held to the issue's per-regime bar (default: the first ads rule "
                        "run, else the first rule)")
    parser.add_argument("--json", help="write every figure to this file")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rules = [r for r in RULES if r in args.rules or r in ("ds", "one-coin")]
    checked = args.check or next((r for r in rules if r in CHOOSERS), rules[0])
    synthetic = {name: [run_all(*REGIMES[name][1](seed), rules) for seed in range(args.seeds)]
                 for name in args.regimes}
    for name in args.regimes:
        print(f"- {name}: {REGIMES[name][0]}")
    table(synthetic, f"Mean error (%) over data seeds 0-{args.seeds - 1}", rules, checked, mean_row=True)
    result = {"synthetic": synthetic}
    if args.real:
        bundled = {name: [run_all(*real(name), rules)] for name in DATASETS}
        table(bundled, "The 12 bundled datasets (error %)", rules, checked, mean_row=True)
        result["real"] = bundled
    print(f"\n{time.perf_counter() - start:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
