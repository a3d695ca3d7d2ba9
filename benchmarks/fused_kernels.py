"""What compiled, fused kernels would buy: the Gibbs sweep and the Dawid-Skene iteration in numba.

    .venv/bin/pip install numba      # optional, not a dependency (the library's kernels are numpy)
    .venv/bin/python -m benchmarks.fused_kernels --labels 10000000

The scale targets ask for one IDBLA Gibbs sweep (H = 2, 5 classes) within 2x one Dawid-Skene iteration, and
allow numba "if a benchmark shows it pays" (BENCHMARKS.md, "Targets").  This benchmark measures, on the
blocks of the 10M-label benchmark data in one process (one core), the block work of one sweep:

* ``numpy``: the library's kernels (``DawidSkene.local_step``, ``IdblaGibbs.local_step`` on a burn-in
  sweep, with the parameters ``step_params`` ships);
* ``numba``: one loop per item over its labels that builds the item's table, normalizes it and either
  draws (T, Q) and counts its labels (Gibbs) or adds its posterior to the expected counts (DS), with no
  per-label or per-item temporaries.  The same uniforms drive both Gibbs versions; the script reports how
  many draws agree.

Driver work (the Dirichlet draw, the M-step) is the same for both and is not timed.  Prints seconds per
sweep (median of ``--repeat``) and the Gibbs / DS ratio of each implementation.  Experiment code: the
numba kernels are not part of the library.
"""

from __future__ import annotations

import argparse
import time
from datetime import date

import numpy as np
import pandas as pd

from benchmarks.common import ds_dataset, machine
from crowdspark.models.registry import build_model
from crowdspark.config import InputConfig
from crowdspark.io.pandas_reader import prepare_labels
from crowdspark.rng import uniforms
from crowdspark.pipeline.prepare import local_blocks


def numba_kernels():
    """The two fused kernels, compiled on first use."""
    import numba

    @numba.njit(cache=False, fastmath=False)
    def gibbs_sweep(offsets, worker, label, log_pi_t, log_prior, u, counts, T, Q):
        n = offsets.shape[0] - 1
        H, C = log_prior.shape
        table = np.empty(H * C)
        evidence = 0.0
        for i in range(n):
            for j in range(H * C):
                table[j] = log_prior[j // C, j % C]
            for r in range(offsets[i], offsets[i + 1]):
                row = worker[r] * C + label[r]  # log_pi_t[row, h * C + t]: one contiguous row per label
                for j in range(H * C):
                    table[j] += log_pi_t[row, j]
            top = table.max()
            total = 0.0
            for j in range(H * C):
                table[j] = np.exp(table[j] - top)
                total += table[j]
            evidence += np.log(total) + top
            target = u[i] * total
            running = 0.0
            idx = 0
            for j in range(H * C - 1):
                running += table[j]
                if running < target:
                    idx += 1
            q, t = idx // C, idx % C
            T[i], Q[i] = t, q
            for r in range(offsets[i], offsets[i + 1]):
                counts[worker[r], q, t, label[r]] += 1
        return evidence

    @numba.njit(cache=False, fastmath=False)
    def ds_iteration(offsets, worker, label, log_pi_t, log_alpha, confusion_t, classes):
        n = offsets.shape[0] - 1
        C = log_alpha.shape[0]
        post = np.empty(C)
        evidence = 0.0
        for i in range(n):
            for t in range(C):
                post[t] = log_alpha[t]
            for r in range(offsets[i], offsets[i + 1]):
                row = worker[r] * C + label[r]
                for t in range(C):
                    post[t] += log_pi_t[row, t]
            top = post.max()
            total = 0.0
            for t in range(C):
                post[t] = np.exp(post[t] - top)
                total += post[t]
            evidence += np.log(total) + top
            for t in range(C):
                post[t] /= total
                classes[t] += post[t]
            for r in range(offsets[i], offsets[i + 1]):
                row = worker[r] * C + label[r]  # confusion_t[row, t]: the transposed (K, C, C) table
                for t in range(C):
                    confusion_t[row, t] += post[t]
        return evidence

    return gibbs_sweep, ds_iteration


def timed(fn, repeat: int) -> float:
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return float(np.median(seconds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, default=10_000_000)
    parser.add_argument("--workers", type=int, default=0, help="0: the benchmarks' default (10k at 10M labels)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    path = ds_dataset(None, args.labels, n_workers=args.workers)
    labels = prepare_labels(pd.read_parquet(path), InputConfig(), path)
    blocks = local_blocks(labels.frame, None, labels.encoding, 2_000_000)
    K, C, H = labels.encoding.n_workers, labels.encoding.n_classes, 2
    rng = np.random.default_rng(0)
    pi = rng.dirichlet(np.ones(C) + 4 * np.eye(C)[0], size=(K, H, C))  # any valid tables will do
    alpha, beta = np.full(C, 1.0 / C), np.full(H, 1.0 / H)

    ds = build_model("ds", {}, K, C, 0)
    gibbs = build_model("idbla", {"burn_in": 5, "n_samples": 1}, K, C, 0)
    ds_params = {"log_pi": np.log(pi[:, 0]), "log_alpha": np.log(alpha)}
    g_params = gibbs.step_params({"pi": pi, "alpha": alpha, "beta": beta})
    sweep = 1  # a burn-in sweep
    states = [{"T": np.zeros(b.n_items, np.int32), "Q": np.zeros(b.n_items, np.int32)} for b in blocks]

    def numpy_ds():
        for b in blocks:
            ds.local_step(b, None, ds_params, sweep)

    def numpy_gibbs():
        return [gibbs.local_step(b, s, g_params, sweep) for b, s in zip(blocks, states)]

    gibbs_sweep, ds_iteration = numba_kernels()
    us = [uniforms(gibbs.seed, sweep, b.item_keys, 0) for b in blocks]
    # the tables in the layout the sparse products use: one contiguous row per (worker, given label)
    log_pi_t = np.ascontiguousarray(np.moveaxis(g_params["log_pi"], -1, 1).reshape(K * C, H * C))
    log_prior = np.ascontiguousarray(g_params["log_prior"])
    ds_log_pi_t = np.ascontiguousarray(np.moveaxis(ds_params["log_pi"], -1, 1).reshape(K * C, C))

    def numba_gibbs():
        out = []
        for b, u in zip(blocks, us):
            counts = np.zeros((K, H, C, C), dtype=np.int64)
            T, Q = np.empty(b.n_items, np.int32), np.empty(b.n_items, np.int32)
            gibbs_sweep(b.offsets, b.worker, b.label, log_pi_t, log_prior, u, counts, T, Q)
            out.append((T, Q, counts))
        return out

    def numba_ds():
        for b in blocks:
            confusion_t, classes = np.zeros((K * C, C)), np.zeros(C)
            ds_iteration(b.offsets, b.worker, b.label, ds_log_pi_t, ds_params["log_alpha"], confusion_t, classes)

    start = time.perf_counter()
    numba_gibbs(), numba_ds()  # compile
    compile_s = time.perf_counter() - start
    reference, fused = numpy_gibbs(), numba_gibbs()
    same = sum(int(np.count_nonzero((s["T"] == T) & (s["Q"] == Q))) for (s, _), (T, Q, _) in zip(reference, fused))
    counts_equal = all(np.array_equal(st["counts"], c) for (_, st), (_, _, c) in zip(reference, fused))
    n_items = sum(b.n_items for b in blocks)

    results = {name: timed(fn, args.repeat) for name, fn in
               (("numpy ds", numpy_ds), ("numpy gibbs", numpy_gibbs), ("numba ds", numba_ds), ("numba gibbs", numba_gibbs))}
    print(f"\n{args.labels:,} labels, {K:,} workers, {len(blocks)} blocks, one process; machine: {machine()}; "
          f"date: {date.today()}; median of {args.repeat}; numba compile {compile_s:.1f} s")
    print(f"Gibbs draws equal to the numpy kernel's: {same:,} of {n_items:,}; counts equal: {counts_equal}")
    print("| kernels | DS iteration (s) | Gibbs sweep (s) | Gibbs / DS |")
    print("|---|---|---|---|")
    for impl in ("numpy", "numba"):
        d, g = results[f"{impl} ds"], results[f"{impl} gibbs"]
        print(f"| {impl} | {d:.3f} | {g:.3f} | {g / d:.2f} |")
    print(f"| numba Gibbs / numpy DS | | | {results['numba gibbs'] / results['numpy ds']:.2f} |")


if __name__ == "__main__":
    main()
