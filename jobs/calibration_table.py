"""Expected calibration error of every registered algorithm on bundled datasets with gold (docs/quality.md).

Example::

    .venv/bin/python -m jobs.calibration_table --datasets rte temp dog

Each cell is ``summary.json``'s ``quality.calibration.ece`` of a local run with all the gold held out
(``gold.fit_fraction = 0``); ``gold-mv``, which needs gold in the fit, holds 30% of it fixed and is scored on
the rest; ``n/a``: the algorithm does not run on the data (kos: two classes only).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from crowdspark.config import load_config
from crowdspark.errors import ConfigError
from crowdspark.models.registry import algorithm_names, model_class
from crowdspark.pipeline import aggregate_frames

DATA = Path(__file__).resolve().parent.parent / "data"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["rte", "temp", "dog"])
    parser.add_argument("--algorithms", nargs="+", default=None, help="default: every registered algorithm")
    return parser.parse_args(argv)


def ece(algorithm: str, labels: pd.DataFrame, gold: pd.DataFrame) -> float | str | None:
    """The run's expected calibration error, or why the algorithm does not run on the data."""
    fraction = 0.3 if model_class(algorithm).needs_fit_gold else 0.0
    config = load_config(overrides=[f"algorithm={algorithm}", "engine.name=local", f"gold.fit_fraction={fraction}"])
    try:
        return aggregate_frames(config, labels, gold).summary["quality"]["calibration"]["ece"]
    except ConfigError:  # kos: two classes only
        return "n/a"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    algorithms = args.algorithms or list(algorithm_names())
    frames = {name: (pd.read_csv(DATA / name / "labels.csv", dtype=str), pd.read_csv(DATA / name / "truth.csv",
                                                                                      dtype=str))
              for name in args.datasets}
    print("| algorithm | " + " | ".join(args.datasets) + " |")
    print("|---|" + "---|" * len(args.datasets))
    for algorithm in algorithms:
        cells = [ece(algorithm, *frames[name]) for name in args.datasets]
        print(f"| {algorithm} | " + " | ".join(c if isinstance(c, str) else f"{c:.3f}" for c in cells) + " |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
