"""Criteria for H on planted two-level data and the real datasets.

Usage: ``python scripts/experiments/choose_h.py [dataset ...]`` (``planted`` is the test generator).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "tests"))

from _data import load  # noqa: E402
from test_idbla_gibbs import planted  # noqa: E402

from crowdspark.engine.local import LocalEngine  # noqa: E402
from crowdspark.engine.select import choose_levels  # noqa: E402
from crowdspark.models.idbla_gibbs import IdblaGibbs  # noqa: E402

KEYS = ("paper", "log_evidence", "aic", "bic", "collapsed", "collapsed_raw")


def main(names: list[str]) -> None:
    for name in names:
        if name == "planted":
            blocks, K, C, _ = planted()
        else:
            blocks, K, C = load(name)
        choice = choose_levels(lambda h: IdblaGibbs(K, C, n_levels=h), LocalEngine(blocks), (1, 2, 3, 4))
        print(f"\n## {name}: chosen H = {choice.chosen} ({choice.criterion})")
        print("| H | " + " | ".join(KEYS) + " | level sizes |")
        print("|---" * (len(KEYS) + 2) + "|")
        for row in choice.table:
            sizes = [round(x) for x in row["level_sizes"]]
            print(f"| {row['n_levels']} | " + " | ".join(f"{row[k]:.1f}" for k in KEYS) + f" | {sizes} |")


if __name__ == "__main__":
    main(sys.argv[1:] or ["planted", "rte", "web_search_filtered", "temp", "bluebird"])
