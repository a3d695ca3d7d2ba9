"""Variants of the adaptive default on the 12 real datasets and the paper-style synthetic draws, and the
leave-one-dataset-out choice among them.

    .venv/bin/python scripts/experiments/adaptive_variants.py [--draws 10]

Variants (each an ``ads`` fit on the local engine with model seed 1; its structure choice as named):

* ``aic``, ``bic``: ``ads`` as registered, choosing between the full and the one-coin structure by AIC or BIC;
* ``full``, ``one-coin``: the structure fixed (``ds`` and ``one-coin`` fitted alongside the other);
* ``worker-aic``: the full structure's M-step keeps, per worker, its full matrix or its one-coin matrix,
  whichever has the lower AIC on the worker's expected complete-data log-likelihood (penalty
  ``2 (C (C - 1) - 1)`` for the full matrix); used alone (no run-level choice);
* ``shrink-A``: every worker's full matrix is the MAP estimate under a Dirichlet prior centred on its own
  one-coin matrix with A pseudo-labels per row, ``pi[k, t] ~ N[k, t] + A * onecoin[k, t] + s``, so a
  worker with few labels keeps close to one accuracy and a prolific one to its own matrix; used alone.

Prints the error table (%) with the mean over the 12 real datasets, the synthetic mean, the largest excess
over ``full`` (= ``ds``) in points and items, and the leave-one-dataset-out choice: for each real dataset, the
variant with the lowest mean error on the other 11, and that variant's error on the held-out one.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _data import load  # noqa: E402

from crowdspark.block import Block, build_blocks  # noqa: E402
from crowdspark.engine.local import LocalEngine  # noqa: E402
from crowdspark.engine.loop import finish_fn, fit  # noqa: E402
from crowdspark.models.adaptive_ds import AdaptiveDawidSkene  # noqa: E402
from crowdspark.models.common import normalize_rows  # noqa: E402
from crowdspark.models.one_coin import one_coin_accuracy, one_coin_log_pi  # noqa: E402
from crowdspark.stats import Stats  # noqa: E402
from crowdspark.synthetic import paper_synthetic  # noqa: E402

REAL = ("rte", "web_search", "web_search_filtered", "temp", "bluebird", "cf", "dog", "music_genre", "product",
        "sentiment_zheng", "sp", "trec2011")


@dataclass(frozen=True)
class WorkerChoice(AdaptiveDawidSkene):
    """``worker-aic``: per worker, its full matrix or its one-coin matrix by AIC."""

    def _m_step(self, stats: Stats) -> dict[str, np.ndarray]:
        out = super()._m_step(stats)
        counts = stats["confusion"][:, 0]
        full = out["log_pi"][:, 0]
        coin = one_coin_log_pi(one_coin_accuracy(counts, self.smoothing), self.n_classes)
        extra = 2.0 * (self.n_classes * (self.n_classes - 1) - 1)
        use_coin = (-2.0 * (counts * coin).sum(axis=(1, 2)) + 0.0) <= (-2.0 * (counts * full).sum(axis=(1, 2)) + extra)
        out["log_pi"][:, 0] = np.where(use_coin[:, None, None], coin, full)
        return out


@dataclass(frozen=True)
class ShrinkToOneCoin(AdaptiveDawidSkene):
    """``shrink-A``: full matrices under a Dirichlet prior centred on each worker's one-coin matrix."""

    strength: float = 1.0

    def _m_step(self, stats: Stats) -> dict[str, np.ndarray]:
        out = super()._m_step(stats)
        counts = stats["confusion"][:, 0]
        coin = np.exp(one_coin_log_pi(one_coin_accuracy(counts, self.smoothing), self.n_classes))
        out["log_pi"][:, 0] = np.log(normalize_rows(counts + self.strength * coin, self.smoothing))
        return out


def variants(strengths: list[float]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "aic": partial(AdaptiveDawidSkene, criterion="aic"),
        "bic": partial(AdaptiveDawidSkene, criterion="bic"),
        "full": partial(AdaptiveDawidSkene, structure="full"),
        "one-coin": partial(AdaptiveDawidSkene, structure="one-coin"),
        "worker-aic": partial(WorkerChoice, structure="full"),
    }
    for a in strengths:
        out[f"shrink-{a:g}"] = partial(ShrinkToOneCoin, structure="full", strength=a)
    return out


def synthetic(seed: int) -> tuple[list[Block], int, int]:
    labels, truth, _ = paper_synthetic(seed)
    workers = sorted(labels.worker.unique())
    classes = sorted(labels.label.unique())
    gold = labels.item.map(dict(zip(truth.item, truth.truth)))
    return (build_blocks(labels.item.values, np.searchsorted(workers, labels.worker), np.searchsorted(classes, labels.label),
                         np.searchsorted(classes, gold), max_labels=100_000), len(workers), len(classes))


def error(make: Any, blocks: list[Block], k: int, c: int) -> tuple[float, int]:
    """(error %, wrong items) of one fit."""
    model = make(n_workers=k, n_classes=c, seed=1)
    engine = LocalEngine(blocks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fit(model, engine)
    out = engine.map_items(partial(finish_fn, model), result.params)
    wrong = sum(int(((b.truth >= 0) & (r.label != b.truth)).sum()) for b, r in out)
    total = sum(int((b.truth >= 0).sum()) for b, _ in out)
    return 100.0 * wrong / total, wrong


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--strengths", nargs="+", type=float, default=[1.0, 3.0, 10.0])
    args = parser.parse_args(argv)
    makers = variants(args.strengths)
    table: dict[str, dict[str, tuple[float, float]]] = {v: {} for v in makers}
    sets = [(name, [load(name)]) for name in REAL] + [("synthetic", [synthetic(s) for s in range(args.draws)])]
    for name, draws in sets:
        for v, make in makers.items():
            runs = [error(make, *d) for d in draws]
            table[v][name] = (float(np.mean([e for e, _ in runs])), float(np.mean([w for _, w in runs])))
        print(name, {v: round(table[v][name][0], 2) for v in makers}, file=sys.stderr, flush=True)
    names = [n for n, _ in sets]
    print("| variant | " + " | ".join(names) + " | mean of 12 real | worst vs full (points / items) |")
    print("|---|" + "---|" * (len(names) + 2))
    for v in makers:
        worst = max(REAL, key=lambda n: table[v][n][0] - table["full"][n][0])
        excess = (table[v][worst][0] - table["full"][worst][0], table[v][worst][1] - table["full"][worst][1])
        mean = np.mean([table[v][n][0] for n in REAL])
        print(f"| {v} | " + " | ".join(f"{table[v][n][0]:.2f}" for n in names) +
              f" | {mean:.2f} | {excess[0]:+.2f} / {excess[1]:+.0f} ({worst}) |")
    print("\nleave one dataset out: the variant with the lowest mean error on the other 11")
    print("| held out | chosen | its error there |\n|---|---|---|")
    held = []
    for out in REAL:
        rest = [n for n in REAL if n != out]
        chosen = min(makers, key=lambda v: np.mean([table[v][n][0] for n in rest]))
        held.append(table[chosen][out][0])
        print(f"| {out} | {chosen} | {table[chosen][out][0]:.2f} |")
    print(f"| mean | | {np.mean(held):.2f} |")


if __name__ == "__main__":
    main()
