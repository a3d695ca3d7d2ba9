"""Does the relabel queue pick the items one more label fixes?  An experiment on the bundled data with gold.

For each dataset and seed: hide one label, chosen at random, of every item with two labels or more; fit the
rest; then "relabel" the first 5% and 10% of the items (of those with a hidden label) by three orders, giving
each chosen item its hidden label back, refit, and count the gold items the refit answers right that the
first fit answered wrong, net (errors before - errors after).  The orders: the relabel queue (``relabel/``:
smallest margin between the two most probable classes, then lowest confidence), the expected error reduction
of one label from the run's average worker (``relabel_gain``, then lowest confidence), lowest confidence
alone, and a random order.

Example (docs/quality.md's table)::

    .venv/bin/python -m jobs.relabel_experiment --algorithm ds --seeds 10
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from crowdspark.config import load_config
from crowdspark.pipeline import aggregate_frames
from crowdspark.pipeline.quality import relabel_queue

log = logging.getLogger("crowdspark.jobs.relabel_experiment")

DATA = Path(__file__).resolve().parent.parent / "data"
ORDERS = ("queue", "expected error reduction", "lowest confidence", "random")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default="ds")
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0 .. SEEDS-1")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.05, 0.10])
    parser.add_argument("--datasets", nargs="+", default=None, help="default: every bundled dataset")
    return parser.parse_args(argv)


def hide_one_label(labels: pd.DataFrame, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(kept, hidden)``: one random label of every item with two labels or more is hidden."""
    rng = np.random.default_rng(seed)
    order = labels.assign(_key=rng.random(len(labels))).sort_values(["item", "_key"])
    counts = order.groupby("item")["item"].transform("size")
    first = ~order["item"].duplicated()
    hidden = first & (counts >= 2)
    return order[~hidden].drop(columns="_key"), order[hidden].drop(columns="_key")


def _errors(items: pd.DataFrame, truth: pd.Series) -> int:
    answered = items.set_index("item")["label"].reindex(truth.index)
    return int((answered != truth).sum())


def _chosen(items: pd.DataFrame, candidates: set[str], order: str, n: int, seed: int) -> list[str]:
    pool = items[items["item"].isin(candidates)]
    if order == "queue":
        ranked = relabel_queue(pool, 0)
    elif order == "expected error reduction":
        ranked = pool.sort_values(["relabel_gain", "confidence", "item"], ascending=[False, True, True],
                                  kind="mergesort")
    elif order == "lowest confidence":
        ranked = pool.sort_values(["confidence", "item"], kind="mergesort")
    else:
        ranked = pool.sample(frac=1.0, random_state=np.random.default_rng([seed, 1]))
    return ranked["item"].head(n).tolist()


def run_dataset(name: str, algorithm: str, seeds: int, fractions: Sequence[float]) -> list[dict]:
    """One row per (seed, fraction, order): the gold errors fixed by relabelling."""
    labels = pd.read_csv(DATA / name / "labels.csv", dtype=str)
    truth = pd.read_csv(DATA / name / "truth.csv", dtype=str).set_index("item")["truth"]
    truth = truth[truth.index.isin(set(labels["item"]))]
    config = load_config(overrides=[f"algorithm={algorithm}", "engine.name=local", "relabel.budget=0"])
    rows = []
    for seed in range(seeds):
        kept, hidden = hide_one_label(labels, seed)
        items = aggregate_frames(config, kept).items
        before = _errors(items, truth)
        candidates = set(hidden["item"])
        for fraction in fractions:
            n = int(round(fraction * len(candidates)))
            for order in ORDERS:
                chosen = set(_chosen(items, candidates, order, n, seed))
                relabelled = pd.concat([kept, hidden[hidden["item"].isin(chosen)]], ignore_index=True)
                after = _errors(aggregate_frames(config, relabelled).items, truth)
                rows.append({"dataset": name, "seed": seed, "fraction": fraction, "order": order, "items": n,
                             "errors_before": before, "fixed": before - after})
    return rows


def table(rows: list[dict]) -> pd.DataFrame:
    """Mean errors fixed over the seeds, per dataset and fraction, one column per order."""
    frame = pd.DataFrame(rows)
    mean = frame.pivot_table(index=["dataset", "fraction", "items"], columns="order", values="fixed",
                             aggfunc="mean")
    before = frame.groupby(["dataset", "fraction", "items"])["errors_before"].mean().rename("errors before")
    return pd.concat([before, mean[list(ORDERS)]], axis=1).reset_index()


def paired(rows: list[dict], first: str, second: str) -> pd.DataFrame:
    """Per fraction, over every (dataset, seed): how often order ``first`` fixed more, as many and fewer errors
    than order ``second``."""
    frame = pd.DataFrame(rows).pivot_table(index=["fraction", "dataset", "seed"], columns="order", values="fixed")
    difference = frame[first] - frame[second]
    return pd.DataFrame({"more": (difference > 0).groupby("fraction").sum(),
                         "as many": (difference == 0).groupby("fraction").sum(),
                         "fewer": (difference < 0).groupby("fraction").sum()}).reset_index()


def markdown(frame: pd.DataFrame) -> str:
    """``frame`` as a Markdown table, floats with one decimal."""
    def cell(value) -> str:
        return f"{value:.1f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    names = args.datasets or sorted(p.name for p in DATA.iterdir() if (p / "truth.csv").exists())
    rows = []
    for name in names:
        rows += run_dataset(name, args.algorithm, args.seeds, args.fractions)
        print(f"{name}: done", flush=True)
    result = table(rows)
    result["fraction"] = [f"{100 * f:g}%" for f in result["fraction"]]
    print(markdown(result))
    totals = result.groupby("fraction", sort=False)[list(ORDERS)].sum().reset_index()
    print("\nsum over datasets of the mean errors fixed:")
    print(markdown(totals))
    print("\n(dataset, seed) pairs where the queue fixed more, as many or fewer errors than lowest confidence:")
    pairs = paired(rows, "queue", "lowest confidence")
    pairs["fraction"] = [f"{100 * f:g}%" for f in pairs["fraction"]]
    print(markdown(pairs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
