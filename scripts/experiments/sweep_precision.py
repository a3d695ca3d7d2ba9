"""How far a single-precision Gibbs table is from the double-precision one, by number of labels per item.

Usage: ``python scripts/experiments/sweep_precision.py``

For each number of labels L it builds 30 contested items (each label is class 0 or 1 with equal
frequency, from L random workers of 2000; 5 classes, 2 levels, confusion rows ``0.5 I + 0.5 Dir(1)``),
computes the per-item table ``ll[i, h, t] = sum over labels of log pi[k, h, t, c]`` with the library's
sparse product (``label_loglik``) in float64 and in float32, shifts each row by its maximum, and prints the
largest and median difference of the log weights over the cells that matter (within 20 nats of the row's
maximum).  This is the measurement behind ``idbla_gibbs.SINGLE_PRECISION_MAX_LABELS``.
"""
from __future__ import annotations

import numpy as np

from crowdspark.block import build_blocks
from crowdspark.models.common import label_loglik

N_WORKERS, N_CLASSES, N_LEVELS, N_ITEMS = 2000, 5, 2, 30


def contested_block(rng: np.random.Generator, per_item: int):
    items = np.repeat(np.array([f"i{j}" for j in range(N_ITEMS)], dtype=object), per_item)
    workers = np.concatenate([rng.choice(N_WORKERS, per_item, replace=per_item > N_WORKERS)
                              for _ in range(N_ITEMS)])
    labels = rng.integers(0, 2, items.size)
    return build_blocks(items, workers, labels, None, max_labels=items.size)[0]


def main() -> None:
    rng = np.random.default_rng(0)
    eye = np.eye(N_CLASSES)[None, None]
    pi = 0.5 * eye + 0.5 * rng.dirichlet(np.ones(N_CLASSES), size=(N_WORKERS, N_LEVELS, N_CLASSES))
    log_pi = np.log(pi)
    print("| labels per item | largest abs. sum | largest error of a log weight | median error |")
    print("|---|---|---|---|")
    for per_item in (10, 40, 100, 256, 1000, 4000, 10000):
        block = contested_block(rng, per_item)
        double = label_loglik(block, log_pi).reshape(N_ITEMS, -1)
        single = label_loglik(block, log_pi.astype(np.float32)).reshape(N_ITEMS, -1).astype(np.float64)
        d64 = double - double.max(axis=1, keepdims=True)
        d32 = single - single.max(axis=1, keepdims=True)
        err = np.abs(d64 - d32)[d64 > -20]
        print(f"| {per_item} | {np.abs(double).max():.0f} | {err.max():.1e} | {np.median(err):.1e} |")


if __name__ == "__main__":
    main()
