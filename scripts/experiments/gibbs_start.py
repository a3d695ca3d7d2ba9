"""Does the Gibbs samplers' gap to Dawid-Skene come from where the chain starts, or from the posterior?

Usage: ``python scripts/experiments/gibbs_start.py [--seeds 3] [--data web_search_filtered,bluebird]
[--models bcc,idbla,fixed-idbla]``

Each model runs twice per seed: from the paper's initialization (majority vote, then the per-item
difficulty fit) and from the same initialization with Dawid-Skene's labels in place of the majority vote
(the chain then starts at DS's answer).  If the error from DS's start stays near DS's, the chain is stuck
where it starts; if it moves back to the majority-vote start's error, the posterior itself prefers that
answer.  Prints the error (%) per seed.  Experiment code: it swaps ``majority_labels`` in
:mod:`crowdspark.models.idbla_init` for the run.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import load  # noqa: E402

import crowdspark.models.idbla_init as idbla_init  # noqa: E402
from crowdspark.models.registry import build_model  # noqa: E402
from crowdspark.block import Block  # noqa: E402
from crowdspark.engine.local import LocalEngine  # noqa: E402
from crowdspark.engine.loop import finish_fn, fit  # noqa: E402


def run(model, blocks: list[Block]) -> tuple[float, dict[bytes, np.ndarray]]:
    """Gold error (%) and the labels of each block, keyed by the block's item keys."""
    engine = LocalEngine(blocks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fit(model, engine)
    errors = n_gold = 0
    labels = {}
    for block, item in engine.map_items(partial(finish_fn, model), result.params):
        gold = block.truth >= 0
        errors += int((item.label[gold] != block.truth[gold]).sum())
        n_gold += int(gold.sum())
        labels[block.item_keys.tobytes()] = item.label
    return 100.0 * errors / n_gold, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--data", default="web_search_filtered,bluebird")
    parser.add_argument("--models", default="bcc,idbla,fixed-idbla")
    args = parser.parse_args()
    majority = idbla_init.majority_labels
    for name in args.data.split(","):
        blocks, K, C = load(name)
        ds_error, ds_labels = run(build_model("ds", {}, K, C, 0), blocks)
        print(f"{name}: ds {ds_error:.2f}")

        def ds_start(block: Block, n_classes: int, seed: int) -> tuple[None, np.ndarray]:
            return None, ds_labels[block.item_keys.tobytes()]

        for model_name in args.models.split(","):
            for start, labels_fn in (("majority vote", majority), ("DS labels", ds_start)):
                idbla_init.majority_labels = labels_fn
                try:
                    errors = [run(build_model(model_name, {}, K, C, seed), blocks)[0] for seed in range(args.seeds)]
                finally:
                    idbla_init.majority_labels = majority
                print(f"{name}: {model_name:12s} start {start:14s} " + " ".join(f"{e:.2f}" for e in errors))


if __name__ == "__main__":
    main()
