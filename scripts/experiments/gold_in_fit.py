"""Does gold in the fit help? Error on held-out gold with 0%, 10% and 30% of the gold used in the fit.

    .venv/bin/python scripts/experiments/gold_in_fit.py --algorithms ds [one-coin ...] [--seeds 5]

For every dataset of ``data/`` (the catalogue's 12 by default), every algorithm and every split seed ``s``
(``gold.split_seed = s``, ``s = 0 .. seeds - 1``), the run is fitted with ``gold.fit_fraction`` at each
fraction (local engine, the algorithm's defaults). All fractions of one seed are scored on the same items:
the gold held out at the largest fraction, which no fit of that seed used (for one seed, the items of a
smaller fraction are among those of a larger one). The table gives each fraction's error on those items,
averaged over the seeds, and whether every fraction above 0 is lower than 0%. The fit with 0% does not
depend on the seed; only the items it is scored on do.

Prints a Markdown table (``docs/gold_in_fit.md`` holds the recorded one) and, with ``--json``, writes every
figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from crowdspark.block import GoldSplit  # noqa: E402
from crowdspark.config import load_config  # noqa: E402
from crowdspark.pipeline import aggregate_frames  # noqa: E402
from crowdspark.rng import item_keys  # noqa: E402

DATASETS = ("rte", "web_search", "web_search_filtered", "temp", "bluebird", "cf", "dog", "music_genre", "product",
            "sentiment_zheng", "sp", "trec2011")


def load(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Labels and gold of ``data/<name>`` as strings."""
    folder = ROOT / "data" / name
    return pd.read_csv(folder / "labels.csv", dtype=str), pd.read_csv(folder / "truth.csv", dtype=str)


def answers(labels: pd.DataFrame, gold: pd.DataFrame, algorithm: str, fraction: float, seed: int) -> pd.Series:
    """Item -> label of a fit with ``fraction`` of the gold (split seed ``seed``) in it."""
    config = load_config(overrides=[f"gold.fit_fraction={fraction}", f"gold.split_seed={seed}"],
                         algorithm=algorithm, engine_name="local")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = aggregate_frames(config, labels, gold)
    return run.items.set_index("item")["label"]


def held_out(gold: pd.DataFrame, labelled: pd.Index, fraction: float, seed: int) -> pd.Series:
    """The labelled gold items no fit of ``seed`` at ``fraction`` or less used: item -> truth."""
    gold = gold[gold["item"].isin(labelled)]
    keep = ~GoldSplit(fraction, seed).in_fit(item_keys(gold["item"].to_numpy(dtype=object)))
    return gold[keep].set_index("item")["truth"]


def measure(name: str, algorithm: str, fractions: list[float], seeds: int) -> dict:
    """Mean error (%) on the common held-out items per fraction, over the split seeds."""
    labels, gold = load(name)
    start = time.perf_counter()
    no_gold = answers(labels, gold, algorithm, 0.0, 0) if 0.0 in fractions else None
    errors: dict[float, list[float]] = {f: [] for f in fractions}
    sizes = []
    for seed in range(seeds):
        scored = held_out(gold, no_gold.index if no_gold is not None else pd.Index(labels["item"]),
                          max(fractions), seed)
        sizes.append(len(scored))
        for fraction in fractions:
            got = no_gold if fraction == 0.0 else answers(labels, gold, algorithm, fraction, seed)
            errors[fraction].append(100.0 * float((got.loc[scored.index] != scored).mean()))
    mean = {f: float(np.mean(v)) for f, v in errors.items()}
    base = errors.get(0.0)
    seeds_lower = {str(f): int(sum(e < b for e, b in zip(v, base))) for f, v in errors.items() if f > 0 and base}
    return {"dataset": name, "algorithm": algorithm, "errors": {str(f): v for f, v in errors.items()},
            "mean": {str(f): v for f, v in mean.items()}, "seeds_lower": seeds_lower, "held_out_items": sizes,
            "lower": all(mean[f] < mean[0.0] for f in fractions if f > 0) if 0.0 in fractions else None,
            "seconds": round(time.perf_counter() - start, 1)}


def table(rows: list[dict], fractions: list[float]) -> str:
    head = " | ".join(f"{100 * f:g}% in the fit" for f in fractions)
    used = [f for f in fractions if f > 0]
    seeds = " / ".join(f"{100 * f:g}%" for f in used)
    out = [f"| dataset | algorithm | held-out items (mean) | {head} | lower than 0% | seeds lower ({seeds}) |",
           "|---|---|---|" + "---|" * len(fractions) + "---|---|"]
    for row in rows:
        cells = " | ".join(f"{row['mean'][str(f)]:.3f}" for f in fractions)
        lower = {True: "yes", False: "no", None: "-"}[row["lower"]]
        counts = " / ".join(str(row["seeds_lower"].get(str(f), "-")) for f in used)
        out.append(f"| {row['dataset']} | {row['algorithm']} | {np.mean(row['held_out_items']):.0f} | {cells} | "
                   f"{lower} | {counts} |")
    for algorithm in dict.fromkeys(r["algorithm"] for r in rows):
        mine = [r for r in rows if r["algorithm"] == algorithm]
        out.append(f"\n{algorithm}: every fraction above 0 lower than 0% on {sum(bool(r['lower']) for r in mine)} "
                   f"of {len(mine)} datasets")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithms", nargs="+", default=["ds"])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--fractions", nargs="+", type=float, default=[0.0, 0.1, 0.3])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--json", help="write every figure to this file")
    args = parser.parse_args(argv)
    fractions = sorted(set(args.fractions))
    rows = []
    for name in args.datasets:
        for algorithm in args.algorithms:
            rows.append(measure(name, algorithm, fractions, args.seeds))
            print(f"{name} {algorithm}: {rows[-1]['mean']} ({rows[-1]['seconds']} s)", file=sys.stderr, flush=True)
    print(table(rows, fractions))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
