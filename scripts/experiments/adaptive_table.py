"""Error of every registered algorithm on the 12 real datasets and on 10 draws of the paper-style synthetic set.

    .venv/bin/python scripts/experiments/adaptive_table.py [--algorithms ds ads ...] [--datasets ...]
        [--draws 10] [--set ads.criterion=bic ...] [--json out.json]

Every run is the command line's on the local engine with ``--seed 1`` and the algorithm's defaults (plus
``--set`` overrides): ``aggregate_frames`` on ``data/<name>/labels.csv``, scored on every labelled item of
``truth.csv``. ``synthetic`` is the mean over ``crowdspark.synthetic.paper_synthetic(seed)`` for data seeds
``0 .. draws - 1``. A cell is empty where the algorithm does not apply (``kos`` on more than two classes;
``gold-mv``, which needs gold in the fit). Prints the Markdown table of the README (error %, the mean over
the 12 real datasets, the synthetic mean), then ``ads``'s structure per dataset and its difference from
``ds``'s error in points and items.
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

from crowdspark.config import load_config  # noqa: E402
from crowdspark.errors import CrowdsparkError  # noqa: E402
from crowdspark.models.registry import algorithm_names  # noqa: E402
from crowdspark.pipeline import aggregate_frames  # noqa: E402
from crowdspark.synthetic import paper_synthetic  # noqa: E402

DATASETS = ("rte", "web_search", "web_search_filtered", "temp", "bluebird", "cf", "dog", "music_genre", "product",
            "sentiment_zheng", "sp", "trec2011")
SEED = 1


def score(labels: pd.DataFrame, gold: pd.DataFrame, algorithm: str, overrides: list[str]) -> tuple[float, int, dict]:
    """(error %, number of scored items, the model's summary) of one run; error NaN where it does not apply."""
    own = [o for o in overrides if o.startswith(f"{algorithm}.")]
    config = load_config(overrides=own, algorithm=algorithm, engine_name="local", seed=SEED)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = aggregate_frames(config, labels, gold)
    except CrowdsparkError:  # kos on C > 2, gold-mv without gold in the fit
        return float("nan"), 0, {}
    answers = run.items.set_index("item")["label"]
    truth = gold.set_index("item")["truth"]
    truth = truth[truth.index.isin(answers.index)]
    return 100.0 * float((answers.loc[truth.index] != truth).mean()), len(truth), run.summary["model"]


def real(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    folder = ROOT / "data" / name
    return pd.read_csv(folder / "labels.csv", dtype=str), pd.read_csv(folder / "truth.csv", dtype=str)


def synthetic(seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    labels, truth, _ = paper_synthetic(seed)
    return labels, truth[["item", "truth"]]


def cell(value: float) -> str:
    return "" if np.isnan(value) else f"{value:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", nargs="+", default=algorithm_names())
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--draws", type=int, default=10, help="synthetic draws (0: none)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="e.g. ads.criterion=bic")
    parser.add_argument("--json", help="write every figure to this file")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    errors: dict[str, dict[str, float]] = {a: {} for a in args.algorithms}
    items: dict[str, int] = {}
    chosen: dict[str, str] = {}
    sets = [(name, [real(name)]) for name in args.datasets]
    if args.draws:
        sets.append(("synthetic", [synthetic(seed) for seed in range(args.draws)]))
    for name, draws in sets:
        for algorithm in args.algorithms:
            runs = [score(labels, gold, algorithm, args.overrides) for labels, gold in draws]
            errors[algorithm][name] = float(np.mean([e for e, _, _ in runs]))
            items[name] = max(items.get(name, 0), runs[0][1])
            if algorithm == "ads":
                chosen[name] = "/".join(sorted({m.get("structure", "") for _, _, m in runs}))
        print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    names = [name for name, _ in sets]
    print("| algorithm | " + " | ".join(names) + " | mean of the 12 real |")
    print("|---|" + "---|" * (len(names) + 1))
    for algorithm in args.algorithms:
        row = [errors[algorithm][n] for n in names]
        reals = [errors[algorithm][n] for n in args.datasets]
        mean = float(np.mean(reals)) if not np.isnan(reals).any() else float("nan")
        print(f"| `{algorithm}` | " + " | ".join(cell(v) for v in row) + f" | {cell(mean)} |")
    if "ads" in errors and "ds" in errors:
        print("\n| dataset | ads structure | ads - ds (points) | ads - ds (items) |\n|---|---|---|---|")
        for name in names:
            diff = errors["ads"][name] - errors["ds"][name]
            print(f"| {name} | {chosen.get(name, '')} | {diff:+.2f} | {diff * items[name] / 100:+.1f} |")
    print(f"\n{time.perf_counter() - start:.0f} s", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps({"errors": errors, "items": items, "ads_structure": chosen}, indent=1))


if __name__ == "__main__":
    main()
