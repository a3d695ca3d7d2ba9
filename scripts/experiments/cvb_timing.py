"""Time one parallel CVB / CVB0 iteration (local_step on one block + global_step) on synthetic labels.

Usage::

    .venv/bin/python scripts/experiments/cvb_timing.py [n_labels] [n_classes] [n_levels]

Synthetic data: K = 1000 workers, 5 labels per item, labels correct with probability 0.7.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from crowdspark.block import build_blocks
from crowdspark.models.idbla_cvb import IdblaCvb, IdblaCvb0
from crowdspark.stats import sum_stats


def main(argv: list[str]) -> None:
    n_labels = int(argv[0]) if argv else 1_000_000
    C = int(argv[1]) if len(argv) > 1 else 5
    H = int(argv[2]) if len(argv) > 2 else 2
    K, per_item = 1000, 5
    rng = np.random.default_rng(0)
    n_items = n_labels // per_item
    truth = rng.integers(C, size=n_items)
    item = np.repeat(np.arange(n_items), per_item)
    worker = rng.integers(K, size=n_items * per_item)
    correct = rng.random(item.shape[0]) < 0.7
    label = np.where(correct, truth[item], rng.integers(C, size=item.shape[0]))
    ids = item.astype(str).astype(object)
    blocks = build_blocks(ids, worker, label, truth[item])
    for cls in (IdblaCvb, IdblaCvb0):
        model = cls(K, C, n_levels=H)
        states, parts = [], []
        for b in blocks:
            s, st = model.init_block(b)
            states.append(s)
            parts.append(st)
        params = model.init_params(sum_stats(parts))
        for r in range(1, model.n_init_rounds + 1):
            parts = []
            for j, b in enumerate(blocks):
                states[j], st = model.init_round(b, states[j], params, r)
                parts.append(st)
            params = model.init_update(sum_stats(parts), params, r)
        for sweep in (1, 2):
            t0 = time.perf_counter()
            parts = []
            for j, b in enumerate(blocks):
                states[j], st = model.local_step(b, states[j], params, sweep)
                parts.append(st)
            t1 = time.perf_counter()
            update = model.global_step(sum_stats(parts), params, sweep)
            params = update.params
            t2 = time.perf_counter()
        print(f"{model.name}: {n_labels} labels, {len(blocks)} block(s), C={C}, H={H}: "
              f"local {t1 - t0:.2f}s, global {t2 - t1:.3f}s per iteration", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
