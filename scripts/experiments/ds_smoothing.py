"""Dawid-Skene error rate against the smoothing pseudo-count, on every bundled dataset.

    .venv/bin/python scripts/experiments/ds_smoothing.py

Prints a Markdown table (the one in docs/decisions/0035-ds-smoothing.md).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd

from crowdspark.api import DawidSkene

DATA = Path(__file__).resolve().parents[2] / "data"
DATASETS = ["rte", "web_search_filtered", "web_search", "temp", "bluebird"]
SMOOTHING = [0.001, 0.01, 0.1, 0.5, 1.0, 2.0]


def main() -> None:
    warnings.simplefilter("ignore")
    print("| smoothing | " + " | ".join(DATASETS) + " | mean |")
    print("|---|" + "---|" * (len(DATASETS) + 1))
    for s in SMOOTHING:
        errors = []
        for name in DATASETS:
            labels = pd.read_csv(DATA / name / "labels.csv", dtype=str)
            gold = pd.read_csv(DATA / name / "truth.csv", dtype=str)
            model = DawidSkene(smoothing=s, max_iter=500, tol=1e-7).fit(labels, gold)
            errors.append(model.summary_["metrics"]["error_rate"])
        cells = " | ".join(f"{100 * e:.2f}" for e in errors)
        print(f"| {s:g} | {cells} | {100 * sum(errors) / len(errors):.2f} |")


if __name__ == "__main__":
    main()
