"""Why the levels vanish on the paper-style synthetic set although it has planted difficulty.

Usage: ``.venv/bin/python scripts/experiments/difficulty_diagnose.py [--seed 0]``

On ``paper_synthetic(seed)`` (25% of the items at w = 0.6) prints, for Dawid-Skene and the noise-only dds
(``learn_penalty=False``, H = 2, the model whose diagnosis ``docs/difficulty_model.md`` reports under "Why
noise levels vanish"): the error, the final level weights and proportions, and ``log p(L | params) / m`` (no
prior), started from majority vote and started from the planted parameters, with smoothing 0.5 and 0.05;
plus the error of the planted parameters themselves (an oracle) and of the planted base matrices alone
(H = 1).
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
from difficulty_eval import synthetic_blocks  # noqa: E402

from crowdspark.engine.local import LocalEngine  # noqa: E402
from crowdspark.engine.loop import finish_fn, fit  # noqa: E402
from crowdspark.models.dawid_skene import DawidSkene  # noqa: E402
from crowdspark.models.difficulty_ds import DifficultyDawidSkene, dds_e_step, level_log_pi  # noqa: E402
from crowdspark.stats import Stats  # noqa: E402
from crowdspark.synthetic import paper_synthetic  # noqa: E402


@dataclass(frozen=True)
class PlantedStart(DifficultyDawidSkene):
    """dds started from given base matrices, w and beta instead of majority vote (diagnostics only)."""

    planted: Any = None

    def init_params(self, stats: Stats) -> dict[str, Any]:
        params = super().init_params(stats)
        base, w, beta = self.planted
        params["log_B"] = np.log(base)
        params["w"] = np.asarray(w, dtype=np.float64)
        params["log_beta"] = np.log(beta)
        params["log_pi"] = level_log_pi(params["log_B"], params["w"], params["log_noise"])
        return params


def evaluate(model, blocks, n_labels: int) -> str:
    engine = LocalEngine(blocks)
    result = fit(model, engine)
    items = engine.map_items(partial(finish_fn, model), result.params)
    wrong = sum(int((r.label != b.truth).sum()) for b, r in items)
    n = sum(b.n_items for b in blocks)
    if "log_B" not in result.params:
        return f"error {100 * wrong / n:.1f}%"
    loglik = sum(float(dds_e_step(b, result.params)[1].sum()) for b in blocks) / n_labels
    w = np.round(result.params["w"], 2).tolist()
    beta = np.round(np.exp(result.params["log_beta"]), 2).tolist()
    return f"error {100 * wrong / n:.1f}%, w {w}, beta {beta}, log p(L)/m {loglik:.3f}, {result.n_iter} it"


def oracle(blocks, log_pi: np.ndarray, alpha: np.ndarray, beta: np.ndarray, n_labels: int) -> str:
    params = {"log_pi": log_pi, "log_alpha": np.log(alpha), "log_beta": np.log(beta)}
    wrong, loglik = 0, 0.0
    for b in blocks:
        resp, ev = dds_e_step(b, params)
        wrong += int((resp.sum(axis=1).argmax(axis=1) != b.truth).sum())
        loglik += float(ev.sum())
    return f"error {100 * wrong / sum(b.n_items for b in blocks):.1f}%, log p(L)/m {loglik / n_labels:.3f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    blocks, K, C = synthetic_blocks(args.seed)
    _, _, planted = paper_synthetic(args.seed)
    m = sum(b.n_labels for b in blocks)
    pi, alpha, beta = planted["pi"], planted["alpha"], planted["beta"]
    print(f"- planted parameters (w = {planted['level_noise'].tolist()}, beta = {beta.tolist()}): "
          + oracle(blocks, np.log(pi), alpha, beta, m))
    print("- planted base matrices only (H = 1): " + oracle(blocks, np.log(pi[:, :1]), alpha, np.ones(1), m))
    print("- Dawid-Skene: " + evaluate(DawidSkene(K, C), blocks, m))
    start = (0.98 * pi[:, 0] + 0.02 / C, planted["level_noise"], beta)
    for s in (0.5, 0.05):
        print(f"- dds H=2, smoothing {s}, from majority vote: "
              + evaluate(DifficultyDawidSkene(K, C, smoothing=s, max_iter=500, learn_penalty=False), blocks, m))
        print(f"- dds H=2, smoothing {s}, from the planted parameters: "
              + evaluate(PlantedStart(K, C, smoothing=s, max_iter=500, learn_penalty=False, planted=start), blocks, m))


if __name__ == "__main__":
    main()
