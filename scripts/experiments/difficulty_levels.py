"""BIC / AIC / ICL / log-evidence of difficulty Dawid-Skene for H = 1..3 on every dataset.

Usage: ``.venv/bin/python scripts/experiments/difficulty_levels.py [--noise uniform]``

Datasets: the bundled real sets, ``paper_synthetic(0)`` and the planted set of
``tests/test_difficulty_model.py`` (``idbla_data`` with 10 workers on every item, 4 classes, w = (0, 0.8)).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from _data import load  # noqa: E402
from difficulty_eval import REAL, planted_blocks, synthetic_blocks  # noqa: E402

from crowdspark.engine.local import LocalEngine  # noqa: E402
from crowdspark.engine.select import choose_levels  # noqa: E402
from crowdspark.models.difficulty_ds import DifficultyDawidSkene  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--noise", default="uniform")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    print("| data | log evidence H=1, 2, 3 | BIC H=1, 2, 3 | AIC H=1, 2, 3 | ICL H=1, 2, 3 | ICL (joint) H=1, 2, 3 "
          "| BIC picks | AIC picks | ICL picks | ICL (joint) picks | w (H=2) | d of level 1 (H=2) | beta (H=2) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in ("planted",) + REAL + ("synthetic",):
        if name == "planted":
            blocks, K, C = planted_blocks(0)
        elif name == "synthetic":
            blocks, K, C = synthetic_blocks(0)
        else:
            blocks, K, C = load(name)
        make = lambda h: DifficultyDawidSkene(K, C, n_levels=h, noise=args.noise)  # noqa: E731
        choice = choose_levels(make, LocalEngine(blocks), (1, 2, 3))
        rows = choice.table
        aic = min(rows, key=lambda r: r["aic"])["n_levels"]
        icl = min(rows, key=lambda r: r["icl"])["n_levels"]
        fmt = lambda key: ", ".join(f"{r[key]:.0f}" for r in rows)  # noqa: E731
        w = [round(x, 2) for x in rows[1]["level_noise"]]
        beta = [round(x, 2) for x in rows[1]["level_proportions"]]
        d = [round(x, 2) for x in rows[1]["level_penalty"][1]]
        for r in rows:  # ICL with the entropy of the joint (level, class) posteriors instead of the levels'
            r["icl_joint"] = r["bic"] + 2.0 * r["joint_entropy"]
        icl_joint = min(rows, key=lambda r: r["icl_joint"])["n_levels"]
        cells = [fmt("log_evidence"), fmt("bic"), fmt("aic"), fmt("icl"), fmt("icl_joint"), choice.chosen, aic, icl,
                 icl_joint, w, d, beta]
        print(f"| {name} | " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    main()
