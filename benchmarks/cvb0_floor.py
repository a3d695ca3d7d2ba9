"""Where a CVB0 local step goes on one block, against a Dawid-Skene local step on the same block.

    source scripts/env.sh
    .venv/bin/python -m benchmarks.cvb0_floor --labels 2000000

The first ``--labels`` labels of the 10M-label synthetic Dawid-Skene set (``benchmarks/common.py``: 10k
workers, 5 classes, ~10 labels per item; 2M labels is the local engine's block) form one block; DS and
``idbla-cvb0`` (H = 2) are initialized on it, then each piece below is timed ``--repeats`` times in turn, in
CPU seconds of this process (``time.process_time``: less sensitive to other processes on a shared machine
than wall time), and the medians are printed with their ratio to the DS local step:

* the whole local steps (DS: E-step and expected counts; CVB0: both updates and the sweep's statistics);
* the parts of a CVB0 step that every label needs whatever the implementation, each a sparse product
  already: the two gathers of table rows (lambda: H rows of 2 C values per label, rho: C rows of 2 H),
  the per-item sums of the per-label terms (C + H values per label) and the expected-count table
  (H C values per label).  Their sum is the floor of this formulation in numpy/scipy.

It also prints the multiply-adds per label of each: DS 2 C (E-step C, counts C); CVB0 4 C H (gathers) +
C + H (sums) + H C (table), and C + H logarithms.
"""

from __future__ import annotations

import argparse
import time
from datetime import date

import numpy as np
import pandas as pd

from benchmarks.common import ds_dataset, machine
from crowdspark.config import InputConfig
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.loop import initialize
from crowdspark.io.pandas_reader import prepare_labels
from crowdspark.models import idbla_cvb as cvb
from crowdspark.models.registry import build_model
from crowdspark.pipeline.prepare import local_blocks


def one_block(n_labels: int):
    """The first ``n_labels`` labels of the 10M-label set as one block, and the encoding."""
    path = ds_dataset(None, 10_000_000)
    frame = pd.read_parquet(path).iloc[:n_labels]
    labels = prepare_labels(frame, InputConfig(), path)
    (block,) = local_blocks(labels.frame, None, labels.encoding, n_labels + 1)
    return block, labels.encoding


def started(name: str, block, encoding):
    """A model, its per-sweep parameters and the block's state after initialization."""
    model = build_model(name, {}, encoding.n_workers, encoding.n_classes, 0)
    engine = LocalEngine([block])
    params, _, _ = initialize(model, engine, model.stateful)
    if hasattr(model, "step_params"):
        params = model.step_params(params)
    return model, params, engine.states[0]


def cvb_pieces(model, block, params, state) -> dict:
    """Callables timing the parts of a CVB0 step every label needs."""
    n_classes = model.n_classes
    layout = cvb.cvb_layout(params, model.priors)
    chunks = cvb._chunks(block, n_classes, cvb.CHUNK_LABELS, state["gather_order"])
    lam, rho = state["lam"], state["rho"]

    def gathers() -> None:
        for chunk in chunks:
            for key, coupling in (("lam", rho), ("rho", lam)):
                table = layout[key]
                weights = np.take(coupling[chunk.lo:chunk.hi], chunk.item, axis=0)
                cvb._coupling_matrix(weights, chunk.cell, table.shape[0]) @ table

    per_label = (np.ones((block.n_labels, n_classes)), np.ones((block.n_labels, model.n_levels)))
    starts = block.offsets[:-1]

    def item_sums() -> None:
        for values in per_label:
            np.add.reduceat(values, starts, axis=0)

    def table() -> None:
        cvb.cvb_tables(block, lam, rho, model.n_workers, second_order=False)

    return {"CVB0 gathers of table rows": gathers, "CVB0 per-item sums": item_sums, "CVB0 expected-count table": table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    block, encoding = one_block(args.labels)
    ds, ds_params, _ = started("ds", block, encoding)
    cvb0, cvb_params, cvb_state = started("idbla-cvb0", block, encoding)
    timed = {
        "DS local step": lambda: ds.local_step(block, None, ds_params, 1),
        "CVB0 local step": lambda: cvb0.local_step(block, cvb_state, cvb_params, 1),
        **cvb_pieces(cvb0, block, cvb_params, cvb_state),
    }
    seconds: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(args.repeats):
        for name, fn in timed.items():
            start = time.process_time()
            fn()
            seconds[name].append(time.process_time() - start)
    c, h = encoding.n_classes, cvb0.n_levels
    macs = {"DS local step": 2 * c, "CVB0 gathers of table rows": 4 * c * h, "CVB0 per-item sums": c + h,
            "CVB0 expected-count table": h * c}
    ds_median = float(np.median(seconds["DS local step"]))
    floor = sum(float(np.median(seconds[name])) for name in macs if name.startswith("CVB0"))
    print()
    print(f"{block.n_labels:,} labels, {block.n_items:,} items, {encoding.n_workers:,} workers, C = {c}, H = {h}; "
          f"machine: {machine()}; date: {date.today()}; median CPU seconds of {args.repeats}")
    print("| piece | CPU s | x DS local step | multiply-adds per label |")
    print("|---|---|---|---|")
    for name, values in seconds.items():
        median = float(np.median(values))
        print(f"| {name} | {median:.4f} | {median / ds_median:.1f} | {macs.get(name, '')} |")
    print(f"| CVB0 floor (the three parts above) | {floor:.4f} | {floor / ds_median:.1f} | {5 * c * h + c + h} |")


if __name__ == "__main__":
    main()
